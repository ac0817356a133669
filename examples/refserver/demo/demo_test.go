package demo_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/hostpathplugin/hostpath"
	"github.com/csikit/csikit/examples/refserver/api"
	"github.com/csikit/csikit/examples/refserver/demo"
	"github.com/csikit/csikit/examples/refserver/internal/tlsconf"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// syncBuffer is an io.Writer safe for the demo's many goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// shortTempDir is a temporary directory short enough for unix sockets.
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "rsd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if left, _ := demo.MountsUnder(dir); len(left) > 0 {
			t.Errorf("mounts left under %s: %v", dir, left)
			return
		}
		_ = os.RemoveAll(dir)
	})
	return dir
}

// requireInOrder checks that each want appears in out after the one
// before it.
func requireInOrder(t *testing.T, out string, wants ...string) {
	t.Helper()
	at := 0
	for _, w := range wants {
		i := strings.Index(out[at:], w)
		if i < 0 {
			if strings.Contains(out, w) {
				t.Fatalf("%q is printed, but not after %q\noutput:\n%s", w, out[:at], out)
			}
			t.Fatalf("%q is not printed\noutput:\n%s", w, out)
		}
		at += i + len(w)
	}
}

// lifecycle is the order of the demo's steps as printed: each line is
// caused by the one before it, so the order is fixed.
var lifecycle = []string{
	"[demo] starting a server and two node agents",
	"[server] API listening on https://127.0.0.1:",
	"[demo] ACLs are on: a management token is in ",
	"[demo] plugin hostpath (hostpath.csikit.io 0.1.0) is ready: controllers 1/1, nodes 2/2 healthy",
	"[node-1] CreateVolume ok: name default/demo-vol → vol-",
	"[server] volume demo-vol created by plugin hostpath.csikit.io on node-1 (controller), external ID vol-",
	"[server] allocation web-1 placed on node-2",
	"[node-1] ControllerPublishVolume ok: vol-",
	"[server] volume demo-vol claimed by web-1 on node-2 (write, single-node-writer/file-system); attached by the controller on node-1",
	"[server] asking node-2 to mount demo-vol for web-1",
	"[node-2] NodeStageVolume ok: vol-",
	"[node-2] NodePublishVolume ok: vol-",
	"[node-2] mounted demo-vol for web-1 at ",
	"[demo] web-1 holds a write claim on demo-vol (taken), mounted on node-2",
	"[demo] web-1 wrote hello.txt through the mount",
	"[server] allocation web-1 stopped: releasing its claims on default/demo-vol",
	"[node-2] NodeUnpublishVolume ok: vol-",
	"[node-2] NodeUnstageVolume ok: vol-",
	"[node-1] ControllerUnpublishVolume ok: vol-",
	"[demo] the claim of web-1 on demo-vol is freed: the volume has no claims",
	"[demo] hello.txt is in the plugin's data dir: ",
	"[demo] done: created, claimed, mounted, written, released and freed",
	"[demo] stopping: releasing what is still claimed",
	"[demo] stopped cleanly",
}

// checkDemo asserts what every demo run shows.
func checkDemo(t *testing.T, out string, res *demo.Result) {
	t.Helper()
	requireInOrder(t, out, lifecycle...)
	// The worker's free is printed after the write that the demo's
	// blocking query sees, so only its place after the release is fixed.
	requireInOrder(t, out, "[server] allocation web-1 stopped", "[server] claim of web-1 on volume default/demo-vol released and freed")
	if strings.Contains(out, "demo-secret") {
		t.Errorf("the volume's secret was printed:\n%s", out)
	}
	for _, bad := range []string{" failed", "retrying", "permission denied"} {
		if strings.Contains(out, bad) {
			t.Errorf("a step failed (%q):\n%s", bad, out)
		}
	}
	if res.ExternalID == "" || !strings.HasPrefix(res.ExternalID, "vol-") {
		t.Errorf("external ID %q", res.ExternalID)
	}
	if !strings.Contains(res.MountPath, filepath.Join("node-2", "mnt", "per-alloc", demo.AllocationID, demo.VolumeID)) {
		t.Errorf("mount path %q is not under node-2's mount root", res.MountPath)
	}
	if want := filepath.Join(res.Dir, "plugin", "volumes", res.ExternalID, demo.FileName); res.PluginFile != want {
		t.Errorf("plugin file %q, want %q", res.PluginFile, want)
	}
	if len(res.MountsAfter) != 0 {
		t.Errorf("mounts left after the release: %v", res.MountsAfter)
	}
}

