package csitest_test

import (
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/csikit/csikit/csi/clock"
	"github.com/csikit/csikit/csitest"
)

func createVol(t *testing.T, c clients, name string) string {
	t.Helper()
	r, err := c.ctrl.CreateVolume(ctxT(t), &csipb.CreateVolumeRequest{Name: name,
		VolumeCapabilities: []*csipb.VolumeCapability{mountCap(csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)}})
	noErr(t, err)
	return r.GetVolume().GetVolumeId()
}

func TestCreateSnapshot_ReadyAfterCalls(t *testing.T) {
	cfg := fullConfig
	cfg.SnapshotReadyAfter = 2
	p, c := start(t, cfg)
	vol := createVol(t, c, "v")
	req := &csipb.CreateSnapshotRequest{SourceVolumeId: vol, Name: "s"}
	var ids []string
	for i, want := range []bool{false, false, true, true} {
		r, err := c.ctrl.CreateSnapshot(ctxT(t), req)
		noErr(t, err)
		if got := r.GetSnapshot().GetReadyToUse(); got != want {
			t.Fatalf("reply %d: ready_to_use %v, want %v", i+1, got, want)
		}
		ids = append(ids, r.GetSnapshot().GetSnapshotId())
	}
	if ids[0] != ids[3] {
		t.Errorf("a repeated CreateSnapshot made a second snapshot: %v", ids)
	}
	p.RequireNoViolations(t)
}

func TestCreateSnapshot_ReadyAfterDelay(t *testing.T) {
	fake := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg := fullConfig
	cfg.Clock, cfg.SnapshotReadyDelay = fake, time.Minute
	_, c := start(t, cfg)
	vol := createVol(t, c, "v")
	r, err := c.ctrl.CreateSnapshot(ctxT(t), &csipb.CreateSnapshotRequest{SourceVolumeId: vol, Name: "s"})
	noErr(t, err)
	id := r.GetSnapshot().GetSnapshotId()
	if r.GetSnapshot().GetReadyToUse() {
		t.Fatal("ready before the delay passed")
	}
	// A restore from it is refused as retryable meanwhile.
	_, err = c.ctrl.CreateVolume(ctxT(t), &csipb.CreateVolumeRequest{Name: "r",
		VolumeCapabilities:  []*csipb.VolumeCapability{mountCap(csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)},
		VolumeContentSource: &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Snapshot{Snapshot: &csipb.VolumeContentSource_SnapshotSource{SnapshotId: id}}}})
	wantCode(t, err, codes.Unavailable)
	fake.Advance(time.Minute)
	l, err := c.ctrl.ListSnapshots(ctxT(t), &csipb.ListSnapshotsRequest{SnapshotId: id})
	noErr(t, err)
	if len(l.GetEntries()) != 1 || !l.GetEntries()[0].GetSnapshot().GetReadyToUse() {
		t.Fatalf("after the delay: %v, want the snapshot ready", l.GetEntries())
	}
}

func TestSnapshotRules(t *testing.T) {
	p, c := start(t, fullConfig)
	_, err := c.ctrl.CreateSnapshot(ctxT(t), &csipb.CreateSnapshotRequest{SourceVolumeId: "nope", Name: "s"})
	wantCode(t, err, codes.NotFound)
	if vs := p.Violations(); len(vs) != 0 {
		t.Fatalf("violations %v for a source never had, want none", vs)
	}
	// A snapshot of a volume the CO deleted is the CO's mistake.
	p.AddVolume("was", 10, nil)
	_, err = c.ctrl.DeleteVolume(ctxT(t), &csipb.DeleteVolumeRequest{VolumeId: "was"})
	noErr(t, err)
	_, err = c.ctrl.CreateSnapshot(ctxT(t), &csipb.CreateSnapshotRequest{SourceVolumeId: "was", Name: "s"})
	wantCode(t, err, codes.NotFound)
	vs := p.Violations()
	if len(vs) != 1 || vs[0].Rule != csitest.RuleSnapshotMissingVolume {
		t.Fatalf("violations %v, want one %s", vs, csitest.RuleSnapshotMissingVolume)
	}
	p.ResetViolations()
	// Deletes are idempotent: twice, and of a snapshot never made.
	id := p.AddSnapshot("outside", "gone-volume", 10)
	for range 2 {
		_, err := c.ctrl.DeleteSnapshot(ctxT(t), &csipb.DeleteSnapshotRequest{SnapshotId: id})
		noErr(t, err)
	}
	if _, ok := p.Snapshot(id); ok {
		t.Error("snapshot still in the model after DeleteSnapshot")
	}
	p.RequireNoViolations(t)
}
