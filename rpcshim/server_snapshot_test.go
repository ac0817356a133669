package rpcshim_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/clock"
	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/rpcshim"
)

var snapCaps = csi.ControllerCapabilities{
	CreateDeleteVolume: true, PublishUnpublishVolume: true, ListVolumes: true,
	CreateDeleteSnapshot: true, ListSnapshots: true, CloneVolume: true,
}

// snapEnv is srvEnv (a server and three nodes over the in-memory
// transport) with a Server on a fake clock, whose timers a goroutine
// fires as soon as the Server waits on one.
type snapEnv struct {
	*srvEnv
	clock *clock.Fake
	srv   *rpcshim.Server
}

func newSnapEnv(t *testing.T, caps csi.ControllerCapabilities, cfg csitest.Config) *snapEnv {
	t.Helper()
	e := newSrvEnv(t, caps)
	if cfg.SnapshotReadyAfter != 0 || cfg.Clock != nil { // a fake with other knobs behind the same node endpoint
		cfg.Type, cfg.Name, cfg.Controller = csi.PluginTypeController, "fake.csikit.io", caps
		e.ctl = csitest.Start(t, cfg)
		_, info, err := e.plugins.ControllerPlugin(rtPlugin)
		must(t, err)
		e.plugins.set(rtPlugin, newPluginClient(t, e.ctl), info)
	}
	s := &snapEnv{srvEnv: e, clock: clock.NewFake(rtTime)}
	if cfg.Clock != nil {
		s.clock = cfg.Clock.(*clock.Fake)
	}
	var err error
	s.srv, err = rpcshim.NewServer(rpcshim.ServerConfig{Store: e.store, Applier: e.applier, Router: e.router, Clock: s.clock})
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for s.clock.BlockUntil(ctx, 1) == nil {
			s.clock.AdvanceToNext()
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return s
}

func (e *snapEnv) snapshot(t *testing.T, id, vol string) (*rpcshim.SnapshotResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return e.srv.CreateSnapshot(ctx, &rpcshim.SnapshotCreateRequest{Namespace: "default", VolumeID: vol, SnapshotID: id})
}

func (e *snapEnv) create(t *testing.T, id string, from *rpcshim.VolumeSource) (*rpcshim.VolumeResponse, error) {
	t.Helper()
	return e.srv.CreateVolume(context.Background(), &rpcshim.VolumeCreateRequest{From: from, Volume: csi.Volume{
		ID: id, Namespace: "default", PluginID: rtPlugin, Capabilities: []csi.Capability{snwFS},
	}})
}

func wantErrIs(t *testing.T, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("error %v, want one matching %v", err, target)
	}
}

