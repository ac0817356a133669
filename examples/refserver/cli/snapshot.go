package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/refserver/api"
	"github.com/csikit/csikit/rpcshim"
)

func idSnapshot(flag, v string) idCheck { return idCheck{flag, v, csi.ValidateSnapshotID} }

// volumeSnapshot is the "volume snapshot" group.
func (e *env) volumeSnapshot(ctx context.Context, args []string) int {
	return e.sub(ctx, "volume snapshot", args, []subcommand{
		{"create", "snapshot a volume through its plugin and wait until it is ready", e.snapshotCreate},
		{"delete", "delete a snapshot in its plugin and forget it", e.snapshotDelete},
		{"list", "show the snapshots, of every volume or of one", e.snapshotList},
	})
}

func (e *env) snapshotCreate(ctx context.Context, args []string) int {
	c := e.newCommand("volume snapshot create", "VOLUME SNAPSHOT",
		"Snapshots a volume through a controller of its plugin, under a name derived from the snapshot ID so a retry never makes a second snapshot, and waits until the plugin reports it ready to use.",
		"refserver volume snapshot create data nightly")
	ns := c.fs.String("namespace", api.DefaultNamespace, "the volume's namespace, and the snapshot's")
	secrets, params := kvFlag{}, kvFlag{}
	c.fs.Var(secrets, "secret", "KEY=VALUE secret for CreateSnapshot and DeleteSnapshot, repeatable (default: the volume's; never printed)")
	c.fs.Var(params, "param", "KEY=VALUE CreateSnapshot parameter, repeatable")
	code := ExitOK
	if !c.parse(args, 2, 2, &code) {
		return code
	}
	if err := validateIDs(idVolume("volume ID", c.arg(0)), idSnapshot("snapshot ID", c.arg(1)), idNamespace(*ns)); err != nil {
		return c.fail(err)
	}
	cl, ctx, done, err := c.client(ctx)
	if err != nil {
		return c.fail(err)
	}
	defer done()
	body := &api.SnapshotCreateBody{Parameters: mapOrNil(params), Secrets: mapOrNil(secrets)}
	stop := c.ticking(fmt.Sprintf("waiting for snapshot %s of volume %s to be ready…", c.arg(1), c.arg(0)))
	resp, err := retry(ctx, c, func(ctx context.Context) (*rpcshim.SnapshotResponse, error) {
		return cl.CreateSnapshot(ctx, *ns, c.arg(0), c.arg(1), body)
	})
	stop()
	if err != nil {
		return c.fail(err)
	}
	if *c.json {
		return c.printJSON(resp)
	}
	s := resp.Snapshot
	fmt.Fprintf(e.stdout, "Snapshot %s/%s of volume %s created by plugin %s (external ID %s, size %s)\n",
		s.Namespace, s.ID, s.SourceVolumeID, s.PluginID, s.ExternalID, orDash(bytesText(s.Size)))
	return ExitOK
}

func (e *env) snapshotDelete(ctx context.Context, args []string) int {
	c := e.newCommand("volume snapshot delete", "SNAPSHOT", "Deletes a snapshot in its plugin and forgets it. Volumes restored from it are not touched.",
		"refserver volume snapshot delete nightly")
	ns := c.fs.String("namespace", api.DefaultNamespace, "the snapshot's namespace")
	code := ExitOK
	if !c.parse(args, 1, 1, &code) {
		return code
	}
	if err := validateIDs(idSnapshot("snapshot ID", c.arg(0)), idNamespace(*ns)); err != nil {
		return c.fail(err)
	}
	cl, ctx, done, err := c.client(ctx)
	if err != nil {
		return c.fail(err)
	}
	defer done()
	resp, err := retry(ctx, c, func(ctx context.Context) (*api.WriteResponse, error) { return cl.DeleteSnapshot(ctx, *ns, c.arg(0)) })
	if err != nil {
		return c.fail(err)
	}
	if *c.json {
		return c.printJSON(resp)
	}
	fmt.Fprintf(e.stdout, "Snapshot %s/%s deleted\n", *ns, c.arg(0))
	return ExitOK
}

func (e *env) snapshotList(ctx context.Context, args []string) int {
	c := e.newCommand("volume snapshot list", "[VOLUME]", "Shows the snapshots csikit knows, or those of one source volume. Secrets are never shown.",
		"refserver volume snapshot list data")
	ns := c.fs.String("namespace", "", "namespace (default: every namespace, or \""+api.DefaultNamespace+"\" with a volume)")
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
	snaps, _, err := cl.Snapshots(ctx, *ns, c.arg(0), nil)
	if err != nil {
		return c.fail(err)
	}
	if *c.json {
		return c.printJSON(snaps)
	}
	printSnapshots(e, snaps)
	return ExitOK
}

func printSnapshots(e *env, snaps []*csi.Snapshot) {
	if len(snaps) == 0 {
		fmt.Fprintln(e.stdout, "No snapshots")
		return
	}
	t := newTable(e.stdout, "SNAPSHOT", "NAMESPACE", "VOLUME", "PLUGIN", "SIZE", "READY", "CREATED")
	for _, s := range snaps {
		created := "-"
		if !s.CreatedAt.IsZero() {
			created = s.CreatedAt.UTC().Format(time.RFC3339)
		}
		t.row(s.ID, s.Namespace, orDash(s.SourceVolumeID), s.PluginID, orDash(bytesText(s.Size)), yesNo(s.ReadyToUse), created)
	}
	t.flush()
}

// createSource is the content source of volume create's -snapshot and
// -clone flags; nil for neither.
func createSource(snapshot, volume string) (*rpcshim.VolumeSource, error) {
	switch {
	case snapshot != "" && volume != "":
		return nil, fmt.Errorf("%w: give -snapshot or -clone, not both", csi.ErrInvalidRequest)
	case snapshot != "":
		return &rpcshim.VolumeSource{SnapshotID: snapshot}, nil
	case volume != "":
		return &rpcshim.VolumeSource{VolumeID: volume}, nil
	}
	return nil, nil
}

// volumeSnapshots prints the snapshots of v for volume status, if it
// has any.
func (e *env) volumeSnapshots(ctx context.Context, c *command, cl *api.Client, v *csi.Volume) int {
	snaps, _, err := cl.Snapshots(ctx, v.Namespace, v.ID, nil)
	if err != nil {
		return c.fail(err)
	}
	if len(snaps) == 0 {
		return ExitOK
	}
	fmt.Fprintln(e.stdout)
	printSnapshots(e, snaps)
	return ExitOK
}
