package mounter_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/mounter"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	testPlugin = "fake-plugin"
	testNS     = "default"
)

// registry implements mounter.Plugins with one real plugin.Client
// connected to a csitest socket: the gRPC is real, only the lookup is
// ours. A plugin can be made to disappear and come back.
type registry struct {
	mu      sync.Mutex
	id      string
	client  *plugin.Client
	info    *csi.PluginInfo // nil: the mounter asks NodeGetCapabilities
	missing bool
	// wrap, if set, wraps the client handed to the mounter (to lose a
	// reply after the plugin acted, say).
	wrap func(plugin.NodeClient) plugin.NodeClient
}

var _ mounter.Plugins = (*registry)(nil)

func (r *registry) NodePlugin(id string) (plugin.NodeClient, *csi.PluginInfo, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if id != r.id || r.missing {
		return nil, nil, fmt.Errorf("no node plugin %q on this node: %w", id, csi.ErrPluginNotFound)
	}
	if r.wrap != nil {
		return r.wrap(r.client), r.info.Copy(), nil
	}
	return r.client, r.info.Copy(), nil
}

func (r *registry) setMissing(missing bool) {
	r.mu.Lock()
	r.missing = missing
	r.mu.Unlock()
}

// env is one node: a fake plugin, a client of it, a mount root and a
// state directory.
type env struct {
	t     testing.TB
	p     *csitest.Plugin
	reg   *registry
	root  string
	state string
	last  *mounter.Mounter // closed by the next mounter(): it holds the state database
}

func newEnv(t testing.TB, node csi.NodeCapabilities, cfg ...func(*csitest.Config)) *env {
	t.Helper()
	c := csitest.Config{Type: csi.PluginTypeNode, Node: node}
	for _, f := range cfg {
		f(&c)
	}
	p := csitest.Start(t, c)
	client, err := plugin.New(plugin.Config{Endpoint: p.Endpoint(), MaxRetries: -1})
	if err != nil {
		t.Fatalf("plugin client: %v", err)
	}
	t.Cleanup(func() { _ = client.Close() })
	dir := t.TempDir()
	e := &env{
		t:     t,
		p:     p,
		reg:   &registry{id: testPlugin, client: client},
		root:  filepath.Join(dir, "mnt"),
		state: filepath.Join(dir, "state"),
	}
	return e
}

// mounter starts a Mounter on the env's node, as a restarted agent
// does: the previous one, abandoned, is closed first.
func (e *env) mounter() *mounter.Mounter {
	e.t.Helper()
	if e.last != nil {
		_ = e.last.Close()
	}
	m, err := mounter.New(mounter.Config{Root: e.root, StateDir: e.state, Plugins: e.reg})
	if err != nil {
		e.t.Fatalf("mounter.New: %v", err)
	}
	e.last = m
	e.t.Cleanup(func() { _ = m.Close() })
	return m
}

// reread starts a Mounter on a copy of the state directory, to see what
// a restarted agent would read while the running one (which holds the
// state database locked) goes on.
func (e *env) reread() *mounter.Mounter {
	e.t.Helper()
	state := filepath.Join(e.t.TempDir(), "state")
	copyDir(e.t, e.state, state)
	m, err := mounter.New(mounter.Config{Root: e.root, StateDir: state, Plugins: e.reg})
	if err != nil {
		e.t.Fatalf("mounter.New on a copy of the state: %v", err)
	}
	e.t.Cleanup(func() { _ = m.Close() })
	return m
}

// volume adds a volume to the fake and returns its external ID.
func (e *env) volume(id string) string {
	ext := "ext-" + id
	e.p.AddVolume(ext, 1<<30, map[string]string{"pool": "p1"})
	return ext
}

func fsWriter() csi.Capability {
	return csi.Capability{AccessMode: csi.AccessModeSingleNodeWriter, AttachmentMode: csi.AttachmentModeFileSystem}
}

func multiReader() csi.Capability {
	return csi.Capability{AccessMode: csi.AccessModeMultiNodeReaderOnly, AttachmentMode: csi.AttachmentModeFileSystem}
}

// mountReq is a write claim on a single-node-multi-writer file system,
// so that several allocations on the node may share the volume.
func mountReq(vol, alloc string) *mounter.MountRequest {
	return &mounter.MountRequest{
		Namespace:    testNS,
		VolumeID:     vol,
		ExternalID:   "ext-" + vol,
		PluginID:     testPlugin,
		AllocationID: alloc,
		Capability:   csi.Capability{AccessMode: csi.AccessModeSingleNodeMultiWriter, AttachmentMode: csi.AttachmentModeFileSystem},
		ClaimMode:    csi.ClaimWrite,
	}
}

