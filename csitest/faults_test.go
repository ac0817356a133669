package csitest_test

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/clock"
	"github.com/csikit/csikit/csitest"
)

func probeCodes(t *testing.T, c clients, n int) []codes.Code {
	t.Helper()
	out := make([]codes.Code, n)
	for i := range out {
		_, err := c.id.Probe(ctxT(t), &csipb.ProbeRequest{})
		out[i] = status.Code(err)
	}
	return out
}

func TestPlugin_FailNext(t *testing.T) {
	tests := []struct {
		name  string
		setup func(p *csitest.Plugin)
		want  []codes.Code
	}{
		{"counts down", func(p *csitest.Plugin) {
			p.FailNext(csitest.MethodProbe, codes.Unavailable, 2)
		}, []codes.Code{codes.Unavailable, codes.Unavailable, codes.OK}},
		{"queues in order", func(p *csitest.Plugin) {
			p.FailNext(csitest.MethodProbe, codes.Unavailable, 1)
			p.FailNext(csitest.MethodProbe, codes.Internal, 1)
		}, []codes.Code{codes.Unavailable, codes.Internal, codes.OK}},
		{"before FailAlways", func(p *csitest.Plugin) {
			p.FailAlways(csitest.MethodProbe, codes.Aborted)
			p.FailNext(csitest.MethodProbe, codes.Unavailable, 1)
		}, []codes.Code{codes.Unavailable, codes.Aborted, codes.Aborted}},
		{"zero times", func(p *csitest.Plugin) {
			p.FailNext(csitest.MethodProbe, codes.Unavailable, 0)
		}, []codes.Code{codes.OK}},
		{"full method name", func(p *csitest.Plugin) {
			p.FailNext("/csi.v1.Identity/Probe", codes.Unavailable, 1)
		}, []codes.Code{codes.Unavailable, codes.OK}},
		{"other method untouched", func(p *csitest.Plugin) {
			p.FailNext(csitest.MethodGetPluginInfo, codes.Unavailable, 1)
		}, []codes.Code{codes.OK}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, c := start(t, csitest.Config{})
			tt.setup(p)
			got := probeCodes(t, c, len(tt.want))
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("codes %v, want %v", got, tt.want)
				}
			}
			if n := p.CallCount(csitest.MethodProbe); n != len(tt.want) {
				t.Errorf("CallCount = %d, want %d (failed calls are logged too)", n, len(tt.want))
			}
		})
	}
}

func TestPlugin_FailAlways(t *testing.T) {
	p, c := start(t, csitest.Config{})
	p.FailAlways(csitest.MethodProbe, codes.Unavailable)
	if got := probeCodes(t, c, 3); !slices.Equal(got, []codes.Code{codes.Unavailable, codes.Unavailable, codes.Unavailable}) {
		t.Errorf("codes %v, want Unavailable throughout", got)
	}
	p.FailAlways(csitest.MethodProbe, codes.OK)
	if got := probeCodes(t, c, 1); got[0] != codes.OK {
		t.Errorf("after FailAlways(OK) code %v", got[0])
	}
	p.FailAlways(csitest.MethodProbe, codes.Internal)
	p.ClearFaults()
	if got := probeCodes(t, c, 1); got[0] != codes.OK {
		t.Errorf("after ClearFaults code %v", got[0])
	}
}

func TestPlugin_FailNext_ModelUntouched(t *testing.T) {
	p, c := start(t, csitest.Config{Type: csi.PluginTypeNode})
	_, target := paths(t)
	p.AddVolume("v", 1, nil)
	p.FailNext(csitest.MethodNodePublishVolume, codes.DeadlineExceeded, 1)
	_, err := c.node.NodePublishVolume(ctxT(t), &csipb.NodePublishVolumeRequest{VolumeId: "v", TargetPath: target, VolumeCapability: mountCap(snw)})
	wantCode(t, err, codes.DeadlineExceeded)
	if v, _ := p.Volume("v"); v.InUse() {
		t.Errorf("a failed call changed the model: %+v", v)
	}
	if _, err := os.Lstat(target); !os.IsNotExist(err) {
		t.Errorf("a failed call created the target: %v", err)
	}
}

