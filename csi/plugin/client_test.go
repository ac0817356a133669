package plugin_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/backoff"
	"github.com/csikit/csikit/csi/clock"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/csitest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var (
	fsCap    = csi.Capability{AccessMode: csi.AccessModeSingleNodeWriter, AttachmentMode: csi.AttachmentModeFileSystem}
	blockCap = csi.Capability{AccessMode: csi.AccessModeSingleNodeWriter, AttachmentMode: csi.AttachmentModeBlockDevice}

	allController = csi.ControllerCapabilities{
		CreateDeleteVolume: true, PublishUnpublishVolume: true, ListVolumes: true,
		CreateDeleteSnapshot: true, ListSnapshots: true, ExpandVolume: true,
		GetCapacity: true, GetVolume: true,
	}
	allNode = csi.NodeCapabilities{StageUnstageVolume: true, GetVolumeStats: true, ExpandVolume: true}
)

// shortDir returns a fresh directory with a path short enough for unix
// sockets (t.TempDir() may not be).
func shortDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("", "csi")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// startPlugin serves a monolith fake with every capability the client
// uses.
func startPlugin(t testing.TB) *csitest.Plugin {
	t.Helper()
	return csitest.Start(t, csitest.Config{
		Name: "fake.csikit.io", Version: "1.2.3",
		Controller: allController, Node: allNode,
		RequiresTopologies: true,
		NodeID:             "node-1", MaxVolumes: 8,
		Topology: &csi.Topology{Segments: map[string]string{"zone": "z1"}},
	})
}