// TestRun_SymlinkExitAfterDemo runs the whole demo with the symlink
// mount method, which works for any user, and keeps its directory to
// check what the demo left in the plugin's data dir.
func TestRun_SymlinkExitAfterDemo(t *testing.T) {
	dir := shortTempDir(t)
	var out syncBuffer
	var steps []demo.Step
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := demo.Run(ctx, demo.Config{
		DataDir: dir, Out: &out, ExitAfterDemo: true, Mount: hostpath.MountSymlink,
		OnStep: func(s demo.Step, _ *demo.Result) { steps = append(steps, s) },
	})
	if err != nil {
		t.Fatalf("demo: %v\noutput:\n%s", err, out.String())
	}
	checkDemo(t, out.String(), res)
	if res.MountMethod != hostpath.MountSymlink {
		t.Errorf("mount method %q, want symlink", res.MountMethod)
	}
	if len(res.MountsDuring) != 0 {
		t.Errorf("symlink mode made mounts: %v", res.MountsDuring)
	}
	want := []demo.Step{demo.StepClusterUp, demo.StepCreated, demo.StepMounted, demo.StepReleased}
	if !equalSteps(steps, want) {
		t.Errorf("steps %v, want %v", steps, want)
	}
	// The file written through the mount is in the plugin's data dir,
	// which a given DataDir keeps.
	got, err := os.ReadFile(filepath.Join(dir, "plugin", "volumes", res.ExternalID, demo.FileName))
	if err != nil || string(got) != demo.FileContent {
		t.Errorf("file in the plugin's data dir: %q, %v", got, err)
	}
	// The mount is gone: the target no longer exists (the plugin
	// removed its link and the mounter its directory).
	if _, err := os.Lstat(res.MountPath); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the mount target %s is still there: %v", res.MountPath, err)
	}
}

// TestRun_BindMounts runs the demo with real bind mounts, as root, and
// checks through /proc/self/mountinfo that the staging and target mounts
// exist while the volume is mounted and are all gone at the end, and
// that the temporary directory is removed.
func TestRun_BindMounts(t *testing.T) {
	if err := hostpath.CanBindMount(); err != nil {
		t.Skipf("bind mounts do not work here (%v); the symlink demo test covers the rest", err)
	}
	var out syncBuffer
	var during []string
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := demo.Run(ctx, demo.Config{
		Out: &out, ExitAfterDemo: true, Mount: hostpath.MountBind,
		OnStep: func(s demo.Step, r *demo.Result) {
			if s != demo.StepMounted {
				return
			}
			var err error
			if during, err = demo.MountsUnder(r.Dir); err != nil {
				t.Errorf("read mountinfo: %v", err)
			}
		},
	})
	if err != nil {
		t.Fatalf("demo: %v\noutput:\n%s", err, out.String())
	}
	checkDemo(t, out.String(), res)
	requireInOrder(t, out.String(),
		"[node-1] hostpath plugin (monolith, bind mounts)",
		"[demo] /proc/self/mountinfo lists 2 bind mounts under ",
		"[demo] /proc/self/mountinfo lists no mounts under ")
	var staging, target bool
	for _, m := range during {
		staging = staging || strings.Contains(m, filepath.Join("staging", demo.Namespace, demo.VolumeID))
		target = target || m == res.MountPath
	}
	if len(during) != 2 || !staging || !target {
		t.Errorf("mounts while mounted: %v; want the staging path and the target %s", during, res.MountPath)
	}
	if _, err := os.Stat(res.Dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the demo's temporary directory %s was not removed: %v", res.Dir, err)
	}
	if left, err := demo.MountsUnder(filepath.Dir(res.Dir)); err != nil || containsUnder(left, res.Dir) {
		t.Errorf("mounts left under %s: %v (%v)", res.Dir, left, err)
	}
}

