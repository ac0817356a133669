package claimgc_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/mounter"
	"github.com/csikit/csikit/state"
)

// The tests of this file pin how the Worker's writes are ordered and
// grouped: a claim's checkpoint before its next step, a node's frees in
// one transaction, and a failed write handled like a failed step.

// orderApplier applies commands through the harness's applier and adds
// each Apply call to the harness's call order, next to the plugin
// calls: "store:<kind> <allocations>", one entry per call (a batch lists
// every command). fail, when set, refuses the calls it matches with its
// error, before they reach the store.
type orderApplier struct {
	state.Applier
	h *harness

	mu   sync.Mutex
	fail func(cmds []state.Command) error
}

func (a *orderApplier) Apply(ctx context.Context, cmd state.Command) (state.Result, error) {
	cmds := []state.Command{cmd}
	if b, ok := cmd.(state.Batch); ok {
		cmds = b.Commands
	}
	a.mu.Lock()
	fail := a.fail
	a.mu.Unlock()
	if fail != nil {
		if err := fail(cmds); err != nil {
			return state.Result{}, err
		}
	}
	res, err := a.Applier.Apply(ctx, cmd)
	if err == nil {
		var parts []string
		for _, c := range cmds {
			parts = append(parts, describe(c))
		}
		a.h.order.add("store:" + strings.Join(parts, ","))
	}
	return res, err
}

func (a *orderApplier) setFail(f func([]state.Command) error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.fail = f
}

// describe names a command of the Worker with its allocation.
func describe(c state.Command) string {
	switch c := c.(type) {
	case state.CheckpointClaim:
		return fmt.Sprintf("checkpoint-%s-%s", c.State, c.AllocationID)
	case state.FreeClaim:
		return "free-" + c.AllocationID
	case state.RecordClaimError:
		return "error-" + c.AllocationID
	}
	return string(c.Kind())
}

// logError is what a host's log answers when it cannot commit: no csi
// sentinel (so the committer does not retry the batch command by
// command), Retryable.
type logError struct{}

func (logError) Error() string         { return "log unavailable: commit timed out" }
func (logError) ErrorClass() csi.Class { return csi.ClassRetryable }

// failOnce refuses the first Apply call that holds a command for which
// match is true, with a logError.
func failOnce(match func(state.Command) bool) func([]state.Command) error {
	var once sync.Once
	return func(cmds []state.Command) error {
		if !slices.ContainsFunc(cmds, match) {
			return nil
		}
		var err error
		once.Do(func() { err = logError{} })
		return err
	}
}

func TestWorker_Release_WritesOfOneNode(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.addVolume("vol", csi.AccessModeMultiNodeMultiWriter)
	h.claim("vol", "a1", "n2")
	h.claim("vol", "a2", "n2")
	h.claim("vol", "a3", "n2")
	oa := &orderApplier{Applier: h.applier, h: h}
	cfg := h.workerConfig()
	cfg.Applier = oa
	w := h.startWorker(cfg, true)
	h.settle(w)
	h.order.reset()

	h.release("a1", "a2", "a3")
	h.settle(w)
	h.requireNoPastClaims("after the release")
	got := h.order.list()
	at := func(entry string) int {
		for i, e := range got {
			if slices.Contains(strings.Split(strings.TrimPrefix(e, "store:"), ","), entry) || e == entry {
				return i
			}
		}
		t.Fatalf("%s missing from %v", entry, got)
		return -1
	}
	ctrl := at("ctrl:" + ctrlUnpublish + ":vol")
	for _, a := range []string{"a1", "a2", "a3"} {
		if cp := at("checkpoint-" + csi.ClaimNodeDetached.String() + "-" + a); cp > ctrl {
			t.Errorf("%s's node checkpoint was written after the ControllerUnpublish: %v", a, got)
		}
	}
	// The detach intent goes before the call; the attachment's removal
	// and the three frees end one step of one node: one transaction.
	if i := at("detach-volume"); i > ctrl {
		t.Errorf("the detach was written after the ControllerUnpublish: %v", got)
	}
	if last := got[len(got)-1]; last != "store:remove-attachment,free-a1,free-a2,free-a3" {
		t.Errorf("last write = %q, want the attachment's removal and the three frees in one batch (calls %v)", last, got)
	}
	if i := at("free-a1"); i < ctrl {
		t.Errorf("a free was written before the ControllerUnpublish: %v", got)
	}
	// A release running alone writes its pass's checkpoints together
	// too, once its node steps are done, with the detach intent of the
	// node whose controller step follows.
	if i := at("checkpoint-" + csi.ClaimNodeDetached.String() + "-a1"); got[i] != "store:checkpoint-node-detached-a1,checkpoint-node-detached-a2,checkpoint-node-detached-a3,detach-volume" {
		t.Errorf("node checkpoints written as %q, want the three and the detach intent in one batch (calls %v)", got[i], got)
	}
	if st := w.Stats(); st.Freed != 3 || st.NodeDetached != 3 || st.ControllerDetached != 3 || st.FailedAttempts != 0 {
		t.Errorf("stats = %+v", st)
	}
	h.requireDetached("vol", "a1", "a2", "a3")
	h.requireNoViolations()
}

