package rpcshim_test

import (
	"context"
	"testing"
	"time"

	"github.com/csikit/csikit/claimgc"
	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/state"
)

// runWorker starts a claim release worker on e's store and router and
// stops it at the end of the test.
func runWorker(t *testing.T, e *srvEnv) *claimgc.Worker {
	t.Helper()
	return startWorker(t, claimgc.Config{
		Store: e.store, Applier: e.applier, Nodes: e.router, Controllers: e.router, NodeStatuses: e.statuses,
	})
}

// startWorker starts an enabled claim release worker and stops it at
// the end of the test.
func startWorker(t *testing.T, cfg claimgc.Config) *claimgc.Worker {
	t.Helper()
	w, err := claimgc.New(cfg)
	must(t, err)
	w.SetEnabled(true)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		select {
		case err := <-done:
			must(t, err)
		case <-time.After(10 * time.Second):
			t.Error("the worker did not stop")
		}
	})
	return w
}

// waitVolume blocks on e's store until ok holds for the volume, for at
// most 10 s of real time.
func waitVolume(t *testing.T, e *srvEnv, id string, ok func(*csi.Volume) bool) *csi.Volume {
	t.Helper()
	return waitStoreVolume(t, e.store, id, ok)
}

// waitStoreVolume is waitVolume on any store.
func waitStoreVolume(t *testing.T, store *state.MemStore, id string, ok func(*csi.Volume) bool) *csi.Volume {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		idx, err := store.Index(state.TableVolumes)
		must(t, err)
		v, err := store.Volume("default", id)
		must(t, err)
		if ok(v) {
			return v
		}
		if _, err := store.Wait(ctx, state.TableVolumes, idx); err != nil {
			t.Fatalf("waiting on volume %s: %v (volume now %+v)", id, err, v)
		}
	}
}

// stopReported stops alloc on node as a node agent that unmounted it
// reports it: terminal, with its node step done.
func stopReported(e *srvEnv, vol, alloc, node string) {
	e.apply(state.Batch{Commands: []state.Command{
		state.UpsertAllocations{ReleasedAt: rtTime, Allocations: []csi.Allocation{{ID: alloc, Namespace: "default", NodeID: node, Terminal: true}}},
		state.CheckpointClaim{Namespace: "default", VolumeID: vol, AllocationID: alloc, State: csi.ClaimNodeDetached},
	}})
}

// TestServer_Claim_WhileTheWorkerDetaches pins the interleaving where a
// claim on a node arrives while the release worker is detaching the
// volume from that node: the claim must not be taken on an attachment
// that is going away (with the old inferred attachments it copied the
// releasing claim's publish context and was taken with nothing attached
// behind it). It is refused as retryable, stores nothing, and succeeds
// with a ControllerPublish of its own once the detach is done.
func TestServer_Claim_WhileTheWorkerDetaches(t *testing.T) {
	e := newSrvEnv(t, allControllerCaps)
	e.register("vol-a", "ext-a", mnmwFS)
	e.allocs("a1", "n2", "a2", "n2")
	_, err := e.claim("vol-a", "a1", "n2", csi.ClaimWrite, mnmwFS)
	must(t, err)

	entered, release := make(chan struct{}), make(chan struct{})
	e.ctl.SetHook(csitest.MethodControllerUnpublishVolume, func(ctx context.Context, _ string, _ any) error {
		close(entered)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})
	runWorker(t, e)
	stopReported(e, "vol-a", "a1", "n2")
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the worker made no ControllerUnpublishVolume")
	}
	if a := e.volume("vol-a").Attachments["n2"]; a == nil || a.State != csi.AttachmentDetaching {
		t.Fatalf("attachment while ControllerUnpublish runs = %+v, want detaching (written before the call)", a)
	}

	_, err = e.claim("vol-a", "a2", "n2", csi.ClaimWrite, mnmwFS)
	expectIs(t, err, csi.ErrVolumeInUse)
	expectEqual(t, csi.IsRetryable(err), true)
	expectContains(t, err.Error(), "being detached from node n2")
	if c := e.volume("vol-a").Claim("a2"); c != nil {
		t.Fatalf("the refused claim was stored: %+v", c)
	}

	close(release)
	waitVolume(t, e, "vol-a", func(v *csi.Volume) bool { return !v.InUse() })
	r, err := e.claim("vol-a", "a2", "n2", csi.ClaimWrite, mnmwFS)
	must(t, err)
	expectEqual(t, r.Attachment.State, csi.AttachmentAttached)
	expectEqual(t, r.ControllerNodeID, "n1")
	expectEqual(t, publishedTo(e.ctl), []string{"csi-n2", "csi-n2"})
	e.ctl.RequireNoViolations(t)
}

// TestServer_Claim_JoinsBeforeTheWorkerDetaches is the other order: the
// new claim joins the attachment before the worker decides the detach,
// so the worker frees the released claim without ControllerUnpublish
// and the volume stays attached for the new one.
func TestServer_Claim_JoinsBeforeTheWorkerDetaches(t *testing.T) {
	e := newSrvEnv(t, allControllerCaps)
	e.register("vol-a", "ext-a", mnmwFS)
	e.allocs("a1", "n2", "a2", "n2")
	_, err := e.claim("vol-a", "a1", "n2", csi.ClaimWrite, mnmwFS)
	must(t, err)
	stopReported(e, "vol-a", "a1", "n2")
	r, err := e.claim("vol-a", "a2", "n2", csi.ClaimWrite, mnmwFS)
	must(t, err)
	expectEqual(t, r.ControllerNodeID, "")
	expectEqual(t, r.Attachment.State, csi.AttachmentAttached)

	runWorker(t, e)
	v := waitVolume(t, e, "vol-a", func(v *csi.Volume) bool { return len(v.PastClaims) == 0 })
	if a := v.Attachments["n2"]; a == nil || a.State != csi.AttachmentAttached {
		t.Errorf("attachment after a1's release = %+v, want it attached for a2", a)
	}
	expectEqual(t, e.ctl.CallCount(csitest.MethodControllerUnpublishVolume), 0)
	expectEqual(t, publishedTo(e.ctl), []string{"csi-n2"})
	e.ctl.RequireNoViolations(t)
}
