package hostpath_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/csikit/csikit/examples/hostpathplugin/hostpath"
)

func TestController_SnapshotRestoreClone(t *testing.T) {
	h := start(t, hostpath.Config{})
	ctx := context.Background()
	snw := csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
	create := func(name string, src *csipb.VolumeContentSource) string {
		t.Helper()
		r, err := h.ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: name,
			VolumeCapabilities: []*csipb.VolumeCapability{mountCap(snw)}, VolumeContentSource: src})
		must.NoError(t, err)
		return r.GetVolume().GetVolumeId()
	}
	file := func(vol string) string { return filepath.Join(h.cfg.DataDir, "volumes", vol, "sub", "data.txt") }
	write := func(vol, text string) {
		t.Helper()
		must.NoError(t, os.MkdirAll(filepath.Dir(file(vol)), 0o755))
		must.NoError(t, os.WriteFile(file(vol), []byte(text), 0o644))
	}
	read := func(vol string) string {
		t.Helper()
		b, err := os.ReadFile(file(vol))
		must.NoError(t, err)
		return string(b)
	}

	src := create("src", nil)
	write(src, "before")
	sr, err := h.ctrl.CreateSnapshot(ctx, &csipb.CreateSnapshotRequest{SourceVolumeId: src, Name: "snap"})
	must.NoError(t, err)
	snap := sr.GetSnapshot()
	must.True(t, snap.GetReadyToUse(), "a copy is ready once made")
	again, err := h.ctrl.CreateSnapshot(ctx, &csipb.CreateSnapshotRequest{SourceVolumeId: src, Name: "snap"})
	must.NoError(t, err)
	must.Equal(t, snap.GetSnapshotId(), again.GetSnapshot().GetSnapshotId(), "a repeated CreateSnapshot returns the same snapshot")
	write(src, "after")

	restored := create("restored", &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Snapshot{
		Snapshot: &csipb.VolumeContentSource_SnapshotSource{SnapshotId: snap.GetSnapshotId()}}})
	must.Equal(t, "before", read(restored), "the restore holds the data as it was at the snapshot")
	cloned := create("cloned", &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Volume{
		Volume: &csipb.VolumeContentSource_VolumeSource{VolumeId: src}}})
	must.Equal(t, "after", read(cloned), "the clone holds the source's data")

	// The snapshot survives its source volume and a restart.
	_, err = h.ctrl.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: src})
	must.NoError(t, err)
	h.restart()
	l, err := h.ctrl.ListSnapshots(ctx, &csipb.ListSnapshotsRequest{SourceVolumeId: src})
	must.NoError(t, err)
	must.Len(t, l.GetEntries(), 1, "the snapshot is listed after its source went and the plugin restarted")

	for range 2 { // idempotent
		_, err = h.ctrl.DeleteSnapshot(ctx, &csipb.DeleteSnapshotRequest{SnapshotId: snap.GetSnapshotId()})
		must.NoError(t, err)
	}
	_, err = h.ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "late",
		VolumeCapabilities: []*csipb.VolumeCapability{mountCap(snw)},
		VolumeContentSource: &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Snapshot{
			Snapshot: &csipb.VolumeContentSource_SnapshotSource{SnapshotId: snap.GetSnapshotId()}}}})
	requireCode(t, codes.NotFound, err)
	_, err = h.ctrl.ListSnapshots(ctx, &csipb.ListSnapshotsRequest{StartingToken: "../x"})
	requireCode(t, codes.Aborted, err)
}
