package mounter_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/mounter"
)

// plantings are the elements beneath the mount root where a symbolic
// link can be planted on the way to the staging and target paths of
// mountReq("vol1", "a1") for a plugin that stages.
var plantings = []struct {
	name string
	rel  string // beneath the root
	// staging: the element is on the staging path, so an unmount's
	// NodeUnpublishVolume (whose target is clean) goes through and only
	// NodeUnstageVolume is held back.
	staging bool
	// mountPoint: the staging directory or the target itself, which
	// the plugin owns once it was asked to stage or publish there (and
	// may make a link of its own): refused only before that.
	mountPoint bool
}{
	{name: "staging", rel: "staging", staging: true},
	{name: "staging/<ns>", rel: "staging/" + testNS, staging: true},
	{name: "staging/<ns>/<vol>", rel: "staging/" + testNS + "/vol1", staging: true},
	{name: "staging/<ns>/<vol>/<usage>", rel: "staging/" + testNS + "/vol1/" + mountReq("vol1", "a1").Usage().StageUsage().String(), staging: true, mountPoint: true},
	{name: "per-alloc", rel: "per-alloc"},
	{name: "per-alloc/<alloc>", rel: "per-alloc/a1"},
	{name: "per-alloc/<alloc>/<vol>", rel: "per-alloc/a1/vol1"},
	{name: "per-alloc/<alloc>/<vol>/<usage>", rel: "per-alloc/a1/vol1/" + mountReq("vol1", "a1").Usage().String(), mountPoint: true},
}

// withFingerprint makes the registry report the plugin's capabilities,
// so that the mounter calls nothing to learn them and any call the fake
// records is one a mount or unmount made.
func withFingerprint(e *env) {
	e.reg.info = &csi.PluginInfo{PluginID: testPlugin, Type: csi.PluginTypeNode,
		NodeInfo: &csi.NodeInfo{ID: "n1", Capabilities: stageCaps}}
}

// plant replaces root/rel with a symbolic link to target: what was there
// moves to moved (if not empty), the missing parents are made as real
// directories.
func plant(t *testing.T, root, rel, target, moved string) {
	t.Helper()
	p := filepath.Join(root, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(p); err == nil {
		if moved == "" {
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
		} else if err := os.Rename(p, moved); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
}

// requireUnsafe checks that err is the typed refusal of a link at p.
// It does not stop the test, so that what else went wrong is reported
// too.
func requireUnsafe(t *testing.T, err error, p string) {
	t.Helper()
	if !errors.Is(err, mounter.ErrUnsafePath) {
		t.Errorf("error %v, want ErrUnsafePath", err)
		return
	}
	if !errors.Is(err, csi.ErrInvalidRequest) {
		t.Errorf("error %v does not match csi.ErrInvalidRequest", err)
	}
	var ue *mounter.UnsafePathError
	if !errors.As(err, &ue) || ue.Path != p {
		t.Errorf("error %v does not name the link %s", err, p)
	}
	if !strings.Contains(err.Error(), "remove the link") {
		t.Errorf("error %q does not say what to do", err)
	}
	if c := csi.Classify(err); c != csi.ClassFinal {
		t.Errorf("class %s, want final", c)
	}
}

// A link planted anywhere beneath the root on the way to the staging or
// target path makes the mount fail with ErrUnsafePath before any plugin
// call or state write, and nothing is made where the link points.
func TestMounter_MountVolume_PlantedSymlink(t *testing.T) {
	for _, tc := range plantings {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, stageCaps)
			withFingerprint(e)
			e.volume("vol1")
			m := e.mounter()
			outside := t.TempDir()
			plant(t, e.root, tc.rel, outside, "")

			_, err := m.MountVolume(context.Background(), mountReq("vol1", "a1"))
			requireUnsafe(t, err, filepath.Join(e.root, filepath.FromSlash(tc.rel)))
			if calls := e.p.Calls(); len(calls) != 0 {
				t.Errorf("plugin calls made: %v", calls)
			}
			if left := files(t, outside); len(left) != 0 {
				t.Errorf("made through the link, outside the root: %v", left)
			}
			if has, err := m.HasMount(context.Background(), testNS, "vol1", "a1"); err != nil || has {
				t.Errorf("HasMount = %v, %v after a refused mount; want false", has, err)
			}
			requireNoStateLeft(t, e.state)

			// A retry fails the same way, and the unmount the host owes
			// has nothing to do.
			_, err = m.MountVolume(context.Background(), mountReq("vol1", "a1"))
			requireUnsafe(t, err, filepath.Join(e.root, filepath.FromSlash(tc.rel)))
			mustUnmount(t, m, unmountReq("vol1", "a1"))
			if calls := e.p.Calls(); len(calls) != 0 {
				t.Errorf("plugin calls made: %v", calls)
			}
			if left := files(t, outside); len(left) != 0 {
				t.Errorf("made through the link, outside the root: %v", left)
			}
		})
	}
}

