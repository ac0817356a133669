package mounter_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/mounter"
)

func multiWriter() csi.Capability {
	return csi.Capability{AccessMode: csi.AccessModeMultiNodeMultiWriter, AttachmentMode: csi.AttachmentModeFileSystem}
}

// claimReq is a mount request for a claim with the given mode and
// capability.
func claimReq(vol, alloc string, mode csi.ClaimMode, c csi.Capability) *mounter.MountRequest {
	r := mountReq(vol, alloc)
	r.ClaimMode, r.Capability = mode, c
	return r
}

// TestMounter_MountVolume_ReaderAndWriterShareStage: a read claim and a
// write claim of one multi-writer volume on one node share one stage, as
// the CSI spec wants ("The CO SHALL ensure that there is only one
// `staging_target_path` per volume"), and are published at two targets,
// the reader's read-only. The volume is unstaged only when both have
// unmounted, whichever leaves first.
func TestMounter_MountVolume_ReaderAndWriterShareStage(t *testing.T) {
	for _, tc := range []struct {
		name  string
		first string // the allocation that unmounts first
		// usage: the unmount names the claim's usage rather than the zero
		// Usage.
		usage bool
	}{
		{name: "writer leaves first", first: "writer"},
		{name: "reader leaves first", first: "reader"},
		{name: "reader leaves first, by usage", first: "reader", usage: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, stageCaps)
			ext := e.volume("vol1")
			m := e.mounter()
			mw := mustMount(t, m, claimReq("vol1", "writer", csi.ClaimWrite, multiWriter()))
			mr := mustMount(t, m, claimReq("vol1", "reader", csi.ClaimRead, multiWriter()))
			requireCounts(t, e.p, [4]int{1, 2, 0, 0}, "after both mounts")

			if mw.Usage.String() != "w-mnmw-fs" || mr.Usage.String() != "r-mnmw-fs" {
				t.Errorf("usages %s and %s, want w-mnmw-fs and r-mnmw-fs", mw.Usage, mr.Usage)
			}
			if mw.Usage.StageUsage() != mr.Usage.StageUsage() || mw.Usage.StageUsage().String() != "mnmw-fs" {
				t.Errorf("stage usages %s and %s, want both mnmw-fs", mw.Usage.StageUsage(), mr.Usage.StageUsage())
			}
			wantStaging := filepath.Join(e.root, "staging", testNS, "vol1", "mnmw-fs")
			vs, _ := e.p.Volume(ext)
			if _, ok := vs.Staged[wantStaging]; len(vs.Staged) != 1 || !ok {
				t.Fatalf("staged at %v, want only %s", slices.Collect(maps.Keys(vs.Staged)), wantStaging)
			}
			for _, tt := range []struct {
				mi       *mounter.MountInfo
				target   string
				readonly bool
			}{
				{mw, filepath.Join(e.root, "per-alloc", "writer", "vol1", "w-mnmw-fs"), false},
				{mr, filepath.Join(e.root, "per-alloc", "reader", "vol1", "r-mnmw-fs"), true},
			} {
				if tt.mi.Path != tt.target {
					t.Errorf("%s mounted at %s, want %s", tt.mi.Usage, tt.mi.Path, tt.target)
				}
				pub, ok := vs.Published[tt.mi.Path]
				if !ok {
					t.Fatalf("%s not published at %s", tt.mi.Usage, tt.mi.Path)
				}
				if pub.Readonly != tt.readonly || pub.StagingPath != wantStaging {
					t.Errorf("%s published readonly=%v from %s; want readonly=%v from %s",
						tt.mi.Usage, pub.Readonly, pub.StagingPath, tt.readonly, wantStaging)
				}
			}

			second, firstInfo := "reader", mw
			if tc.first == "reader" {
				second, firstInfo = "writer", mr
			}
			first := unmountReq("vol1", tc.first)
			if tc.usage {
				first.Usage = firstInfo.Usage
			}
			mustUnmount(t, m, first)
			requireCounts(t, e.p, [4]int{1, 2, 1, 0}, "after the first unmount")
			if vs, _ := e.p.Volume(ext); len(vs.Staged) != 1 || len(vs.Published) != 1 {
				t.Fatalf("after the first unmount: %d staged, %d published; want 1 and 1", len(vs.Staged), len(vs.Published))
			}
			if has, _ := m.HasMount(context.Background(), testNS, "vol1", second); !has {
				t.Errorf("HasMount(%s) false while it is mounted", second)
			}
			mustUnmount(t, m, unmountReq("vol1", second))
			requireCounts(t, e.p, [4]int{1, 2, 2, 1}, "after the second unmount")
			if vs, _ := e.p.Volume(ext); vs.InUse() {
				t.Errorf("volume still in use: %+v", vs)
			}
			if _, err := os.Stat(wantStaging); !os.IsNotExist(err) {
				t.Errorf("staging directory %s left behind: %v", wantStaging, err)
			}
			requireNoStateLeft(t, e.state)
			e.p.RequireNoViolations(t)
		})
	}
}

