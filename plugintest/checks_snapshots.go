package plugintest

import (
	"context"
	"fmt"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/csikit/csikit/csi"
)

// The rows of snapshots and of volumes made from a source: create,
// repeat, list with paging, delete, restore and clone.

const (
	methodCreateSnapshot = "CreateSnapshot"
	methodDeleteSnapshot = "DeleteSnapshot"
	methodListSnapshots  = "ListSnapshots"
)

var (
	needSnapshots     = needController(func(c csi.ControllerCapabilities) bool { return c.CreateDeleteSnapshot }, "CREATE_DELETE_SNAPSHOT")
	needListSnapshots = needBoth(needSnapshots, needController(func(c csi.ControllerCapabilities) bool { return c.ListSnapshots }, "LIST_SNAPSHOTS"))
	needClone         = needBoth(needCreate, needController(func(c csi.ControllerCapabilities) bool { return c.CloneVolume }, "CLONE_VOLUME"))
)

// pagingSnapshots is how many snapshots "list snapshots (paging)" takes.
const pagingSnapshots = 3

var snapshotChecks = []coverageCheck{
	{name: "CreateSnapshot", needs: needSnapshots, run: (*run).checkCreateSnapshot},
	{name: "CreateSnapshot (errors)", needs: needSnapshots, run: (*run).checkSnapshotErrors},
	{name: "ListSnapshots (paging)", needs: needListSnapshots, run: (*run).checkListSnapshots},
	{name: "ListSnapshots (invalid starting token)", needs: needListSnapshots, run: func(l *run, ctx context.Context, step string) {
		cc, ok := l.ctrlRaw(ctx, step)
		if !ok {
			return
		}
		tok := invalidToken()
		expectRPC(ctx, l, step, methodListSnapshots, csi.CodeAborted, fmt.Sprintf("the spec requires Aborted when starting_token (%q) is not one the plugin issued", tok),
			func(ctx context.Context) (*csipb.ListSnapshotsResponse, error) {
				return cc.ListSnapshots(ctx, &csipb.ListSnapshotsRequest{StartingToken: tok})
			})
	}},
}

var volumeSourceChecks = []coverageCheck{
	{name: "CreateVolume (from a snapshot)", needs: needBoth(needCreate, needSnapshots), run: func(l *run, ctx context.Context, step string) {
		sn, ok := l.snapshot(ctx, step, "restore-src")
		if !ok {
			return
		}
		defer l.dropSnapshot(ctx, step, sn.GetSnapshotId())
		src := &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Snapshot{Snapshot: &csipb.VolumeContentSource_SnapshotSource{SnapshotId: sn.GetSnapshotId()}}}
		l.fromSource(ctx, step, "restore", src, "snapshot", sn.GetSnapshotId())
	}},
	{name: "CreateVolume (clone)", needs: needClone, run: func(l *run, ctx context.Context, step string) {
		src := &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Volume{Volume: &csipb.VolumeContentSource_VolumeSource{VolumeId: l.externalID}}}
		l.fromSource(ctx, step, "clone", src, "volume", l.externalID)
	}},
}

// fromSource creates a volume from src, checks that it says so, deletes
// it, and requires NotFound for a source that does not exist.
func (l *run) fromSource(ctx context.Context, step, suffix string, src *csipb.VolumeContentSource, kind, id string) {
	v, err := l.scratch(ctx, step, suffix, src)
	if err != nil {
		l.expectCode(ctx, step, methodCreateVolume, err, csi.CodeOK, fmt.Sprintf("the spec requires OK from CreateVolume with the %s %q as volume_content_source", kind, id))
		return
	}
	got := v.GetContentSource().GetSnapshot().GetSnapshotId()
	if kind == "volume" {
		got = v.GetContentSource().GetVolume().GetVolumeId()
	}
	if got != id {
		l.wrong(ctx, step, methodCreateVolume, fmt.Sprintf("with content_source %s %q", kind, got), fmt.Sprintf("the spec requires content_source set to the %s the volume was made from (%q)", kind, id))
	}
	l.dropScratch(ctx, step, v.GetVolumeId())
	bad := unknownID(id)
	var missing *csipb.VolumeContentSource
	if kind == "volume" {
		missing = &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Volume{Volume: &csipb.VolumeContentSource_VolumeSource{VolumeId: bad}}}
	} else {
		missing = &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Snapshot{Snapshot: &csipb.VolumeContentSource_SnapshotSource{SnapshotId: bad}}}
	}
	if _, err := l.scratch(ctx, step, suffix+"-missing", missing); err == nil {
		l.expectCode(ctx, step, methodCreateVolume, nil, csi.CodeNotFound, fmt.Sprintf("the spec requires NotFound when the source %s %q does not exist", kind, bad))
		l.dropScratch(ctx, step, l.scratchIDs[len(l.scratchIDs)-1])
	} else {
		l.expectCode(ctx, step, methodCreateVolume, err, csi.CodeNotFound, fmt.Sprintf("the spec requires NotFound when the source %s %q does not exist", kind, bad))
	}
}

