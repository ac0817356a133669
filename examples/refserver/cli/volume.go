package cli

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/refserver/api"
	"github.com/csikit/csikit/rpcshim"
)

func (e *env) volumeRegister(ctx context.Context, args []string) int {
	c := e.newCommand("volume register", "ID", "Registers a volume that already exists in its plugin. The plugin's controller, if any, confirms the capabilities first.",
		"refserver volume register -plugin hostpath -external-id vol-0123 -capability single-node-writer/file-system data")
	ns := c.fs.String("namespace", api.DefaultNamespace, "the volume's namespace")
	pluginID := c.fs.String("plugin", "", "the plugin ID (required)")
	external := c.fs.String("external-id", "", "the plugin's ID of the volume (required)")
	name := c.fs.String("name", "", "a display name")
	caps := &capsFlag{}
	c.fs.Var(caps, "capability", "ACCESS[/ATTACHMENT] a claim may use, repeatable (default single-node-writer/file-system)")
	secrets, params, vctx := kvFlag{}, kvFlag{}, kvFlag{}
	c.fs.Var(secrets, "secret", "KEY=VALUE secret for the plugin's calls, repeatable (never printed)")
	c.fs.Var(params, "param", "KEY=VALUE parameter, repeatable")
	c.fs.Var(vctx, "context", "KEY=VALUE volume context, repeatable")
	code := ExitOK
	if !c.parse(args, 1, 1, &code) {
		return code
	}
	if *pluginID == "" || *external == "" {
		return c.fail(fmt.Errorf("%w: -plugin and -external-id are required", csi.ErrInvalidRequest))
	}
	if err := validateIDs(idVolume("volume ID", c.arg(0)), idNamespace(*ns), idPlugin("-plugin", *pluginID)); err != nil {
		return c.fail(err)
	}
	cl, ctx, done, err := c.client(ctx)
	if err != nil {
		return c.fail(err)
	}
	defer done()
	req := &rpcshim.VolumeRegisterRequest{Volume: csi.Volume{
		ID: c.arg(0), Namespace: *ns, Name: *name, PluginID: *pluginID, ExternalID: *external,
		Capabilities: defaultCaps(*caps), Secrets: mapOrNil(secrets), Parameters: mapOrNil(params), Context: mapOrNil(vctx),
	}}
	resp, err := retry(ctx, c, func(ctx context.Context) (*rpcshim.VolumeResponse, error) { return cl.RegisterVolume(ctx, req) })
	if err != nil {
		return c.fail(err)
	}
	if *c.json {
		return c.printJSON(resp)
	}
	fmt.Fprintf(e.stdout, "Volume %s/%s registered with plugin %s (external ID %s)\n", resp.Volume.Namespace, resp.Volume.ID, resp.Volume.PluginID, resp.Volume.ExternalID)
	return ExitOK
}

