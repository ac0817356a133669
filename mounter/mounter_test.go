package mounter_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/clock"
	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/mounter"
)

var stageCaps = csi.NodeCapabilities{StageUnstageVolume: true}

func TestMounter_MountVolume_SharedStage(t *testing.T) {
	for _, tc := range []struct {
		name string
		info bool // the registry has a fingerprint; else the mounter asks NodeGetCapabilities
	}{
		{name: "capabilities from fingerprint", info: true},
		{name: "capabilities asked", info: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, stageCaps)
			if tc.info {
				e.reg.info = &csi.PluginInfo{PluginID: testPlugin, Type: csi.PluginTypeNode,
					NodeInfo: &csi.NodeInfo{ID: "n1", Capabilities: stageCaps}}
			}
			ext := e.volume("vol1")
			m := e.mounter()
			allocs := []string{"a1", "a2", "a3"}
			var paths []string
			for _, a := range allocs {
				mi := mustMount(t, m, mountReq("vol1", a))
				requireInside(t, e.root, mi.Path)
				if fi, err := os.Stat(mi.Path); err != nil || !fi.IsDir() {
					t.Fatalf("target %s is not a directory: %v", mi.Path, err)
				}
				paths = append(paths, mi.Path)
			}
			requireCounts(t, e.p, [4]int{1, 3, 0, 0}, "after three mounts")
			wantCaps := 1
			if tc.info {
				wantCaps = 0
			}
			if n := e.p.CallCount(csitest.MethodNodeGetCapabilities); n != wantCaps {
				t.Errorf("NodeGetCapabilities called %d times, want %d", n, wantCaps)
			}
			vs, _ := e.p.Volume(ext)
			if len(vs.Staged) != 1 || len(vs.Published) != 3 {
				t.Fatalf("model: %d staged, %d published; want 1 and 3", len(vs.Staged), len(vs.Published))
			}
			for _, pub := range vs.Published {
				requireInside(t, e.root, pub.StagingPath)
				if !slices.Contains(paths, pub.TargetPath) {
					t.Errorf("published at %s, not a returned path", pub.TargetPath)
				}
			}

			// A repeated mount is idempotent and calls nothing.
			if mi := mustMount(t, m, mountReq("vol1", "a2")); mi.Path != paths[1] {
				t.Errorf("repeated mount returned %s, want %s", mi.Path, paths[1])
			}
			requireCounts(t, e.p, [4]int{1, 3, 0, 0}, "after a repeated mount")

			mustUnmount(t, m, unmountReq("vol1", "a1"))
			requireCounts(t, e.p, [4]int{1, 3, 1, 0}, "after the first unmount")
			mustUnmount(t, m, unmountReq("vol1", "a2"))
			requireCounts(t, e.p, [4]int{1, 3, 2, 0}, "after the second unmount")
			mustUnmount(t, m, unmountReq("vol1", "a3"))
			requireCounts(t, e.p, [4]int{1, 3, 3, 1}, "after the third unmount")

			// Idempotent: nothing is left, so nothing is called.
			mustUnmount(t, m, unmountReq("vol1", "a3"))
			requireCounts(t, e.p, [4]int{1, 3, 3, 1}, "after a repeated unmount")

			vs, _ = e.p.Volume(ext)
			if vs.InUse() {
				t.Errorf("volume still in use in the model: %+v", vs)
			}
			if left := files(t, e.root); len(left) != 2 { // staging and per-alloc
				t.Errorf("left under the root: %v", left)
			}
			requireNoStateLeft(t, e.state)
			e.p.RequireNoViolations(t)
		})
	}
}

func TestMounter_MountVolume_NoStage(t *testing.T) {
	e := newEnv(t, csi.NodeCapabilities{})
	ext := e.volume("vol1")
	m := e.mounter()
	mi := mustMount(t, m, mountReq("vol1", "a1"))
	mustMount(t, m, mountReq("vol1", "a2"))
	requireCounts(t, e.p, [4]int{0, 2, 0, 0}, "after two mounts")
	vs, _ := e.p.Volume(ext)
	for _, pub := range vs.Published {
		if pub.StagingPath != "" {
			t.Errorf("publish got staging path %q from a plugin that does not stage", pub.StagingPath)
		}
	}
	if _, err := os.Stat(filepath.Join(e.root, "staging", testNS)); !os.IsNotExist(err) {
		t.Errorf("a staging directory was created for a plugin that does not stage: %v", err)
	}
	requireInside(t, e.root, mi.Path)
	mustUnmount(t, m, unmountReq("vol1", "a1"))
	mustUnmount(t, m, unmountReq("vol1", "a2"))
	requireCounts(t, e.p, [4]int{0, 2, 2, 0}, "after two unmounts")
	e.p.RequireNoViolations(t)
}