func TestWorker_Release_FailedWrite(t *testing.T) {
	tests := []struct {
		name  string
		match func(state.Command) bool
		// state of the claim after the failed write, and the step its
		// error names
		wantState csi.ClaimState
		wantStep  string
		// plugin calls once the retry freed the claim
		wantNodeUnpublish, wantCtrlUnpublish int
	}{
		{
			name: "node checkpoint",
			match: func(c state.Command) bool {
				cp, ok := c.(state.CheckpointClaim)
				return ok && cp.State == csi.ClaimNodeDetached
			},
			wantState: csi.ClaimUnpublishing,
			wantStep:  "node-detach: checkpoint",
			// The retry repeats the node step (the mounter has nothing
			// left to do, so the plugin sees one call) and only then
			// reaches the controller.
			wantNodeUnpublish: 1, wantCtrlUnpublish: 1,
		},
		{
			name: "free",
			match: func(c state.Command) bool {
				_, ok := c.(state.FreeClaim)
				return ok
			},
			wantState: csi.ClaimNodeDetached,
			wantStep:  "free: free the claim",
			// A free that did not land repeats the controller step.
			wantNodeUnpublish: 1, wantCtrlUnpublish: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, harnessOptions{})
			h.addVolume("vol", csi.AccessModeSingleNodeWriter)
			h.claim("vol", "a1", "n3")
			oa := &orderApplier{Applier: h.applier, h: h}
			oa.setFail(failOnce(tt.match))
			cfg := h.workerConfig()
			cfg.Applier = oa
			w := h.startWorker(cfg, true)

			h.release("a1")
			h.settle(w)
			c := h.claimOf("vol", "a1")
			if c == nil || c.State != tt.wantState || !strings.HasPrefix(c.LastError, tt.wantStep) ||
				!strings.Contains(c.LastError, "log unavailable") {
				t.Fatalf("claim after the failed write = %+v, want %s with an error starting %q", c, tt.wantState, tt.wantStep)
			}
			if tt.wantState == csi.ClaimUnpublishing && h.ctrl.CallCount(ctrlUnpublish) != 0 {
				t.Fatal("the controller step ran although the node checkpoint was not written")
			}
			if st := w.Stats(); st.FailedAttempts != 1 || st.Waiting != 1 {
				t.Errorf("stats = %+v, want one failed attempt and the volume waiting for its retry", st)
			}

			h.advance(w, 8*time.Second)
			h.requireNoPastClaims("after the retry")
			n3 := h.nodes["n3"]
			if got := n3.fake.CallCount(nodeUnpublish); got != tt.wantNodeUnpublish {
				t.Errorf("NodeUnpublish calls = %d, want %d", got, tt.wantNodeUnpublish)
			}
			if got := h.ctrl.CallCount(ctrlUnpublish); got != tt.wantCtrlUnpublish {
				t.Errorf("ControllerUnpublish calls = %d, want %d", got, tt.wantCtrlUnpublish)
			}
			h.requireDetached("vol", "a1")
			h.requireNoViolations()
		})
	}
}

