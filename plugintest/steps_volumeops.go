package plugintest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/rpcshim"
)

// The volume operations steps: while allocation 1 has the volume
// mounted, each operation the plugin advertises runs through the csikit
// server (ExpandVolume, CreateSnapshot, CreateVolume from a snapshot or
// a volume, ModifyVolume), and the data written before it is read back
// where the operation must keep it.
const (
	stepExpandOnline = "expand online (data kept)"
	stepSnapshot     = "snapshot"
	stepRestore      = "restore snapshot (read back)"
	stepClone        = "clone volume (read back)"
	stepModify       = "modify volume"
)

// opsFile is the file the volume operations write before they run and
// read back after.
type opsFile struct {
	name string
	data []byte
	// writer is where it was written; nil when no read/write
	// file-system mount was there to write through.
	writer *alloc
}

// volumeOps runs the volume operations steps. The calls they make are
// dropped from the call log afterwards: they are not part of the
// lifecycle the later steps repeat and check the order of.
func (l *run) volumeOps(ctx context.Context) {
	from := l.calls.len()
	defer l.calls.truncate(from)
	f := l.writeOpsFile(ctx)
	if f.writer != nil {
		defer func() { _ = os.Remove(filepath.Join(f.writer.path, f.name)) }()
	}
	l.expandOnline(ctx, f)
	snap := l.snapshotOp(ctx)
	if snap != "" && l.ctrlCaps.CreateDeleteVolume && l.begin(ctx, stepRestore) {
		l.opsFromSource(ctx, stepRestore, "restore", &rpcshim.VolumeSource{SnapshotID: snap}, f)
	}
	if l.hasController && l.ctrlCaps.CloneVolume && l.ctrlCaps.CreateDeleteVolume && l.begin(ctx, stepClone) {
		l.opsFromSource(ctx, stepClone, "clone", &rpcshim.VolumeSource{VolumeID: l.volID}, f)
	}
	l.modifyOp(ctx)
}

// writeOpsFile writes the file the operations read back, through
// allocation 1's target when it is a read/write file-system mount.
func (l *run) writeOpsFile(ctx context.Context) opsFile {
	f := opsFile{name: "plugintest-ops-" + randomHex(4), data: []byte("kept by csikit plugintest across the volume operations\n")}
	if len(l.allocs) == 0 || !l.allocs[0].mounted || l.allocs[0].mode != csi.ClaimWrite ||
		l.cfg.Capability.AttachmentMode != csi.AttachmentModeFileSystem || l.cfg.DataCheck == DataOff {
		return f
	}
	w := l.allocs[0]
	if err := os.WriteFile(filepath.Join(w.path, f.name), f.data, 0o644); err != nil {
		l.rep.Logf("volume operations: cannot write %s through allocation 1's target: %v", f.name, err)
		return f
	}
	f.writer = w
	return f
}

// readBack checks that dir holds f as written.
func (l *run) readBack(ctx context.Context, step, dir, where string, f opsFile) {
	got, err := os.ReadFile(filepath.Join(dir, f.name))
	switch {
	case err != nil:
		l.fail(ctx, Failure{Step: step, Got: "the file written before the operation cannot be read " + where,
			Expect: "the volume's data must survive the operation (set Config.DataCheck to DataWriterOnly for a plugin without real storage)", Detail: err.Error()})
	case !bytes.Equal(got, f.data):
		l.fail(ctx, Failure{Step: step, Got: "the file read " + where + " differs from what was written before the operation",
			Expect: "the volume's data must survive the operation"})
	}
}