func TestMounter_MountVolume_Block(t *testing.T) {
	e := newEnv(t, stageCaps)
	ext := e.volume("vol1")
	m := e.mounter()
	r := mountReq("vol1", "a1")
	r.Capability.AttachmentMode = csi.AttachmentModeBlockDevice
	mi := mustMount(t, m, r)
	if !mi.Block {
		t.Errorf("MountInfo.Block is false for a block claim")
	}
	fi, err := os.Lstat(mi.Path)
	if err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("block target %s is not a file: %v", mi.Path, err)
	}
	vs, _ := e.p.Volume(ext)
	for _, st := range vs.Staged {
		if fi, err := os.Stat(st.Path); err != nil || !fi.IsDir() {
			t.Errorf("staging path %s of a block volume is not a directory: %v", st.Path, err)
		}
	}
	mustUnmount(t, m, &mounter.UnmountRequest{Namespace: testNS, VolumeID: "vol1", AllocationID: "a1", Usage: mi.Usage})
	requireCounts(t, e.p, [4]int{1, 1, 1, 1}, "after mount and unmount")
	if _, err := os.Lstat(mi.Path); !os.IsNotExist(err) {
		t.Errorf("block target still exists: %v", err)
	}
	e.p.RequireNoViolations(t)
}

// TestMounter_MountVolume_Usages mounts a read claim on a
// multi-node-reader-only mode and a write claim on a multi-writer mode of
// one volume: two access modes, so two stage usages. A plugin that does
// not stage publishes both at once; one that stages takes them one
// after the other (see TestMounter_MountVolume_StageConflict). Each
// claim gets its own target, and the read claim is published read-only.
func TestMounter_MountVolume_Usages(t *testing.T) {
	for _, tc := range []struct {
		name    string
		caps    csi.NodeCapabilities
		overlap bool
		want    [4]int
	}{
		{name: "publish only, overlapping", caps: csi.NodeCapabilities{}, overlap: true, want: [4]int{0, 2, 2, 0}},
		{name: "staged, one after the other", caps: stageCaps, want: [4]int{2, 2, 2, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.caps)
			ext := e.volume("vol1")
			m := e.mounter()
			r := mountReq("vol1", "reader")
			r.ClaimMode, r.Capability = csi.ClaimRead, multiReader()
			w := mountReq("vol1", "writer")
			w.Capability.AccessMode = csi.AccessModeMultiNodeMultiWriter

			mr := mustMount(t, m, r)
			if !tc.overlap {
				vs, _ := e.p.Volume(ext)
				if !vs.Published[mr.Path].Readonly {
					t.Errorf("read claim published read-write")
				}
				mustUnmount(t, m, unmountReq("vol1", "reader"))
			}
			mw := mustMount(t, m, w)
			if mr.Usage == mw.Usage || mr.Path == mw.Path {
				t.Fatalf("read and write claims share usage %s or path %s", mr.Usage, mr.Path)
			}
			if mr.Usage.String() != "r-mnro-fs" || mw.Usage.String() != "w-mnmw-fs" {
				t.Errorf("usages %s and %s, want r-mnro-fs and w-mnmw-fs", mr.Usage, mw.Usage)
			}
			vs, _ := e.p.Volume(ext)
			if vs.Published[mw.Path].Readonly {
				t.Errorf("write claim published read-only")
			}
			if tc.overlap {
				if !vs.Published[mr.Path].Readonly {
					t.Errorf("read claim published read-write")
				}
				mustUnmount(t, m, unmountReq("vol1", "reader"))
			}
			mustUnmount(t, m, unmountReq("vol1", "writer"))
			requireCounts(t, e.p, tc.want, "after both claims came and went")
			e.p.RequireNoViolations(t)
		})
	}
}