// TestWorker_Scan_WaitsForAFreeSlot checks that the Worker lists the
// volumes with past claims only when a scan can start work: while every
// worker slot is busy (here the only one), the releases' own writes do
// not each cost a scan. The first scan (enabling) and the one that finds
// the released volumes may be one or two; then one when the last volume
// is done.
func TestWorker_Scan_WaitsForAFreeSlot(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	var allocs []string
	for i := range 4 {
		vol := fmt.Sprintf("vol%d", i)
		h.addVolume(vol, csi.AccessModeMultiNodeMultiWriter)
		for j := range 2 {
			a := fmt.Sprintf("a%d-%d", i, j)
			h.claim(vol, a, h.nodeIDs[j])
			allocs = append(allocs, a)
		}
	}
	cfg := h.workerConfig()
	cfg.Parallelism = 1
	w := h.startWorker(cfg, true)
	h.settle(w)
	before := w.Stats().Scans

	h.release(allocs...)
	h.settle(w)
	h.requireNoPastClaims("after the release")
	st := w.Stats()
	if st.Writes < 8 {
		t.Fatalf("stats = %+v, want at least 8 writes (4 volumes, 2 claims each)", st)
	}
	if scans := st.Scans - before; scans > 2 {
		t.Errorf("%d scans for one release while the only slot was busy, want at most 2 (stats %+v)", scans, st)
	}
}

// failingWatch is the harness's store whose watch of the volumes with
// past claims fails while fails is above zero: Wait on the volume table
// for a store without state.PastClaimWatcher, or WaitPastClaims (see
// failingPastWatch). waited receives a value at each failure.
type failingWatch struct {
	state.Reader // the harness's store, without PastClaimWatcher
	mem          *state.MemStore
	mu           sync.Mutex
	fails        int
	calls        int
	waited       chan struct{}
}

// failNow counts a wait and reports whether it fails.
func (s *failingWatch) failNow() bool {
	s.mu.Lock()
	s.calls++
	fail := s.fails > 0
	if fail {
		s.fails--
	}
	s.mu.Unlock()
	if fail {
		select {
		case s.waited <- struct{}{}:
		default:
		}
	}
	return fail
}

func (s *failingWatch) Wait(ctx context.Context, table state.Table, minIndex uint64) (uint64, error) {
	if s.failNow() {
		return 0, errors.New("store unavailable")
	}
	return s.Reader.Wait(ctx, table, minIndex)
}

func (s *failingWatch) waits() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// failingPastWatch is a failingWatch with the store's
// state.PastClaimWatcher, whose WaitPastClaims fails instead. A wait on
// the volume table is counted in tableWaits: the Worker should not make
// one.
type failingPastWatch struct {
	*failingWatch
	tableWaits *atomic.Int32
}

func (s failingPastWatch) Wait(ctx context.Context, table state.Table, minIndex uint64) (uint64, error) {
	if table == state.TableVolumes {
		s.tableWaits.Add(1)
	}
	return s.mem.Wait(ctx, table, minIndex)
}

func (s failingPastWatch) PastClaimsIndex() (uint64, error) { return s.mem.PastClaimsIndex() }

func (s failingPastWatch) WaitPastClaims(ctx context.Context, minIndex uint64) (uint64, error) {
	if s.failNow() {
		return 0, errors.New("store unavailable")
	}
	return s.mem.WaitPastClaims(ctx, minIndex)
}