// TestMounter_MountVolume_StageConflict: while a volume is staged under
// one (access, attachment) pair for some allocations, a mount under
// another pair is refused with a Retryable csi.ErrVolumeInUse, with no
// plugin call and nothing written, also after a restart. Once those
// allocations have unmounted, the other pair mounts.
func TestMounter_MountVolume_StageConflict(t *testing.T) {
	e := newEnv(t, stageCaps)
	ext := e.volume("vol1")
	m := e.mounter()
	mustMount(t, m, claimReq("vol1", "w1", csi.ClaimWrite, multiWriter()))
	mustMount(t, m, claimReq("vol1", "r1", csi.ClaimRead, multiWriter()))

	block := multiWriter()
	block.AttachmentMode = csi.AttachmentModeBlockDevice
	conflicts := []struct {
		name string
		req  *mounter.MountRequest
	}{
		{"another access mode", claimReq("vol1", "r2", csi.ClaimRead, multiReader())},
		{"another attachment mode", claimReq("vol1", "w2", csi.ClaimWrite, block)},
		{"another mode for a current user", claimReq("vol1", "r1", csi.ClaimRead, multiReader())},
	}
	check := func(t *testing.T, m *mounter.Mounter) {
		for _, c := range conflicts {
			t.Run(c.name, func(t *testing.T) {
				calls := len(e.p.Calls())
				before := snapshot(t, e)
				_, err := m.MountVolume(context.Background(), c.req)
				if !errors.Is(err, csi.ErrVolumeInUse) {
					t.Fatalf("MountVolume = %v, want ErrVolumeInUse", err)
				}
				if csi.Classify(err) != csi.ClassRetryable || !csi.IsRetryable(err) {
					t.Errorf("error class %s, want retryable", csi.Classify(err))
				}
				for _, s := range []string{"vol1", c.req.AllocationID, "mnmw-fs", "w1 (w-mnmw-fs)", "r1 (r-mnmw-fs)",
					c.req.Usage().String(), "retry once"} {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not mention %q", err, s)
					}
				}
				if n := len(e.p.Calls()); n != calls {
					t.Errorf("%d plugin calls for a refused mount: %v", n-calls, e.p.Calls()[calls:])
				}
				if after := snapshot(t, e); !slices.Equal(before, after) {
					t.Errorf("files changed:\nbefore %v\nafter  %v", before, after)
				}
				if has, _ := m.HasMount(context.Background(), testNS, "vol1", c.req.AllocationID); has != (c.req.AllocationID == "r1") {
					t.Errorf("HasMount(%s) = %v after a refused mount", c.req.AllocationID, has)
				}
			})
		}
	}
	t.Run("refused", func(t *testing.T) { check(t, m) })
	// A restarted agent knows the stage from its state directory.
	m = e.mounter()
	t.Run("refused after a restart", func(t *testing.T) { check(t, m) })

	// The stage's users unmount one by one; the conflict lasts until the
	// last has gone.
	mustUnmount(t, m, unmountReq("vol1", "w1"))
	if _, err := m.MountVolume(context.Background(), conflicts[0].req); !errors.Is(err, csi.ErrVolumeInUse) ||
		!strings.Contains(err.Error(), "allocation r1 (r-mnmw-fs)") {
		t.Fatalf("MountVolume with one user left = %v, want ErrVolumeInUse naming r1", err)
	}
	mustUnmount(t, m, unmountReq("vol1", "r1"))
	requireCounts(t, e.p, [4]int{1, 2, 2, 1}, "after the first users left")

	mr := mustMount(t, m, conflicts[0].req)
	mustMount(t, m, claimReq("vol1", "r3", csi.ClaimRead, multiReader()))
	requireCounts(t, e.p, [4]int{2, 4, 2, 1}, "after the readers mounted")
	vs, _ := e.p.Volume(ext)
	wantStaging := filepath.Join(e.root, "staging", testNS, "vol1", "mnro-fs")
	if _, ok := vs.Staged[wantStaging]; len(vs.Staged) != 1 || !ok || !vs.Published[mr.Path].Readonly {
		t.Fatalf("model after the readers mounted: staged at %v, reader %+v; want one stage at %s and a read-only publish",
			slices.Collect(maps.Keys(vs.Staged)), vs.Published[mr.Path], wantStaging)
	}
	// Now the writers' mode is the one refused.
	if _, err := m.MountVolume(context.Background(), claimReq("vol1", "w1", csi.ClaimWrite, multiWriter())); !errors.Is(err, csi.ErrVolumeInUse) {
		t.Fatalf("writer mount while readers hold the stage = %v, want ErrVolumeInUse", err)
	}
	mustUnmount(t, m, unmountReq("vol1", "r2"))
	mustUnmount(t, m, unmountReq("vol1", "r3"))
	requireCounts(t, e.p, [4]int{2, 4, 4, 2}, "after every allocation left")
	if vs, _ := e.p.Volume(ext); vs.InUse() {
		t.Errorf("volume still in use: %+v", vs)
	}
	e.p.RequireNoViolations(t)
}