func TestMounter_MountVolume_PassThrough(t *testing.T) {
	e := newEnv(t, stageCaps)
	ext := e.volume("vol1")
	m := e.mounter()
	secrets := csi.Secrets{"password": "hunter2-very-secret"}
	var mu sync.Mutex
	seen := map[string]map[string]string{}
	hook := func(_ context.Context, method string, req any) error {
		type withSecrets interface{ GetSecrets() map[string]string }
		mu.Lock()
		defer mu.Unlock()
		seen[method] = req.(withSecrets).GetSecrets()
		return nil
	}
	e.p.SetHook(csitest.MethodNodeStageVolume, hook)
	e.p.SetHook(csitest.MethodNodePublishVolume, hook)

	vol := &csi.Volume{
		ID: "vol1", Namespace: testNS, ExternalID: ext, PluginID: testPlugin,
		Capabilities: []csi.Capability{fsWriter()},
		MountOptions: &csi.MountOptions{FSType: "ext4", MountFlags: []string{"noatime"}},
		Secrets:      secrets,
		Context:      map[string]string{"pool": "p1"},
		Attachments: map[string]*csi.Attachment{"node1": {NodeID: "node1", State: csi.AttachmentAttached,
			PublishContext: map[string]string{"devicePath": "/dev/fake-1"}}},
	}
	claim := &csi.Claim{
		AllocationID: "a1", NodeID: "node1", Mode: csi.ClaimWrite,
		AccessMode: csi.AccessModeSingleNodeWriter, AttachmentMode: csi.AttachmentModeFileSystem,
		MountOptions: &csi.MountOptions{MountFlags: []string{"ro", "nodev"}},
	}
	req, err := mounter.NewMountRequest(vol, claim)
	if err != nil {
		t.Fatal(err)
	}
	mi := mustMount(t, m, req)

	mu.Lock()
	for _, method := range []string{csitest.MethodNodeStageVolume, csitest.MethodNodePublishVolume} {
		if seen[method]["password"] != "hunter2-very-secret" {
			t.Errorf("%s received secrets %v", method, csi.Secrets(seen[method]))
		}
	}
	mu.Unlock()

	vs, _ := e.p.Volume(ext)
	pub := vs.Published[mi.Path]
	wantMO := &csi.MountOptions{FSType: "ext4", MountFlags: []string{"ro", "nodev"}}
	for name, got := range map[string]struct {
		pc, vc map[string]string
		mo     *csi.MountOptions
	}{
		"publish": {pub.PublishContext, pub.VolumeContext, pub.MountOptions},
		"stage":   {vs.Staged[pub.StagingPath].PublishContext, vs.Staged[pub.StagingPath].VolumeContext, vs.Staged[pub.StagingPath].MountOptions},
	} {
		if got.pc["devicePath"] != "/dev/fake-1" {
			t.Errorf("%s: publish context %v", name, got.pc)
		}
		if got.vc["pool"] != "p1" {
			t.Errorf("%s: volume context %v", name, got.vc)
		}
		if got.mo == nil || got.mo.FSType != wantMO.FSType || !slices.Equal(got.mo.MountFlags, wantMO.MountFlags) {
			t.Errorf("%s: mount options %+v, want %+v", name, got.mo, wantMO)
		}
	}
	if pub.Capability != fsWriter() || pub.Readonly {
		t.Errorf("publish capability %s readonly %v", pub.Capability, pub.Readonly)
	}
	// Neither the call log nor the state directory holds the secret.
	for _, c := range e.p.Calls() {
		if strings.Contains(fmt.Sprint(c.Request), "hunter2") {
			t.Errorf("call log holds the secret: %v", c)
		}
	}
	for _, f := range files(t, e.state) {
		data, _ := os.ReadFile(filepath.Join(e.state, f))
		if strings.Contains(string(data), "hunter2") {
			t.Errorf("state file %s holds the secret", f)
		}
	}
	// A failing publish does not leak the secret into the error.
	e.p.FailNext(csitest.MethodNodePublishVolume, codes.Internal, 1)
	req2, _ := mounter.NewMountRequest(vol, &csi.Claim{AllocationID: "a2", NodeID: "node1", Mode: csi.ClaimWrite,
		AccessMode: csi.AccessModeSingleNodeWriter, AttachmentMode: csi.AttachmentModeFileSystem})
	if _, err := m.MountVolume(context.Background(), req2); err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("MountVolume error %v: want a failure without the secret", err)
	}
	mustUnmount(t, m, unmountReq("vol1", "a2"))
	mustUnmount(t, m, unmountReq("vol1", "a1"))
	e.p.RequireNoViolations(t)
}

func TestMounter_MountVolume_Restart(t *testing.T) {
	e := newEnv(t, stageCaps)
	ext := e.volume("vol1")
	m1 := e.mounter()
	mi := mustMount(t, m1, mountReq("vol1", "a1"))
	requireCounts(t, e.p, [4]int{1, 1, 0, 0}, "before the restart")

	// The agent restarts: a new Mounter on the same state directory.
	m2 := e.mounter()
	has, err := m2.HasMount(context.Background(), testNS, "vol1", "a1")
	if err != nil || !has {
		t.Fatalf("HasMount after restart = %v, %v; want true", has, err)
	}
	mi2 := mustMount(t, m2, mountReq("vol1", "a2"))
	requireCounts(t, e.p, [4]int{1, 2, 0, 0}, "a mount after the restart does not stage again")
	// The mount's success was noted (store.note), which a restart of
	// the agent does not lose: a1 is known published and a repeated
	// mount calls nothing.
	if again := mustMount(t, m2, mountReq("vol1", "a1")); again.Path != mi.Path {
		t.Errorf("re-mount after restart returned %s, want %s", again.Path, mi.Path)
	}
	requireCounts(t, e.p, [4]int{1, 2, 0, 0}, "a repeated mount after the restart")
	mustUnmount(t, m2, unmountReq("vol1", "a1"))
	vs, _ := e.p.Volume(ext)
	if len(vs.Staged) != 1 {
		t.Fatalf("volume unstaged while a2 still uses it: %+v", vs)
	}
	mustUnmount(t, m2, unmountReq("vol1", "a2"))
	if got := counts(e.p); got[0] != 1 || got[3] != 1 {
		t.Errorf("stage/unstage counts %v: want one stage and one unstage", got)
	}
	vs, _ = e.p.Volume(ext)
	if vs.InUse() {
		t.Errorf("volume still in use: %+v", vs)
	}
	if _, err := os.Stat(mi2.Path); !os.IsNotExist(err) {
		t.Errorf("target %s still exists: %v", mi2.Path, err)
	}
	e.p.RequireNoViolations(t)
}

