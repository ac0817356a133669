package csitest_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"

	"github.com/csikit/csikit/csitest"
)

// lockedBuffer is a bytes.Buffer safe for the logger's concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestPlugin_Calls_NoSecrets(t *testing.T) {
	const secret = "hunter2-very-secret"
	var logs lockedBuffer
	cfg := fullConfig
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Level: hclog.Trace, Output: &logs})
	p, c := start(t, cfg)
	secrets := map[string]string{"password": secret}
	lifecycle(t, p, c, secrets)

	ctx := ctxT(t)
	id := createVolume(t, c, "more", 0).GetVolumeId()
	_, err := c.ctrl.CreateSnapshot(ctx, &csipb.CreateSnapshotRequest{SourceVolumeId: id, Name: "s", Secrets: secrets})
	noErr(t, err)
	_, err = c.ctrl.ListSnapshots(ctx, &csipb.ListSnapshotsRequest{Secrets: secrets})
	noErr(t, err)
	_, err = c.ctrl.ControllerExpandVolume(ctx, &csipb.ControllerExpandVolumeRequest{VolumeId: id, CapacityRange: &csipb.CapacityRange{RequiredBytes: 1}, Secrets: secrets})
	noErr(t, err)
	_, err = c.ctrl.ValidateVolumeCapabilities(ctx, &csipb.ValidateVolumeCapabilitiesRequest{VolumeId: id, VolumeCapabilities: []*csipb.VolumeCapability{mountCap(snw)}, Secrets: secrets})
	noErr(t, err)
	// A failing call and a violation with secrets in the request.
	p.FailNext(csitest.MethodDeleteSnapshot, codes.Internal, 1)
	_, err = c.ctrl.DeleteSnapshot(ctx, &csipb.DeleteSnapshotRequest{SnapshotId: "x", Secrets: secrets})
	wantCode(t, err, codes.Internal)
	_, err = c.node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: id, TargetPath: "relative", VolumeCapability: mountCap(snw), Secrets: secrets})
	wantCode(t, err, codes.InvalidArgument)

	calls := p.Calls()
	if len(calls) < 10 {
		t.Fatalf("only %d calls logged", len(calls))
	}
	for _, s := range []string{
		fmt.Sprintf("%v", calls), fmt.Sprintf("%+v", calls), fmt.Sprintf("%#v", calls),
		fmt.Sprintf("%v", p.Violations()), logs.String(),
	} {
		if strings.Contains(s, secret) {
			t.Fatalf("a secret leaked into:\n%s", s)
		}
	}
	// Stripping keeps everything else.
	first := p.CallsTo(csitest.MethodCreateVolume)[0].Request.(*csipb.CreateVolumeRequest)
	if first.GetName() != "data" || len(first.GetSecrets()) != 0 {
		t.Errorf("logged request %v, want the name kept and secrets cleared", first)
	}
	if !strings.Contains(logs.String(), "CreateVolume") {
		t.Errorf("the logger saw no calls:\n%s", logs.String())
	}
}

func TestPlugin_Methods(t *testing.T) {
	p, c := start(t, csitest.Config{})
	ctx := ctxT(t)
	_, err := c.id.GetPluginInfo(ctx, &csipb.GetPluginInfoRequest{})
	noErr(t, err)
	_, err = c.id.Probe(ctx, &csipb.ProbeRequest{})
	noErr(t, err)
	_, err = c.node.NodeGetInfo(ctx, &csipb.NodeGetInfoRequest{})
	noErr(t, err)
	want := []string{csitest.MethodGetPluginInfo, csitest.MethodProbe, csitest.MethodNodeGetInfo}
	if got := p.Methods(); !slices.Equal(got, want) {
		t.Errorf("Methods() = %v, want %v", got, want)
	}
	if n := p.CallCount(csitest.MethodProbe); n != 1 {
		t.Errorf("CallCount(Probe) = %d", n)
	}
	calls := p.Calls()
	if calls[2].Pending || calls[2].Code != codes.OK || calls[2].Time.IsZero() {
		t.Errorf("call %+v, want finished, OK and stamped", calls[2])
	}
	// Calls returns copies.
	calls[0].Method = "changed"
	if p.Calls()[0].Method != csitest.MethodGetPluginInfo {
		t.Error("Calls() shares its entries with the log")
	}
	p.ResetCalls()
	if got := p.Methods(); len(got) != 0 {
		t.Errorf("after ResetCalls Methods() = %v", got)
	}
}