// snapshot takes a snapshot of the run's volume named after suffix.
func (l *run) snapshot(ctx context.Context, step, suffix string) (*csipb.Snapshot, bool) {
	cc, ok := l.ctrlRaw(ctx, step)
	if !ok {
		return nil, false
	}
	name := l.name + "-" + suffix
	resp, ok := callOK(ctx, l, step, methodCreateSnapshot, fmt.Sprintf("the spec requires OK from CreateSnapshot of volume %q, which %s", l.externalID, l.volumeOrigin()),
		func(ctx context.Context) (*csipb.CreateSnapshotResponse, error) {
			return cc.CreateSnapshot(ctx, &csipb.CreateSnapshotRequest{SourceVolumeId: l.externalID, Name: name, Secrets: l.secretsFor(methodCreateSnapshot)})
		})
	if !ok {
		return nil, false
	}
	sn := resp.GetSnapshot()
	if sn.GetSnapshotId() == "" {
		l.wrong(ctx, step, methodCreateSnapshot, "without a snapshot_id", "the spec requires snapshot_id")
		return nil, false
	}
	l.cleanups.push(l.undoSnapshot(sn.GetSnapshotId()))
	if sn.GetSourceVolumeId() != l.externalID {
		l.wrong(ctx, step, methodCreateSnapshot, fmt.Sprintf("with source_volume_id %q", sn.GetSourceVolumeId()), fmt.Sprintf("the spec requires the source volume's ID (%q)", l.externalID))
	}
	return sn, true
}

// dropSnapshot deletes a snapshot and reports a failure to do so.
func (l *run) dropSnapshot(ctx context.Context, step, id string) {
	cc, ok := l.ctrlRaw(ctx, step)
	if !ok {
		return
	}
	if _, ok := callOK(ctx, l, step, methodDeleteSnapshot, fmt.Sprintf("the spec requires OK from DeleteSnapshot of snapshot %q, which CreateSnapshot returned", id),
		func(ctx context.Context) (*csipb.DeleteSnapshotResponse, error) {
			return cc.DeleteSnapshot(ctx, &csipb.DeleteSnapshotRequest{SnapshotId: id, Secrets: l.secretsFor(methodDeleteSnapshot)})
		}); ok {
		l.deletedSnapshots = append(l.deletedSnapshots, id)
	}
}

// undoSnapshot deletes a snapshot a check left behind, silently when
// there is none.
func (l *run) undoSnapshot(id string) func(context.Context) {
	return func(ctx context.Context) {
		for _, d := range l.deletedSnapshots {
			if d == id {
				return
			}
		}
		ctx, cancel := l.cleanupCtx(ctx)
		defer cancel()
		step := fmt.Sprintf("cleanup: delete snapshot %q", id)
		l.rep.Step(step)
		l.dropSnapshot(ctx, step, id)
	}
}

// checkCreateSnapshot takes a snapshot, repeats the call (same
// snapshot), deletes it and repeats the delete (OK).
func (l *run) checkCreateSnapshot(ctx context.Context, step string) {
	sn, ok := l.snapshot(ctx, step, "snap")
	if !ok {
		return
	}
	again, ok := l.snapshot(ctx, step, "snap")
	if ok && again.GetSnapshotId() != sn.GetSnapshotId() {
		l.wrong(ctx, step, methodCreateSnapshot, fmt.Sprintf("with snapshot_id %q, not %q", again.GetSnapshotId(), sn.GetSnapshotId()),
			"the spec requires OK and the same snapshot when CreateSnapshot is repeated with the same name and source")
		l.dropSnapshot(ctx, step, again.GetSnapshotId())
	}
	l.dropSnapshot(ctx, step, sn.GetSnapshotId())
	cc, ok := l.ctrlRaw(ctx, step)
	if !ok {
		return
	}
	callOK(ctx, l, step, methodDeleteSnapshot, fmt.Sprintf("a repeated teardown must succeed: the spec requires OK from DeleteSnapshot of snapshot %q, already deleted", sn.GetSnapshotId()),
		func(ctx context.Context) (*csipb.DeleteSnapshotResponse, error) {
			return cc.DeleteSnapshot(ctx, &csipb.DeleteSnapshotRequest{SnapshotId: sn.GetSnapshotId(), Secrets: l.secretsFor(methodDeleteSnapshot)})
		})
}

