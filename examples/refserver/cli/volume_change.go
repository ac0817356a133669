package cli

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/refserver/api"
	"github.com/csikit/csikit/rpcshim"
)

func (e *env) volumeExpand(ctx context.Context, args []string) int {
	c := e.newCommand("volume expand", "ID", "Grows a volume: ControllerExpandVolume when its controller advertises EXPAND_VOLUME, then NodeExpandVolume on every node where it is mounted. A node that is down completes the node step when it reports back. Volumes never shrink.",
		"refserver volume expand -capacity 2GiB data")
	ns := c.fs.String("namespace", api.DefaultNamespace, "the volume's namespace")
	var size, limit sizeFlag
	c.fs.Var(&size, "capacity", "the new capacity, at least: bytes, or with a unit such as 500M or 2GiB (required)")
	c.fs.Var(&limit, "capacity-max", "the largest capacity the plugin may give (0: no limit)")
	code := ExitOK
	if !c.parse(args, 1, 1, &code) {
		return code
	}
	if size <= 0 {
		return c.fail(fmt.Errorf("%w: -capacity is required", csi.ErrInvalidRequest))
	}
	if err := validateIDs(idVolume("volume ID", c.arg(0)), idNamespace(*ns)); err != nil {
		return c.fail(err)
	}
	cl, ctx, done, err := c.client(ctx)
	if err != nil {
		return c.fail(err)
	}
	defer done()
	req := &rpcshim.VolumeExpandRequest{Namespace: *ns, VolumeID: c.arg(0), RequiredBytes: int64(size), LimitBytes: int64(limit)}
	resp, err := retry(ctx, c, func(ctx context.Context) (*rpcshim.VolumeChangeResponse, error) { return cl.ExpandVolume(ctx, req) })
	if err != nil {
		return c.fail(err)
	}
	if *c.json {
		return c.printJSON(resp)
	}
	v := resp.Volume
	fmt.Fprintf(e.stdout, "Volume %s/%s expanded to %s (%s)\n", v.Namespace, v.ID, orDash(bytesText(v.Capacity)), expansionText(v.Expansion))
	return ExitOK
}

func (e *env) volumeModify(ctx context.Context, args []string) int {
	c := e.newCommand("volume modify", "ID", "Changes a volume's mutable parameters with ControllerModifyVolume, when its controller advertises MODIFY_VOLUME.",
		"refserver volume modify -param hostpath.csikit.io/label=gold data")
	ns := c.fs.String("namespace", api.DefaultNamespace, "the volume's namespace")
	params := kvFlag{}
	c.fs.Var(params, "param", "KEY=VALUE mutable parameter, repeatable (at least one)")
	code := ExitOK
	if !c.parse(args, 1, 1, &code) {
		return code
	}
	if len(params) == 0 {
		return c.fail(fmt.Errorf("%w: at least one -param is required", csi.ErrInvalidRequest))
	}
	if err := validateIDs(idVolume("volume ID", c.arg(0)), idNamespace(*ns)); err != nil {
		return c.fail(err)
	}
	cl, ctx, done, err := c.client(ctx)
	if err != nil {
		return c.fail(err)
	}
	defer done()
	req := &rpcshim.VolumeModifyRequest{Namespace: *ns, VolumeID: c.arg(0), MutableParameters: params}
	resp, err := retry(ctx, c, func(ctx context.Context) (*rpcshim.VolumeChangeResponse, error) { return cl.ModifyVolume(ctx, req) })
	if err != nil {
		return c.fail(err)
	}
	if *c.json {
		return c.printJSON(resp)
	}
	fmt.Fprintf(e.stdout, "Volume %s/%s modified: %s\n", resp.Volume.Namespace, resp.Volume.ID, paramsText(resp.Volume.MutableParameters))
	return ExitOK
}

// expansionText describes a volume's latest expansion for status.
func expansionText(e *csi.Expansion) string {
	if e == nil {
		return "none"
	}
	s := fmt.Sprintf("%s, to %s", e.State, bytesText(e.RequiredBytes))
	if len(e.PendingNodes) > 0 {
		s += ", node step pending on " + strings.Join(e.PendingNodes, ", ")
	}
	if e.LastError != "" {
		s += ", last error: " + e.LastError
	}
	return s
}

// paramsText prints parameters as sorted KEY=VALUE pairs.
func paramsText(m map[string]string) string {
	if len(m) == 0 {
		return "-"
	}
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, ", ")
}

// modifyingText names a modify in progress.
func modifyingText(m map[string]string) string {
	if len(m) == 0 {
		return ""
	}
	return " (modifying to " + paramsText(m) + ")"
}

// changeRows adds the expansion and mutable parameters to a volume's
// status table.
func changeRows(t *table, v *csi.Volume) {
	t.row("Expansion", expansionText(v.Expansion))
	if len(v.MutableParameters)+len(v.ModifyingParameters) > 0 {
		t.row("Mutable", paramsText(v.MutableParameters)+modifyingText(v.ModifyingParameters))
	}
}