func TestPlugin_RequireSequence(t *testing.T) {
	p, c := start(t, csitest.Config{})
	ctx := ctxT(t)
	for range 2 {
		_, err := c.id.Probe(ctx, &csipb.ProbeRequest{})
		noErr(t, err)
		_, err = c.node.NodeGetInfo(ctx, &csipb.NodeGetInfoRequest{})
		noErr(t, err)
	}
	tests := []struct {
		name string
		seq  []string
		fail bool
	}{
		{"empty", nil, false},
		{"whole", []string{csitest.MethodProbe, csitest.MethodNodeGetInfo, csitest.MethodProbe, csitest.MethodNodeGetInfo}, false},
		{"subsequence", []string{csitest.MethodProbe, csitest.MethodNodeGetInfo}, false},
		{"gaps", []string{csitest.MethodProbe, csitest.MethodProbe}, false},
		{"wrong order", []string{csitest.MethodNodeGetInfo, csitest.MethodNodeGetInfo, csitest.MethodProbe}, true},
		{"absent", []string{csitest.MethodNodeStageVolume}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &fatalRecorder{TB: t}
			p.RequireSequence(r, tt.seq...)
			if r.failed != tt.fail {
				t.Fatalf("failed = %v (%q), want %v", r.failed, r.msg, tt.fail)
			}
			if tt.fail && (!strings.Contains(r.msg, "call log (4 calls)") || !strings.Contains(r.msg, "NodeGetInfo OK")) {
				t.Errorf("failure message lacks the call log:\n%s", r.msg)
			}
		})
	}
}

func TestPlugin_Calls_Pending(t *testing.T) {
	p, c := start(t, csitest.Config{})
	arrived, release := make(chan struct{}), make(chan struct{})
	p.SetHook(csitest.MethodProbe, func(ctx context.Context, _ string, _ any) error {
		close(arrived)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})
	errc := make(chan error, 1)
	go func() {
		_, err := c.id.Probe(ctxT(t), &csipb.ProbeRequest{})
		errc <- err
	}()
	<-arrived
	if calls := p.Calls(); len(calls) != 1 || !calls[0].Pending {
		t.Errorf("in-flight call %v, want pending", calls)
	}
	close(release)
	noErr(t, <-errc)
	if calls := p.Calls(); calls[0].Pending || calls[0].Code != codes.OK {
		t.Errorf("finished call %v", calls[0])
	}
}