// TestMounter_Crash takes a copy of the state directory while a plugin
// call is in flight, which is what a crash at that moment leaves, lets
// the call complete behind the crashed mounter's back, and then starts a
// new mounter on the copy.
func TestMounter_Crash(t *testing.T) {
	for _, tc := range []struct {
		name string
		// method: the call during which the agent dies; it and the calls
		// before it are carried out by the plugin, none after it.
		method string
		// snapshot: the call at whose arrival the state is copied, if not
		// method: an earlier one, as when an OS crash loses the unsynced
		// writes made since (the stage's success).
		snapshot string
		// remount: the host retries the mount after the restart before
		// unmounting.
		remount bool
		// hasMount: what the restarted mounter says of the allocation.
		hasMount bool
		want     [4]int // calls after the restart
	}{
		// The publish intent is written with the stage's: a crash during
		// the stage leaves a possible stage and a possible publication,
		// which the unmount undoes (the plugin accepts the unpublish of a
		// target it never published).
		{name: "during stage, then unmount", method: csitest.MethodNodeStageVolume, hasMount: true, want: [4]int{0, 0, 1, 1}},
		{name: "during stage, then mount and unmount", method: csitest.MethodNodeStageVolume, hasMount: true, remount: true, want: [4]int{1, 1, 1, 1}},
		{name: "during publish, then unmount", method: csitest.MethodNodePublishVolume, hasMount: true, want: [4]int{0, 0, 1, 1}},
		// The stage's success was noted before the publish: not staged
		// again.
		{name: "during publish, then mount and unmount", method: csitest.MethodNodePublishVolume, hasMount: true, remount: true, want: [4]int{0, 1, 1, 1}},
		// An OS crash lost that note: the file still says "staging".
		{name: "during publish, stage's note lost, then unmount", method: csitest.MethodNodePublishVolume,
			snapshot: csitest.MethodNodeStageVolume, hasMount: true, want: [4]int{0, 0, 1, 1}},
		{name: "during publish, stage's note lost, then mount and unmount", method: csitest.MethodNodePublishVolume,
			snapshot: csitest.MethodNodeStageVolume, hasMount: true, remount: true, want: [4]int{1, 1, 1, 1}},
		{name: "during unpublish, then unmount", method: csitest.MethodNodeUnpublishVolume, hasMount: true, want: [4]int{0, 0, 1, 1}},
		// The mount's note ("published") lost: the unmount's synced intent
		// does not depend on it.
		{name: "during unpublish, mount's note lost, then unmount", method: csitest.MethodNodeUnpublishVolume,
			snapshot: csitest.MethodNodePublishVolume, hasMount: true, want: [4]int{0, 0, 1, 1}},
		{name: "during unstage, then unmount", method: csitest.MethodNodeUnstageVolume, hasMount: true, want: [4]int{0, 0, 1, 1}},
		{name: "during unstage, then mount and unmount", method: csitest.MethodNodeUnstageVolume, hasMount: true, remount: true, want: [4]int{1, 1, 1, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, stageCaps)
			ext := e.volume("vol1")
			crashed := filepath.Join(t.TempDir(), "state")
			snapshot := tc.snapshot
			if snapshot == "" {
				snapshot = tc.method
			}
			// The state is copied at the arrival of the snapshot call; the
			// agent dies at the arrival of tc.method, which the plugin
			// still carries out; every later call of the crashed mounter
			// fails, as if it had died there.
			var dead atomic.Bool
			lifecycle := []string{csitest.MethodNodeStageVolume, csitest.MethodNodePublishVolume,
				csitest.MethodNodeUnpublishVolume, csitest.MethodNodeUnstageVolume}
			for _, method := range lifecycle {
				e.p.SetHook(method, func(_ context.Context, method string, _ any) error {
					if dead.Load() {
						return status.Error(codes.Unavailable, "the caller crashed")
					}
					if method == snapshot {
						copyDir(t, e.state, crashed)
					}
					if method == tc.method {
						dead.Store(true)
					}
					return nil
				})
			}
			m1 := e.mounter()
			_, _ = m1.MountVolume(context.Background(), mountReq("vol1", "a1"))
			if !dead.Load() {
				_ = m1.UnmountVolume(context.Background(), unmountReq("vol1", "a1"))
			}
			if !dead.Load() {
				t.Fatalf("%s was never called", tc.method)
			}
			for _, method := range lifecycle {
				e.p.SetHook(method, nil)
			}
			e.p.ResetCalls()

			m2, err := mounter.New(mounter.Config{Root: e.root, StateDir: crashed, Plugins: e.reg})
			if err != nil {
				t.Fatalf("New on the crashed state: %v", err)
			}
			has, err := m2.HasMount(context.Background(), testNS, "vol1", "a1")
			if err != nil || has != tc.hasMount {
				t.Fatalf("HasMount after the crash = %v, %v; want %v", has, err, tc.hasMount)
			}
			if tc.remount {
				mustMount(t, m2, mountReq("vol1", "a1"))
			}
			mustUnmount(t, m2, unmountReq("vol1", "a1"))
			requireCounts(t, e.p, tc.want, "after the restart")
			if vs, _ := e.p.Volume(ext); vs.InUse() {
				t.Errorf("volume still in use after the restart: %+v", vs)
			}
			if has, _ := m2.HasMount(context.Background(), testNS, "vol1", "a1"); has {
				t.Errorf("HasMount after the unmount is true")
			}
			if left := stateFiles(t, crashed); len(left) != 0 {
				t.Errorf("state files left: %v", left)
			}
			e.p.RequireNoViolations(t)
		})
	}
}