// expandOnline grows the mounted volume through the server: the
// controller step, then the node step on the harness's node, where the
// volume is staged and published; then it reads the file back.
func (l *run) expandOnline(ctx context.Context, f opsFile) {
	p, err := l.st.server.Plugin(ctx, pluginID)
	if err != nil {
		return
	}
	m := p.ExpansionMode()
	if !m.Supported() || m.OfflineOnly() || f.writer == nil || !l.begin(ctx, stepExpandOnline) {
		return
	}
	ctx, cancel := l.stepCtx(ctx)
	defer cancel()
	v, err := l.st.server.Volume(ctx, namespace, l.volID)
	if err != nil {
		l.fail(ctx, Failure{Step: stepExpandOnline, Expect: "the run's volume in the store", Detail: err.Error()})
		return
	}
	want := max(v.Capacity, l.cfg.CapacityBytes) + expandStep
	resp, err := l.st.server.ExpandVolume(ctx, &rpcshim.VolumeExpandRequest{Namespace: namespace, VolumeID: l.volID, RequiredBytes: want})
	if err != nil {
		l.fail(ctx, l.failure(ctx, stepExpandOnline, err, l.expectOK(callOf(err), csi.CodeOf(err))))
		return
	}
	e := resp.Volume.Expansion
	switch {
	case e == nil || e.State != csi.ExpansionDone:
		l.fail(ctx, Failure{Step: stepExpandOnline, Expect: "the expansion to be done on the node where the volume is mounted",
			Detail: fmt.Sprintf("expansion %+v, pending on %v", e, resp.PendingNodes)})
	case resp.Volume.Capacity != 0 && resp.Volume.Capacity < want:
		l.wrong(ctx, stepExpandOnline, methodControllerExpand, fmt.Sprintf("with capacity_bytes %d", resp.Volume.Capacity),
			fmt.Sprintf("the spec requires the new capacity to be at least required_bytes (%d)", want))
	}
	l.readBack(ctx, stepExpandOnline, f.writer.path, "through allocation 1's target after the expansion", f)
}

// snapshotOp snapshots the run's volume through the server and returns
// the snapshot's csikit ID, "" when the step did not run or failed. A
// cleanup deletes the snapshot.
func (l *run) snapshotOp(ctx context.Context) string {
	if !l.hasController || !l.ctrlCaps.CreateDeleteSnapshot || !l.begin(ctx, stepSnapshot) {
		return ""
	}
	ctx, cancel := l.stepCtx(ctx)
	defer cancel()
	id := "snap-" + randomHex(4)
	resp, err := l.st.server.CreateSnapshot(ctx, &rpcshim.SnapshotCreateRequest{Namespace: namespace, VolumeID: l.volID, SnapshotID: id, Secrets: l.secretsFor(methodCreateSnapshot).Copy()})
	if err != nil {
		l.fail(ctx, l.failure(ctx, stepSnapshot, err, l.expectOK(callOf(err), csi.CodeOf(err))))
		return ""
	}
	l.cleanups.push(l.undoOpsSnapshot(id))
	if s := resp.Snapshot; !s.ReadyToUse || s.ExternalID == "" || s.SourceVolumeID != l.volID {
		l.fail(ctx, Failure{Step: stepSnapshot, Expect: "a snapshot of the run's volume, ready to use, with the plugin's ID",
			Detail: fmt.Sprintf("ready_to_use %t, snapshot_id %q, source %q", s.ReadyToUse, s.ExternalID, s.SourceVolumeID)})
		return ""
	}
	return id
}

// undoOpsSnapshot deletes snapshot id through the server.
func (l *run) undoOpsSnapshot(id string) func(context.Context) {
	return func(ctx context.Context) {
		ctx, cancel := l.cleanupCtx(ctx)
		defer cancel()
		_, err := l.st.server.DeleteSnapshot(ctx, &rpcshim.SnapshotDeleteRequest{Namespace: namespace, SnapshotID: id})
		if err != nil && !errors.Is(err, csi.ErrSnapshotNotFound) {
			step := "cleanup: delete snapshot"
			l.rep.Step(step)
			l.rep.Fail(l.failure(ctx, step, err, "the spec requires OK from DeleteSnapshot of a snapshot nothing uses"))
		}
	}
}

// modifyOp sets Config.MutableParameters through the server and checks
// the volume records them.
func (l *run) modifyOp(ctx context.Context) {
	if !l.hasController || !l.ctrlCaps.ModifyVolume {
		return
	}
	if len(l.cfg.MutableParameters) == 0 {
		l.rep.Skip(stepModify, "Config.MutableParameters is empty: the harness cannot guess the plugin's mutable parameters")
		return
	}
	if !l.begin(ctx, stepModify) {
		return
	}
	ctx, cancel := l.stepCtx(ctx)
	defer cancel()
	resp, err := l.st.server.ModifyVolume(ctx, &rpcshim.VolumeModifyRequest{Namespace: namespace, VolumeID: l.volID, MutableParameters: maps.Clone(l.cfg.MutableParameters)})
	if err != nil {
		l.fail(ctx, l.failure(ctx, stepModify, err, l.expectOK(callOf(err), csi.CodeOf(err))))
		return
	}
	for k, want := range l.cfg.MutableParameters {
		if got := resp.Volume.MutableParameters[k]; got != want {
			l.fail(ctx, Failure{Step: stepModify, Expect: "the volume to record the mutable parameters ControllerModifyVolume accepted",
				Detail: fmt.Sprintf("parameter %q is %q, want %q", k, got, want)})
		}
	}
}