// A link planted after a mount, in place of a directory of its staging
// or target path, makes the unmount fail with ErrUnsafePath before the
// plugin call that would go through it (the plugin would unmount and
// delete where the link points); nothing the link reaches is removed,
// nor the link. Once the link is gone the unmount completes.
func TestMounter_UnmountVolume_PlantedSymlink(t *testing.T) {
	for _, tc := range plantings {
		if tc.mountPoint {
			continue // TestMounter_UnmountVolume_LinkAtMountPoint
		}
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, stageCaps)
			withFingerprint(e)
			e.volume("vol1")
			m := e.mounter()
			mustMount(t, m, mountReq("vol1", "a1"))

			// The link points at a copy of what it replaces, so a
			// teardown that followed it would find its files there.
			dir := t.TempDir()
			moved, outside := filepath.Join(dir, "moved"), filepath.Join(dir, "outside")
			link := filepath.Join(e.root, filepath.FromSlash(tc.rel))
			copyDir(t, link, outside)
			before := files(t, outside)
			if len(before) == 0 {
				t.Fatalf("nothing beneath %s to copy", link)
			}
			plant(t, e.root, tc.rel, outside, moved)

			err := m.UnmountVolume(context.Background(), unmountReq("vol1", "a1"))
			requireUnsafe(t, err, link)
			want := [4]int{1, 1, 0, 0}
			if tc.staging {
				want = [4]int{1, 1, 1, 0}
			}
			if got := counts(e.p); got != want {
				t.Errorf("after the refused unmount: calls (stage, publish, unpublish, unstage) = %v, want %v", got, want)
			}
			if after := files(t, outside); !slices.Equal(after, before) {
				t.Errorf("outside the root, before the unmount: %v; after: %v", before, after)
			}
			if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
				t.Errorf("the link %s is gone (%v)", link, err)
			}
			// Still tracked: a retry resumes the teardown.
			has, err := m.HasMount(context.Background(), testNS, "vol1", "a1")
			if err != nil || has == tc.staging {
				t.Errorf("HasMount = %v, %v after the refused unmount; want %v", has, err, !tc.staging)
			}

			// The operator removes the link and puts the directory back.
			if err := os.Remove(link); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(moved, link); err != nil {
				t.Fatal(err)
			}
			mustUnmount(t, m, unmountReq("vol1", "a1"))
			requireCounts(t, e.p, [4]int{1, 1, 1, 1}, "after the unmount")
			if left := files(t, e.root); len(left) != 2 { // staging and per-alloc
				t.Errorf("left under the root: %v", left)
			}
			if after := files(t, outside); !slices.Equal(after, before) {
				t.Errorf("outside the root, before the unmount: %v; after: %v", before, after)
			}
			requireNoStateLeft(t, e.state)
			e.p.RequireNoViolations(t)
		})
	}
}

// The staging directory, once staged, and the target, once published,
// are the plugin's mount points, and a plugin may make them links of
// its own (the hostpath example does in its symlink mode): later mounts
// and the unmount send them to the plugin as they are. The mounter's own removal still
// neither follows nor removes such a link, and nothing outside the root
// is touched.
func TestMounter_UnmountVolume_LinkAtMountPoint(t *testing.T) {
	for _, tc := range plantings {
		if !tc.mountPoint {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, stageCaps)
			withFingerprint(e)
			e.volume("vol1")
			m := e.mounter()
			mustMount(t, m, mountReq("vol1", "a1"))
			outside := t.TempDir()
			link := filepath.Join(e.root, filepath.FromSlash(tc.rel))
			plant(t, e.root, tc.rel, outside, filepath.Join(t.TempDir(), "moved"))

			// Mounts go on using them.
			want := [4]int{1, 1, 1, 1}
			if tc.staging {
				mustMount(t, m, mountReq("vol1", "a2"))
				mustUnmount(t, m, unmountReq("vol1", "a2"))
				want = [4]int{1, 2, 2, 1}
			} else {
				mustMount(t, m, mountReq("vol1", "a1"))
			}
			mustUnmount(t, m, unmountReq("vol1", "a1"))
			requireCounts(t, e.p, want, "after the unmount")
			if left := files(t, outside); len(left) != 0 {
				t.Errorf("outside the root after the unmount: %v", left)
			}
			_, err := os.Lstat(link)
			if tc.staging {
				// Not the mounter's to remove: it stays, and a new stage
				// there is refused until it is gone.
				if err != nil {
					t.Errorf("the link %s at the staging path was removed (%v)", link, err)
				}
				_, err := m.MountVolume(context.Background(), mountReq("vol1", "a2"))
				requireUnsafe(t, err, link)
			} else if err == nil {
				t.Errorf("the plugin's NodeUnpublishVolume left the target %s", link)
			}
			requireNoStateLeft(t, e.state)
			e.p.RequireNoViolations(t)
		})
	}
}