// TestMounter_Crash_DuringStage_OtherAllocation: the agent dies during
// the NodeStageVolume of a first mount, whose record holds the stage
// intent and the publish intent together. After the restart another
// allocation mounts the volume: it stages again (idempotently) and
// publishes; its unmount leaves the stage alone, since the first
// allocation may be published; the first allocation's unmount then
// unpublishes a target that was never published (the plugin accepts)
// and unstages.
func TestMounter_Crash_DuringStage_OtherAllocation(t *testing.T) {
	e := newEnv(t, stageCaps)
	ext := e.volume("vol1")
	crashed := filepath.Join(t.TempDir(), "state")
	e.p.SetHook(csitest.MethodNodeStageVolume, func(context.Context, string, any) error {
		copyDir(t, e.state, crashed)
		return status.Error(codes.Unavailable, "the caller crashed")
	})
	m1 := e.mounter()
	if _, err := m1.MountVolume(context.Background(), mountReq("vol1", "a1")); err == nil {
		t.Fatal("mount succeeded through a crash")
	}
	e.p.SetHook(csitest.MethodNodeStageVolume, nil)
	e.p.ResetCalls()

	m2, err := mounter.New(mounter.Config{Root: e.root, StateDir: crashed, Plugins: e.reg})
	if err != nil {
		t.Fatal(err)
	}
	if has, err := m2.HasMount(context.Background(), testNS, "vol1", "a1"); err != nil || !has {
		t.Fatalf("HasMount(a1) after a crash during its stage = %v, %v; want true", has, err)
	}
	mustMount(t, m2, mountReq("vol1", "a2"))
	requireCounts(t, e.p, [4]int{1, 1, 0, 0}, "a2's mount stages the volume of unknown stage")
	mustUnmount(t, m2, unmountReq("vol1", "a2"))
	requireCounts(t, e.p, [4]int{1, 1, 1, 0}, "a2's unmount, while a1 may be published")
	if vs, _ := e.p.Volume(ext); len(vs.Staged) != 1 {
		t.Fatalf("volume unstaged while a1 may use it: %+v", vs)
	}
	mustUnmount(t, m2, unmountReq("vol1", "a1"))
	requireCounts(t, e.p, [4]int{1, 1, 2, 1}, "a1's unmount")
	if vs, _ := e.p.Volume(ext); vs.InUse() {
		t.Errorf("volume still in use: %+v", vs)
	}
	if left := stateFiles(t, crashed); len(left) != 0 {
		t.Errorf("state files left: %v", left)
	}
	e.p.RequireNoViolations(t)
}

// TestMounter_MountVolume_DeadlineExceeded: the plugin answers
// DeadlineExceeded, then the agent restarts before anyone unmounts.
func TestMounter_MountVolume_DeadlineExceeded(t *testing.T) {
	for _, method := range []string{csitest.MethodNodeStageVolume, csitest.MethodNodePublishVolume} {
		t.Run(method, func(t *testing.T) {
			e := newEnv(t, stageCaps)
			e.volume("vol1")
			e.p.FailNext(method, codes.DeadlineExceeded, 1)
			m1 := e.mounter()
			_, err := m1.MountVolume(context.Background(), mountReq("vol1", "a1"))
			if csi.Classify(err) != csi.ClassUncertain {
				t.Fatalf("MountVolume error %v has class %s, want uncertain", err, csi.Classify(err))
			}
			m2 := e.mounter()
			e.p.ResetCalls()
			mustUnmount(t, m2, unmountReq("vol1", "a1"))
			want := [4]int{0, 0, 0, 1} // a stage of unknown outcome is undone
			if method == csitest.MethodNodePublishVolume {
				want = [4]int{0, 0, 1, 1}
			}
			requireCounts(t, e.p, want, "unmount after the restart")
			e.p.RequireNoViolations(t)
		})
	}
}