// newClient connects a client to p; edit adjusts the config.
func newClient(t testing.TB, endpoint string, edit func(*plugin.Config)) *plugin.Client {
	t.Helper()
	cfg := plugin.Config{Endpoint: endpoint}
	if edit != nil {
		edit(&cfg)
	}
	c, err := plugin.New(cfg)
	if err != nil {
		t.Fatalf("plugin.New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func noErr(t testing.TB, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func eq(t testing.TB, want, got any, what string) {
	t.Helper()
	if !reflect.DeepEqual(want, got) {
		t.Errorf("%s:\n got: %#v\nwant: %#v", what, got, want)
	}
}

// rpcErr asserts that err is a *csi.RPCError with code and class, whose
// code status.Code also finds.
func rpcErr(t testing.TB, err error, method string, code codes.Code, class csi.Class) *csi.RPCError {
	t.Helper()
	var re *csi.RPCError
	if !errors.As(err, &re) {
		t.Fatalf("want a *csi.RPCError, got %T: %v", err, err)
	}
	if re.Method != method {
		t.Errorf("RPCError.Method = %q, want %q", re.Method, method)
	}
	if re.Code != csi.Code(code) {
		t.Errorf("RPCError.Code = %s, want %s (%v)", re.Code, code, err)
	}
	if got := csi.Classify(err); got != class {
		t.Errorf("class = %s, want %s (%v)", got, class, err)
	}
	if got := status.Code(err); got != code {
		t.Errorf("status.Code(err) = %s, want %s", got, code)
	}
	if got := csi.CodeOf(err); got != csi.Code(code) {
		t.Errorf("csi.CodeOf(err) = %s, want %s", got, code)
	}
	return re
}

func TestNew_Endpoint(t *testing.T) {
	long := "/" + strings.Repeat("x", 120)
	cases := []struct {
		name     string
		endpoint string
		timeout  time.Duration
		want     string // socket path; "" means New must fail
	}{
		{"absolute path", "/run/csi/csi.sock", 0, "/run/csi/csi.sock"},
		{"unix URL", "unix:///run/csi/csi.sock", 0, "/run/csi/csi.sock"},
		{"unix short URL", "unix:/run/csi/csi.sock", 0, "/run/csi/csi.sock"},
		{"empty", "", 0, ""},
		{"relative path", "csi.sock", 0, ""},
		{"relative unix URL", "unix://csi.sock", 0, ""},
		{"tcp", "tcp://127.0.0.1:9000", 0, ""},
		{"too long for a socket", long, 0, ""},
		{"negative timeout", "/run/csi.sock", -time.Second, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cl, err := plugin.New(plugin.Config{Endpoint: c.endpoint, CallTimeout: c.timeout})
			if c.want == "" {
				if !errors.Is(err, csi.ErrInvalidRequest) {
					t.Fatalf("New(%q) = %v, want an error matching csi.ErrInvalidRequest", c.endpoint, err)
				}
				return
			}
			noErr(t, err, "New")
			defer cl.Close()
			eq(t, c.want, cl.Endpoint(), "Endpoint")
		})
	}
}

// TestClient_EveryRPC_HappyPath drives a volume through its whole life,
// calling every RPC the client has, and checks the fake saw a correct CO.
func TestClient_EveryRPC_HappyPath(t *testing.T) {
	p := startPlugin(t)
	c := newClient(t, p.Addr(), nil)
	ctx := t.Context()
	secrets := csi.Secrets{"token": "s3cr3t"}
	dir := shortDir(t)

	info, err := c.GetPluginInfo(ctx)
	noErr(t, err, "GetPluginInfo")
	eq(t, "fake.csikit.io", info.Name, "Name")
	eq(t, "1.2.3", info.VendorVersion, "VendorVersion")

	caps, err := c.GetPluginCapabilities(ctx)
	noErr(t, err, "GetPluginCapabilities")
	if !caps.ControllerService || !caps.VolumeAccessibilityConstraints {
		t.Errorf("plugin capabilities = %+v, want controller service and accessibility constraints", caps)
	}

	ready, err := c.Probe(ctx)
	noErr(t, err, "Probe")
	eq(t, true, ready, "Probe ready")
	p.SetProbeReady(false)
	ready, err = c.Probe(ctx)
	noErr(t, err, "Probe")
	eq(t, false, ready, "Probe ready after SetProbeReady(false)")
	p.SetProbeReady(true)

	ccaps, err := c.ControllerGetCapabilities(ctx)
	noErr(t, err, "ControllerGetCapabilities")
	eq(t, allController, *ccaps, "controller capabilities")

	ncaps, err := c.NodeGetCapabilities(ctx)
	noErr(t, err, "NodeGetCapabilities")
	eq(t, allNode, *ncaps, "node capabilities")

	node, err := c.NodeGetInfo(ctx)
	noErr(t, err, "NodeGetInfo")
	eq(t, &csi.NodeInfo{ID: "node-1", MaxVolumes: 8, AccessibleTopology: &csi.Topology{Segments: map[string]string{"zone": "z1"}}}, node, "NodeGetInfo")

	zone := &csi.Topology{Segments: map[string]string{"zone": "z1"}}
	vol, err := c.CreateVolume(ctx, &plugin.CreateVolumeRequest{
		Name: "data", CapacityMin: 1 << 20, Capabilities: []csi.Capability{fsCap},
		MountOptions: &csi.MountOptions{FSType: "ext4"}, Parameters: map[string]string{"tier": "gold"},
		Secrets: secrets, Topology: &csi.TopologyRequest{Required: []*csi.Topology{zone}},
	})
	noErr(t, err, "CreateVolume")
	if vol.ExternalID == "" || vol.Capacity != 1<<20 {
		t.Fatalf("CreateVolume = %+v, want an ID and 1MiB", vol)
	}
	eq(t, []*csi.Topology{zone}, vol.Topologies, "volume topologies")

	valid, err := c.ValidateVolumeCapabilities(ctx, &plugin.ValidateCapabilitiesRequest{
		ExternalID: vol.ExternalID, Capabilities: []csi.Capability{fsCap}, VolumeContext: vol.Context, Secrets: secrets,
	})
	noErr(t, err, "ValidateVolumeCapabilities")
	if !valid.Confirmed || !slices.Contains(valid.Capabilities, fsCap) {
		t.Errorf("ValidateVolumeCapabilities = %+v, want %s confirmed", valid, fsCap)
	}

	got, err := c.ControllerGetVolume(ctx, &plugin.ControllerGetVolumeRequest{ExternalID: vol.ExternalID})
	noErr(t, err, "ControllerGetVolume")
	eq(t, &plugin.ControllerGetVolumeResponse{Volume: *vol, Status: &plugin.VolumeStatus{}}, got, "ControllerGetVolume")
	capacity, err := c.GetCapacity(ctx, &plugin.GetCapacityRequest{Capabilities: []csi.Capability{fsCap}, Topology: zone})
	noErr(t, err, "GetCapacity")
	eq(t, &plugin.GetCapacityResponse{Available: csitest.DefaultAvailableCapacity - 1<<20}, capacity, "GetCapacity")

	list, err := c.ListVolumes(ctx, &plugin.ListVolumesRequest{MaxEntries: 10})
	noErr(t, err, "ListVolumes")
	if len(list.Entries) != 1 || list.Entries[0].Volume.ExternalID != vol.ExternalID {
		t.Errorf("ListVolumes = %+v, want the one volume", list)
	}

	pubCtx, err := c.ControllerPublishVolume(ctx, &plugin.ControllerPublishRequest{
		ExternalID: vol.ExternalID, ExternalNodeID: node.ID, Capability: fsCap, Secrets: secrets, VolumeContext: vol.Context,
	})
	noErr(t, err, "ControllerPublishVolume")
	if len(pubCtx) == 0 {
		t.Error("ControllerPublishVolume returned no publish context")
	}

	staging, target := filepath.Join(dir, "staging"), filepath.Join(dir, "target")
	noErr(t, c.NodeStageVolume(ctx, &plugin.NodeStageRequest{
		ExternalID: vol.ExternalID, PublishContext: pubCtx, StagingPath: staging, Capability: fsCap,
		MountOptions: &csi.MountOptions{FSType: "ext4"}, Secrets: secrets, VolumeContext: vol.Context,
	}), "NodeStageVolume")
	noErr(t, c.NodePublishVolume(ctx, &plugin.NodePublishRequest{
		ExternalID: vol.ExternalID, StagingPath: staging, TargetPath: target, Capability: fsCap,
		MountOptions: &csi.MountOptions{FSType: "ext4"}, Secrets: secrets, PublishContext: pubCtx, VolumeContext: vol.Context,
	}), "NodePublishVolume")

	stats, err := c.NodeGetVolumeStats(ctx, &plugin.NodeVolumeStatsRequest{ExternalID: vol.ExternalID, VolumePath: target, StagingPath: staging})
	noErr(t, err, "NodeGetVolumeStats")
	if stats.Bytes == nil || stats.Bytes.Total != 1<<20 {
		t.Errorf("NodeGetVolumeStats = %+v, want 1MiB of bytes", stats)
	}

	exp, err := c.ControllerExpandVolume(ctx, &plugin.ControllerExpandRequest{ExternalID: vol.ExternalID, CapacityMin: 2 << 20, Capability: &fsCap, Secrets: secrets})
	noErr(t, err, "ControllerExpandVolume")
	eq(t, plugin.ControllerExpandResponse{Capacity: 2 << 20, NodeExpansionRequired: true}, *exp, "ControllerExpandVolume")
	size, err := c.NodeExpandVolume(ctx, &plugin.NodeExpandRequest{ExternalID: vol.ExternalID, VolumePath: target, StagingPath: staging, CapacityMin: 2 << 20, Secrets: secrets})
	noErr(t, err, "NodeExpandVolume")
	eq(t, int64(2<<20), size, "NodeExpandVolume capacity")

	snap, err := c.CreateSnapshot(ctx, &plugin.CreateSnapshotRequest{SourceID: vol.ExternalID, Name: "snap", Secrets: secrets})
	noErr(t, err, "CreateSnapshot")
	if snap.ID == "" || snap.SourceID != vol.ExternalID {
		t.Errorf("CreateSnapshot = %+v", snap)
	}
	snaps, err := c.ListSnapshots(ctx, &plugin.ListSnapshotsRequest{SourceID: vol.ExternalID, Secrets: secrets})
	noErr(t, err, "ListSnapshots")
	if len(snaps.Entries) != 1 || snaps.Entries[0].ID != snap.ID {
		t.Errorf("ListSnapshots = %+v, want %s", snaps, snap.ID)
	}
	noErr(t, c.DeleteSnapshot(ctx, &plugin.DeleteSnapshotRequest{ID: snap.ID, Secrets: secrets}), "DeleteSnapshot")

	noErr(t, c.NodeUnpublishVolume(ctx, &plugin.NodeUnpublishRequest{ExternalID: vol.ExternalID, TargetPath: target}), "NodeUnpublishVolume")
	noErr(t, c.NodeUnstageVolume(ctx, &plugin.NodeUnstageRequest{ExternalID: vol.ExternalID, StagingPath: staging}), "NodeUnstageVolume")
	noErr(t, c.ControllerUnpublishVolume(ctx, &plugin.ControllerUnpublishRequest{ExternalID: vol.ExternalID, ExternalNodeID: node.ID, Secrets: secrets}), "ControllerUnpublishVolume")
	noErr(t, c.DeleteVolume(ctx, &plugin.DeleteVolumeRequest{ExternalID: vol.ExternalID, Secrets: secrets}), "DeleteVolume")

	p.RequireNoViolations(t)
	for _, m := range []string{
		csitest.MethodGetPluginInfo, csitest.MethodGetPluginCapabilities, csitest.MethodProbe,
		csitest.MethodControllerPublishVolume, csitest.MethodControllerUnpublishVolume, csitest.MethodValidateVolumeCapabilities,
		csitest.MethodCreateVolume, csitest.MethodDeleteVolume, csitest.MethodListVolumes, csitest.MethodControllerGetCapabilities,
		csitest.MethodGetCapacity, csitest.MethodControllerGetVolume,
		csitest.MethodControllerExpandVolume, csitest.MethodCreateSnapshot, csitest.MethodDeleteSnapshot, csitest.MethodListSnapshots,
		csitest.MethodNodeGetInfo, csitest.MethodNodeGetCapabilities, csitest.MethodNodeStageVolume, csitest.MethodNodeUnstageVolume,
		csitest.MethodNodePublishVolume, csitest.MethodNodeUnpublishVolume, csitest.MethodNodeExpandVolume, csitest.MethodNodeGetVolumeStats,
	} {
		if n := p.CallCount(m); n == 0 {
			t.Errorf("%s was never called", m)
		}
	}
	for _, call := range p.Calls() {
		if call.Code != codes.OK {
			t.Errorf("call failed: %s", call)
		}
	}
}

// TestClient_NodePublish_Block publishes a block capability: the fake
// sees the block access type.
func TestClient_NodePublish_Block(t *testing.T) {
	p := csitest.Start(t, csitest.Config{})
	p.AddVolume("vol-1", 1<<20, nil)
	c := newClient(t, p.Endpoint(), nil)
	target := filepath.Join(shortDir(t), "dev")
	noErr(t, c.NodePublishVolume(t.Context(), &plugin.NodePublishRequest{ExternalID: "vol-1", TargetPath: target, Capability: blockCap}), "NodePublishVolume")
	fi, err := os.Stat(target)
	noErr(t, err, "stat target")
	if !fi.Mode().IsRegular() {
		t.Errorf("target is %s, want the fake's block stand-in file", fi.Mode())
	}
	p.RequireNoViolations(t)
}

// fakeClockClient returns a client whose backoff waits on a fake clock,
// with a fixed 1s delay so the test knows what to advance.
func fakeClockClient(t testing.TB, p *csitest.Plugin, retries int) (*plugin.Client, *clock.Fake) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	c := newClient(t, p.Addr(), func(cfg *plugin.Config) {
		cfg.Clock = clk
		cfg.MaxRetries = retries
		cfg.Backoff = backoff.Policy{Base: time.Second, Max: time.Second, Jitter: -1}
	})
	return c, clk
}