// TestRun_ServesUntilInterrupted runs the demo without
// -exit-after-demo: the cluster keeps serving, a client claims and
// mounts another volume meanwhile, and the interrupt releases it through
// the normal release path before everything stops. ACLs are on: the
// client's claim without a token is refused (403) with nothing claimed,
// and with the management token of the demo's token file it succeeds;
// no output shows the token.
func TestRun_ServesUntilInterrupted(t *testing.T) {
	mount := hostpath.MountSymlink
	if hostpath.CanBindMount() == nil {
		mount = hostpath.MountBind
	}
	var out syncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var extra *api.ClaimResponse
	var token string
	res, err := demo.Run(ctx, demo.Config{
		Out: &out, Mount: mount,
		OnStep: func(s demo.Step, r *demo.Result) {
			if s != demo.StepReleased {
				return
			}
			defer cancel()                                                           // the "interrupt", once the claim below is made
			pool, err := tlsconf.LoadCA(filepath.Join(r.Dir, "tls", tlsconf.CAFile)) // the demo runs over TLS
			if err != nil {
				t.Error(err)
				return
			}
			c, err := api.NewTLSClient(r.ServerURL, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			req := &api.ClaimRequest{AllocationID: "web-2", NodeID: "node-1", Mode: csi.ClaimWrite, Mount: true}
			if token, err = readTokenFile(r.TokenFile); err != nil {
				t.Error(err)
				return
			}
			refuseUnauthenticated(t, ctx, c, req)
			extra, err = c.WithToken(token).Claim(ctx, demo.Namespace, demo.VolumeID, req)
			if err != nil {
				t.Errorf("claim while serving: %v", err)
			}
		},
	})
	if err != nil {
		t.Fatalf("demo: %v\noutput:\n%s", err, out.String())
	}
	if extra == nil || extra.Mount == nil {
		t.Fatalf("no mount was made while serving\noutput:\n%s", out.String())
	}
	if strings.Contains(out.String(), token) {
		t.Errorf("the demo printed its management token:\n%s", out.String())
	}
	requireInOrder(t, out.String(),
		"[demo] done: created, claimed, mounted, written, released and freed",
		"[node-1] mounted demo-vol for web-2 at ",
		"[demo] the cluster keeps serving until interrupted",
		"[demo]   export CSIKIT_TOKEN=$(cat "+res.TokenFile+")",
		"[demo] stopping: releasing what is still claimed",
		"[server] allocation web-2 stopped: releasing its claims on default/demo-vol",
		"[node-1] NodeUnpublishVolume ok: ",
		"[node-1] NodeUnstageVolume ok: ",
		"[node-1] ControllerUnpublishVolume ok: ",
		"[demo] stopped cleanly")
	if _, err := os.Stat(res.Dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the demo's temporary directory %s was not removed: %v", res.Dir, err)
	}
}

// readTokenFile reads the demo's management token, which only its
// owner may read.
func readTokenFile(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if fi.Mode().Perm() != 0o600 {
		return "", fmt.Errorf("token file %s has mode %v, want 0600", path, fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) < 32 {
		return "", fmt.Errorf("token file %s holds %d bytes, want a token", path, len(tok))
	}
	return tok, nil
}

// refuseUnauthenticated checks that a claim and a read without a token
// are refused with 403, and that the refused claim took nothing.
func refuseUnauthenticated(t *testing.T, ctx context.Context, c *api.Client, req *api.ClaimRequest) {
	t.Helper()
	var ae *api.Error
	if _, err := c.Claim(ctx, demo.Namespace, demo.VolumeID, req); !errors.Is(err, csi.ErrPermissionDenied) || !errors.As(err, &ae) || ae.StatusCode != http.StatusForbidden {
		t.Errorf("a claim without a token: %v, want 403 csi.ErrPermissionDenied", err)
	}
	if _, _, err := c.Volumes(ctx, "", "", nil); !errors.Is(err, csi.ErrPermissionDenied) || !errors.As(err, &ae) || ae.StatusCode != http.StatusForbidden {
		t.Errorf("a read without a token: %v, want 403 csi.ErrPermissionDenied", err)
	}
}

func TestRun_BadMountMethod(t *testing.T) {
	_, err := demo.Run(context.Background(), demo.Config{ExitAfterDemo: true, Mount: "nfs"})
	if !errors.Is(err, hostpath.ErrInvalidConfig) {
		t.Fatalf("got %v, want hostpath.ErrInvalidConfig", err)
	}
}

func TestStartCluster_NeedsDir(t *testing.T) {
	_, err := demo.StartCluster(context.Background(), demo.ClusterConfig{})
	if !errors.Is(err, csi.ErrInvalidRequest) {
		t.Fatalf("got %v, want csi.ErrInvalidRequest", err)
	}
}

func TestMountsUnder_EmptyDir(t *testing.T) {
	got, err := demo.MountsUnder(t.TempDir())
	if err != nil || len(got) != 0 {
		t.Fatalf("got %v, %v; want no mounts", got, err)
	}
}

func equalSteps(a, b []demo.Step) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func containsUnder(mounts []string, dir string) bool {
	for _, m := range mounts {
		if m == dir || strings.HasPrefix(m, dir+"/") {
			return true
		}
	}
	return false
}