// TestMounter_MountVolume_UnusedStageTornDown: a stage that no
// allocation uses any more (its mount failed after the stage, or its
// teardown was interrupted) does not block another mode: the mount
// unstages it first, with no lifecycle violation.
func TestMounter_MountVolume_UnusedStageTornDown(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, e *env, m *mounter.Mounter)
		want  [4]int // calls by the mount under the other mode
	}{
		{
			name: "publish refused after the stage",
			setup: func(t *testing.T, e *env, m *mounter.Mounter) {
				e.p.FailNext(csitest.MethodNodePublishVolume, codes.FailedPrecondition, 1)
				if _, err := m.MountVolume(context.Background(), claimReq("vol1", "w1", csi.ClaimWrite, multiWriter())); err == nil {
					t.Fatal("mount succeeded through a failing publish")
				}
			},
			want: [4]int{1, 1, 0, 1},
		},
		{
			name: "stage unavailable",
			setup: func(t *testing.T, e *env, m *mounter.Mounter) {
				e.p.FailNext(csitest.MethodNodeStageVolume, codes.Unavailable, 1)
				if _, err := m.MountVolume(context.Background(), claimReq("vol1", "w1", csi.ClaimWrite, multiWriter())); err == nil {
					t.Fatal("mount succeeded through a failing stage")
				}
			},
			want: [4]int{1, 1, 0, 1},
		},
		{
			name: "unpublish failed",
			setup: func(t *testing.T, e *env, m *mounter.Mounter) {
				mustMount(t, m, claimReq("vol1", "w1", csi.ClaimWrite, multiWriter()))
				e.p.FailNext(csitest.MethodNodeUnpublishVolume, codes.Internal, 1)
				if err := m.UnmountVolume(context.Background(), unmountReq("vol1", "w1")); err == nil {
					t.Fatal("unmount succeeded through a failing unpublish")
				}
			},
			want: [4]int{1, 1, 1, 1},
		},
		{
			name: "unstage failed",
			setup: func(t *testing.T, e *env, m *mounter.Mounter) {
				mustMount(t, m, claimReq("vol1", "w1", csi.ClaimWrite, multiWriter()))
				e.p.FailNext(csitest.MethodNodeUnstageVolume, codes.Internal, 1)
				if err := m.UnmountVolume(context.Background(), unmountReq("vol1", "w1")); err == nil {
					t.Fatal("unmount succeeded through a failing unstage")
				}
			},
			want: [4]int{1, 1, 0, 1},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, stageCaps)
			ext := e.volume("vol1")
			m := e.mounter()
			tc.setup(t, e, m)
			e.p.ResetCalls()
			r := claimReq("vol1", "r1", csi.ClaimRead, multiReader())
			mustMount(t, m, r)
			requireCounts(t, e.p, tc.want, "the mount under the other mode")
			vs, _ := e.p.Volume(ext)
			if len(vs.Staged) != 1 || len(vs.Published) != 1 {
				t.Fatalf("model: %d staged, %d published; want 1 and 1", len(vs.Staged), len(vs.Published))
			}
			if _, err := os.Stat(filepath.Join(e.root, "staging", testNS, "vol1", "mnmw-fs")); !os.IsNotExist(err) {
				t.Errorf("the old staging directory is left: %v", err)
			}
			if has, _ := m.HasMount(context.Background(), testNS, "vol1", "w1"); has {
				t.Errorf("HasMount(w1) true after its stage was torn down")
			}
			mustUnmount(t, m, unmountReq("vol1", "r1"))
			if vs, _ := e.p.Volume(ext); vs.InUse() {
				t.Errorf("volume still in use: %+v", vs)
			}
			requireNoStateLeft(t, e.state)
			e.p.RequireNoViolations(t)
		})
	}
}