// TestMounter_MountVolume_UncertainPublish: NodePublishVolume outlives
// the caller's context (the plugin's latency is longer than the caller
// waits); the mounter must assume the publish happened.
func TestMounter_MountVolume_UncertainPublish(t *testing.T) {
	fake := clock.NewFake(time.Unix(0, 0))
	e := newEnv(t, stageCaps, func(c *csitest.Config) { c.Clock = fake })
	ext := e.volume("vol1")
	m := e.mounter()
	// The fake's clock is never advanced, so the call waits until the
	// caller gives up.
	e.p.SetLatency(csitest.MethodNodePublishVolume, time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := m.MountVolume(ctx, mountReq("vol1", "a1"))
		done <- err
	}()
	// Give up only once the publish is inside the plugin.
	if err := fake.BlockUntil(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	cancel()
	err := <-done
	if csi.Classify(err) != csi.ClassUncertain || !errors.Is(err, context.Canceled) {
		t.Fatalf("MountVolume error %v (class %s), want an uncertain context error", err, csi.Classify(err))
	}
	if has, err := m.HasMount(context.Background(), testNS, "vol1", "a1"); err != nil || !has {
		t.Fatalf("HasMount after an uncertain publish = %v, %v; want true", has, err)
	}
	e.p.SetLatency(csitest.MethodNodePublishVolume, 0)
	mustUnmount(t, m, unmountReq("vol1", "a1"))
	requireCounts(t, e.p, [4]int{1, 1, 1, 1}, "unmount after an uncertain publish")
	if vs, _ := e.p.Volume(ext); vs.InUse() {
		t.Errorf("volume still in use: %+v", vs)
	}
	e.p.RequireNoViolations(t)
}

func TestMounter_MountVolume_Failures(t *testing.T) {
	for _, tc := range []struct {
		name      string
		method    string
		code      codes.Code
		class     csi.Class
		hasMount  bool
		afterFail [4]int // calls after the failed mount
		unmount   [4]int // calls after the unmount that follows
	}{
		// A Retryable or Uncertain error may hide a call that acted: the
		// stage or the publish stays recorded and the unmount undoes it.
		{name: "stage unavailable", method: csitest.MethodNodeStageVolume, code: codes.Unavailable,
			class: csi.ClassRetryable, afterFail: [4]int{1, 0, 0, 0}, unmount: [4]int{1, 0, 0, 1}},
		{name: "stage resource exhausted", method: csitest.MethodNodeStageVolume, code: codes.ResourceExhausted,
			class: csi.ClassRetryable, afterFail: [4]int{1, 0, 0, 0}, unmount: [4]int{1, 0, 0, 1}},
		{name: "publish unavailable", method: csitest.MethodNodePublishVolume, code: codes.Unavailable,
			class: csi.ClassRetryable, hasMount: true, afterFail: [4]int{1, 1, 0, 0}, unmount: [4]int{1, 1, 1, 1}},
		{name: "publish aborted", method: csitest.MethodNodePublishVolume, code: codes.Aborted,
			class: csi.ClassRetryable, hasMount: true, afterFail: [4]int{1, 1, 0, 0}, unmount: [4]int{1, 1, 1, 1}},
		{name: "publish canceled", method: csitest.MethodNodePublishVolume, code: codes.Canceled,
			class: csi.ClassUncertain, hasMount: true, afterFail: [4]int{1, 1, 0, 0}, unmount: [4]int{1, 1, 1, 1}},
		// A Final error is the plugin's refusal: nothing to undo but an
		// earlier successful stage.
		{name: "stage internal", method: csitest.MethodNodeStageVolume, code: codes.Internal,
			class: csi.ClassFinal, afterFail: [4]int{1, 0, 0, 0}, unmount: [4]int{1, 0, 0, 0}},
		{name: "stage invalid argument", method: csitest.MethodNodeStageVolume, code: codes.InvalidArgument,
			class: csi.ClassFinal, afterFail: [4]int{1, 0, 0, 0}, unmount: [4]int{1, 0, 0, 0}},
		{name: "publish failed precondition", method: csitest.MethodNodePublishVolume, code: codes.FailedPrecondition,
			class: csi.ClassFinal, afterFail: [4]int{1, 1, 0, 0}, unmount: [4]int{1, 1, 0, 1}},
		{name: "publish invalid argument", method: csitest.MethodNodePublishVolume, code: codes.InvalidArgument,
			class: csi.ClassFinal, afterFail: [4]int{1, 1, 0, 0}, unmount: [4]int{1, 1, 0, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, stageCaps)
			e.volume("vol1")
			m := e.mounter()
			e.p.FailNext(tc.method, tc.code, 1)
			_, err := m.MountVolume(context.Background(), mountReq("vol1", "a1"))
			if err == nil || csi.Classify(err) != tc.class {
				t.Fatalf("MountVolume error %v (class %s), want class %s", err, csi.Classify(err), tc.class)
			}
			if !strings.Contains(err.Error(), "vol1") || !strings.Contains(err.Error(), "a1") {
				t.Errorf("error %q does not name the volume and allocation", err)
			}
			requireCounts(t, e.p, tc.afterFail, "after the failed mount")
			if has, _ := m.HasMount(context.Background(), testNS, "vol1", "a1"); has != tc.hasMount {
				t.Errorf("HasMount = %v, want %v", has, tc.hasMount)
			}
			// A fresh mounter reads the same conclusion from disk.
			m2 := e.reread()
			if has, _ := m2.HasMount(context.Background(), testNS, "vol1", "a1"); has != tc.hasMount {
				t.Errorf("HasMount after reload = %v, want %v", has, tc.hasMount)
			}
			mustUnmount(t, m, unmountReq("vol1", "a1"))
			requireCounts(t, e.p, tc.unmount, "after the unmount")
			// A retry of the mount now succeeds.
			mustMount(t, m, mountReq("vol1", "a1"))
			mustUnmount(t, m, unmountReq("vol1", "a1"))
			e.p.RequireNoViolations(t)
		})
	}
}

// A first mount creates the target's parent while the plugin stages.
// When that fails (here a file stands where the allocation's directory
// goes), the stage is done but the publish cannot be: the mount fails
// without NodePublishVolume, nothing counts as mounted, and the
// allocation's unmount tears the unused stage down.
func TestMounter_MountVolume_TargetParentFails(t *testing.T) {
	e := newEnv(t, stageCaps)
	e.volume("vol1")
	m := e.mounter()
	blocker := filepath.Join(e.root, "per-alloc", "a1")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := m.MountVolume(context.Background(), mountReq("vol1", "a1"))
	if err == nil || !strings.Contains(err.Error(), "create the target's parent directory") {
		t.Fatalf("MountVolume error %v, want the target's parent directory named", err)
	}
	requireCounts(t, e.p, [4]int{1, 0, 0, 0}, "after the failed mount")
	for _, mm := range []*mounter.Mounter{m, e.reread()} { // and from disk
		if has, err := mm.HasMount(context.Background(), testNS, "vol1", "a1"); err != nil || has {
			t.Errorf("HasMount = %v, %v after the failed mount; want false", has, err)
		}
	}
	mustUnmount(t, m, unmountReq("vol1", "a1"))
	requireCounts(t, e.p, [4]int{1, 0, 0, 1}, "after the unmount")
	if err := os.Remove(blocker); err != nil {
		t.Fatal(err)
	}
	mustMount(t, m, mountReq("vol1", "a1"))
	mustUnmount(t, m, unmountReq("vol1", "a1"))
	requireCounts(t, e.p, [4]int{2, 1, 1, 2}, "after a mount and unmount that worked")
	e.p.RequireNoViolations(t)
}