// advanceBackoffs waits n times for the client to park on its backoff
// timer and fires it.
func advanceBackoffs(t testing.TB, clk *clock.Fake, n int) {
	t.Helper()
	for range n {
		if err := clk.BlockUntil(t.Context(), 1); err != nil {
			t.Fatalf("client never waited on its backoff: %v", err)
		}
		clk.AdvanceToNext()
	}
}

func TestClient_Retry_RetryableThenSuccess(t *testing.T) {
	for _, code := range []codes.Code{codes.Unavailable, codes.ResourceExhausted, codes.Aborted} {
		t.Run(code.String(), func(t *testing.T) {
			p := startPlugin(t)
			c, clk := fakeClockClient(t, p, 0)
			p.FailNext(csitest.MethodNodeGetInfo, code, 2)

			done := make(chan error, 1)
			go func() {
				_, err := c.NodeGetInfo(t.Context())
				done <- err
			}()
			advanceBackoffs(t, clk, 2)
			noErr(t, <-done, "NodeGetInfo after two retryable failures")
			eq(t, 3, p.CallCount(csitest.MethodNodeGetInfo), "NodeGetInfo calls")
			eq(t, 0, clk.Waiters(), "timers left pending")
		})
	}
}

func TestClient_Retry_Exhausted(t *testing.T) {
	p := startPlugin(t)
	c, clk := fakeClockClient(t, p, 2)
	p.FailAlways(csitest.MethodProbe, codes.Unavailable)

	done := make(chan error, 1)
	go func() {
		_, err := c.Probe(t.Context())
		done <- err
	}()
	advanceBackoffs(t, clk, 2)
	err := <-done
	rpcErr(t, err, "Probe", codes.Unavailable, csi.ClassRetryable)
	eq(t, 3, p.CallCount(csitest.MethodProbe), "Probe calls (1 + MaxRetries)")
}

