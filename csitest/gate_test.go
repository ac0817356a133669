package csitest_test

import (
	"context"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/csikit/csikit/csitest"
)

// created is one CreateVolume reply as a client saw it.
type created struct {
	name, id string
	err      error
}

// createAsync sends CreateVolume for name from its own goroutine and
// reports the reply on out.
func createAsync(ctx context.Context, c clients, name string, out chan<- created) {
	go func() {
		resp, err := c.ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{
			Name: name, VolumeCapabilities: []*csipb.VolumeCapability{mountCap(snw)},
		})
		out <- created{name, resp.GetVolume().GetVolumeId(), err}
	}()
}

// Two calls held at the gate, the later one let go first: it is handled
// and answered first. Replies held after handling: handled in arrival
// order, answered in release order.
func TestGate_OutOfOrder(t *testing.T) {
	tests := []struct {
		name string
		hold func(p *csitest.Plugin) *csitest.Gate
		// wantIDs are the volume IDs the first and second call get.
		wantFirst, wantSecond string
		// heldInModel is how many volumes the model holds while both
		// calls are held.
		heldInModel int
	}{
		{"requests", func(p *csitest.Plugin) *csitest.Gate { return p.Hold(csitest.MethodCreateVolume) }, "vol-2", "vol-1", 0},
		{"replies", func(p *csitest.Plugin) *csitest.Gate { return p.HoldReplies(csitest.MethodCreateVolume) }, "vol-1", "vol-2", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, c := start(t, fullConfig)
			ctx := ctxT(t)
			g := tt.hold(p)
			if g.Method() != csitest.MethodCreateVolume {
				t.Errorf("gate method %q", g.Method())
			}
			replies := make(chan created, 2)
			createAsync(ctx, c, "first", replies)
			noErr(t, g.Wait(ctx, 1))
			createAsync(ctx, c, "second", replies)
			noErr(t, g.Wait(ctx, 2))
			if n := len(p.Volumes()); n != tt.heldInModel {
				t.Errorf("while held the model has %d volumes, want %d", n, tt.heldInModel)
			}
			for _, call := range p.CallsTo(csitest.MethodCreateVolume) {
				if !call.Pending {
					t.Errorf("held call %v is not pending", call)
				}
			}

			g.Release(2)
			r := <-replies
			noErr(t, r.err)
			if r.name != "second" || r.id != tt.wantSecond {
				t.Errorf("first reply %+v, want the second call's with %s", r, tt.wantSecond)
			}
			g.Release(1)
			r = <-replies
			noErr(t, r.err)
			if r.name != "first" || r.id != tt.wantFirst {
				t.Errorf("second reply %+v, want the first call's with %s", r, tt.wantFirst)
			}
			if got := g.Arrived(); got != 2 {
				t.Errorf("Arrived() = %d, want 2", got)
			}
			p.RequireNoViolations(t)
		})
	}
}

// A call held past its client's patience fails for the client; held
// before handling it changed nothing, held after it the work is done.
func TestGate_ClientGivesUp(t *testing.T) {
	tests := []struct {
		name         string
		hold         func(p *csitest.Plugin, method string) *csitest.Gate
		wantAttached bool
	}{
		{"request held", (*csitest.Plugin).Hold, false},
		{"reply held", (*csitest.Plugin).HoldReplies, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, c := start(t, fullConfig)
			id := createVolume(t, c, "v", 0).GetVolumeId()
			g := tt.hold(p, csitest.MethodControllerPublishVolume)
			ctx, cancel := context.WithCancel(ctxT(t))
			errc := make(chan error, 1)
			go func() {
				_, err := c.ctrl.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{
					VolumeId: id, NodeId: "node-1", VolumeCapability: mountCap(snw),
				})
				errc <- err
			}()
			noErr(t, g.Wait(ctxT(t), 1))
			cancel()
			wantCode(t, <-errc, codes.Canceled)
			// Nothing releases the gate, so a held request is never
			// handled, however late the fake notices the cancellation.
			v, _ := p.Volume(id)
			if attached := len(v.Attachments) > 0; attached != tt.wantAttached {
				t.Errorf("attached %v after the client gave up, want %v", attached, tt.wantAttached)
			}
		})
	}
}

func TestGate_ReleaseAndOpen(t *testing.T) {
	tests := []struct {
		name string
		// before runs with the gate installed and no call made; after
		// runs once the first call is held.
		before, after func(p *csitest.Plugin, g *csitest.Gate)
		// laterPass: the gate lets later calls through as well.
		laterPass bool
	}{
		{"released before arrival", func(_ *csitest.Plugin, g *csitest.Gate) { g.Release(1) }, nil, false},
		{"released twice", nil, func(_ *csitest.Plugin, g *csitest.Gate) { g.Release(1); g.Release(1) }, false},
		{"opened", nil, func(_ *csitest.Plugin, g *csitest.Gate) { g.Open() }, true},
		{"cleared", nil, func(p *csitest.Plugin, _ *csitest.Gate) { p.ClearFaults() }, true},
		{"replaced", nil, func(p *csitest.Plugin, _ *csitest.Gate) { p.Hold(csitest.MethodProbe).Open() }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, c := start(t, csitest.Config{})
			ctx := ctxT(t)
			g := p.Hold(csitest.MethodProbe)
			if tt.before != nil {
				tt.before(p, g)
			}
			errc := make(chan error, 1)
			go func() {
				_, err := c.id.Probe(ctx, &csipb.ProbeRequest{})
				errc <- err
			}()
			noErr(t, g.Wait(ctx, 1))
			if tt.after != nil {
				tt.after(p, g)
			}
			noErr(t, <-errc)
			if tt.laterPass {
				_, err := c.id.Probe(ctx, &csipb.ProbeRequest{})
				noErr(t, err)
			}
		})
	}
}

func TestGate_ReleaseBelowOnePanics(t *testing.T) {
	p, err := csitest.New(csitest.Config{})
	noErr(t, err)
	g := p.Hold(csitest.MethodProbe)
	defer func() {
		if recover() == nil {
			t.Error("Release(0) did not panic")
		}
	}()
	g.Release(0)
}

func TestGate_UnknownMethodPanics(t *testing.T) {
	p, err := csitest.New(csitest.Config{})
	noErr(t, err)
	for name, f := range map[string]func(){
		"Hold":        func() { p.Hold("Nope") },
		"HoldReplies": func() { p.HoldReplies("Nope") },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Errorf("%s of an unknown method did not panic", name)
				}
			}()
			f()
		})
	}
}

// A reply gate holds failures too, the injected ones included.
func TestGate_HoldRepliesHoldsFailures(t *testing.T) {
	p, c := start(t, csitest.Config{})
	ctx := ctxT(t)
	g := p.HoldReplies(csitest.MethodProbe)
	p.FailNext(csitest.MethodProbe, codes.Unavailable, 1)
	errc := make(chan error, 1)
	go func() {
		_, err := c.id.Probe(ctx, &csipb.ProbeRequest{})
		errc <- err
	}()
	noErr(t, g.Wait(ctx, 1))
	g.Release(1)
	if err := <-errc; status.Code(err) != codes.Unavailable {
		t.Errorf("held injected failure answered %v, want Unavailable", err)
	}
}
