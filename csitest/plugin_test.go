package csitest_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csitest"
)

func TestNew_InvalidConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  csitest.Config
		want string
	}{
		{"bad type", csitest.Config{Type: "sidecar"}, "plugin type"},
		{"negative max volumes", csitest.Config{MaxVolumes: -1}, "MaxVolumes"},
		{"negative capacity", csitest.Config{AvailableCapacity: -1}, "AvailableCapacity"},
		{"negative max calls", csitest.Config{MaxCalls: -1}, "MaxCalls"},
		{"unknown publish context reply", csitest.Config{PublishContext: csitest.ContextAbsent + 1}, "PublishContext"},
		{"negative volume context reply", csitest.Config{VolumeContext: -1}, "VolumeContext"},
		{"long node ID", csitest.Config{NodeID: strings.Repeat("n", csi.MaxExternalNodeIDLength+1)}, "node ID"},
		{"control character in node ID", csitest.Config{NodeID: "node\x1b[0m"}, "control character"},
		{"long socket path", csitest.Config{Endpoint: "/tmp/" + strings.Repeat("s", 120) + "/csi.sock"}, "socket path"},
		{"unknown volume status reply", csitest.Config{VolumeStatus: csitest.StatusAbsent + 1}, "VolumeStatus"},
		{"capacity and pools", csitest.Config{AvailableCapacity: 1, Pools: []csitest.Pool{{Capacity: 1}}}, "both AvailableCapacity and Pools"},
		{"negative pool capacity", csitest.Config{Pools: []csitest.Pool{{Capacity: 1}, {Capacity: -1}}}, "Pools[1]: Capacity is -1"},
		{"negative max volume size", csitest.Config{Pools: []csitest.Pool{{MaxVolumeSize: new(int64(-1))}}}, "Pools[0]: MaxVolumeSize is -1"},
		{"negative min volume size", csitest.Config{Pools: []csitest.Pool{{MinVolumeSize: new(int64(-2))}}}, "Pools[0]: MinVolumeSize is -2"},
		{"min above max", csitest.Config{Pools: []csitest.Pool{{MinVolumeSize: new(int64(5)), MaxVolumeSize: new(int64(4))}}}, "MinVolumeSize (5) exceeds MaxVolumeSize (4)"},
		{"pool topology without constraints", csitest.Config{Pools: []csitest.Pool{{Topology: &csi.Topology{Segments: map[string]string{"zone": "a"}}}}},
			"Pools[0]: has Topology zone=a but the plugin does not set RequiresTopologies"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := csitest.New(tt.cfg)
			if err == nil {
				t.Fatalf("New(%+v) = %v, want an error", tt.cfg, p)
			}
			if !errors.Is(err, csi.ErrInvalidRequest) && !errors.Is(err, csi.ErrInvalidID) {
				t.Errorf("error %v matches neither csi.ErrInvalidRequest nor csi.ErrInvalidID", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not mention %q", err, tt.want)
			}
		})
	}
}

func TestNew_Defaults(t *testing.T) {
	p, err := csitest.New(csitest.Config{})
	noErr(t, err)
	if !strings.HasSuffix(p.Endpoint(), "/csi.sock") || len(p.Endpoint()) > 103 {
		t.Errorf("Endpoint() = %q, want a short path ending in /csi.sock", p.Endpoint())
	}
	if p.Addr() != "unix://"+p.Endpoint() {
		t.Errorf("Addr() = %q, want unix:// + Endpoint()", p.Addr())
	}
	if _, err := os.Stat(filepath.Dir(p.Endpoint())); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("New created %s (err %v); it must not touch the file system", filepath.Dir(p.Endpoint()), err)
	}
	p.Stop() // a never-started plugin stops quietly
}

func TestPlugin_Start_ServesDefaults(t *testing.T) {
	p, c := start(t, csitest.Config{})
	ctx := ctxT(t)
	info, err := c.id.GetPluginInfo(ctx, &csipb.GetPluginInfoRequest{})
	noErr(t, err)
	if info.GetName() != csitest.DefaultName || info.GetVendorVersion() != csitest.DefaultVersion {
		t.Errorf("GetPluginInfo = %v, want defaults", info)
	}
	ni, err := c.node.NodeGetInfo(ctx, &csipb.NodeGetInfoRequest{})
	noErr(t, err)
	if ni.GetNodeId() != csitest.DefaultNodeID {
		t.Errorf("node ID %q, want %q", ni.GetNodeId(), csitest.DefaultNodeID)
	}
	if fi, err := os.Stat(p.Endpoint()); err != nil || fi.Mode().Type() != os.ModeSocket {
		t.Errorf("Stat(%s) = %v, %v; want a socket", p.Endpoint(), fi, err)
	}
}

func TestNew_RelativeEndpoint(t *testing.T) {
	p, err := csitest.New(csitest.Config{Endpoint: "csi.sock"})
	noErr(t, err)
	if !filepath.IsAbs(p.Endpoint()) || filepath.Base(p.Endpoint()) != "csi.sock" {
		t.Errorf("Endpoint() = %q, want an absolute path to csi.sock", p.Endpoint())
	}
}