func TestClient_Retry_Disabled(t *testing.T) {
	p := startPlugin(t)
	c, _ := fakeClockClient(t, p, -1)
	p.FailNext(csitest.MethodProbe, codes.Unavailable, 1)
	_, err := c.Probe(t.Context())
	rpcErr(t, err, "Probe", codes.Unavailable, csi.ClassRetryable)
	eq(t, 1, p.CallCount(csitest.MethodProbe), "Probe calls")
}

// TestClient_Retry_NotForFinalOrUncertain: a Final or Uncertain code is
// returned after one call. Were the client to retry, it would park on the
// fake clock that nobody advances and the test would hang.
func TestClient_Retry_NotForFinalOrUncertain(t *testing.T) {
	cases := []struct {
		code  codes.Code
		class csi.Class
	}{
		{codes.NotFound, csi.ClassFinal},
		{codes.InvalidArgument, csi.ClassFinal},
		{codes.FailedPrecondition, csi.ClassFinal},
		{codes.AlreadyExists, csi.ClassFinal},
		{codes.Internal, csi.ClassFinal},
		{codes.Unimplemented, csi.ClassFinal},
		{codes.DeadlineExceeded, csi.ClassUncertain},
		{codes.Canceled, csi.ClassUncertain},
	}
	for _, tc := range cases {
		t.Run(tc.code.String(), func(t *testing.T) {
			p := startPlugin(t)
			p.AddVolume("vol-1", 1<<20, nil)
			c, _ := fakeClockClient(t, p, 5)
			p.FailNext(csitest.MethodNodeUnpublishVolume, tc.code, 1)
			err := c.NodeUnpublishVolume(t.Context(), &plugin.NodeUnpublishRequest{ExternalID: "vol-1", TargetPath: "/no/such/target"})
			rpcErr(t, err, "NodeUnpublishVolume", tc.code, tc.class)
			eq(t, 1, p.CallCount(csitest.MethodNodeUnpublishVolume), "calls")
		})
	}
}

func TestClient_Call_Deadline(t *testing.T) {
	cases := []struct {
		name    string
		timeout time.Duration // Config.CallTimeout
		ctx     func(t *testing.T) context.Context
	}{
		{"CallTimeout", 50 * time.Millisecond, func(t *testing.T) context.Context { return t.Context() }},
		{"CallTimeout before a later ctx deadline", 50 * time.Millisecond, func(t *testing.T) context.Context {
			ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
			t.Cleanup(cancel)
			return ctx
		}},
		{"ctx deadline", 0, func(t *testing.T) context.Context {
			ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
			t.Cleanup(cancel)
			return ctx
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := startPlugin(t)
			p.AddVolume("vol-1", 1<<20, nil)
			p.SetLatency(csitest.MethodNodeStageVolume, time.Hour)
			c := newClient(t, p.Addr(), func(cfg *plugin.Config) { cfg.CallTimeout = tc.timeout })
			err := c.NodeStageVolume(tc.ctx(t), &plugin.NodeStageRequest{ExternalID: "vol-1", StagingPath: "/staging", Capability: fsCap})
			rpcErr(t, err, "NodeStageVolume", codes.DeadlineExceeded, csi.ClassUncertain)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("errors.Is(err, context.DeadlineExceeded) is false for %v", err)
			}
			eq(t, 1, p.CallCount(csitest.MethodNodeStageVolume), "calls (an uncertain call is not retried)")
		})
	}
}

func TestClient_Call_CanceledDuringBackoff(t *testing.T) {
	p := startPlugin(t)
	c, clk := fakeClockClient(t, p, 3)
	p.FailAlways(csitest.MethodGetPluginInfo, codes.Unavailable)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := c.GetPluginInfo(ctx)
		done <- err
	}()
	noErr(t, clk.BlockUntil(t.Context(), 1), "wait for the backoff")
	cancel()
	err := <-done
	// The plugin never acted: the last code stands, and ctx's error is
	// reachable.
	rpcErr(t, err, "GetPluginInfo", codes.Unavailable, csi.ClassRetryable)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("errors.Is(err, context.Canceled) is false for %v", err)
	}
	eq(t, 1, p.CallCount(csitest.MethodGetPluginInfo), "calls")
}