func TestServer_Snapshot_Lifecycle(t *testing.T) {
	e := newSnapEnv(t, snapCaps, csitest.Config{})
	e.register("db", "ext-db", snwFS)
	resp, err := e.snapshot(t, "s1", "db")
	must(t, err)
	snap := resp.Snapshot
	if snap.Creating || !snap.ReadyToUse || snap.ExternalID == "" || snap.SourceExternalID != "ext-db" || snap.Secrets != nil {
		t.Fatalf("snapshot %+v: want complete, ready, secrets removed", snap)
	}
	if resp.ControllerNodeID != "n1" {
		t.Errorf("served by %q, want n1", resp.ControllerNodeID)
	}
	req := e.ctl.CallsTo(csitest.MethodCreateSnapshot)[0].Request.(*csipb.CreateSnapshotRequest)
	if req.GetName() != csi.SnapshotName("default", "s1") {
		t.Errorf("CreateSnapshot name %q: want the deterministic name", req.GetName())
	}
	// A repeat answers from the state.
	again, err := e.snapshot(t, "s1", "db")
	must(t, err)
	if again.Snapshot.ExternalID != snap.ExternalID || e.ctl.CallCount(csitest.MethodCreateSnapshot) != 1 {
		t.Errorf("repeat: %+v after %d calls", again.Snapshot, e.ctl.CallCount(csitest.MethodCreateSnapshot))
	}
	_, err = e.snapshot(t, "s1", "other")
	wantErrIs(t, err, csi.ErrSnapshotExists)

	// Restore and clone reach the plugin with its own IDs, and at least
	// the source's size.
	_, err = e.create(t, "restored", &rpcshim.VolumeSource{SnapshotID: "s1"})
	must(t, err)
	_, err = e.create(t, "cloned", &rpcshim.VolumeSource{VolumeID: "db"})
	must(t, err)
	creates := e.ctl.CallsTo(csitest.MethodCreateVolume)
	r0, r1 := creates[0].Request.(*csipb.CreateVolumeRequest), creates[1].Request.(*csipb.CreateVolumeRequest)
	if r0.GetVolumeContentSource().GetSnapshot().GetSnapshotId() != snap.ExternalID || r0.GetCapacityRange().GetRequiredBytes() < snap.Size {
		t.Errorf("restore request %v: want snapshot %s and at least %d bytes", r0, snap.ExternalID, snap.Size)
	}
	if r1.GetVolumeContentSource().GetVolume().GetVolumeId() != "ext-db" {
		t.Errorf("clone request %v: want volume ext-db", r1)
	}

	list, err := e.srv.ListSnapshots(context.Background(), "default", "db")
	must(t, err)
	if len(list) != 1 || list[0].ID != "s1" {
		t.Errorf("ListSnapshots(db) = %v", list)
	}
	// The source volume can go; its snapshot stays.
	_, err = e.srv.DeleteVolume(context.Background(), &rpcshim.VolumeDeleteRequest{Namespace: "default", VolumeID: "db"})
	must(t, err)
	if _, err := e.srv.Snapshot(context.Background(), "default", "s1"); err != nil {
		t.Errorf("the snapshot went with its source volume: %v", err)
	}
	_, err = e.srv.DeleteSnapshot(context.Background(), &rpcshim.SnapshotDeleteRequest{Namespace: "default", SnapshotID: "s1"})
	must(t, err)
	if _, ok := e.ctl.Snapshot(snap.ExternalID); ok {
		t.Error("the plugin still has the deleted snapshot")
	}
	_, err = e.srv.DeleteSnapshot(context.Background(), &rpcshim.SnapshotDeleteRequest{Namespace: "default", SnapshotID: "s1"})
	wantErrIs(t, err, csi.ErrSnapshotNotFound)
	e.ctl.RequireNoViolations(t)
}

// TestServer_CreateSnapshot_ResumeAfterCrash: the plugin made the
// snapshot but the server died before its reply. A new server on the
// same state resumes the intent under the same name, and the plugin
// has one snapshot.
func TestServer_CreateSnapshot_ResumeAfterCrash(t *testing.T) {
	e := newSnapEnv(t, snapCaps, csitest.Config{})
	e.register("db", "ext-db", snwFS)
	gate := e.ctl.HoldReplies(csitest.MethodCreateSnapshot)
	ctx, crash := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := e.srv.CreateSnapshot(ctx, &rpcshim.SnapshotCreateRequest{Namespace: "default", VolumeID: "db", SnapshotID: "s1"})
		errc <- err
	}()
	wctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	must(t, gate.Wait(wctx, 1))
	intent, err := e.store.VolumeSnapshot("default", "s1")
	must(t, err)
	if !intent.Creating {
		t.Fatalf("before the plugin answered: %+v, want the intent", intent)
	}
	crash()
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("the crashed create succeeded")
		}
	case <-wctx.Done():
		t.Fatal("the crashed create did not return")
	}
	gate.Open()
	// The intent cannot be deleted: the plugin made a snapshot for it.
	_, err = e.srv.DeleteSnapshot(wctx, &rpcshim.SnapshotDeleteRequest{Namespace: "default", SnapshotID: "s1"})
	wantErrIs(t, err, csi.ErrSnapshotNotReady)

	next, err := rpcshim.NewServer(rpcshim.ServerConfig{Store: e.store, Applier: e.applier, Router: e.router, Clock: e.clock})
	must(t, err)
	resp, err := next.CreateSnapshot(wctx, &rpcshim.SnapshotCreateRequest{Namespace: "default", VolumeID: "db", SnapshotID: "s1"})
	must(t, err)
	var made []string
	for _, id := range []string{"snap-1", "snap-2"} {
		if _, ok := e.ctl.Snapshot(id); ok {
			made = append(made, id)
		}
	}
	if len(made) != 1 || resp.Snapshot.ExternalID != made[0] {
		t.Errorf("plugin snapshots %v, resumed record %q: want exactly one, recorded", made, resp.Snapshot.ExternalID)
	}
}