func TestPlugin_Start_Twice(t *testing.T) {
	p := csitest.Start(t, csitest.Config{})
	if err := p.Start(); err == nil {
		t.Fatal("second Start succeeded, want an error")
	}
}

func TestPlugin_Start_RemovesStaleSocket(t *testing.T) {
	dir, err := os.MkdirTemp("", "csi")
	noErr(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	sock := filepath.Join(dir, "csi.sock")
	// A listener whose socket file outlives it, as after a crash.
	l, err := net.Listen("unix", sock)
	noErr(t, err)
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	noErr(t, l.Close())

	p, c := start(t, csitest.Config{Endpoint: sock})
	if p.Endpoint() != sock {
		t.Fatalf("Endpoint() = %q, want %q", p.Endpoint(), sock)
	}
	_, err = c.id.Probe(ctxT(t), &csipb.ProbeRequest{})
	noErr(t, err)
	p.Stop()
	if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket still there after Stop: %v", err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Errorf("Stop removed the caller's directory: %v", err)
	}
}

func TestPlugin_Start_RefusesNonSocket(t *testing.T) {
	dir, err := os.MkdirTemp("", "csi")
	noErr(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	path := filepath.Join(dir, "csi.sock")
	noErr(t, os.WriteFile(path, []byte("keep me"), 0o600))
	p, err := csitest.New(csitest.Config{Endpoint: path})
	noErr(t, err)
	if err := p.Start(); err == nil || !strings.Contains(err.Error(), "not a socket") {
		p.Stop()
		t.Fatalf("Start = %v, want a not-a-socket error", err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "keep me" {
		t.Errorf("the file was changed: %q, %v", b, err)
	}
}

func TestPlugin_Stop_Idempotent(t *testing.T) {
	p := csitest.Start(t, csitest.Config{})
	dir := filepath.Dir(p.Endpoint())
	p.Stop()
	p.Stop()
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temporary socket directory %s still there after Stop: %v", dir, err)
	}
}

func TestPlugin_Stop_FailsInFlightCall(t *testing.T) {
	p, c := start(t, csitest.Config{})
	arrived := make(chan struct{})
	p.SetHook(csitest.MethodProbe, func(ctx context.Context, _ string, _ any) error {
		close(arrived)
		<-ctx.Done()
		return ctx.Err()
	})
	errc := make(chan error, 1)
	go func() {
		_, err := c.id.Probe(ctxT(t), &csipb.ProbeRequest{})
		errc <- err
	}()
	<-arrived
	p.Stop()
	if err := <-errc; err == nil {
		t.Fatal("in-flight Probe succeeded across Stop, want an error")
	}
}

func TestPlugin_Restart_KeepsModel(t *testing.T) {
	p, c := start(t, fullConfig)
	ctx := ctxT(t)
	staging, target := paths(t)
	p.AddVolume("vol-a", 1<<20, map[string]string{"k": "v"})
	vc := mountCap(snw)
	pub, err := c.ctrl.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{VolumeId: "vol-a", NodeId: csitest.DefaultNodeID, VolumeCapability: vc})
	noErr(t, err)
	_, err = c.node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: "vol-a", StagingTargetPath: staging, VolumeCapability: vc, PublishContext: pub.GetPublishContext()})
	noErr(t, err)
	p.FailAlways(csitest.MethodGetCapacity, codes.Unavailable)

	noErr(t, p.Restart())

	// The same connection reconnects to the restarted plugin. A call that
	// raced with the client noticing the old connection's end fails
	// Unavailable, as after a real crash; callers retry.
	for attempt := 1; ; attempt++ {
		_, err = c.node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{
			VolumeId: "vol-a", StagingTargetPath: staging, TargetPath: target, VolumeCapability: vc, PublishContext: pub.GetPublishContext(),
		}, grpc.WaitForReady(true))
		if status.Code(err) != codes.Unavailable || attempt == 3 {
			break
		}
	}
	noErr(t, err)
	v, ok := p.Volume("vol-a")
	if !ok || len(v.Attachments) != 1 || len(v.Staged) != 1 || len(v.Published) != 1 {
		t.Fatalf("after restart volume = %+v, %v; want attached, staged and published", v, ok)
	}
	_, err = c.ctrl.GetCapacity(ctx, &csipb.GetCapacityRequest{})
	wantCode(t, err, codes.Unavailable)
	p.RequireSequence(t, csitest.MethodControllerPublishVolume, csitest.MethodNodeStageVolume, csitest.MethodNodePublishVolume, csitest.MethodGetCapacity)
	p.RequireNoViolations(t)
}

func TestPlugin_Stop_Unreachable(t *testing.T) {
	p, c := start(t, csitest.Config{})
	p.Stop()
	_, err := c.id.Probe(ctxT(t), &csipb.ProbeRequest{})
	wantCode(t, err, codes.Unavailable)
}
