package cli_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/hostpathplugin/hostpath"
	"github.com/csikit/csikit/examples/refserver/api"
	"github.com/csikit/csikit/examples/refserver/cli"
	"github.com/csikit/csikit/examples/refserver/demo"
	"github.com/csikit/csikit/examples/refserver/events"
)

// startZonalCluster is a server and three agents: node-1 and node-2 in
// zone a (node-1 runs the controller), node-3 in zone b.
func startZonalCluster(t *testing.T) *cluster {
	t.Helper()
	c := &cluster{events: &syncBuffer{}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dc, err := demo.StartCluster(ctx, demo.ClusterConfig{
		Dir: shortTempDir(t), Mount: hostpath.MountSymlink, Nodes: []string{"node-1", "node-2", "node-3"},
		Topologies: demo.PlacementTopologies, Events: events.New(c.events),
	})
	must(t, err)
	c.Cluster = dc
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := dc.Close(ctx); err != nil {
			t.Errorf("cluster close: %v", err)
		}
	})
	return c
}

func TestCLI_VolumePlace(t *testing.T) {
	c := startZonalCluster(t)
	out := c.ok(t, "volume", "create", "-plugin", "hostpath", "-node", "node-1,node-2", "v")
	if !strings.Contains(out, "accessible from {zone=a}") {
		t.Errorf("volume create:\n%s", out)
	}
	status := c.ok(t, "volume", "status", "v")
	if !strings.Contains(status, "Topology") || !strings.Contains(status, "{zone=a}") {
		t.Errorf("volume status shows no topology:\n%s", status)
	}
	nodes := c.ok(t, "node", "status")
	columnsAligned(t, nodes, "node-3", "STATUS", "TOPOLOGY", "PLUGINS")
	for _, want := range []string{"zone=a", "zone=b"} {
		if !strings.Contains(nodes, want) {
			t.Errorf("node status does not show %s:\n%s", want, nodes)
		}
	}

	text := c.ok(t, "volume", "place", "v")
	if !strings.HasPrefix(text, "Volume default/v is accessible from {zone=a}; 2 of 3 nodes can take a write claim") {
		t.Errorf("volume place header:\n%s", text)
	}
	table := text[strings.Index(text, "NODE"):]
	columnsAligned(t, table, "node-3", "TOPOLOGY", "FEASIBLE", "REASONS")
	for _, want := range []string{"node-1  zone=a    yes", "node-3  zone=b    no        topology (volume not accessible from node)"} {
		if !strings.Contains(text, want) {
			t.Errorf("volume place does not show %q:\n%s", want, text)
		}
	}

	resp := decodeJSON[api.PlaceResponse](t, c.ok(t, "volume", "place", "-json", "-node", "node-3,node-9", "v"))
	want := map[string]csi.Reasons{"node-3": csi.ReasonTopology, "node-9": csi.ReasonNoNodePlugin}
	if len(resp.Nodes) != 2 {
		t.Fatalf("place -json: %+v", resp)
	}
	for _, n := range resp.Nodes {
		if n.Reasons != want[n.NodeID] {
			t.Errorf("node %s: %v, want %v", n.NodeID, n.Reasons, want[n.NodeID])
		}
	}

	_, errOut, code := c.run(t, "claim", "-volume", "v", "-alloc", "web-1", "-node", "node-3")
	if code != cli.ExitError || !strings.Contains(errOut, "node node-3 is in {zone=b}") {
		t.Errorf("claim on the other zone: exit %d, %s", code, errOut)
	}
	c.ok(t, "claim", "-volume", "v", "-alloc", "web-2", "-node", "node-2")
}

func TestCLI_VolumePlace_Errors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no volume", []string{"volume", "place"}, "ID"},
		{"bad node", []string{"volume", "place", "-node", "../x", "v"}, "-node"},
		{"bad mode", []string{"volume", "place", "-mode", "sideways", "v"}, "sideways"},
		{"bad access mode", []string{"volume", "place", "-access-mode", "everyone", "v"}, "everyone"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, errOut, code := runCLI(t, append(tc.args, "-address", "http://127.0.0.1:1")...)
			if code == cli.ExitOK || !strings.Contains(errOut, tc.want) {
				t.Errorf("exit %d, stderr %q; want a failure naming %q", code, errOut, tc.want)
			}
		})
	}
}