func (e *env) volumeCreate(ctx context.Context, args []string) int {
	c := e.newCommand("volume create", "ID", "Creates a volume through a controller of its plugin and registers it; with -snapshot it restores a snapshot, with -clone it copies a volume (of the same namespace and plugin).",
		"refserver volume create -plugin hostpath -capacity-min 1GiB -capability single-node-writer data")
	ns := c.fs.String("namespace", api.DefaultNamespace, "the volume's namespace")
	pluginID := c.fs.String("plugin", "", "the plugin ID (required)")
	name := c.fs.String("name", "", "the name the plugin creates the volume under (default NAMESPACE/ID)")
	var capMin, capMax sizeFlag
	c.fs.Var(&capMin, "capacity-min", "smallest capacity: bytes, or with a unit such as 500M or 1GiB (0: the plugin's choice)")
	c.fs.Var(&capMax, "capacity-max", "largest capacity: bytes, or with a unit such as 500M or 1GiB (0: no limit)")
	caps := &capsFlag{}
	c.fs.Var(caps, "capability", "ACCESS[/ATTACHMENT] a claim may use, repeatable (default single-node-writer/file-system)")
	secrets, params := kvFlag{}, kvFlag{}
	c.fs.Var(secrets, "secret", "KEY=VALUE secret for the plugin's calls, repeatable (never printed)")
	c.fs.Var(params, "param", "KEY=VALUE CreateVolume parameter, repeatable")
	fromSnap := c.fs.String("snapshot", "", "restore: fill the volume from this snapshot of its namespace")
	fromVol := c.fs.String("clone", "", "clone: fill the volume from this volume of its namespace")
	var nodes listFlag
	c.fs.Var(&nodes, "node", "a node the volume should be usable from, repeatable or comma-separated: a zonal plugin is asked for their topologies (default: every node running the plugin)")
	code := ExitOK
	if !c.parse(args, 1, 1, &code) {
		return code
	}
	if *pluginID == "" {
		return c.fail(fmt.Errorf("%w: -plugin is required", csi.ErrInvalidRequest))
	}
	ids := []idCheck{idVolume("volume ID", c.arg(0)), idNamespace(*ns), idPlugin("-plugin", *pluginID)}
	for _, n := range nodes {
		ids = append(ids, idNode("-node", n))
	}
	ids = append(ids, idSnapshot("-snapshot", *fromSnap), idVolume("-clone", *fromVol))
	if err := validateIDs(ids...); err != nil {
		return c.fail(err)
	}
	from, err := createSource(*fromSnap, *fromVol)
	if err != nil {
		return c.fail(err)
	}
	cl, ctx, done, err := c.client(ctx)
	if err != nil {
		return c.fail(err)
	}
	defer done()
	req := &rpcshim.VolumeCreateRequest{From: from, Volume: csi.Volume{
		ID: c.arg(0), Namespace: *ns, Name: *name, PluginID: *pluginID, Capabilities: defaultCaps(*caps),
		Secrets: mapOrNil(secrets), Parameters: mapOrNil(params), RequestedCapacityMin: int64(capMin), RequestedCapacityMax: int64(capMax),
	}, Nodes: nodes}
	stop := c.ticking(fmt.Sprintf("waiting for plugin %s to create volume %s…", *pluginID, c.arg(0)))
	resp, err := retry(ctx, c, func(ctx context.Context) (*rpcshim.VolumeResponse, error) { return cl.CreateVolume(ctx, req) })
	stop()
	if err != nil {
		return c.fail(err)
	}
	if *c.json {
		return c.printJSON(resp)
	}
	v := resp.Volume
	fmt.Fprintf(e.stdout, "Volume %s/%s created by plugin %s (external ID %s, capacity %s, accessible from %s)\n",
		v.Namespace, v.ID, v.PluginID, v.ExternalID, orDash(bytesText(v.Capacity)), csi.TopologiesString(v.Topologies))
	return ExitOK
}

func (e *env) volumeDelete(ctx context.Context, args []string) int {
	c := e.newCommand("volume delete", "ID", "Deletes a volume in its plugin and deregisters it; with -deregister, only deregisters it.",
		"refserver volume delete data")
	ns := c.fs.String("namespace", api.DefaultNamespace, "the volume's namespace")
	dereg := c.fs.Bool("deregister", false, "only forget the volume; do not delete it in the plugin")
	force := c.fs.Bool("force", false, "with -deregister: drop its claims too (only when the attachments are known to be gone)")
	code := ExitOK
	if !c.parse(args, 1, 1, &code) {
		return code
	}
	if *force && !*dereg {
		return c.fail(fmt.Errorf("%w: -force only goes with -deregister", csi.ErrInvalidRequest))
	}
	if err := validateIDs(idVolume("volume ID", c.arg(0)), idNamespace(*ns)); err != nil {
		return c.fail(err)
	}
	cl, ctx, done, err := c.client(ctx)
	if err != nil {
		return c.fail(err)
	}
	defer done()
	var resp *api.WriteResponse
	verb := "deleted and deregistered"
	if *dereg {
		verb = "deregistered"
		resp, err = retry(ctx, c, func(ctx context.Context) (*api.WriteResponse, error) {
			return cl.DeregisterVolume(ctx, *ns, c.arg(0), *force)
		})
	} else {
		resp, err = retry(ctx, c, func(ctx context.Context) (*api.WriteResponse, error) { return cl.DeleteVolume(ctx, *ns, c.arg(0)) })
	}
	if err != nil {
		return c.fail(err)
	}
	if *c.json {
		return c.printJSON(resp)
	}
	fmt.Fprintf(e.stdout, "Volume %s/%s %s\n", *ns, c.arg(0), verb)
	return ExitOK
}

