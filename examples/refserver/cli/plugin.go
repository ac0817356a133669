package cli

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/csikit/csikit/csi"
)

func (e *env) pluginStatus(ctx context.Context, args []string) int {
	c := e.newCommand("plugin status", "[ID]", "Shows the plugins (provider, version, controllers and nodes healthy/expected), or one plugin with its instances.",
		"refserver plugin status hostpath")
	code := ExitOK
	if !c.parse(args, 0, 1, &code) {
		return code
	}
	cl, ctx, done, err := c.client(ctx)
	if err != nil {
		return c.fail(err)
	}
	defer done()
	if len(c.args) == 0 {
		ps, _, err := cl.Plugins(ctx, nil)
		if err != nil {
			return c.fail(err)
		}
		if *c.json {
			return c.printJSON(ps)
		}
		if len(ps) == 0 {
			fmt.Fprintln(e.stdout, "No plugins")
			return ExitOK
		}
		t := newTable(e.stdout, "ID", "PROVIDER", "VERSION", "CONTROLLERS", "NODES", "SCHEDULABLE")
		for _, p := range ps {
			t.row(p.ID, p.Provider, p.Version, ratio(p.ControllersHealthy, p.ControllersExpected), ratio(p.NodesHealthy, p.NodesExpected), yesNo(p.Schedulable()))
		}
		t.flush()
		return ExitOK
	}
	if err := validateIDs(idPlugin("plugin ID", c.arg(0))); err != nil {
		return c.fail(err)
	}
	p, _, err := cl.Plugin(ctx, c.arg(0), nil)
	if err != nil {
		return c.fail(err)
	}
	if *c.json {
		return c.printJSON(p)
	}
	t := newTable(e.stdout)
	t.row("ID", p.ID)
	t.row("Provider", strings.TrimSpace(p.Provider+" "+p.Version))
	t.row("Controller required", yesNo(p.ControllerRequired))
	t.row("Controllers healthy", ratio(p.ControllersHealthy, p.ControllersExpected))
	t.row("Nodes healthy", ratio(p.NodesHealthy, p.NodesExpected))
	t.row("Schedulable", yesNo(p.Schedulable()))
	t.flush()
	fmt.Fprintln(e.stdout)
	it := newTable(e.stdout, "NODE", "ROLE", "TYPE", "HEALTHY", "CSI NODE ID", "DESCRIPTION")
	for _, role := range []struct {
		name  string
		insts map[string]*csi.PluginInfo
	}{{"controller", p.Controllers}, {"node", p.Nodes}} {
		for _, node := range slices.Sorted(maps.Keys(role.insts)) {
			in := role.insts[node]
			csiNode := ""
			if role.name == "node" && in.NodeInfo != nil {
				csiNode = in.NodeInfo.ID
			}
			it.row(node, role.name, in.Type, yesNo(in.Healthy), csiNode, in.HealthDescription)
		}
	}
	it.flush()
	e.printPluginRPC(ctx, cl, p.ID)
	return ExitOK
}

func (e *env) nodeStatus(ctx context.Context, args []string) int {
	c := e.newCommand("node status", "", "Shows the node agents the server knows: ready while they heartbeat, down at once when their agent stops, and down after the server's -heartbeat-ttl when it dies.",
		"refserver node status -json")
	code := ExitOK
	if !c.parse(args, 0, 0, &code) {
		return code
	}
	cl, ctx, done, err := c.client(ctx)
	if err != nil {
		return c.fail(err)
	}
	defer done()
	nodes, err := cl.Nodes(ctx)
	if err != nil {
		return c.fail(err)
	}
	if *c.json {
		return c.printJSON(nodes)
	}
	if len(nodes) == 0 {
		fmt.Fprintln(e.stdout, "No nodes")
		return ExitOK
	}
	now := time.Now()
	t := newTable(e.stdout, "ID", "STATUS", "ADDRESS", "LAST HEARTBEAT", "TOPOLOGY", "PLUGINS")
	for _, n := range nodes {
		var ps, tops []string
		for _, p := range n.Plugins {
			h := "healthy"
			if !p.Healthy {
				h = "unhealthy"
			}
			ps = append(ps, fmt.Sprintf("%s (%s, %s)", p.PluginID, p.Type, h))
			if top := p.NodeInfo.Topology(); top != nil && len(top.Segments) > 0 && !slices.Contains(tops, top.String()) {
				tops = append(tops, top.String())
			}
		}
		t.row(n.ID, n.Status, n.Address, ago(n.LastHeartbeat, now), orDash(strings.Join(tops, " ")), strings.Join(ps, ", "))
	}
	t.flush()
	return ExitOK
}