// lostReply passes NodePublishVolume to the plugin and then reports
// Unavailable, as gRPC does when the connection drops after the plugin
// acted but before its answer arrived.
type lostReply struct{ plugin.NodeClient }

func (c lostReply) NodePublishVolume(ctx context.Context, r *plugin.NodePublishRequest) error {
	if err := c.NodeClient.NodePublishVolume(ctx, r); err != nil {
		return err
	}
	return &csi.RPCError{Method: "NodePublishVolume", Code: csi.CodeUnavailable, Message: "connection lost"}
}

// TestMounter_MountVolume_UnavailablePublish: Unavailable from
// NodePublishVolume is Retryable, yet the plugin may have published (a
// connection lost mid-call reads as Unavailable). The mount fails
// retryable, the allocation counts as mounted, and the unmount
// unpublishes it and unstages the volume.
func TestMounter_MountVolume_UnavailablePublish(t *testing.T) {
	for _, tc := range []struct {
		name     string
		setup    func(e *env)
		acted    bool // the plugin published despite the error
		retry    bool // the host retries the mount before unmounting
		unmounts [4]int
	}{
		{name: "refused", setup: func(e *env) { e.p.FailNext(csitest.MethodNodePublishVolume, codes.Unavailable, 1) },
			unmounts: [4]int{1, 1, 1, 1}},
		{name: "refused, then retried", setup: func(e *env) { e.p.FailNext(csitest.MethodNodePublishVolume, codes.Unavailable, 1) },
			retry: true, unmounts: [4]int{1, 2, 1, 1}},
		{name: "acted, reply lost", setup: func(e *env) {
			e.reg.wrap = func(c plugin.NodeClient) plugin.NodeClient { return lostReply{c} }
		}, acted: true, unmounts: [4]int{1, 1, 1, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, stageCaps)
			ext := e.volume("vol1")
			m := e.mounter()
			tc.setup(e)
			_, err := m.MountVolume(context.Background(), mountReq("vol1", "a1"))
			if csi.Classify(err) != csi.ClassRetryable || csi.CodeOf(err) != csi.CodeUnavailable {
				t.Fatalf("MountVolume = %v (class %s), want a retryable Unavailable", err, csi.Classify(err))
			}
			requireCounts(t, e.p, [4]int{1, 1, 0, 0}, "after the failed mount")
			if vs, _ := e.p.Volume(ext); (len(vs.Published) == 1) != tc.acted {
				t.Fatalf("model has %d publications; the plugin acted: %v", len(vs.Published), tc.acted)
			}
			for _, mm := range []*mounter.Mounter{m, e.reread()} {
				if has, err := mm.HasMount(context.Background(), testNS, "vol1", "a1"); err != nil || !has {
					t.Fatalf("HasMount after an Unavailable publish = %v, %v; want true (also after a restart)", has, err)
				}
			}
			e.reg.wrap = nil
			if tc.retry {
				mustMount(t, m, mountReq("vol1", "a1"))
			}
			mustUnmount(t, m, unmountReq("vol1", "a1"))
			requireCounts(t, e.p, tc.unmounts, "after the unmount")
			if vs, _ := e.p.Volume(ext); vs.InUse() {
				t.Errorf("volume still in use: %+v", vs)
			}
			if has, _ := m.HasMount(context.Background(), testNS, "vol1", "a1"); has {
				t.Errorf("HasMount true after the unmount")
			}
			requireNoStateLeft(t, e.state)
			e.p.RequireNoViolations(t)
		})
	}
}