func TestMounter_UnmountVolume_TeardownFailure(t *testing.T) {
	e := newEnv(t, stageCaps)
	e.volume("vol1")
	m := e.mounter()
	mustMount(t, m, mountReq("vol1", "a1"))
	e.p.FailNext(csitest.MethodNodeUnstageVolume, codes.Internal, 1)
	if err := m.UnmountVolume(context.Background(), unmountReq("vol1", "a1")); err == nil {
		t.Fatal("UnmountVolume succeeded despite a failing NodeUnstageVolume")
	}
	// The retry resumes: the unpublish is done, only the unstage is left.
	mustUnmount(t, m, unmountReq("vol1", "a1"))
	requireCounts(t, e.p, [4]int{1, 1, 1, 2}, "after the retried unmount")
	// NotFound during teardown counts as done.
	mustMount(t, m, mountReq("vol1", "a2"))
	e.p.FailNext(csitest.MethodNodeUnpublishVolume, codes.NotFound, 1)
	e.p.FailNext(csitest.MethodNodeUnstageVolume, codes.NotFound, 1)
	mustUnmount(t, m, unmountReq("vol1", "a2"))
	if has, _ := m.HasMount(context.Background(), testNS, "vol1", "a2"); has {
		t.Error("HasMount true after a NotFound teardown")
	}
	e.p.RequireNoViolations(t)
}

func TestMounter_UnmountVolume_NeverMounted(t *testing.T) {
	e := newEnv(t, stageCaps)
	e.reg.setMissing(true) // not even the plugin is needed
	m := e.mounter()
	mustUnmount(t, m, unmountReq("vol1", "a1"))
	if n := len(e.p.Calls()); n != 0 {
		t.Errorf("%d plugin calls for an unmount of nothing", n)
	}
}

func TestMounter_PluginMissing(t *testing.T) {
	e := newEnv(t, stageCaps)
	e.volume("vol1")
	m := e.mounter()
	e.reg.setMissing(true)
	_, err := m.MountVolume(context.Background(), mountReq("vol1", "a1"))
	if !errors.Is(err, csi.ErrPluginNotFound) || !csi.IsRetryable(err) {
		t.Fatalf("MountVolume error %v: want a retryable ErrPluginNotFound", err)
	}
	for _, s := range []string{"vol1", "a1", testPlugin} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not name %s", err, s)
		}
	}

	e.reg.setMissing(false)
	mustMount(t, m, mountReq("vol1", "a1"))
	e.reg.setMissing(true)
	err = m.UnmountVolume(context.Background(), unmountReq("vol1", "a1"))
	if !errors.Is(err, csi.ErrPluginNotFound) || !csi.IsRetryable(err) {
		t.Fatalf("UnmountVolume error %v: want a retryable ErrPluginNotFound", err)
	}
	if has, _ := m.HasMount(context.Background(), testNS, "vol1", "a1"); !has {
		t.Error("a failed unmount forgot the mount")
	}
	e.reg.setMissing(false)
	mustUnmount(t, m, unmountReq("vol1", "a1"))
	requireCounts(t, e.p, [4]int{1, 1, 1, 1}, "after the plugin came back")
	e.p.RequireNoViolations(t)
}