func TestPlugin_SetHook(t *testing.T) {
	p, c := start(t, csitest.Config{Controller: allController})
	ctx := ctxT(t)
	var sawSecret string
	p.SetHook(csitest.MethodCreateVolume, func(_ context.Context, method string, req any) error {
		r := req.(*csipb.CreateVolumeRequest)
		sawSecret = r.GetSecrets()["token"]
		if r.GetName() == "refused" {
			return status.Error(codes.ResourceExhausted, "no room for "+r.GetName())
		}
		return nil
	})
	_, err := c.ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "refused", VolumeCapabilities: []*csipb.VolumeCapability{mountCap(snw)}, Secrets: map[string]string{"token": "s3cr3t"}})
	wantCode(t, err, codes.ResourceExhausted)
	if sawSecret != "s3cr3t" {
		t.Errorf("hook saw secret %q, want the live request's", sawSecret)
	}
	if len(p.Volumes()) != 0 {
		t.Error("a refused call created a volume")
	}
	_, err = c.ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "fine", VolumeCapabilities: []*csipb.VolumeCapability{mountCap(snw)}})
	noErr(t, err)
	p.SetHook(csitest.MethodCreateVolume, nil)
	_, err = c.ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "refused", VolumeCapabilities: []*csipb.VolumeCapability{mountCap(snw)}})
	noErr(t, err)
}

func TestPlugin_SetHook_Panic(t *testing.T) {
	p, c := start(t, csitest.Config{})
	p.SetHook(csitest.MethodProbe, func(context.Context, string, any) error { panic("boom") })
	_, err := c.id.Probe(ctxT(t), &csipb.ProbeRequest{})
	wantCode(t, err, codes.Internal)
	vs := p.Violations()
	if len(vs) != 1 || vs[0].Rule != csitest.RulePanic || vs[0].Method != csitest.MethodProbe {
		t.Errorf("violations %v, want one panic", vs)
	}
	if calls := p.Calls(); len(calls) != 1 || calls[0].Code != codes.Internal {
		t.Errorf("call log %v", calls)
	}
}

func TestPlugin_SetLatency_Deadline(t *testing.T) {
	p, c := start(t, csitest.Config{})
	p.SetLatency(csitest.MethodProbe, time.Hour)
	ctx, cancel := context.WithTimeout(ctxT(t), 10*time.Millisecond)
	defer cancel()
	_, err := c.id.Probe(ctx, &csipb.ProbeRequest{})
	wantCode(t, err, codes.DeadlineExceeded)
	p.SetLatency(csitest.MethodProbe, 0)
	_, err = c.id.Probe(ctxT(t), &csipb.ProbeRequest{})
	noErr(t, err)
}

func TestPlugin_SetLatency_FakeClock(t *testing.T) {
	fake := clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	p, c := start(t, csitest.Config{Clock: fake})
	p.SetLatency(csitest.MethodProbe, time.Minute)
	errc := make(chan error, 1)
	go func() {
		_, err := c.id.Probe(ctxT(t), &csipb.ProbeRequest{})
		errc <- err
	}()
	noErr(t, fake.BlockUntil(ctxT(t), 1))
	fake.Advance(time.Minute)
	noErr(t, <-errc)
	if calls := p.Calls(); len(calls) != 1 || !calls[0].Time.Equal(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Errorf("call log %v, want one call stamped with the fake clock's start", calls)
	}
}

func TestPlugin_UnknownMethodPanics(t *testing.T) {
	p, err := csitest.New(csitest.Config{})
	noErr(t, err)
	knobs := map[string]func(){
		"FailNext":   func() { p.FailNext("NodePublish", codes.Internal, 1) },
		"FailAlways": func() { p.FailAlways("Nope", codes.Internal) },
		"SetLatency": func() { p.SetLatency("Nope", time.Second) },
		"SetHook":    func() { p.SetHook("Nope", nil) },
		"CallCount":  func() { p.CallCount("Nope") },
		"FailNextOK": func() { p.FailNext(csitest.MethodProbe, codes.OK, 1) },
	}
	for name, f := range knobs {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Errorf("%s with a bad argument did not panic", name)
				}
			}()
			f()
		})
	}
}