// TestWorker_Watch_FailsThenRetries: a failed watch of the store is
// retried after a backoff, not at once, whichever way the Worker
// watches it.
func TestWorker_Watch_FailsThenRetries(t *testing.T) {
	for _, tc := range []struct {
		name string
		past bool
	}{
		{"past claims watch", true},
		{"volume table watch", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessOptions{})
			h.addVolume("vol", csi.AccessModeSingleNodeWriter)
			h.claim("vol", "a1", "n2")
			fw := &failingWatch{Reader: h.store, mem: h.store, fails: 1, waited: make(chan struct{}, 1)}
			cfg := h.workerConfig()
			cfg.Store = fw
			var tableWaits atomic.Int32
			if tc.past {
				cfg.Store = failingPastWatch{fw, &tableWaits}
			}
			w := h.startWorker(cfg, true)
			<-fw.waited // the first scan is done and the watch failed
			// The retry is scheduled right after; the hang guard is the test's.
			for !w.NextScan().Before(epoch.Add(cfg.ScanInterval)) {
				runtime.Gosched()
			}

			h.release("a1")
			if got := fw.waits(); got != 1 {
				t.Fatalf("watch calls before the retry = %d, want 1: a failed watch is retried after the backoff", got)
			}
			if c := h.claimOf("vol", "a1"); c == nil || c.State != csi.ClaimUnpublishing {
				t.Fatalf("claim before the retry = %+v", c)
			}
			h.advance(w, 8*time.Second) // RetryMax: the backoff is over
			h.requireNoPastClaims("after the retry")
			if st := w.Stats(); st.Freed != 1 {
				t.Errorf("stats = %+v, want the claim freed", st)
			}
			h.requireDetached("vol", "a1")
			if n := tableWaits.Load(); n != 0 {
				t.Errorf("%d waits on the volume table; a store with PastClaimWatcher is watched with WaitPastClaims", n)
			}
		})
	}
}

// TestWorker_Release_FailedCheckpointHoldsOnlyItsClaim checks that a
// node checkpoint that cannot be written stops its own claim only: a
// claim of the same volume on another node, whose node step was done
// already, is detached and freed in the same run.
func TestWorker_Release_FailedCheckpointHoldsOnlyItsClaim(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.addVolume("vol", csi.AccessModeMultiNodeMultiWriter)
	h.claim("vol", "a1", "n1")
	h.claim("vol", "a2", "n2")
	oa := &orderApplier{Applier: h.applier, h: h}
	oa.setFail(failOnce(func(c state.Command) bool {
		cp, ok := c.(state.CheckpointClaim)
		return ok && cp.AllocationID == "a1"
	}))
	cfg := h.workerConfig()
	cfg.Applier = oa
	w := h.startWorker(cfg, false)
	// a2's node has reported its unmount (rpcshim's Server.Unpublish
	// with NodeDetached), so only its controller step is left.
	h.release("a1", "a2")
	if err := h.nodes["n2"].mounter.UnmountVolume(context.Background(), &mounter.UnmountRequest{
		Namespace: testNamespace, VolumeID: "vol", AllocationID: "a2",
	}); err != nil {
		t.Fatal(err)
	}
	h.apply(state.CheckpointClaim{Namespace: testNamespace, VolumeID: "vol", AllocationID: "a2", State: csi.ClaimNodeDetached})
	w.SetEnabled(true)
	h.settle(w)

	if c := h.claimOf("vol", "a2"); c != nil {
		t.Errorf("a2's claim = %+v, want freed in the run in which a1's checkpoint failed", c)
	}
	if c := h.claimOf("vol", "a1"); c == nil || c.State != csi.ClaimUnpublishing || !strings.Contains(c.LastError, "log unavailable") {
		t.Fatalf("a1's claim = %+v, want unpublishing with the write's error", c)
	}
	calls := h.ctrl.CallsTo(ctrlUnpublish)
	if len(calls) != 1 || !strings.Contains(calls[0].String(), "csi-n2") {
		t.Errorf("ControllerUnpublish calls = %v, want one, for csi-n2", calls)
	}
	h.advance(w, 8*time.Second)
	h.requireNoPastClaims("after the retry")
	h.requireDetached("vol", "a1", "a2")
	h.requireNoViolations()
}