// TestNew_StateVersion1 takes over a node whose state a format-1
// mounter wrote (one stage per full usage, at .../staging/<ns>/<vol>/
// <usage>): the volume is not staged again, a reader of the same mode
// publishes from the old staging path, the last user unstages it there,
// and the record moves to the current format.
func TestNew_StateVersion1(t *testing.T) {
	e := newEnv(t, stageCaps)
	ext := e.volume("vol1")
	ctx := context.Background()
	oldStaging := filepath.Join(e.root, "staging", testNS, "vol1", "w-snmw-fs")
	oldTarget := filepath.Join(e.root, "per-alloc", "a1", "vol1", "w-snmw-fs")
	capab := mountReq("vol1", "a1").Capability
	// What the old mounter did, by hand.
	for _, d := range []string{oldStaging, filepath.Dir(oldTarget)} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.reg.client.NodeStageVolume(ctx, &plugin.NodeStageRequest{ExternalID: ext, StagingPath: oldStaging, Capability: capab}); err != nil {
		t.Fatal(err)
	}
	if err := e.reg.client.NodePublishVolume(ctx, &plugin.NodePublishRequest{ExternalID: ext, StagingPath: oldStaging,
		TargetPath: oldTarget, Capability: capab}); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(e.state, "volumes", testNS, "vol1.json")
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		t.Fatal(err)
	}
	v1 := `{"Version":1,"Namespace":"default","VolumeID":"vol1","ExternalID":"` + ext + `","PluginID":"` + testPlugin + `",
"Usages":{"w-snmw-fs":{"Stage":"staged","StagingPath":"` + oldStaging + `",
"Allocations":{"a1":{"State":"published","TargetPath":"` + oldTarget + `"}}}}}`
	if err := os.WriteFile(file, []byte(v1), 0o600); err != nil {
		t.Fatal(err)
	}
	e.p.ResetCalls()

	m := e.mounter()
	if has, err := m.HasMount(ctx, testNS, "vol1", "a1"); err != nil || !has {
		t.Fatalf("HasMount from a version 1 file = %v, %v", has, err)
	}
	mi := mustMount(t, m, claimReq("vol1", "a2", csi.ClaimRead, capab))
	requireCounts(t, e.p, [4]int{0, 1, 0, 0}, "a reader of the same mode joins the old stage")
	vs, _ := e.p.Volume(ext)
	if pub, ok := vs.Published[mi.Path]; !ok || pub.StagingPath != oldStaging || !pub.Readonly {
		t.Fatalf("reader published as %+v, want read-only from %s", pub, oldStaging)
	}
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Errorf("the version 1 file is left: %v", err)
	}
	if rec := dbRecords(t, e.state)["default/vol1"]; !strings.Contains(rec, `"Version":3`) || !strings.Contains(rec, `"snmw-fs"`) {
		t.Errorf("record not moved to version 3: %s", rec)
	}
	// Another mode waits for both users, old and new.
	if _, err := m.MountVolume(ctx, claimReq("vol1", "a3", csi.ClaimRead, multiReader())); !errors.Is(err, csi.ErrVolumeInUse) {
		t.Errorf("another mode while the old stage has users = %v, want ErrVolumeInUse", err)
	}
	mustUnmount(t, m, unmountReq("vol1", "a1"))
	requireCounts(t, e.p, [4]int{0, 1, 1, 0}, "after the old user left")
	mustUnmount(t, m, unmountReq("vol1", "a2"))
	requireCounts(t, e.p, [4]int{0, 1, 2, 1}, "after the last user left")
	if vs, _ := e.p.Volume(ext); vs.InUse() {
		t.Errorf("volume still in use: %+v", vs)
	}
	if _, err := os.Stat(oldStaging); !os.IsNotExist(err) {
		t.Errorf("old staging directory left: %v", err)
	}
	requireNoStateLeft(t, e.state)
	e.p.RequireNoViolations(t)
}