func unmountReq(vol, alloc string) *mounter.UnmountRequest {
	return &mounter.UnmountRequest{Namespace: testNS, VolumeID: vol, AllocationID: alloc}
}

func mustMount(t testing.TB, m mounter.VolumeMounter, r *mounter.MountRequest) *mounter.MountInfo {
	t.Helper()
	mi, err := m.MountVolume(context.Background(), r)
	if err != nil {
		t.Fatalf("MountVolume(%s, %s): %v", r.VolumeID, r.AllocationID, err)
	}
	return mi
}

func mustUnmount(t testing.TB, m mounter.VolumeMounter, r *mounter.UnmountRequest) {
	t.Helper()
	if err := m.UnmountVolume(context.Background(), r); err != nil {
		t.Fatalf("UnmountVolume(%s, %s): %v", r.VolumeID, r.AllocationID, err)
	}
}

// counts returns the number of calls of each node lifecycle method, in
// the order stage, publish, unpublish, unstage.
func counts(p *csitest.Plugin) [4]int {
	return [4]int{
		p.CallCount(csitest.MethodNodeStageVolume),
		p.CallCount(csitest.MethodNodePublishVolume),
		p.CallCount(csitest.MethodNodeUnpublishVolume),
		p.CallCount(csitest.MethodNodeUnstageVolume),
	}
}

func requireCounts(t testing.TB, p *csitest.Plugin, want [4]int, when string) {
	t.Helper()
	if got := counts(p); got != want {
		t.Fatalf("%s: calls (stage, publish, unpublish, unstage) = %v, want %v\n%v", when, got, want, p.Calls())
	}
}

// files lists every file and directory under dir, relative to it.
func files(t testing.TB, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) && p == dir {
				return filepath.SkipAll
			}
			return err
		}
		if p != dir {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", dir, err)
	}
	return out
}

// stateFiles lists the volume records in the state directory: the
// database's, as "mounter.db: <namespace>/<volume>", and any file of an
// older version.
func stateFiles(t testing.TB, state string) []string {
	t.Helper()
	var out []string
	for k := range dbRecords(t, state) {
		out = append(out, "mounter.db: "+k)
	}
	for _, f := range files(t, state) {
		if strings.HasSuffix(f, ".json") || strings.HasSuffix(f, ".state") {
			out = append(out, f)
		}
	}
	return out
}

// requireNoStateLeft fails t if a state file still tracks a volume: the
// mounter owes nothing once every allocation has unmounted.
func requireNoStateLeft(t testing.TB, state string) {
	t.Helper()
	if left := stateFiles(t, state); len(left) != 0 {
		t.Errorf("state files left: %v", left)
	}
}

func requireInside(t testing.TB, root, p string) {
	t.Helper()
	rel, err := filepath.Rel(root, p)
	if err != nil || rel == "." || strings.HasPrefix(rel, "..") || filepath.IsAbs(rel) {
		t.Fatalf("path %q is not inside root %q", p, root)
	}
}

// copyDir copies a directory tree of regular files: a snapshot of the
// state directory as a crash at that moment would leave it.
func copyDir(t testing.TB, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o700)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(to, data, 0o600)
	})
	if err != nil {
		t.Fatalf("copy %s to %s: %v", src, dst, err)
	}
}

// writeState writes a state file, creating its directory; a setup
// failure stops the test instead of leaving it to pass on a missing file.
func writeState(t testing.TB, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// requireStateRefused starts a Mounter on state and checks that New
// refuses the corrupt file p: an error matching ErrCorruptState, a
// *StateError naming p, Final, saying reason when it is set; and that p
// (unless it is a directory, dir) still holds content.
func requireStateRefused(t *testing.T, state, p, content string, dir bool, reason string) {
	t.Helper()
	_, err := newOn(t, state)
	if !errors.Is(err, mounter.ErrCorruptState) {
		t.Fatalf("New = %v, want ErrCorruptState", err)
	}
	var se *mounter.StateError
	if !errors.As(err, &se) || filepath.Clean(se.Path) != filepath.Clean(p) {
		t.Fatalf("error %v does not name the file %s", err, p)
	}
	if reason != "" && !strings.Contains(err.Error(), reason) {
		t.Errorf("error %q does not say %q", err, reason)
	}
	if csi.Classify(err) != csi.ClassFinal {
		t.Errorf("class %s, want final", csi.Classify(err))
	}
	if !dir {
		if data, _ := os.ReadFile(p); string(data) != content {
			t.Errorf("the corrupt file was changed")
		}
	}
}