func (e *env) volumeStatus(ctx context.Context, args []string) int {
	c := e.newCommand("volume status", "[ID]", "Shows the volumes, or one volume with its claims. Secrets are never shown.",
		"refserver volume status data")
	ns := c.fs.String("namespace", "", "namespace (default: every namespace for the list, \""+api.DefaultNamespace+"\" for one volume)")
	code := ExitOK
	if !c.parse(args, 0, 1, &code) {
		return code
	}
	if err := validateIDs(idVolume("volume ID", c.arg(0)), idNamespace(*ns)); err != nil {
		return c.fail(err)
	}
	cl, ctx, done, err := c.client(ctx)
	if err != nil {
		return c.fail(err)
	}
	defer done()
	if len(c.args) == 0 {
		return e.volumeList(ctx, c, cl, *ns)
	}
	namespace := *ns
	if namespace == "" {
		namespace = api.DefaultNamespace
	}
	return e.volumeDetail(ctx, c, cl, namespace, c.arg(0))
}

// volumeList prints the volumes of ns ("" for every namespace).
func (e *env) volumeList(ctx context.Context, c *command, cl *api.Client, ns string) int {
	vols, _, err := cl.Volumes(ctx, ns, "", nil)
	if err != nil {
		return c.fail(err)
	}
	if *c.json {
		return c.printJSON(vols)
	}
	if len(vols) == 0 {
		fmt.Fprintln(e.stdout, "No volumes")
		return ExitOK
	}
	t := newTable(e.stdout, "ID", "NAMESPACE", "PLUGIN", "SCHEDULABLE", "CAPACITY", "WRITE", "READ", "RELEASING")
	for _, v := range vols {
		t.row(v.ID, v.Namespace, v.PluginID, yesNo(v.Schedulable), bytesText(v.Capacity), len(v.WriteClaims), len(v.ReadClaims), len(v.PastClaims))
	}
	t.flush()
	return ExitOK
}

// volumeDetail prints one volume with its snapshots, health and claims.
func (e *env) volumeDetail(ctx context.Context, c *command, cl *api.Client, namespace, id string) int {
	v, _, err := cl.Volume(ctx, namespace, id, nil)
	if err != nil {
		return c.fail(err)
	}
	if *c.json {
		return c.printJSON(v)
	}
	t := newTable(e.stdout)
	t.row("ID", v.ID)
	t.row("Namespace", v.Namespace)
	if v.Name != "" {
		t.row("Name", v.Name)
	}
	t.row("Plugin", fmt.Sprintf("%s (%s)", v.PluginID, orDash(v.Provider)))
	t.row("External ID", v.ExternalID)
	t.row("Capabilities", capsText(v.Capabilities))
	t.row("Capacity", bytesText(v.Capacity))
	changeRows(t, v)
	t.row("Topology", csi.TopologiesString(v.Topologies))
	t.row("Schedulable", fmt.Sprintf("%s (controllers %s, nodes %s)", yesNo(v.Schedulable),
		ratio(v.ControllersHealthy, v.ControllersExpected), ratio(v.NodesHealthy, v.NodesExpected)))
	t.flush()
	if code := e.volumeSnapshots(ctx, c, cl, v); code != ExitOK {
		return code
	}
	fmt.Fprintln(e.stdout)
	if h, err := cl.VolumeHealth(ctx, namespace, v.ID); err == nil {
		e.printHealth(h)
		fmt.Fprintln(e.stdout)
	}
	if !v.InUse() {
		fmt.Fprintln(e.stdout, "No claims")
		return ExitOK
	}
	ct := newTable(e.stdout, "ALLOCATION", "NODE", "MODE", "STATE", "CAPABILITY", "LAST ERROR")
	for _, m := range []map[string]*csi.Claim{v.WriteClaims, v.ReadClaims, v.PastClaims} {
		for _, id := range slices.Sorted(maps.Keys(m)) {
			cl := m[id]
			ct.row(id, cl.NodeID, cl.Mode, cl.State, cl.Capability(), cl.LastError)
		}
	}
	ct.flush()
	return ExitOK
}

func defaultCaps(cs capsFlag) []csi.Capability {
	if len(cs) == 0 {
		return []csi.Capability{{AccessMode: csi.AccessModeSingleNodeWriter, AttachmentMode: csi.AttachmentModeFileSystem}}
	}
	return cs
}

func mapOrNil(m kvFlag) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return m
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