func TestServer_CreateVolume_SourceRefused(t *testing.T) {
	e := newSnapEnv(t, snapCaps, csitest.Config{})
	e.register("db", "ext-db", snwFS)
	_, err := e.snapshot(t, "s1", "db")
	must(t, err)
	cases := []struct {
		name string
		from rpcshim.VolumeSource
		want error
	}{
		{"OtherNamespace", rpcshim.VolumeSource{Namespace: "other", SnapshotID: "s1"}, csi.ErrNamespaceMismatch},
		{"CloneOtherNamespace", rpcshim.VolumeSource{Namespace: "other", VolumeID: "db"}, csi.ErrNamespaceMismatch},
		{"MissingSnapshot", rpcshim.VolumeSource{SnapshotID: "nope"}, csi.ErrSnapshotNotFound},
		{"MissingVolume", rpcshim.VolumeSource{VolumeID: "nope"}, csi.ErrVolumeNotFound},
		{"Both", rpcshim.VolumeSource{SnapshotID: "s1", VolumeID: "db"}, csi.ErrInvalidRequest},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := e.create(t, "new-"+c.name, &c.from)
			wantErrIs(t, err, c.want)
			if _, err := e.store.Volume("default", "new-"+c.name); !errors.Is(err, csi.ErrVolumeNotFound) {
				t.Errorf("a refused create left a record: %v", err)
			}
		})
	}
	t.Run("BelowSourceSize", func(t *testing.T) {
		_, err := e.srv.CreateVolume(context.Background(), &rpcshim.VolumeCreateRequest{From: &rpcshim.VolumeSource{SnapshotID: "s1"},
			Volume: csi.Volume{ID: "small", Namespace: "default", PluginID: rtPlugin, Capabilities: []csi.Capability{snwFS}, RequestedCapacityMax: 1 << 20}})
		wantErrIs(t, err, csi.ErrInvalidRequest)
	})
	if n := e.ctl.CallCount(csitest.MethodCreateVolume); n != 0 {
		t.Errorf("refused creates made %d CreateVolume calls", n)
	}
}

func TestServer_Snapshot_NotSupported(t *testing.T) {
	caps := snapCaps
	caps.CreateDeleteSnapshot, caps.CloneVolume = false, false
	e := newSnapEnv(t, caps, csitest.Config{})
	e.register("db", "ext-db", snwFS)
	_, err := e.snapshot(t, "s1", "db")
	wantErrIs(t, err, csi.ErrNotSupported)
	if _, err := e.store.VolumeSnapshot("default", "s1"); !errors.Is(err, csi.ErrSnapshotNotFound) {
		t.Errorf("a refused snapshot left an intent: %v", err)
	}
	_, err = e.create(t, "c", &rpcshim.VolumeSource{VolumeID: "db"})
	wantErrIs(t, err, csi.ErrNotSupported)
}

