package rpcshim_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/rpcshim"
	"github.com/csikit/csikit/state"
)

// parkProbe is a context that reports the first time its call waits on
// it (calls Done). A Server operation that queues behind another one on
// the same volume waits for its turn or its ctx, so, for an operation
// whose first store write comes before any wait of its own, "waited
// before writing" is the proof that it was held back. No timer decides
// that the call is parked.
type parkProbe struct {
	context.Context
	once    sync.Once
	waiting chan struct{}
}

func newParkProbe(t *testing.T) *parkProbe {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return &parkProbe{Context: ctx, waiting: make(chan struct{})}
}

func (p *parkProbe) Done() <-chan struct{} {
	p.once.Do(func() { close(p.waiting) })
	return p.Context.Done()
}

// firstWriteApplier records the first command applied after arm, and
// closes wrote when it does. It records before applying, so a write
// that reaches it is seen even if applying it then waits on its ctx.
type firstWriteApplier struct {
	state.Applier
	mu    sync.Mutex
	armed bool
	first state.Command
	wrote chan struct{}
}

func (a *firstWriteApplier) Apply(ctx context.Context, cmd state.Command) (state.Result, error) {
	a.mu.Lock()
	if a.armed {
		a.armed, a.first = false, cmd
		close(a.wrote)
	}
	a.mu.Unlock()
	return a.Applier.Apply(ctx, cmd)
}

func (a *firstWriteApplier) arm() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.armed, a.first, a.wrote = true, nil, make(chan struct{})
}

// disarm stops recording and returns the command recorded since arm,
// nil when none was.
func (a *firstWriteApplier) disarm() state.Command {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.armed = false
	return a.first
}

// TestServer_VolumeLock_HoldsSecondOperation pins the Server's
// per-volume lock (lockVolume): while a claim of the volume is inside
// ControllerPublishVolume (held there by a csitest gate), a second operation on
// the volume (another allocation's claim on the node, the unpublish of
// the claim, a forced deregister) writes nothing until the claim is
// done. It must wait first (parkProbe), not write (firstWriteApplier).
// Then it runs and sees the claim complete: the second claim joins the
// Attached attachment without a ControllerPublish of its own, the
// unpublish releases an attached claim, the deregister drops a volume
// whose claim finished. Without the lock the second claim would see
// the attachment Attaching and publish again, the unpublish would
// release the claim under its publish, and the deregister would pull
// the volume from under it.
func TestServer_VolumeLock_HoldsSecondOperation(t *testing.T) {
	tests := []struct {
		name   string
		second func(ctx context.Context, s *rpcshim.Server) (any, error)
		check  func(t *testing.T, e *srvEnv, resp any)
	}{
		{
			name: "claim by another allocation on the node",
			second: func(ctx context.Context, s *rpcshim.Server) (any, error) {
				return s.Claim(ctx, &rpcshim.VolumeClaimRequest{Namespace: "default", VolumeID: "vol-a", Claim: csi.Claim{
					AllocationID: "a2", NodeID: "n2", Mode: csi.ClaimWrite,
					AccessMode: mnmwFS.AccessMode, AttachmentMode: mnmwFS.AttachmentMode,
				}})
			},
			check: func(t *testing.T, e *srvEnv, resp any) {
				r := resp.(*rpcshim.VolumeClaimResponse)
				if r.ControllerNodeID != "" || r.Attachment.State != csi.AttachmentAttached {
					t.Errorf("second claim: published through %q, attachment %s; want it to join the first claim's attachment, attached, without a ControllerPublishVolume of its own",
						r.ControllerNodeID, r.Attachment.State)
				}
				expectEqual(t, len(e.volume("vol-a").WriteClaims), 2)
			},
		},
		{
			name: "unpublish of the claim",
			second: func(ctx context.Context, s *rpcshim.Server) (any, error) {
				return s.Unpublish(ctx, &rpcshim.VolumeUnpublishRequest{
					Namespace: "default", VolumeID: "vol-a", AllocationID: "a1", NodeID: "n2",
				})
			},
			check: func(t *testing.T, e *srvEnv, resp any) {
				r := resp.(*rpcshim.VolumeUnpublishResponse)
				if r.Claim == nil || r.Claim.State != csi.ClaimUnpublishing {
					t.Errorf("claim after the unpublish = %+v, want it released (unpublishing)", r.Claim)
				}
				if a := e.volume("vol-a").Attachments["n2"]; a == nil || a.State != csi.AttachmentAttached {
					t.Errorf("attachment after the unpublish = %+v, want attached until the worker detaches it", a)
				}
			},
		},
		{
			name: "forced deregister",
			second: func(ctx context.Context, s *rpcshim.Server) (any, error) {
				return s.DeregisterVolume(ctx, &rpcshim.VolumeDeregisterRequest{Namespace: "default", VolumeID: "vol-a", Force: true})
			},
			check: func(t *testing.T, e *srvEnv, _ any) {
				_, err := e.store.Volume("default", "vol-a")
				expectIs(t, err, csi.ErrVolumeNotFound)
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newSrvEnv(t, allControllerCaps)
			e.register("vol-a", "ext-a", mnmwFS)
			e.allocs("a1", "n2", "a2", "n2")
			fa := &firstWriteApplier{Applier: e.applier}
			srv, err := rpcshim.NewServer(rpcshim.ServerConfig{Store: e.store, Applier: fa, Router: e.router})
			must(t, err)

			gate := e.ctl.Hold(csitest.MethodControllerPublishVolume)
			t.Cleanup(gate.Open)
			hang, cancel := context.WithTimeout(context.Background(), 10*time.Second) // a hang guard, not a timing assertion
			defer cancel()

			type result struct {
				resp any
				err  error
			}
			first := make(chan result, 1)
			go func() {
				r, err := srv.Claim(context.Background(), &rpcshim.VolumeClaimRequest{Namespace: "default", VolumeID: "vol-a", Claim: csi.Claim{
					AllocationID: "a1", NodeID: "n2", Mode: csi.ClaimWrite,
					AccessMode: mnmwFS.AccessMode, AttachmentMode: mnmwFS.AttachmentMode,
				}})
				first <- result{r, err}
			}()
			if err := gate.Wait(hang, 1); err != nil { // a1's claim is written and its ControllerPublish held
				t.Fatalf("the first claim made no ControllerPublishVolume: %v", err)
			}

			fa.arm()
			probe := newParkProbe(t)
			second := make(chan result, 1)
			go func() {
				r, err := tc.second(probe, srv)
				second <- result{r, err}
			}()
			select {
			case <-probe.waiting:
			case <-fa.wrote:
			case <-hang.Done():
				t.Fatal("the second operation neither waited nor wrote")
			}
			if cmd := fa.disarm(); cmd != nil {
				t.Errorf("the second operation wrote %s (%+v) while the first claim's ControllerPublishVolume was in flight: operations on one volume must run one at a time", cmd.Kind(), cmd)
			}

			gate.Open()
			r1 := <-first
			if r1.err != nil {
				t.Fatalf("first claim: %v", r1.err)
			}
			c1 := r1.resp.(*rpcshim.VolumeClaimResponse)
			expectEqual(t, c1.ControllerNodeID, "n1")
			expectEqual(t, c1.Attachment.State, csi.AttachmentAttached)
			r2 := <-second
			if r2.err != nil {
				t.Fatalf("second operation: %v", r2.err)
			}
			tc.check(t, e, r2.resp)
			expectEqual(t, publishedTo(e.ctl), []string{"csi-n2"})
			e.ctl.RequireNoViolations(t)
		})
	}
}
