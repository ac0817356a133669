package plugintest_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/examples/hostpathplugin/hostpath"
	"github.com/csikit/csikit/plugintest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// shortDir returns a new directory with a path short enough for a unix
// socket, removed when the test ends.
func shortDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "pt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// startHostpath serves a hostpath plugin in-process on a fresh socket
// until the test ends and returns the socket. Zero fields get test
// defaults: a fresh data dir, node ID "node-1", symlinks.
func startHostpath(t testing.TB, cfg hostpath.Config) string {
	t.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	if cfg.NodeID == "" {
		cfg.NodeID = "node-1"
	}
	if cfg.Mount == "" {
		cfg.Mount = hostpath.MountSymlink
	}
	cfg.Endpoint = filepath.Join(shortDir(t), "csi.sock")
	p, err := hostpath.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("hostpath plugin: %v", err)
		}
	})
	// Run creates the socket in its own goroutine: wait until the plugin
	// answers, so that a raw client without WaitForReady finds it.
	conn, err := grpc.NewClient("unix://"+cfg.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := csipb.NewIdentityClient(conn).Probe(context.Background(), &csipb.ProbeRequest{}, grpc.WaitForReady(true)); err != nil {
		t.Fatal(err)
	}
	return cfg.Endpoint
}

// bindMounts skips the test unless bind mounts work here (root, or
// CAP_SYS_ADMIN).
func bindMounts(t testing.TB) {
	t.Helper()
	if err := hostpath.CanBindMount(); err != nil {
		t.Skipf("bind mounts do not work here (%v): run the tests as root to cover the hostpath plugin's bind mount method", err)
	}
}

// volumeID returns the volume ID of a node request, or "".
func volumeID(req any) string {
	switch r := req.(type) {
	case *csipb.NodeStageVolumeRequest:
		return r.GetVolumeId()
	case *csipb.NodePublishVolumeRequest:
		return r.GetVolumeId()
	}
	return ""
}

// sharedBackEnd makes a node-only fake know the volumes a controller
// fake created, as the two halves of a split plugin share their storage:
// the node's stage and publish find them, and unknown volumes stay
// NotFound.
func sharedBackEnd(ctrl, node *csitest.Plugin) {
	admit := func(_ context.Context, _ string, req any) error {
		if v, ok := ctrl.Volume(volumeID(req)); ok {
			if _, known := node.Volume(v.ID); !known {
				node.AddVolume(v.ID, v.Capacity, v.Context)
			}
		}
		return nil
	}
	node.SetHook(csitest.MethodNodeStageVolume, admit)
	node.SetHook(csitest.MethodNodePublishVolume, admit)
}

// requireClean fails the test if the fake keeps anything attached,
// staged or published, or (with a controller) holds a volume other than
// keep.
func requireClean(t *testing.T, p *csitest.Plugin, controller bool, keep string) {
	t.Helper()
	for _, v := range p.Volumes() {
		if controller && v.ID != keep {
			t.Errorf("the fake still holds volume %s", v.ID)
		}
		if v.InUse() {
			t.Errorf("volume %s is still in use: attached %v, staged %d, published %d", v.ID, v.AttachedNodes(), len(v.Staged), len(v.Published))
		}
	}
}

// failuresOf returns the recorded failures as strings.
func failuresOf(r *plugintest.Recorder) []string {
	var out []string
	for _, f := range r.Failures() {
		out = append(out, f.String())
	}
	return out
}

// requireOneFailure fails the test unless r recorded exactly one failure
// and it starts with prefix.
func requireOneFailure(t *testing.T, r *plugintest.Recorder, prefix string) plugintest.Failure {
	t.Helper()
	fs := r.Failures()
	if len(fs) != 1 || !strings.HasPrefix(fs[0].String(), prefix) {
		t.Fatalf("want exactly one failure starting with\n\t%s\ngot %d:\n\t%s", prefix, len(fs), strings.Join(failuresOf(r), "\n\t"))
	}
	return fs[0]
}

// check runs the lifecycle into a Recorder and fails the test only if
// the harness could not start.
func check(t *testing.T, cfg plugintest.Config) *plugintest.Recorder {
	t.Helper()
	if cfg.MountRoot == "" {
		dir := t.TempDir()
		cfg.MountRoot, cfg.StateDir = filepath.Join(dir, "mnt"), filepath.Join(dir, "state")
	}
	r := &plugintest.Recorder{}
	if err := plugintest.Check(t.Context(), cfg, r); err != nil {
		t.Fatalf("Check: %v", err)
	}
	return r
}

// createHostpathVolume creates a volume through a hostpath controller's
// socket and returns its ID.
func createHostpathVolume(t testing.TB, socket string) string {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := csipb.NewControllerClient(conn).CreateVolume(t.Context(), &csipb.CreateVolumeRequest{
		Name: "pre-provisioned",
		VolumeCapabilities: []*csipb.VolumeCapability{{
			AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}},
			AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		}},
	}, grpc.WaitForReady(true))
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetVolume().GetVolumeId()
}