// signalWriter reports the first write on a channel.
type signalWriter struct {
	once sync.Once
	ch   chan struct{}
}

func (w *signalWriter) Write(b []byte) (int, error) {
	w.once.Do(func() { close(w.ch) })
	return len(b), nil
}

// TestClient_Connect_SocketAppearsLate starts a call before the plugin
// listens; the call succeeds once it does.
func TestClient_Connect_SocketAppearsLate(t *testing.T) {
	sock := filepath.Join(shortDir(t), "late.sock")
	p, err := csitest.New(csitest.Config{Endpoint: sock, Name: "late.csikit.io"})
	noErr(t, err, "csitest.New")
	t.Cleanup(p.Stop)

	// The client's trace line is written just before it sends the call.
	started := &signalWriter{ch: make(chan struct{})}
	logger := hclog.New(&hclog.LoggerOptions{Level: hclog.Trace, Output: started})
	c := newClient(t, sock, func(cfg *plugin.Config) { cfg.Logger = logger })

	type result struct {
		info *plugin.Info
		err  error
	}
	done := make(chan result, 1)
	go func() {
		info, err := c.GetPluginInfo(t.Context())
		done <- result{info, err}
	}()
	<-started.ch
	if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket exists before Start: %v", err)
	}
	noErr(t, p.Start(), "start the plugin")
	r := <-done
	noErr(t, r.err, "GetPluginInfo started before the socket existed")
	eq(t, "late.csikit.io", r.info.Name, "plugin name")
}

// blockIn makes method block in the fake until its call ends, and returns
// a channel closed when the first such call arrives.
func blockIn(p *csitest.Plugin, method string) <-chan struct{} {
	entered := make(chan struct{})
	var once sync.Once
	p.SetHook(method, func(ctx context.Context, _ string, _ any) error {
		once.Do(func() { close(entered) })
		<-ctx.Done()
		return status.FromContextError(ctx.Err()).Err()
	})
	return entered
}

// TestClient_Call_PluginStopsMidCall: the plugin dies while serving a
// call; the call returns a typed error rather than hanging.
func TestClient_Call_PluginStopsMidCall(t *testing.T) {
	p := startPlugin(t)
	p.AddVolume("vol-1", 1<<20, nil)
	c := newClient(t, p.Addr(), func(cfg *plugin.Config) { cfg.MaxRetries = -1 })
	entered := blockIn(p, csitest.MethodNodeUnstageVolume)

	done := make(chan error, 1)
	go func() {
		done <- c.NodeUnstageVolume(t.Context(), &plugin.NodeUnstageRequest{ExternalID: "vol-1", StagingPath: "/staging"})
	}()
	<-entered
	p.Stop()
	err := <-done
	var re *csi.RPCError
	if !errors.As(err, &re) {
		t.Fatalf("want a *csi.RPCError, got %T: %v", err, err)
	}
	// grpc reports the lost connection as Unavailable (Retryable); a
	// Canceled (Uncertain) would be as acceptable.
	if !csi.IsRetryable(err) {
		t.Errorf("class of %v is %s, want retryable or uncertain", err, csi.Classify(err))
	}
	if code := status.Code(err); code != codes.Unavailable && code != codes.Canceled {
		t.Errorf("status.Code = %s, want Unavailable (or Canceled)", code)
	}
}

// TestClient_Call_PluginRestartsMidCall: with retries, a call that lost
// its plugin succeeds once the plugin is back.
func TestClient_Call_PluginRestartsMidCall(t *testing.T) {
	p := startPlugin(t)
	c, clk := fakeClockClient(t, p, 3)
	entered := blockIn(p, csitest.MethodNodeGetCapabilities)

	done := make(chan error, 1)
	go func() {
		_, err := c.NodeGetCapabilities(t.Context())
		done <- err
	}()
	<-entered
	p.Stop()
	// The client got Unavailable and waits to retry.
	noErr(t, clk.BlockUntil(t.Context(), 1), "wait for the backoff")
	p.ClearFaults()
	noErr(t, p.Start(), "restart the plugin")
	clk.AdvanceToNext()
	noErr(t, <-done, "NodeGetCapabilities across a restart")
	eq(t, 2, p.CallCount(csitest.MethodNodeGetCapabilities), "calls")
}

func TestClient_Close_CallsFail(t *testing.T) {
	p := startPlugin(t)
	c, err := plugin.New(plugin.Config{Endpoint: p.Addr()})
	noErr(t, err, "New")
	_, err = c.Probe(t.Context())
	noErr(t, err, "Probe")
	noErr(t, c.Close(), "Close")
	_, err = c.Probe(t.Context())
	var re *csi.RPCError
	if !errors.As(err, &re) {
		t.Fatalf("Probe after Close = %v, want a *csi.RPCError", err)
	}
}

