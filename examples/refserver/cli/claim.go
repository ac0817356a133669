package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/refserver/api"
)

func (e *env) claim(ctx context.Context, args []string) int {
	c := e.newCommand("claim", "", "Claims a volume for an allocation on a node: the server records the allocation, writes the claim, then attaches the volume through a controller if the plugin needs it. With -mount, the node agent mounts it too.",
		"refserver claim -volume data -alloc web-1 -node node-2 -mount")
	ns := c.fs.String("namespace", api.DefaultNamespace, "the volume's namespace (and the allocation's)")
	vol := c.fs.String("volume", "", "the volume ID (required)")
	alloc := c.fs.String("alloc", "", "the allocation ID (required)")
	node := c.fs.String("node", "", "the node the allocation runs on (required)")
	mode := c.fs.String("mode", "write", "read or write")
	access := c.fs.String("access-mode", "", "access mode, e.g. single-node-writer (default: the volume's only capability)")
	attach := c.fs.String("attachment-mode", "", "file-system or block-device (default: the volume's only capability)")
	mount := c.fs.Bool("mount", false, "have the node agent mount the volume for the allocation")
	code := ExitOK
	if !c.parse(args, 0, 0, &code) {
		return code
	}
	if *vol == "" || *alloc == "" || *node == "" {
		return c.fail(fmt.Errorf("%w: -volume, -alloc and -node are required", csi.ErrInvalidRequest))
	}
	if err := validateIDs(idVolume("-volume", *vol), idNamespace(*ns), idAlloc("-alloc", *alloc), idNode("-node", *node)); err != nil {
		return c.fail(err)
	}
	req := &api.ClaimRequest{AllocationID: *alloc, NodeID: *node, Mount: *mount}
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
	resp, err := retry(ctx, c, func(ctx context.Context) (*api.ClaimResponse, error) { return cl.Claim(ctx, *ns, *vol, req) })
	if err != nil {
		return c.fail(err)
	}
	if *c.json {
		return c.printJSON(resp)
	}
	cm := resp.Claim
	fmt.Fprintf(e.stdout, "Volume %s/%s claimed by %s on %s (%s, %s), state %s\n", resp.Namespace, resp.VolumeID, cm.AllocationID, cm.NodeID, cm.Mode, cm.Capability(), cm.State)
	if resp.ControllerNodeID != "" {
		fmt.Fprintf(e.stdout, "Attached by the controller on %s\n", resp.ControllerNodeID)
	}
	if resp.Mount != nil {
		fmt.Fprintf(e.stdout, "Mounted on %s at %s\n", resp.Mount.NodeID, resp.Mount.Path)
	}
	return ExitOK
}

func (e *env) release(ctx context.Context, args []string) int {
	c := e.newCommand("release", "ALLOCATION", "Stops an allocation: its claims become past claims, and the claim release worker unmounts (on the node), detaches (through a controller) and frees each. With -wait, returns once all are freed.",
		"refserver release -wait web-1")
	wait := c.fs.Bool("wait", false, "wait until every claim of the allocation is freed")
	ns := c.fs.String("namespace", api.DefaultNamespace, "the allocation's namespace")
	code := ExitOK
	if !c.parse(args, 1, 1, &code) {
		return code
	}
	id := c.arg(0)
	if err := validateIDs(idAlloc("allocation ID", id), idNamespace(*ns)); err != nil {
		return c.fail(err)
	}
	cl, ctx, done, err := c.client(ctx)
	if err != nil {
		return c.fail(err)
	}
	defer done()
	resp, err := retry(ctx, c, func(ctx context.Context) (*api.ReleaseResponse, error) { return cl.ReleaseIn(ctx, *ns, id) })
	if err != nil {
		return c.fail(err)
	}
	if *wait {
		if _, err := retry(ctx, c, func(ctx context.Context) (struct{}, error) { return struct{}{}, c.waitReleased(ctx, cl, *ns, id) }); err != nil {
			return c.fail(fmt.Errorf("allocation %s stopped, but its claims are not all freed yet (see \"refserver volume status\"): %w", id, err))
		}
		resp.Claims = nil
	}
	if *c.json {
		return c.printJSON(resp)
	}
	var names []string
	for _, cl := range resp.Claims {
		names = append(names, cl.Namespace+"/"+cl.VolumeID)
	}
	switch {
	case len(names) == 0 && *wait:
		fmt.Fprintf(e.stdout, "Allocation %s stopped; its claims are released and freed\n", id)
	case len(names) == 0:
		fmt.Fprintf(e.stdout, "Allocation %s stopped; it holds no claims\n", id)
	default:
		fmt.Fprintf(e.stdout, "Allocation %s stopped; releasing its claims on %s\n", id, strings.Join(names, ", "))
	}
	return ExitOK
}