func TestPlugin_MaxCalls(t *testing.T) {
	const (
		probe = csitest.MethodProbe
		info  = csitest.MethodGetPluginInfo
		node  = csitest.MethodNodeGetInfo
	)
	// Each case makes 2 Probe, 3 GetPluginInfo and 2 NodeGetInfo calls,
	// in that order.
	tests := []struct {
		name        string
		maxCalls    int
		wantMethods []string
	}{
		{"unlimited", 0, []string{probe, probe, info, info, info, node, node}},
		{"larger than the log", 10, []string{probe, probe, info, info, info, node, node}},
		{"exactly the log", 7, []string{probe, probe, info, info, info, node, node}},
		{"keeps the most recent", 3, []string{info, node, node}},
		{"one", 1, []string{node}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, c := start(t, csitest.Config{MaxCalls: tt.maxCalls})
			ctx := ctxT(t)
			for range 2 {
				_, err := c.id.Probe(ctx, &csipb.ProbeRequest{})
				noErr(t, err)
			}
			for range 3 {
				_, err := c.id.GetPluginInfo(ctx, &csipb.GetPluginInfoRequest{})
				noErr(t, err)
			}
			for range 2 {
				_, err := c.node.NodeGetInfo(ctx, &csipb.NodeGetInfoRequest{})
				noErr(t, err)
			}
			if got := p.Methods(); !slices.Equal(got, tt.wantMethods) {
				t.Errorf("Methods() = %v, want %v", got, tt.wantMethods)
			}
			calls := p.Calls()
			if len(calls) != len(tt.wantMethods) {
				t.Fatalf("Calls() has %d entries, want %d", len(calls), len(tt.wantMethods))
			}
			for i, c := range calls {
				if c.Method != tt.wantMethods[i] || c.Pending || c.Code != codes.OK || c.Request == nil {
					t.Errorf("call %d = %v, want a finished %s with its request", i, c, tt.wantMethods[i])
				}
			}
			// The counters see every call, dropped ones included.
			for method, want := range map[string]int{probe: 2, info: 3, node: 2, csitest.MethodNodeStageVolume: 0} {
				if n := p.CallCount(method); n != want {
					t.Errorf("CallCount(%s) = %d, want %d", method, n, want)
				}
			}
			if got, want := len(p.CallsTo(probe)), countOf(tt.wantMethods, probe); got != want {
				t.Errorf("CallsTo(Probe) has %d entries, want the %d still in the log", got, want)
			}
			p.ResetCalls()
			if n := p.CallCount(info); n != 0 || len(p.Calls()) != 0 {
				t.Errorf("after ResetCalls CallCount = %d and Calls() = %v, want both empty", n, p.Calls())
			}
			_, err := c.id.Probe(ctx, &csipb.ProbeRequest{})
			noErr(t, err)
			if n := p.CallCount(probe); n != 1 || len(p.Calls()) != 1 {
				t.Errorf("after ResetCalls and one Probe: CallCount = %d, %d calls logged; want 1 and 1", n, len(p.Calls()))
			}
		})
	}
}

func countOf(methods []string, m string) int {
	n := 0
	for _, x := range methods {
		if x == m {
			n++
		}
	}
	return n
}

// TestPlugin_MaxCalls_Long checks the log stays bounded and in order over
// many more calls than MaxCalls, so the dropping wraps many times.
func TestPlugin_MaxCalls_Long(t *testing.T) {
	const maxCalls, total = 5, 203
	cfg := fullConfig
	cfg.MaxCalls = maxCalls
	p, c := start(t, cfg)
	ctx := ctxT(t)
	for i := range total {
		_, err := c.ctrl.ListVolumes(ctx, &csipb.ListVolumesRequest{StartingToken: fmt.Sprint(i)})
		// Tokens past the end answer Aborted; both outcomes are logged.
		if err != nil {
			wantCode(t, err, codes.Aborted)
		}
	}
	calls := p.Calls()
	if len(calls) != maxCalls {
		t.Fatalf("Calls() has %d entries, want %d", len(calls), maxCalls)
	}
	for i, call := range calls {
		want := fmt.Sprint(total - maxCalls + i)
		if got := call.Request.(*csipb.ListVolumesRequest).GetStartingToken(); got != want {
			t.Errorf("call %d has token %q, want %q (the most recent calls, oldest first)", i, got, want)
		}
	}
	if n := p.CallCount(csitest.MethodListVolumes); n != total {
		t.Errorf("CallCount(ListVolumes) = %d, want %d", n, total)
	}
}

func TestPlugin_RequireSequence_MaxCallsDropped(t *testing.T) {
	p, c := start(t, csitest.Config{MaxCalls: 2})
	ctx := ctxT(t)
	_, err := c.node.NodeGetInfo(ctx, &csipb.NodeGetInfoRequest{})
	noErr(t, err)
	for range 2 {
		_, err := c.id.Probe(ctx, &csipb.ProbeRequest{})
		noErr(t, err)
	}
	r := &fatalRecorder{TB: t}
	p.RequireSequence(r, csitest.MethodNodeGetInfo, csitest.MethodProbe)
	if !r.failed {
		t.Fatal("RequireSequence passed on a call the log no longer holds")
	}
	if !strings.Contains(r.msg, "1 earlier calls were dropped (Config.MaxCalls)") || !strings.Contains(r.msg, "call log (2 calls)") {
		t.Errorf("failure message does not say the log was cut:\n%s", r.msg)
	}
	r = &fatalRecorder{TB: t}
	p.RequireSequence(r, csitest.MethodProbe, csitest.MethodProbe)
	if r.failed {
		t.Errorf("RequireSequence failed on the retained calls: %s", r.msg)
	}
}