// checkSnapshotErrors sends the snapshot requests the spec requires
// refused.
func (l *run) checkSnapshotErrors(ctx context.Context, step string) {
	cc, ok := l.ctrlRaw(ctx, step)
	if !ok {
		return
	}
	create := func(r *csipb.CreateSnapshotRequest) func(context.Context) (*csipb.CreateSnapshotResponse, error) {
		r.Secrets = l.secretsFor(methodCreateSnapshot)
		return func(ctx context.Context) (*csipb.CreateSnapshotResponse, error) { return cc.CreateSnapshot(ctx, r) }
	}
	keep := func(resp *csipb.CreateSnapshotResponse, ok bool) {
		if id := resp.GetSnapshot().GetSnapshotId(); !ok && id != "" {
			l.cleanups.push(l.undoSnapshot(id))
		}
	}
	keep(expectRPC(ctx, l, step, methodCreateSnapshot, csi.CodeInvalidArgument, expectMissingField+" (CreateSnapshotRequest.name)", create(&csipb.CreateSnapshotRequest{SourceVolumeId: l.externalID})))
	keep(expectRPC(ctx, l, step, methodCreateSnapshot, csi.CodeInvalidArgument, expectMissingField+" (CreateSnapshotRequest.source_volume_id)", create(&csipb.CreateSnapshotRequest{Name: l.name + "-nosrc"})))
	bad := unknownID(l.externalID)
	keep(expectRPC(ctx, l, step, methodCreateSnapshot, csi.CodeNotFound, fmt.Sprintf("the spec requires NotFound when source_volume_id does not exist (%q)", bad), create(&csipb.CreateSnapshotRequest{Name: l.name + "-badsrc", SourceVolumeId: bad})))
	expectRPC(ctx, l, step, methodDeleteSnapshot, csi.CodeInvalidArgument, expectMissingField+" (DeleteSnapshotRequest.snapshot_id)",
		func(ctx context.Context) (*csipb.DeleteSnapshotResponse, error) {
			return cc.DeleteSnapshot(ctx, &csipb.DeleteSnapshotRequest{Secrets: l.secretsFor(methodDeleteSnapshot)})
		})
}

// checkListSnapshots takes snapshots, then pages through them one at a
// time, and filters by an unknown snapshot ID (an empty list).
func (l *run) checkListSnapshots(ctx context.Context, step string) {
	cc, ok := l.ctrlRaw(ctx, step)
	if !ok {
		return
	}
	var made []string
	defer func() {
		for _, id := range made {
			l.dropSnapshot(ctx, step, id)
		}
	}()
	for i := range pagingSnapshots {
		sn, ok := l.snapshot(ctx, step, fmt.Sprintf("page-%d", i))
		if !ok {
			return
		}
		made = append(made, sn.GetSnapshotId())
	}
	seen := map[string]bool{}
	tok := ""
	for page := 0; ; page++ {
		resp, ok := callOK(ctx, l, step, methodListSnapshots, fmt.Sprintf("the spec requires OK from ListSnapshots (max_entries 1, starting_token %q from the previous page)", tok),
			func(ctx context.Context) (*csipb.ListSnapshotsResponse, error) {
				return cc.ListSnapshots(ctx, &csipb.ListSnapshotsRequest{MaxEntries: 1, StartingToken: tok, SourceVolumeId: l.externalID, Secrets: l.secretsFor(methodListSnapshots)})
			})
		if !ok {
			return
		}
		if n := len(resp.GetEntries()); n > 1 {
			l.wrong(ctx, step, methodListSnapshots, fmt.Sprintf("with %d entries", n), "the spec requires at most max_entries (1) entries")
			return
		}
		for _, e := range resp.GetEntries() {
			seen[e.GetSnapshot().GetSnapshotId()] = true
		}
		if tok = resp.GetNextToken(); tok == "" || page > 1000 {
			break
		}
	}
	for _, id := range made {
		if !seen[id] {
			l.wrong(ctx, step, methodListSnapshots, fmt.Sprintf("without snapshot_id %q on any page of max_entries 1", id),
				"the spec requires the pages, followed by next_token, to list every snapshot of source_volume_id")
		}
	}
	bad := unknownID(made[0])
	resp, ok := callOK(ctx, l, step, methodListSnapshots, fmt.Sprintf("the spec requires OK and an empty list from ListSnapshots of a snapshot_id that does not exist (%q)", bad),
		func(ctx context.Context) (*csipb.ListSnapshotsResponse, error) {
			return cc.ListSnapshots(ctx, &csipb.ListSnapshotsRequest{SnapshotId: bad, Secrets: l.secretsFor(methodListSnapshots)})
		})
	if ok && len(resp.GetEntries()) > 0 {
		l.wrong(ctx, step, methodListSnapshots, fmt.Sprintf("with %d entries for snapshot_id %q", len(resp.GetEntries()), bad), "the spec requires an empty list when no snapshot has snapshot_id")
	}
}