// A repeated mount makes no plugin call, but hands the target path to
// the host again: not through a link planted since.
func TestMounter_MountVolume_PlantedSymlinkRepeated(t *testing.T) {
	e := newEnv(t, stageCaps)
	withFingerprint(e)
	e.volume("vol1")
	m := e.mounter()
	mustMount(t, m, mountReq("vol1", "a1"))
	outside := t.TempDir()
	dir := filepath.Join(e.root, "per-alloc", "a1")
	moved := filepath.Join(t.TempDir(), "moved")
	plant(t, e.root, "per-alloc/a1", outside, moved)
	_, err := m.MountVolume(context.Background(), mountReq("vol1", "a1"))
	requireUnsafe(t, err, dir)
	requireCounts(t, e.p, [4]int{1, 1, 0, 0}, "after the repeated mount")
	if left := files(t, outside); len(left) != 0 {
		t.Errorf("made through the link, outside the root: %v", left)
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(moved, dir); err != nil {
		t.Fatal(err)
	}
	mustMount(t, m, mountReq("vol1", "a1"))
	mustUnmount(t, m, unmountReq("vol1", "a1"))
	requireCounts(t, e.p, [4]int{1, 1, 1, 1}, "after the unmount")
	e.p.RequireNoViolations(t)
}

// New refuses to start on a root whose staging or per-alloc directory is
// a link, and makes nothing where it points.
func TestNew_PlantedSymlink(t *testing.T) {
	for _, d := range []string{"staging", "per-alloc"} {
		t.Run(d, func(t *testing.T) {
			e := newEnv(t, stageCaps)
			outside := t.TempDir()
			plant(t, e.root, d, outside, "")
			_, err := mounter.New(mounter.Config{Root: e.root, StateDir: e.state, Plugins: e.reg})
			requireUnsafe(t, err, filepath.Join(e.root, d))
			if left := files(t, outside); len(left) != 0 {
				t.Errorf("made through the link, outside the root: %v", left)
			}
		})
	}
}

// A root given through a link of the host's is taken: it is resolved
// once, and the paths handed to the plugin are built on what it points
// at.
func TestNew_RootThroughSymlink(t *testing.T) {
	e := newEnv(t, stageCaps)
	withFingerprint(e)
	e.volume("vol1")
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	if err := os.Mkdir(real, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, e.root); err != nil {
		t.Fatal(err)
	}
	m := e.mounter()
	mi := mustMount(t, m, mountReq("vol1", "a1"))
	requireInside(t, real, mi.Path)
	mustUnmount(t, m, unmountReq("vol1", "a1"))
	requireCounts(t, e.p, [4]int{1, 1, 1, 1}, "after the unmount")
	if left := files(t, real); len(left) != 2 { // staging and per-alloc
		t.Errorf("left under the root: %v", left)
	}
	e.p.RequireNoViolations(t)
}

// A link planted beneath the root that points inside it (which os.Root
// alone would follow) is refused like one that leaves it: no plugin
// call, no state, and nothing made where it points.
func TestMounter_UnderRoot_NotPlain(t *testing.T) {
	for _, tc := range plantings {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, stageCaps)
			withFingerprint(e)
			e.volume("vol1")
			m := e.mounter()
			inner := filepath.Join(e.root, "inner")
			if err := os.Mkdir(inner, 0o750); err != nil {
				t.Fatal(err)
			}
			link := filepath.Join(e.root, filepath.FromSlash(tc.rel))
			rel, err := filepath.Rel(filepath.Dir(link), inner)
			if err != nil {
				t.Fatal(err)
			}
			plant(t, e.root, tc.rel, rel, "")

			_, err = m.MountVolume(context.Background(), mountReq("vol1", "a1"))
			requireUnsafe(t, err, link)
			if err != nil && !strings.Contains(err.Error(), "is a symbolic link") {
				t.Errorf("error %q does not say that %s is a link", err, link)
			}
			if calls := e.p.Calls(); len(calls) != 0 {
				t.Errorf("plugin calls made: %v", calls)
			}
			if left := files(t, inner); len(left) != 0 {
				t.Errorf("made through the link: %v", left)
			}
			if has, err := m.HasMount(context.Background(), testNS, "vol1", "a1"); err != nil || has {
				t.Errorf("HasMount = %v, %v after a refused mount; want false", has, err)
			}
			requireNoStateLeft(t, e.state)
		})
	}
}

// NodeExpandVolume gets the tracked paths only when no link was planted
// on the way to them since the mount.
func TestMounter_ExpandVolume_PlantedSymlink(t *testing.T) {
	for _, rel := range []string{"per-alloc/a1", "staging/" + testNS} {
		t.Run(rel, func(t *testing.T) {
			e := newEnv(t, csi.NodeCapabilities{StageUnstageVolume: true, ExpandVolume: true})
			e.volume("vol1")
			m := e.mounter()
			mustMount(t, m, mountReq("vol1", "a1"))
			link := filepath.Join(e.root, filepath.FromSlash(rel))
			plant(t, e.root, rel, t.TempDir(), filepath.Join(t.TempDir(), "moved"))
			_, err := m.ExpandVolume(context.Background(), &mounter.ExpandRequest{Namespace: testNS, VolumeID: "vol1", RequiredBytes: 2 << 30})
			requireUnsafe(t, err, link)
			if n := e.p.CallCount(csitest.MethodNodeExpandVolume); n != 0 {
				t.Errorf("%d NodeExpandVolume calls through a link", n)
			}
		})
	}
}