// TestClient_BadRequest_NoRPC: every malformed request is refused with a
// *RequestError matching csi.ErrInvalidRequest, and nothing reaches the
// plugin.
func TestClient_BadRequest_NoRPC(t *testing.T) {
	p := startPlugin(t)
	c := newClient(t, p.Addr(), nil)
	ctx := t.Context()
	badCap := csi.Capability{AccessMode: csi.AccessModeUnknown, AttachmentMode: csi.AttachmentModeFileSystem}
	noAttach := csi.Capability{AccessMode: csi.AccessModeSingleNodeWriter}
	long := strings.Repeat("v", csi.MaxIDLength+1)
	mo := &csi.MountOptions{FSType: "ext4"}

	cases := []struct {
		name  string
		field string
		call  func() error
	}{
		{"ControllerPublish nil", "request", func() error {
			_, err := c.ControllerPublishVolume(ctx, nil)
			return err
		}},
		{"ControllerPublish no volume ID", "ExternalID", func() error {
			_, err := c.ControllerPublishVolume(ctx, &plugin.ControllerPublishRequest{ExternalNodeID: "n", Capability: fsCap})
			return err
		}},
		{"ControllerPublish no node ID", "ExternalNodeID", func() error {
			_, err := c.ControllerPublishVolume(ctx, &plugin.ControllerPublishRequest{ExternalID: "v", Capability: fsCap})
			return err
		}},
		{"ControllerPublish bad capability", "Capability", func() error {
			_, err := c.ControllerPublishVolume(ctx, &plugin.ControllerPublishRequest{ExternalID: "v", ExternalNodeID: "n", Capability: badCap})
			return err
		}},
		{"ControllerPublish block with mount options", "MountOptions", func() error {
			_, err := c.ControllerPublishVolume(ctx, &plugin.ControllerPublishRequest{ExternalID: "v", ExternalNodeID: "n", Capability: blockCap, MountOptions: mo})
			return err
		}},
		{"ControllerUnpublish no volume ID", "ExternalID", func() error {
			return c.ControllerUnpublishVolume(ctx, &plugin.ControllerUnpublishRequest{ExternalNodeID: "n"})
		}},
		{"ControllerUnpublish long node ID", "ExternalNodeID", func() error {
			return c.ControllerUnpublishVolume(ctx, &plugin.ControllerUnpublishRequest{ExternalID: "v", ExternalNodeID: strings.Repeat("n", csi.MaxExternalNodeIDLength+1)})
		}},
		{"ControllerPublish control character in node ID", "ExternalNodeID", func() error {
			_, err := c.ControllerPublishVolume(ctx, &plugin.ControllerPublishRequest{ExternalID: "v", ExternalNodeID: "n\x00", Capability: fsCap})
			return err
		}},
		{"Validate no capabilities", "Capabilities", func() error {
			_, err := c.ValidateVolumeCapabilities(ctx, &plugin.ValidateCapabilitiesRequest{ExternalID: "v"})
			return err
		}},
		{"Validate bad capability", "Capabilities[1]", func() error {
			_, err := c.ValidateVolumeCapabilities(ctx, &plugin.ValidateCapabilitiesRequest{ExternalID: "v", Capabilities: []csi.Capability{fsCap, noAttach}})
			return err
		}},
		{"CreateVolume no name", "Name", func() error {
			_, err := c.CreateVolume(ctx, &plugin.CreateVolumeRequest{Capabilities: []csi.Capability{fsCap}})
			return err
		}},
		{"CreateVolume inverted capacity", "CapacityMin", func() error {
			_, err := c.CreateVolume(ctx, &plugin.CreateVolumeRequest{Name: "n", CapacityMin: 10, CapacityMax: 5, Capabilities: []csi.Capability{fsCap}})
			return err
		}},
		{"CreateVolume negative capacity", "CapacityMax", func() error {
			_, err := c.CreateVolume(ctx, &plugin.CreateVolumeRequest{Name: "n", CapacityMax: -1, Capabilities: []csi.Capability{fsCap}})
			return err
		}},
		{"CreateVolume two sources", "Source", func() error {
			_, err := c.CreateVolume(ctx, &plugin.CreateVolumeRequest{Name: "n", Capabilities: []csi.Capability{fsCap}, Source: &plugin.ContentSource{SnapshotID: "s", VolumeID: "v"}})
			return err
		}},
		{"CreateVolume nil topology", "Topology", func() error {
			_, err := c.CreateVolume(ctx, &plugin.CreateVolumeRequest{Name: "n", Capabilities: []csi.Capability{fsCap}, Topology: &csi.TopologyRequest{Preferred: []*csi.Topology{nil}}})
			return err
		}},
		{"GetCapacity bad capability", "Capabilities[0]", func() error {
			_, err := c.GetCapacity(ctx, &plugin.GetCapacityRequest{Capabilities: []csi.Capability{badCap}})
			return err
		}},
		{"GetCapacity unnamed segment", "Topology", func() error {
			_, err := c.GetCapacity(ctx, &plugin.GetCapacityRequest{Topology: &csi.Topology{Segments: map[string]string{"": "a"}}})
			return err
		}},
		{"ControllerGetVolume nil", "request", func() error {
			_, err := c.ControllerGetVolume(ctx, nil)
			return err
		}},
		{"ControllerGetVolume long ID", "ExternalID", func() error {
			_, err := c.ControllerGetVolume(ctx, &plugin.ControllerGetVolumeRequest{ExternalID: long})
			return err
		}},
		{"DeleteVolume no ID", "ExternalID", func() error {
			return c.DeleteVolume(ctx, &plugin.DeleteVolumeRequest{})
		}},
		{"ListVolumes negative page", "MaxEntries", func() error {
			_, err := c.ListVolumes(ctx, &plugin.ListVolumesRequest{MaxEntries: -1})
			return err
		}},
		{"ControllerExpand no size", "CapacityMin", func() error {
			_, err := c.ControllerExpandVolume(ctx, &plugin.ControllerExpandRequest{ExternalID: "v"})
			return err
		}},
		{"CreateSnapshot no source", "SourceID", func() error {
			_, err := c.CreateSnapshot(ctx, &plugin.CreateSnapshotRequest{Name: "s"})
			return err
		}},
		{"CreateSnapshot no name", "Name", func() error {
			_, err := c.CreateSnapshot(ctx, &plugin.CreateSnapshotRequest{SourceID: "v"})
			return err
		}},
		{"DeleteSnapshot no ID", "ID", func() error {
			return c.DeleteSnapshot(ctx, &plugin.DeleteSnapshotRequest{})
		}},
		{"ListSnapshots negative page", "MaxEntries", func() error {
			_, err := c.ListSnapshots(ctx, &plugin.ListSnapshotsRequest{MaxEntries: -3})
			return err
		}},
		{"NodeStage no staging path", "StagingPath", func() error {
			return c.NodeStageVolume(ctx, &plugin.NodeStageRequest{ExternalID: "v", Capability: fsCap})
		}},
		{"NodeStage relative staging path", "StagingPath", func() error {
			return c.NodeStageVolume(ctx, &plugin.NodeStageRequest{ExternalID: "v", StagingPath: "staging", Capability: fsCap})
		}},
		{"NodeStage bad capability", "Capability", func() error {
			return c.NodeStageVolume(ctx, &plugin.NodeStageRequest{ExternalID: "v", StagingPath: "/s", Capability: noAttach})
		}},
		{"NodeUnstage no volume ID", "ExternalID", func() error {
			return c.NodeUnstageVolume(ctx, &plugin.NodeUnstageRequest{StagingPath: "/s"})
		}},
		{"NodeUnstage dot-dot path", "StagingPath", func() error {
			return c.NodeUnstageVolume(ctx, &plugin.NodeUnstageRequest{ExternalID: "v", StagingPath: "/a/../../etc"})
		}},
		{"NodePublish no volume ID", "ExternalID", func() error {
			return c.NodePublishVolume(ctx, &plugin.NodePublishRequest{TargetPath: "/t", Capability: fsCap})
		}},
		{"NodePublish empty target", "TargetPath", func() error {
			return c.NodePublishVolume(ctx, &plugin.NodePublishRequest{ExternalID: "v", Capability: fsCap})
		}},
		{"NodePublish relative target", "TargetPath", func() error {
			return c.NodePublishVolume(ctx, &plugin.NodePublishRequest{ExternalID: "v", TargetPath: "t", Capability: fsCap})
		}},
		{"NodePublish relative staging", "StagingPath", func() error {
			return c.NodePublishVolume(ctx, &plugin.NodePublishRequest{ExternalID: "v", StagingPath: "s", TargetPath: "/t", Capability: fsCap})
		}},
		{"NodePublish NUL in target", "TargetPath", func() error {
			return c.NodePublishVolume(ctx, &plugin.NodePublishRequest{ExternalID: "v", TargetPath: "/t\x00x", Capability: fsCap})
		}},
		{"NodePublish bad capability", "Capability", func() error {
			return c.NodePublishVolume(ctx, &plugin.NodePublishRequest{ExternalID: "v", TargetPath: "/t", Capability: badCap})
		}},
		{"NodeUnpublish no target", "TargetPath", func() error {
			return c.NodeUnpublishVolume(ctx, &plugin.NodeUnpublishRequest{ExternalID: "v"})
		}},
		{"NodeExpand no volume path", "VolumePath", func() error {
			_, err := c.NodeExpandVolume(ctx, &plugin.NodeExpandRequest{ExternalID: "v"})
			return err
		}},
		{"NodeExpand block with mount options", "MountOptions", func() error {
			_, err := c.NodeExpandVolume(ctx, &plugin.NodeExpandRequest{ExternalID: "v", VolumePath: "/p", Capability: &blockCap, MountOptions: mo})
			return err
		}},
		{"NodeGetVolumeStats relative path", "VolumePath", func() error {
			_, err := c.NodeGetVolumeStats(ctx, &plugin.NodeVolumeStatsRequest{ExternalID: "v", VolumePath: "p"})
			return err
		}},
		{"NodeGetVolumeStats nil", "request", func() error {
			_, err := c.NodeGetVolumeStats(ctx, nil)
			return err
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if !errors.Is(err, csi.ErrInvalidRequest) {
				t.Fatalf("err = %v, want one matching csi.ErrInvalidRequest", err)
			}
			var re *plugin.RequestError
			if !errors.As(err, &re) {
				t.Fatalf("err = %T, want a *plugin.RequestError", err)
			}
			eq(t, tc.field, re.Field, "RequestError.Field")
			eq(t, csi.ClassFinal, csi.Classify(err), "class")
		})
	}
	if calls := p.Calls(); len(calls) != 0 {
		t.Errorf("bad requests reached the plugin: %v", calls)
	}
}

