//go:build linux

package mounter_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/csikit/csikit/csi"
)

// TestMounter_MountVolume_StateDiskFull: when the state database
// cannot grow (its file system is full), a mount fails before any
// plugin call, Retryable, and tracks nothing. Needs root, for a small
// tmpfs.
func TestMounter_MountVolume_StateDiskFull(t *testing.T) {
	e := newEnv(t, stageCaps)
	e.volume("vol1")
	if err := os.MkdirAll(e.state, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", e.state, "tmpfs", 0, "size=256k"); err != nil {
		t.Skipf("cannot mount a tmpfs for the state directory (needs root): %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(e.state, syscall.MNT_DETACH) })
	m := e.mounter()
	// Fill what is left.
	fill, err := os.Create(filepath.Join(e.state, "fill"))
	if err != nil {
		t.Fatal(err)
	}
	for _, err = fill.Write(make([]byte, 4096)); err == nil; _, err = fill.Write(make([]byte, 4096)) {
	}
	_ = fill.Close()
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filling the state file system: %v", err)
	}
	// Mount allocations until the database needs a page it cannot
	// get (it reuses freed pages first).
	for i := range 256 {
		req := mountReq("vol1", fmt.Sprintf("a%d", i))
		before := counts(e.p)
		_, err := m.MountVolume(context.Background(), req)
		if err == nil {
			continue
		}
		if !csi.IsRetryable(err) || !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("mount on a full disk = %v (%s), want a Retryable ENOSPC", err, csi.Classify(err))
		}
		requireCounts(t, e.p, before, "after a mount that could not write its intent")
		if has, err := m.HasMount(context.Background(), testNS, "vol1", req.AllocationID); err != nil || has {
			t.Errorf("HasMount after the failed mount = %v, %v; want false", has, err)
		}
		// With room again, the retry mounts.
		if err := os.Remove(filepath.Join(e.state, "fill")); err != nil {
			t.Fatal(err)
		}
		mustMount(t, m, req)
		return
	}
	t.Fatal("256 mounts fit in a full state file system")
}