// TestServer_CreateSnapshot_UnavailableBackoff: Unavailable answers are
// retried, each after a backoff delay on the Server's clock.
func TestServer_CreateSnapshot_UnavailableBackoff(t *testing.T) {
	e := newSnapEnv(t, snapCaps, csitest.Config{})
	e.register("db", "ext-db", snwFS)
	e.ctl.FailNext(csitest.MethodCreateSnapshot, codes.Unavailable, 2)
	start := e.clock.Now()
	_, err := e.snapshot(t, "s1", "db")
	must(t, err)
	if n := e.ctl.CallCount(csitest.MethodCreateSnapshot); n != 3 {
		t.Errorf("%d CreateSnapshot calls, want 3 (two Unavailable, then success)", n)
	}
	// Delays of 1s and 2s, less at most 20% jitter each.
	if waited := e.clock.Now().Sub(start); waited < 2400*time.Millisecond {
		t.Errorf("waited %s on the clock between the calls, want the backoff (at least 2.4s)", waited)
	}
}

func TestServer_CreateSnapshot_WaitsForReady(t *testing.T) {
	t.Run("ReadyOnThirdCall", func(t *testing.T) {
		e := newSnapEnv(t, snapCaps, csitest.Config{SnapshotReadyAfter: 2})
		e.register("db", "ext-db", snwFS)
		resp, err := e.snapshot(t, "s1", "db")
		must(t, err)
		if !resp.Snapshot.ReadyToUse || e.ctl.CallCount(csitest.MethodCreateSnapshot) != 3 {
			t.Errorf("%+v after %d calls, want ready after 3", resp.Snapshot, e.ctl.CallCount(csitest.MethodCreateSnapshot))
		}
	})
	t.Run("BoundedAttempts", func(t *testing.T) {
		e := newSnapEnv(t, snapCaps, csitest.Config{SnapshotReadyAfter: 1000})
		e.register("db", "ext-db", snwFS)
		_, err := e.snapshot(t, "s1", "db")
		wantErrIs(t, err, csi.ErrSnapshotNotReady)
		if n := e.ctl.CallCount(csitest.MethodCreateSnapshot); n != rpcshim.MaxSnapshotAttempts {
			t.Errorf("%d calls, want MaxSnapshotAttempts (%d)", n, rpcshim.MaxSnapshotAttempts)
		}
		snap, err := e.store.VolumeSnapshot("default", "s1")
		must(t, err)
		if snap.Creating || snap.ReadyToUse || snap.ExternalID == "" {
			t.Errorf("recorded %+v, want complete but not ready", snap)
		}
		_, err = e.create(t, "r", &rpcshim.VolumeSource{SnapshotID: "s1"})
		wantErrIs(t, err, csi.ErrSnapshotNotReady)
	})
}

func TestServer_ReconcileSnapshots(t *testing.T) {
	e := newSnapEnv(t, snapCaps, csitest.Config{})
	e.register("db", "ext-db", snwFS)
	_, err := e.snapshot(t, "own", "db")
	must(t, err)
	// More than one page, of a known volume and of one csikit never saw.
	var ids []string
	for i := range 130 {
		src := "ext-db"
		if i%2 == 1 {
			src = "gone"
		}
		ids = append(ids, e.ctl.AddSnapshot(fmt.Sprintf("outside-%d", i), src, 1<<20))
	}
	req := &rpcshim.SnapshotReconcileRequest{PluginID: rtPlugin, Namespace: "default"}
	resp, err := e.srv.ReconcileSnapshots(context.Background(), req)
	must(t, err)
	if len(resp.Registered) != 130 || e.ctl.CallCount(csitest.MethodListSnapshots) != 2 {
		t.Fatalf("registered %d in %d pages, want 130 in 2", len(resp.Registered), e.ctl.CallCount(csitest.MethodListSnapshots))
	}
	got, err := e.store.VolumeSnapshot("default", rpcshim.ImportedSnapshotID(rtPlugin, ids[0]))
	must(t, err)
	if got.SourceVolumeID != "db" || got.ExternalID != ids[0] {
		t.Errorf("imported %+v, want the source volume db", got)
	}
	got, err = e.store.VolumeSnapshot("default", rpcshim.ImportedSnapshotID(rtPlugin, ids[1]))
	must(t, err)
	if got.SourceVolumeID != "" || got.SourceExternalID != "gone" {
		t.Errorf("imported %+v, want no source volume and external source gone", got)
	}
	again, err := e.srv.ReconcileSnapshots(context.Background(), req)
	must(t, err)
	if len(again.Registered)+len(again.Updated) != 0 {
		t.Errorf("a second reconcile wrote %v %v", again.Registered, again.Updated)
	}
}