// snapshot lists the files under the root and the state directory with
// the state files' contents.
func snapshot(t *testing.T, e *env) []string {
	t.Helper()
	out := files(t, e.root)
	for _, f := range files(t, e.state) {
		data, _ := os.ReadFile(filepath.Join(e.state, f))
		out = append(out, f+"="+string(data))
	}
	return out
}

// TestMounter_Concurrent_OneStage runs readers and writers of one
// multi-writer volume, and readers asking another access mode, in
// parallel: whatever the interleaving, the volume is never staged at a
// second path while staged at one (a hook checks each NodeStageVolume),
// a refused mount is ErrVolumeInUse, and every stage is undone. Run it
// with -race.
func TestMounter_Concurrent_OneStage(t *testing.T) {
	e := newEnv(t, stageCaps)
	ext := e.volume("shared")
	m := e.mounter()
	var mu sync.Mutex
	var bad []string
	e.p.SetHook(csitest.MethodNodeStageVolume, func(_ context.Context, _ string, req any) error {
		path := req.(interface{ GetStagingTargetPath() string }).GetStagingTargetPath()
		vs, _ := e.p.Volume(ext)
		for other := range vs.Staged {
			if other != path {
				mu.Lock()
				bad = append(bad, fmt.Sprintf("staged at %s while staged at %s", path, other))
				mu.Unlock()
			}
		}
		return nil
	})
	const workers, rounds = 24, 4
	var refused atomic.Int64
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() {
			for r := range rounds {
				alloc := fmt.Sprintf("alloc-%d-%d", i, r)
				var req *mounter.MountRequest
				switch i % 3 {
				case 0:
					req = claimReq("shared", alloc, csi.ClaimWrite, multiWriter())
				case 1:
					req = claimReq("shared", alloc, csi.ClaimRead, multiWriter())
				default:
					req = claimReq("shared", alloc, csi.ClaimRead, multiReader())
				}
				_, err := m.MountVolume(context.Background(), req)
				switch {
				case errors.Is(err, csi.ErrVolumeInUse):
					refused.Add(1)
					continue
				case err != nil:
					t.Error(err)
					return
				}
				if err := m.UnmountVolume(context.Background(), unmountReq("shared", alloc)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	mu.Lock()
	for _, b := range bad {
		t.Error(b)
	}
	mu.Unlock()
	got := counts(e.p)
	t.Logf("calls (stage, publish, unpublish, unstage) = %v, %d mounts refused", got, refused.Load())
	if got[0] != got[3] || got[1] != got[2] || got[1]+int(refused.Load()) != workers*rounds {
		t.Errorf("calls (stage, publish, unpublish, unstage) = %v with %d refused mounts: want as many unstages as stages, "+
			"unpublishes as publishes, and %d mounts in all", got, refused.Load(), workers*rounds)
	}
	if vs, _ := e.p.Volume(ext); vs.InUse() {
		t.Errorf("volume still in use: %+v", vs)
	}
	requireNoStateLeft(t, e.state)
	e.p.RequireNoViolations(t)
}