// TestWorker_Release_WritesOfOneStep pins how a pass groups its writes:
// one batch for the node checkpoints of every claim of the volume with
// the detach intent of the node the volume leaves (n1), one for the
// frees that need no plugin call (a2 and a3, whose node a4 keeps the
// volume attached to), then the call and the attachment's removal with
// the free after it. Nothing else is written.
func TestWorker_Release_WritesOfOneStep(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.addVolume("vol", csi.AccessModeMultiNodeMultiWriter)
	h.claim("vol", "a1", "n1")
	h.claim("vol", "a2", "n2")
	h.claim("vol", "a3", "n2")
	h.claim("vol", "a4", "n2")
	oa := &orderApplier{Applier: h.applier, h: h}
	cfg := h.workerConfig()
	cfg.Applier = oa
	w := h.startWorker(cfg, true)
	h.settle(w)
	h.order.reset()

	h.release("a1", "a2", "a3")
	h.settle(w)
	var writes []string
	for _, e := range h.order.list() {
		if strings.HasPrefix(e, "store:") || strings.HasPrefix(e, "ctrl:") {
			writes = append(writes, e)
		}
	}
	cp := "checkpoint-" + csi.ClaimNodeDetached.String() + "-"
	want := []string{
		"store:" + cp + "a1," + cp + "a2," + cp + "a3,detach-volume",
		"store:free-a2,free-a3",
		"ctrl:" + ctrlUnpublish + ":vol",
		"store:remove-attachment,free-a1",
	}
	if !slices.Equal(writes, want) {
		t.Errorf("writes and controller calls = %v, want %v", writes, want)
	}
	if st := w.Stats(); st.Writes != 8 || st.Applies != 3 || st.Freed != 3 || st.FailedAttempts != 0 {
		t.Errorf("stats = %+v, want 8 commands in 3 applies and 3 claims freed", st)
	}
	if a := h.volume("vol").Attachments["n2"]; a == nil || a.State != csi.AttachmentAttached {
		t.Errorf("attachment to n2 = %+v, want it kept for a4", a)
	}
	h.requireNoPastClaims("after the release")
	h.requireNoViolations()
}

// TestWorker_Release_ClaimJoinsDuringNodeStep checks the detach intent
// written with the node checkpoint when a claim joins the node while
// the node step runs (after the pass read the volume): the store
// refuses the intent, the checkpoint lands on its own, the released
// claim is freed without a ControllerUnpublish, and the attachment
// stays for the claim that joined.
func TestWorker_Release_ClaimJoinsDuringNodeStep(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.addVolume("vol", csi.AccessModeMultiNodeMultiWriter)
	h.claim("vol", "a1", "n2")
	oa := &orderApplier{Applier: h.applier, h: h}
	cfg := h.workerConfig()
	cfg.Applier = oa
	w := h.startWorker(cfg, true)
	h.settle(w)
	var joined atomic.Bool
	h.nodes["n2"].fake.SetHook(nodeUnpublish, func(ctx context.Context, _ string, _ any) error {
		if joined.Swap(true) {
			return nil
		}
		a := csi.Allocation{ID: "a2", Namespace: testNamespace, NodeID: "n2"}
		if _, err := h.applier.Apply(ctx, state.UpsertAllocations{Allocations: []csi.Allocation{a}}); err != nil {
			return err
		}
		_, err := h.applier.Apply(ctx, state.ClaimVolume{Namespace: testNamespace, VolumeID: "vol", Claim: csi.Claim{
			AllocationID: "a2", NodeID: "n2", Mode: csi.ClaimWrite,
			AccessMode: csi.AccessModeMultiNodeMultiWriter, AttachmentMode: csi.AttachmentModeFileSystem,
		}})
		return err
	})
	h.order.reset()

	h.release("a1")
	h.settle(w)
	if !joined.Load() {
		t.Fatal("the node step did not run")
	}
	var writes []string
	for _, e := range h.order.list() {
		if strings.HasPrefix(e, "store:") || strings.HasPrefix(e, "ctrl:") {
			writes = append(writes, e)
		}
	}
	want := []string{"store:checkpoint-" + csi.ClaimNodeDetached.String() + "-a1", "store:free-a1"}
	if !slices.Equal(writes, want) {
		t.Errorf("writes and controller calls = %v, want %v", writes, want)
	}
	if c := h.claimOf("vol", "a1"); c != nil {
		t.Errorf("a1's claim = %+v, want freed", c)
	}
	if a := h.volume("vol").Attachments["n2"]; a == nil || a.State != csi.AttachmentAttached {
		t.Errorf("attachment to n2 = %+v, want it kept, attached, for a2", a)
	}
	if st := w.Stats(); st.Freed != 1 || st.NodeDetached != 1 || st.ControllerDetached != 0 || st.FailedAttempts != 0 {
		t.Errorf("stats = %+v, want one claim node-detached and freed, no controller step", st)
	}
	h.requireNoViolations()
}