// TestServer_CreateSnapshot_Serialized: a second create of the same
// snapshot waits for the first (the Server's per-snapshot lock), then
// answers from the record without a plugin call of its own.
func TestServer_CreateSnapshot_Serialized(t *testing.T) {
	e := newSnapEnv(t, snapCaps, csitest.Config{})
	e.register("db", "ext-db", snwFS)
	gate := e.ctl.HoldReplies(csitest.MethodCreateSnapshot)
	errc := make(chan error, 2)
	create := func() {
		_, err := e.srv.CreateSnapshot(context.Background(), &rpcshim.SnapshotCreateRequest{Namespace: "default", VolumeID: "db", SnapshotID: "s1"})
		errc <- err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go create()
	must(t, gate.Wait(ctx, 1))
	go create()
	// The second must not reach the plugin while the first holds the
	// snapshot; give it a bounded chance to (it would within this time
	// without the lock).
	short, stop := context.WithTimeout(ctx, 200*time.Millisecond)
	if err := gate.Wait(short, 2); err == nil {
		t.Error("a second CreateSnapshot of the same snapshot reached the plugin while the first was in flight")
	}
	stop()
	gate.Open()
	for range 2 {
		select {
		case err := <-errc:
			must(t, err)
		case <-ctx.Done():
			t.Fatal("the creates did not return")
		}
	}
	if n := e.ctl.CallCount(csitest.MethodCreateSnapshot); n != 1 {
		t.Errorf("%d CreateSnapshot calls, want 1", n)
	}
}

// TestServer_DeleteSnapshot_WaitsForCreate: a delete of a snapshot
// whose create is in flight waits for it (the per-snapshot lock), so it
// deletes what the plugin made instead of dropping the intent under it.
func TestServer_DeleteSnapshot_WaitsForCreate(t *testing.T) {
	e := newSnapEnv(t, snapCaps, csitest.Config{})
	e.register("db", "ext-db", snwFS)
	gate := e.ctl.HoldReplies(csitest.MethodCreateSnapshot)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	created, deleted := make(chan error, 1), make(chan error, 1)
	go func() {
		_, err := e.srv.CreateSnapshot(ctx, &rpcshim.SnapshotCreateRequest{Namespace: "default", VolumeID: "db", SnapshotID: "s1"})
		created <- err
	}()
	must(t, gate.Wait(ctx, 1))
	go func() {
		_, err := e.srv.DeleteSnapshot(ctx, &rpcshim.SnapshotDeleteRequest{Namespace: "default", SnapshotID: "s1"})
		deleted <- err
	}()
	select {
	case err := <-deleted:
		t.Fatalf("the delete returned (%v) while the create was in flight", err)
	case <-time.After(200 * time.Millisecond): // bounded chance for a delete that does not wait
	}
	gate.Open()
	for _, c := range []chan error{created, deleted} {
		select {
		case err := <-c:
			must(t, err)
		case <-ctx.Done():
			t.Fatal("the calls did not return")
		}
	}
	if _, ok := e.ctl.Snapshot("snap-1"); ok {
		t.Error("the plugin still has the snapshot: the delete missed what the create made")
	}
	if _, err := e.store.VolumeSnapshot("default", "s1"); !errors.Is(err, csi.ErrSnapshotNotFound) {
		t.Errorf("record after the delete: %v", err)
	}
}