// TestClient_Secrets_NeverLogged captures every log line at trace level
// for calls carrying secrets, successful and failed, and checks that no
// secret value appears there or in an error string.
func TestClient_Secrets_NeverLogged(t *testing.T) {
	const secret = "hunter2-very-secret"
	secrets := csi.Secrets{"password": secret, "other": secret + "-b"}
	p := startPlugin(t)
	var buf bytes.Buffer
	var mu sync.Mutex
	logger := hclog.New(&hclog.LoggerOptions{Level: hclog.Trace, Output: &lockedWriter{w: &buf, mu: &mu}})
	c := newClient(t, p.Addr(), func(cfg *plugin.Config) { cfg.Logger = logger; cfg.MaxRetries = -1 })
	ctx := t.Context()
	dir := shortDir(t)

	var errs []error
	call := func(err error) { errs = append(errs, err) }
	run := func() {
		vol, err := c.CreateVolume(ctx, &plugin.CreateVolumeRequest{Name: "v", Capabilities: []csi.Capability{fsCap}, Secrets: secrets})
		call(err)
		id := "missing"
		if vol != nil {
			id = vol.ExternalID
		}
		_, err = c.ValidateVolumeCapabilities(ctx, &plugin.ValidateCapabilitiesRequest{ExternalID: id, Capabilities: []csi.Capability{fsCap}, Secrets: secrets})
		call(err)
		pc, err := c.ControllerPublishVolume(ctx, &plugin.ControllerPublishRequest{ExternalID: id, ExternalNodeID: "node-1", Capability: fsCap, Secrets: secrets})
		call(err)
		staging, target := filepath.Join(dir, "s"), filepath.Join(dir, "t")
		call(c.NodeStageVolume(ctx, &plugin.NodeStageRequest{ExternalID: id, StagingPath: staging, Capability: fsCap, PublishContext: pc, Secrets: secrets}))
		call(c.NodePublishVolume(ctx, &plugin.NodePublishRequest{ExternalID: id, StagingPath: staging, TargetPath: target, Capability: fsCap, PublishContext: pc, Secrets: secrets}))
		_, err = c.NodeExpandVolume(ctx, &plugin.NodeExpandRequest{ExternalID: id, VolumePath: target, Secrets: secrets})
		call(err)
		_, err = c.ControllerExpandVolume(ctx, &plugin.ControllerExpandRequest{ExternalID: id, CapacityMin: 2 << 30, Secrets: secrets})
		call(err)
		snap, err := c.CreateSnapshot(ctx, &plugin.CreateSnapshotRequest{SourceID: id, Name: "s", Secrets: secrets})
		call(err)
		_, err = c.ListSnapshots(ctx, &plugin.ListSnapshotsRequest{Secrets: secrets})
		call(err)
		if snap != nil {
			call(c.DeleteSnapshot(ctx, &plugin.DeleteSnapshotRequest{ID: snap.ID, Secrets: secrets}))
		}
		call(c.NodeUnpublishVolume(ctx, &plugin.NodeUnpublishRequest{ExternalID: id, TargetPath: target}))
		call(c.NodeUnstageVolume(ctx, &plugin.NodeUnstageRequest{ExternalID: id, StagingPath: staging}))
		call(c.ControllerUnpublishVolume(ctx, &plugin.ControllerUnpublishRequest{ExternalID: id, ExternalNodeID: "node-1", Secrets: secrets}))
		call(c.DeleteVolume(ctx, &plugin.DeleteVolumeRequest{ExternalID: id, Secrets: secrets}))
		// Refused before sending: the error must not echo the request.
		call(c.NodePublishVolume(ctx, &plugin.NodePublishRequest{ExternalID: id, TargetPath: "rel", Capability: fsCap, Secrets: secrets}))
	}

	run() // success paths, then one refused request
	for _, e := range errs[:len(errs)-1] {
		noErr(t, e, "call with secrets")
	}
	if last := errs[len(errs)-1]; !errors.Is(last, csi.ErrInvalidRequest) || strings.Contains(last.Error(), secret) {
		t.Errorf("refused request: %v", last)
	}
	if !strings.Contains(buf.String(), "NodePublishVolume") {
		t.Fatalf("trace log has no request lines:\n%s", buf.String())
	}

	// Failure paths: every method fails, and its status message echoes
	// the request's secrets, as a careless plugin might.
	echo := func(_ context.Context, method string, req any) error {
		if r, ok := req.(interface{ GetSecrets() map[string]string }); ok && len(r.GetSecrets()) > 0 {
			return status.Errorf(codes.Internal, "%s refused password %q", method, r.GetSecrets()["password"])
		}
		return status.Errorf(codes.Internal, "%s failed", method)
	}
	for _, m := range p.Methods() {
		p.SetHook(m, echo)
	}
	errs = nil
	run()
	failed := 0
	for _, e := range errs {
		if e == nil {
			continue
		}
		failed++
		if strings.Contains(e.Error(), secret) {
			t.Errorf("error string holds the secret: %v", e)
		}
		if st := status.Convert(e); strings.Contains(st.Message(), secret) {
			t.Errorf("status message holds the secret: %v", st.Message())
		}
		if w := errors.Unwrap(e); w != nil && strings.Contains(w.Error(), secret) {
			t.Errorf("wrapped error holds the secret: %v", w)
		}
	}
	if failed != len(errs) {
		t.Errorf("only %d of %d calls failed; the hooks did not fire", failed, len(errs))
	}

	mu.Lock()
	defer mu.Unlock()
	if strings.Contains(buf.String(), secret) {
		t.Errorf("the log holds the secret:\n%s", buf.String())
	}
	if !strings.Contains(buf.String(), "refused password") {
		t.Errorf("the log lacks the failures it should record:\n%s", buf.String())
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}
