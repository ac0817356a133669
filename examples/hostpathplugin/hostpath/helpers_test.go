package hostpath_test

import (
	"bufio"
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/csikit/csikit/examples/hostpathplugin/hostpath"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// harness is one plugin served in-process on a real unix socket, with raw
// CSI clients dialed to it.
type harness struct {
	t      testing.TB
	cfg    hostpath.Config
	p      *hostpath.Plugin
	socket string
	conn   *grpc.ClientConn
	ident  csipb.IdentityClient
	ctrl   csipb.ControllerClient
	node   csipb.NodeClient
	cancel context.CancelFunc
	done   chan error
}

// shortDir returns a new temporary directory with a short path, removed
// at cleanup: t.TempDir() can be too long for a unix socket address.
func shortDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "hp")
	must.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// start serves a plugin for cfg. Zero fields get test defaults: a fresh
// data dir, node ID "node-1", and the symlink mount method so the test
// runs as any user.
func start(t testing.TB, cfg hostpath.Config) *harness {
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
	h := &harness{t: t, cfg: cfg}
	h.serve()
	t.Cleanup(h.stop)
	return h
}

func (h *harness) serve() {
	t := h.t
	t.Helper()
	p, err := hostpath.New(h.cfg)
	must.NoError(t, err)
	h.socket = filepath.Join(shortDir(t), "csi.sock")
	lis, err := net.Listen("unix", h.socket)
	must.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	h.p, h.cancel, h.done = p, cancel, make(chan error, 1)
	go func() { h.done <- p.Serve(ctx, lis) }()
	conn, err := grpc.NewClient("unix://"+h.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	must.NoError(t, err)
	h.conn = conn
	h.ident = csipb.NewIdentityClient(conn)
	h.ctrl = csipb.NewControllerClient(conn)
	h.node = csipb.NewNodeClient(conn)
	// Serve opens the data dir before it answers: once Probe answers, the
	// plugin holds its locks and has loaded its state.
	_, err = h.ident.Probe(ctx, &csipb.ProbeRequest{}, waitForReady)
	must.NoError(t, err)
}

// stop ends the plugin and waits for Serve to return; it may be called
// more than once.
func (h *harness) stop() {
	if h.cancel == nil {
		return
	}
	_ = h.conn.Close()
	h.cancel()
	must.NoError(h.t, <-h.done)
	h.cancel = nil
}

// restart stops the plugin and serves a new one on the same Config (and
// so the same data dir).
func (h *harness) restart() {
	h.stop()
	h.serve()
}

func mountCap(mode csipb.VolumeCapability_AccessMode_Mode) *csipb.VolumeCapability {
	return &csipb.VolumeCapability{
		AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: mode},
	}
}

func blockCap(mode csipb.VolumeCapability_AccessMode_Mode) *csipb.VolumeCapability {
	return &csipb.VolumeCapability{
		AccessType: &csipb.VolumeCapability_Block{Block: &csipb.VolumeCapability_BlockVolume{}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: mode},
	}
}

const (
	snw   = csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
	snro  = csipb.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY
	snsw  = csipb.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER
	mnmw  = csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER
	mnro  = csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
	bytes = csipb.VolumeUsage_BYTES
)

func requireCode(t *testing.T, want codes.Code, err error) {
	t.Helper()
	if want == codes.OK {
		must.NoError(t, err)
		return
	}
	must.Error(t, err)
	must.Equal(t, want.String(), status.Code(err).String(), "error: %v", err)
	must.NotEmpty(t, status.Convert(err).Message(), "an error must say what went wrong")
}

// isMountPoint looks path up in /proc/self/mountinfo (the test's own
// reading, independent of the plugin's).
func isMountPoint(t *testing.T, path string) bool {
	t.Helper()
	resolved, err := filepath.EvalSymlinks(path)
	if err != nil {
		return false
	}
	f, err := os.Open("/proc/self/mountinfo")
	must.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && fields[4] == resolved {
			return true
		}
	}
	must.NoError(t, sc.Err())
	return false
}

var waitForReady = grpc.WaitForReady(true)

// listen opens a unix listener on a fresh short path.
func listen(t *testing.T) net.Listener {
	t.Helper()
	return listenAt(t, filepath.Join(shortDir(t), "csi.sock"))
}

func listenAt(t *testing.T, path string) *net.UnixListener {
	t.Helper()
	lis, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	must.NoError(t, err)
	return lis
}

func dial(t *testing.T, socket string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	must.NoError(t, err)
	return conn
}

// pathDir returns a new temporary directory for staging and target
// paths. Whatever is still mounted under it when the test ends is
// unmounted before the directory is removed, so a failed bind-mount test
// leaks no mount (cleanups run last-registered first).
func pathDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	t.Cleanup(func() { unmountUnder(t, dir) })
	return dir
}

func unmountUnder(t *testing.T, dir string) {
	t.Helper()
	resolved, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return
	}
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return // no mountinfo, no bind mounts
	}
	var mps []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(f[4], resolved+"/") {
			mps = append(mps, f[4])
		}
	}
	// Deepest first, so nested mounts come off before their parents.
	slices.SortFunc(mps, func(a, b string) int { return len(b) - len(a) })
	for _, mp := range mps {
		if err := syscall.Unmount(mp, 0); err != nil {
			t.Errorf("unmount %s left by the test: %v", mp, err)
		}
	}
}
