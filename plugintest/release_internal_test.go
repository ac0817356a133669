package plugintest

import (
	"path/filepath"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/state"
)

// The release's node step goes to the claim release worker only for an
// allocation the harness did not unmount: the stop of one it did
// unmount carries the claim's NodeDetached checkpoint, so the worker
// makes no node step for it and goes straight to ControllerUnpublish.
func TestRelease_NodeStepOnlyWhereStillMounted(t *testing.T) {
	for _, tc := range []struct {
		name    string
		unmount []int // allocations (1, 2) the harness unmounts before the release
		// removed is an allocation whose claim is removed before the
		// release: its checkpoint refuses the batch, and the harness
		// reports the stops alone.
		removed   int
		nodeSteps uint64
		freed     uint64
		unstages  int // NodeUnstageVolume calls the plugin got
	}{
		{name: "both unmounted", unmount: []int{2, 1}, nodeSteps: 0, freed: 2, unstages: 1},
		{name: "one still mounted", unmount: []int{1}, nodeSteps: 1, freed: 2, unstages: 1},
		{name: "none unmounted", unmount: nil, nodeSteps: 2, freed: 2, unstages: 1},
		{name: "a claim gone before the stop", unmount: []int{2, 1}, removed: 2, nodeSteps: 1, freed: 1, unstages: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := csitest.Start(t, csitest.Config{
				Controller: csi.ControllerCapabilities{CreateDeleteVolume: true, PublishUnpublishVolume: true},
				Node:       csi.NodeCapabilities{StageUnstageVolume: true},
			})
			dir := t.TempDir()
			rec := &Recorder{}
			ctx := t.Context()
			l, err := newRun(Config{
				Endpoint: p.Endpoint(), DataCheck: DataOff, SkipIdempotency: true, SkipNegative: true,
				MountRoot: filepath.Join(dir, "mnt"), StateDir: filepath.Join(dir, "state"),
			}, rec)
			if err != nil {
				t.Fatal(err)
			}
			defer l.close(ctx)
			l.st.startWorker(t.Context())
			l.fingerprint(ctx)
			l.registerPlugin(ctx)
			l.provision(ctx)
			l.claimAll(ctx)
			l.mountAll(ctx)
			for _, n := range tc.unmount {
				if !l.unmount(ctx, l.allocs[n-1]) {
					t.Fatalf("unmount of allocation %d failed: %v", n, rec.Failures())
				}
			}
			if tc.removed > 0 {
				if _, err := l.st.applier.Apply(t.Context(), state.RemoveClaim{
					Namespace: namespace, VolumeID: l.volID, AllocationID: l.allocs[tc.removed-1].id,
				}); err != nil {
					t.Fatal(err)
				}
			}
			l.release(ctx)
			if rec.Failed() {
				t.Fatalf("the lifecycle failed: %v", rec.Failures())
			}

			// The harness saw the claims freed; the worker counts them
			// once its release returns.
			if err := l.st.worker.Settle(t.Context()); err != nil {
				t.Fatal(err)
			}
			st := l.st.worker.Stats()
			if st.NodeDetached != tc.nodeSteps {
				t.Errorf("the worker made %d node steps, want %d", st.NodeDetached, tc.nodeSteps)
			}
			if st.Freed != tc.freed || st.ControllerDetached != tc.freed {
				t.Errorf("the worker freed %d claims, %d through ControllerUnpublish; want %d and %d", st.Freed, st.ControllerDetached, tc.freed, tc.freed)
			}
			if n := p.CallCount(csitest.MethodNodeUnpublishVolume); n != 2 {
				t.Errorf("NodeUnpublishVolume called %d times, want 2 (one per allocation, by the harness or the worker)", n)
			}
			if n := p.CallCount(csitest.MethodNodeUnstageVolume); n != tc.unstages {
				t.Errorf("NodeUnstageVolume called %d times, want %d", n, tc.unstages)
			}
			if n := p.CallCount(csitest.MethodControllerUnpublishVolume); n != 1 {
				t.Errorf("ControllerUnpublishVolume called %d times, want 1", n)
			}
			for _, a := range l.allocs {
				if has, err := l.st.mnt.HasMount(t.Context(), namespace, l.volID, a.id); err != nil || has {
					t.Errorf("allocation %d: HasMount = %v, %v after the release; want false", a.n, has, err)
				}
			}
			l.deleteVolume(ctx)
			p.RequireNoViolations(t)
		})
	}
}