// TestMounter_Concurrent runs 50 goroutines mounting and unmounting
// allocations on a few shared volumes and some private ones; run it with
// -race.
func TestMounter_Concurrent(t *testing.T) {
	e := newEnv(t, stageCaps)
	m := e.mounter()
	const workers, rounds = 50, 3
	vols := []string{"shared-0", "shared-1", "shared-2"}
	for i := range workers {
		vols = append(vols, fmt.Sprintf("own-%d", i))
	}
	for _, v := range vols {
		e.volume(v)
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for i := range workers {
		wg.Go(func() {
			for r := range rounds {
				vol := vols[i%3]
				if r == 1 {
					vol = fmt.Sprintf("own-%d", i)
				}
				alloc := fmt.Sprintf("alloc-%d-%d", i, r)
				if _, err := m.MountVolume(context.Background(), mountReq(vol, alloc)); err != nil {
					errs <- err
					return
				}
				if has, err := m.HasMount(context.Background(), testNS, vol, alloc); err != nil || !has {
					errs <- fmt.Errorf("HasMount(%s, %s) = %v, %v", vol, alloc, has, err)
					return
				}
				if err := m.UnmountVolume(context.Background(), unmountReq(vol, alloc)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for _, v := range vols {
		if vs, _ := e.p.Volume("ext-" + v); vs.InUse() {
			t.Errorf("volume %s still in use: %+v", v, vs)
		}
	}
	got := counts(e.p)
	if got[1] != workers*rounds || got[2] != workers*rounds || got[0] != got[3] {
		t.Errorf("calls (stage, publish, unpublish, unstage) = %v: want %d publishes and unpublishes and as many unstages as stages",
			got, workers*rounds)
	}
	requireNoStateLeft(t, e.state)
	e.p.RequireNoViolations(t)
}

// TestMounter_Concurrent_Overlapping keeps allocations of a shared
// volume mounted while others come and go: the volume must stay staged
// until the very last one leaves.
func TestMounter_Concurrent_Overlapping(t *testing.T) {
	e := newEnv(t, stageCaps)
	ext := e.volume("shared")
	m := e.mounter()
	mustMount(t, m, mountReq("shared", "anchor"))
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			alloc := fmt.Sprintf("alloc-%d", i)
			if _, err := m.MountVolume(context.Background(), mountReq("shared", alloc)); err != nil {
				t.Error(err)
				return
			}
			if err := m.UnmountVolume(context.Background(), unmountReq("shared", alloc)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	requireCounts(t, e.p, [4]int{1, 51, 50, 0}, "while the anchor holds the volume")
	mustUnmount(t, m, unmountReq("shared", "anchor"))
	requireCounts(t, e.p, [4]int{1, 51, 51, 1}, "after the anchor left")
	if vs, _ := e.p.Volume(ext); vs.InUse() {
		t.Errorf("volume still in use: %+v", vs)
	}
	e.p.RequireNoViolations(t)
}

func TestMounter_MountVolume_ExternalIDChange(t *testing.T) {
	e := newEnv(t, stageCaps)
	e.volume("vol1")
	m := e.mounter()
	mustMount(t, m, mountReq("vol1", "a1"))
	r := mountReq("vol1", "a2")
	r.ExternalID = "something-else"
	if _, err := m.MountVolume(context.Background(), r); !errors.Is(err, csi.ErrInvalidRequest) {
		t.Fatalf("MountVolume with another external ID: %v, want ErrInvalidRequest", err)
	}
	mustUnmount(t, m, unmountReq("vol1", "a1"))
	e.p.RequireNoViolations(t)
}

func TestMounter_HasMount_Waits(t *testing.T) {
	e := newEnv(t, stageCaps)
	e.volume("vol1")
	m := e.mounter()
	arrived, release := make(chan struct{}), make(chan struct{})
	e.p.SetHook(csitest.MethodNodePublishVolume, func(context.Context, string, any) error {
		close(arrived)
		<-release
		return nil
	})
	done := make(chan error, 1)
	go func() {
		_, err := m.MountVolume(context.Background(), mountReq("vol1", "a1"))
		done <- err
	}()
	<-arrived
	// The volume is locked by the mount: a caller that will not wait
	// gets its context error, not a half-done answer.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := m.HasMount(ctx, testNS, "vol1", "a1"); !errors.Is(err, context.Canceled) {
		t.Errorf("HasMount on a busy volume with a canceled ctx: %v", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mustUnmount(t, m, unmountReq("vol1", "a1"))
}

// TestMounter_Crash_CompletedByNextMount: the agent dies during the
// NodeUnpublishVolume of one allocation while another still uses the
// volume. After the restart the next mount on the volume finishes that
// teardown, and the volume is unstaged only when the last user leaves.
func TestMounter_Crash_CompletedByNextMount(t *testing.T) {
	e := newEnv(t, stageCaps)
	ext := e.volume("vol1")
	m1 := e.mounter()
	mustMount(t, m1, mountReq("vol1", "a1"))
	mustMount(t, m1, mountReq("vol1", "a2"))
	crashed := filepath.Join(t.TempDir(), "state")
	e.p.SetHook(csitest.MethodNodeUnpublishVolume, func(context.Context, string, any) error {
		copyDir(t, e.state, crashed)
		// The plugin never gets to unpublish: the node went down first.
		return status.Error(codes.Unavailable, "node going down")
	})
	if err := m1.UnmountVolume(context.Background(), unmountReq("vol1", "a1")); err == nil {
		t.Fatal("unmount succeeded through a failing plugin")
	}
	e.p.SetHook(csitest.MethodNodeUnpublishVolume, nil)
	e.p.ResetCalls()

	m2, err := mounter.New(mounter.Config{Root: e.root, StateDir: crashed, Plugins: e.reg})
	if err != nil {
		t.Fatal(err)
	}
	mustMount(t, m2, mountReq("vol1", "a3"))
	requireCounts(t, e.p, [4]int{0, 1, 1, 0}, "the next mount finishes a1's teardown")
	if has, _ := m2.HasMount(context.Background(), testNS, "vol1", "a1"); has {
		t.Error("a1 still tracked after its teardown was finished")
	}
	vs, _ := e.p.Volume(ext)
	if len(vs.Published) != 2 {
		t.Errorf("%d publications, want a2 and a3", len(vs.Published))
	}
	mustUnmount(t, m2, unmountReq("vol1", "a2"))
	mustUnmount(t, m2, unmountReq("vol1", "a3"))
	requireCounts(t, e.p, [4]int{0, 1, 3, 1}, "after the last user left")
	if vs, _ := e.p.Volume(ext); vs.InUse() {
		t.Errorf("volume still in use: %+v", vs)
	}
	e.p.RequireNoViolations(t)
}
