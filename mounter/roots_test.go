package mounter_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/mounter"
)

// splitRoots gives the env separate staging and target roots, and
// returns a Mounter on them (Root unset).
func splitRoots(t *testing.T, e *env) (m *mounter.Mounter, staging, target string) {
	t.Helper()
	dir := t.TempDir()
	staging, target = filepath.Join(dir, "stage"), filepath.Join(dir, "pub")
	m, err := mounter.New(mounter.Config{StagingRoot: staging, TargetRoot: target, StateDir: e.state, Plugins: e.reg})
	if err != nil {
		t.Fatalf("mounter.New: %v", err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m, staging, target
}

// With StagingRoot and TargetRoot, staging paths are made beneath the
// one and targets beneath the other, and a teardown leaves each root as
// New made it.
func TestMounter_SeparateRoots(t *testing.T) {
	e := newEnv(t, stageCaps)
	withFingerprint(e)
	e.volume("vol1")
	m, staging, target := splitRoots(t, e)

	info := mustMount(t, m, mountReq("vol1", "a1"))
	requireInside(t, filepath.Join(target, "per-alloc"), info.Path)
	stageDir := filepath.Join("staging", testNS, "vol1", mountReq("vol1", "a1").Usage().StageUsage().String())
	if got := files(t, staging); !slices.Contains(got, stageDir) {
		t.Errorf("staging root holds %v, want %s", got, stageDir)
	}
	for _, f := range files(t, target) {
		if strings.HasPrefix(f, "staging"+string(filepath.Separator)) {
			t.Errorf("staging path %s made beneath the target root", f)
		}
	}
	for _, f := range files(t, staging) {
		if strings.HasPrefix(f, "per-alloc"+string(filepath.Separator)) {
			t.Errorf("target path %s made beneath the staging root", f)
		}
	}
	mustUnmount(t, m, unmountReq("vol1", "a1"))
	for _, root := range []string{staging, target} {
		for _, f := range files(t, root) {
			if f != "staging" && f != "per-alloc" {
				t.Errorf("left beneath %s after the unmount: %s", root, f)
			}
		}
	}
}

// A link planted beneath either root on the way to the staging or the
// target path is refused before any plugin call, named under its own
// root.
func TestMounter_SeparateRoots_PlantedSymlink(t *testing.T) {
	for _, tc := range plantings {
		if tc.mountPoint {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, stageCaps)
			withFingerprint(e)
			e.volume("vol1")
			m, staging, target := splitRoots(t, e)
			root := target
			if tc.staging {
				root = staging
			}
			outside := t.TempDir()
			plant(t, root, tc.rel, outside, "")

			_, err := m.MountVolume(context.Background(), mountReq("vol1", "a1"))
			requireUnsafe(t, err, filepath.Join(root, filepath.FromSlash(tc.rel)))
			if calls := e.p.Calls(); len(calls) != 0 {
				t.Errorf("plugin calls made: %v", calls)
			}
			if left := files(t, outside); len(left) != 0 {
				t.Errorf("made through the link, outside the root: %v", left)
			}
		})
	}
}

// Roots that are missing, relative or nested are refused.
func TestNew_SeparateRootsInvalid(t *testing.T) {
	dir := t.TempDir()
	reg := &registry{id: testPlugin}
	for _, tc := range []struct {
		name string
		cfg  mounter.Config
	}{
		{"target only", mounter.Config{TargetRoot: dir}},
		{"staging only", mounter.Config{StagingRoot: dir}},
		{"relative staging", mounter.Config{Root: dir, StagingRoot: "stage"}},
		{"relative target", mounter.Config{Root: dir, TargetRoot: "pub"}},
		{"target inside staging", mounter.Config{StagingRoot: dir, TargetRoot: filepath.Join(dir, "pub")}},
		{"staging inside target", mounter.Config{StagingRoot: filepath.Join(dir, "stage"), TargetRoot: dir}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.StateDir = filepath.Join(t.TempDir(), "state")
			tc.cfg.Plugins = reg
			m, err := mounter.New(tc.cfg)
			if err == nil {
				_ = m.Close()
				t.Fatal("New succeeded")
			}
			if !errors.Is(err, csi.ErrInvalidRequest) {
				t.Errorf("error %v, want ErrInvalidRequest", err)
			}
		})
	}
}
