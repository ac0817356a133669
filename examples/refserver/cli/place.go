package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/refserver/api"
)

func (e *env) volumePlace(ctx context.Context, args []string) int {
	c := e.newCommand("volume place", "ID", "Shows which nodes can take a claim on the volume, and for every other node the reasons a claim there would be refused (topology, max-volumes, no-node-plugin, …). Nothing is written.",
		"refserver volume place -mode write data\n  refserver volume place -node node-1,node-3 -json data")
	ns := c.fs.String("namespace", api.DefaultNamespace, "the volume's namespace")
	allocNS := c.fs.String("alloc-namespace", "", "the allocation's namespace (default: the volume's)")
	mode := c.fs.String("mode", "write", "read or write")
	access := c.fs.String("access-mode", "", "access mode, e.g. single-node-writer (default: the volume's only capability)")
	attach := c.fs.String("attachment-mode", "", "file-system or block-device (default: the volume's only capability)")
	var nodes listFlag
	c.fs.Var(&nodes, "node", "a candidate node, repeatable or comma-separated (default: every node running the volume's node plugin)")
	code := ExitOK
	if !c.parse(args, 1, 1, &code) {
		return code
	}
	ids := []idCheck{idVolume("volume ID", c.arg(0)), idNamespace(*ns)}
	if *allocNS != "" {
		ids = append(ids, idNamespace(*allocNS))
	}
	for _, n := range nodes {
		ids = append(ids, idNode("-node", n))
	}
	if err := validateIDs(ids...); err != nil {
		return c.fail(err)
	}
	req := &api.PlaceRequest{Namespace: *allocNS, Nodes: nodes}
	var err error
	if req.Mode, err = parseClaimMode(*mode); err != nil {
		return c.fail(err)
	}
	if *access != "" {
		if req.AccessMode, err = parseAccessMode("-access-mode", *access); err != nil {
			return c.fail(err)
		}
	}
	if *attach != "" {
		if req.AttachmentMode, err = parseAttachmentMode("-attachment-mode", *attach); err != nil {
			return c.fail(err)
		}
	}
	cl, ctx, done, err := c.client(ctx)
	if err != nil {
		return c.fail(err)
	}
	defer done()
	resp, err := retry(ctx, c, func(ctx context.Context) (*api.PlaceResponse, error) { return cl.Place(ctx, *ns, c.arg(0), req) })
	if err != nil {
		return c.fail(err)
	}
	if *c.json {
		return c.printJSON(resp)
	}
	fmt.Fprintf(e.stdout, "Volume %s/%s is accessible from %s; %d of %d nodes can take a %s claim\n\n",
		*ns, c.arg(0), csi.TopologiesString(resp.VolumeTopologies), len(resp.Feasible()), len(resp.Nodes), req.Mode)
	if len(resp.Nodes) == 0 {
		fmt.Fprintln(e.stdout, "No candidate nodes")
		return ExitOK
	}
	t := newTable(e.stdout, "NODE", "TOPOLOGY", "FEASIBLE", "REASONS")
	for _, n := range resp.Nodes {
		t.row(n.NodeID, topologyText(n.Topology), yesNo(n.Reasons == 0), reasonsText(n.Reasons))
	}
	t.flush()
	return ExitOK
}

// reasonsText is "-" for none, else each reason with what a claim would
// be refused with: "topology (volume not accessible from node)".
func reasonsText(r csi.Reasons) string {
	if r == 0 {
		return "-"
	}
	var s []string
	for rest := r; rest != 0; rest &^= rest.First() {
		f := rest.First()
		s = append(s, fmt.Sprintf("%s (%s)", f, f.Sentinel()))
	}
	return strings.Join(s, ", ")
}

// topologyText is a node's topology, "-" for none.
func topologyText(t *csi.Topology) string {
	if t == nil || len(t.Segments) == 0 {
		return "-"
	}
	return t.String()
}
