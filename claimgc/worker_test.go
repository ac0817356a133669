package claimgc_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"

	"github.com/csikit/csikit/claimgc"
	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/mounter"
	"github.com/csikit/csikit/state"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const (
	nodeUnpublish = csitest.MethodNodeUnpublishVolume
	nodeUnstage   = csitest.MethodNodeUnstageVolume
	ctrlUnpublish = csitest.MethodControllerUnpublishVolume
)

func TestWorker_Release_NodeThenControllerThenFree(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	for i, node := range h.nodeIDs {
		vol := "vol" + node
		h.addVolume(vol, csi.AccessModeSingleNodeWriter)
		h.claim(vol, "alloc"+string(rune('a'+i)), node)
	}
	obs := &recorder{}
	cfg := h.workerConfig()
	cfg.Observer = obs
	w := h.startWorker(cfg, false)
	h.release("alloca", "allocb", "allocc")
	h.advance(w, 3*time.Second) // the leader takes over 3s after the allocations stopped
	w.SetEnabled(true)
	h.settle(w)

	h.requireNoPastClaims("after release")
	for i, node := range h.nodeIDs {
		vol := "vol" + node
		want := []string{
			node + ":" + nodeUnpublish + ":" + vol,
			node + ":" + nodeUnstage + ":" + vol,
			"ctrl:" + ctrlUnpublish + ":" + vol,
		}
		var got []string
		for _, c := range h.order.list() {
			if strings.HasSuffix(c, ":"+vol) {
				got = append(got, c)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("calls for %s = %v, want %v", vol, got, want)
		}
		h.requireDetached(vol, "alloc"+string(rune('a'+i)))
		if v, err := h.store.Volume(testNamespace, vol); err != nil || v.InUse() {
			t.Errorf("volume %s still in use (err %v)", vol, err)
		}
	}
	h.requireNoViolations()
	if got := h.ctrl.CallCount(csitest.MethodControllerPublishVolume); got != 3 {
		t.Errorf("ControllerPublish calls = %d, want the 3 of the setup: releasing never publishes", got)
	}

	st := w.Stats()
	if st.Freed != 3 || st.NodeDetached != 3 || st.ControllerDetached != 3 || st.FailedAttempts != 0 {
		t.Errorf("stats = %+v", st)
	}
	if got := obs.freedCount(); got != 3 {
		t.Errorf("observer saw %d frees, want 3", got)
	}
	if obs.maxLatency() != 3*time.Second || st.FreeLatencyMax != 3*time.Second {
		t.Errorf("free latency = %v (stats %v), want 3s on the fake clock", obs.maxLatency(), st.FreeLatencyMax)
	}
	obs.requireDepthChanges(t)
}

func TestWorker_Release_NodePluginMissingRetriesWithBackoff(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.addVolume("vol", csi.AccessModeSingleNodeWriter)
	h.claim("vol", "a1", "n2")
	n2 := h.nodes["n2"]
	n2.registry.setRegistered(false)
	w := h.startWorker(h.workerConfig(), true)

	h.release("a1")
	h.settle(w)
	c := h.claimOf("vol", "a1")
	if c == nil || c.State != csi.ClaimUnpublishing {
		t.Fatalf("claim after a release with the node plugin missing = %+v, want unpublishing", c)
	}
	if !strings.Contains(c.LastError, "plugin not found") {
		t.Errorf("LastError = %q, want it to name the missing plugin", c.LastError)
	}
	if st := w.Stats(); st.FailedAttempts != 1 || st.Waiting != 1 {
		t.Errorf("stats = %+v, want 1 failed attempt and the volume waiting", st)
	}

	// The retry waits for the backoff: nothing happens before it.
	h.advance(w, 500*time.Millisecond)
	if st := w.Stats(); st.FailedAttempts != 1 {
		t.Errorf("retried before the backoff: %+v", st)
	}
	h.advance(w, 8*time.Second)
	if st := w.Stats(); st.FailedAttempts != 2 {
		t.Errorf("after the first backoff: %+v, want a second failed attempt", st)
	}

	n2.registry.setRegistered(true)
	h.advance(w, 8*time.Second)
	h.requireNoPastClaims("once the plugin registered")
	if got := n2.fake.CallCount(nodeUnpublish); got != 1 {
		t.Errorf("NodeUnpublish calls = %d, want 1 (none while the plugin was missing)", got)
	}
	h.requireDetached("vol", "a1")
	h.requireNoViolations()
}

func TestWorker_Release_ControllerUnavailableTwice(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.addVolume("vol", csi.AccessModeSingleNodeWriter)
	h.claim("vol", "a1", "n3")
	h.ctrl.FailNext(ctrlUnpublish, codes.Unavailable, 2)
	w := h.startWorker(h.workerConfig(), true)

	h.release("a1")
	h.settle(w)
	if c := h.claimOf("vol", "a1"); c == nil || c.State != csi.ClaimNodeDetached || c.LastError == "" {
		t.Fatalf("claim after a failed controller step = %+v, want node-detached with LastError", c)
	}
	h.advance(w, 8*time.Second)
	if c := h.claimOf("vol", "a1"); c == nil || c.State != csi.ClaimNodeDetached {
		t.Fatalf("claim after the second failure = %+v", c)
	}
	h.advance(w, 8*time.Second)
	h.requireNoPastClaims("after the controller came back")
	if got := h.ctrl.CallCount(ctrlUnpublish); got != 3 {
		t.Errorf("ControllerUnpublish calls = %d, want 3", got)
	}
	n3 := h.nodes["n3"]
	if u, s := n3.fake.CallCount(nodeUnpublish), n3.fake.CallCount(nodeUnstage); u != 1 || s != 1 {
		t.Errorf("node calls = %d unpublish, %d unstage; the node step must not repeat", u, s)
	}
	if st := w.Stats(); st.FailedAttempts != 2 || st.Freed != 1 {
		t.Errorf("stats = %+v", st)
	}
	h.requireDetached("vol", "a1")
	h.requireNoViolations()
}

// crashApplier applies commands, and after the first checkpoint to
// NodeDetached (alone or in a batch) it "crashes" the worker: cancels
// its Run before the next step can start.
type crashApplier struct {
	state.Applier
	mu    sync.Mutex
	crash func()
}

func (a *crashApplier) Apply(ctx context.Context, cmd state.Command) (state.Result, error) {
	res, err := a.Applier.Apply(ctx, cmd)
	cmds := []state.Command{cmd}
	if b, ok := cmd.(state.Batch); ok {
		cmds = b.Commands
	}
	nodeDetached := slices.ContainsFunc(cmds, func(c state.Command) bool {
		cp, ok := c.(state.CheckpointClaim)
		return ok && cp.State == csi.ClaimNodeDetached
	})
	if nodeDetached && err == nil {
		a.mu.Lock()
		crash := a.crash
		a.crash = nil
		a.mu.Unlock()
		if crash != nil {
			crash()
		}
	}
	return res, err
}

func TestWorker_Resume_AfterNodeDetachedCheckpoint(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.addVolume("vol", csi.AccessModeSingleNodeWriter)
	h.claim("vol", "a1", "n1")

	ca := &crashApplier{Applier: h.applier}
	cfg := h.workerConfig()
	cfg.Applier = ca
	first := h.startWorker(cfg, true)
	ca.crash = first.cancel
	h.settle(first)
	h.release("a1")
	<-first.done // Run returned: the first worker is gone
	first.done <- nil

	if c := h.claimOf("vol", "a1"); c == nil || c.State != csi.ClaimNodeDetached {
		t.Fatalf("claim after the crash = %+v, want node-detached", c)
	}
	if got := h.ctrl.CallCount(ctrlUnpublish); got != 0 {
		t.Fatalf("the crashed worker reached the controller step (%d calls)", got)
	}

	second := h.startWorker(h.workerConfig(), true)
	h.settle(second)
	h.requireNoPastClaims("after the new worker ran")
	n1 := h.nodes["n1"]
	if u, s := n1.fake.CallCount(nodeUnpublish), n1.fake.CallCount(nodeUnstage); u != 1 || s != 1 {
		t.Errorf("node calls = %d unpublish, %d unstage; the new worker must resume at the controller step", u, s)
	}
	h.requireControllerStepOnly(second.Stats())
	h.requireDetached("vol", "a1")
	h.requireNoViolations()
}

func TestWorker_Release_NodeGoneSkipsNodeStep(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.addVolume("vol", csi.AccessModeSingleNodeWriter)
	h.claim("vol", "a1", "n3")
	h.statuses.set("n3", csi.NodeStatusGone)
	w := h.startWorker(h.workerConfig(), true)

	h.release("a1")
	h.settle(w)
	h.requireNoPastClaims("after the release with the node gone")
	n3 := h.nodes["n3"]
	if got := n3.fake.CallCount(nodeUnpublish) + n3.fake.CallCount(nodeUnstage); got != 0 {
		t.Errorf("node calls to a gone node = %d, want 0", got)
	}
	if got := h.ctrl.CallCount(ctrlUnpublish); got != 1 {
		t.Errorf("ControllerUnpublish calls = %d, want 1: the attachment outlives the node", got)
	}
	h.requireDetached("vol", "a1")
	h.requireNoViolations()
}

// A host whose node agent unmounted the allocation itself reports the
// node step done with the stop (a Batch of the terminal upsert and the
// NodeDetached checkpoint): the Worker makes no node call and goes
// straight to ControllerUnpublish and the free.
func TestWorker_Release_HostReportsNodeDetached(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.addVolume("vol", csi.AccessModeSingleNodeWriter)
	h.claim("vol", "a1", "n1")
	w := h.startWorker(h.workerConfig(), true)
	h.settle(w)

	n1 := h.nodes["n1"]
	v, err := h.store.Volume(testNamespace, "vol")
	if err != nil {
		t.Fatal(err)
	}
	if err := n1.mounter.UnmountVolume(context.Background(), mounter.NewUnmountRequest(testNamespace, "vol", v.Claim("a1"))); err != nil {
		t.Fatal(err)
	}
	calls := n1.fake.CallCount(nodeUnpublish) + n1.fake.CallCount(nodeUnstage)
	h.mu.Lock()
	a := h.allocs["a1"]
	a.Terminal = true
	h.allocs["a1"] = a
	h.mu.Unlock()
	h.apply(state.Batch{Commands: []state.Command{
		state.UpsertAllocations{Allocations: []csi.Allocation{a}, ReleasedAt: h.clock.Now()},
		state.CheckpointClaim{Namespace: testNamespace, VolumeID: "vol", AllocationID: "a1", State: csi.ClaimNodeDetached},
	}})
	h.settle(w)

	h.requireNoPastClaims("after the release")
	if got := n1.fake.CallCount(nodeUnpublish) + n1.fake.CallCount(nodeUnstage); got != calls {
		t.Errorf("the worker made %d node calls, want none: the host reported the node step done", got-calls)
	}
	h.requireControllerStepOnly(w.Stats())
	h.requireDetached("vol", "a1")
	h.requireNoViolations()
}

func TestWorker_Release_NodeDownRetriesUntilReady(t *testing.T) {
	for _, st := range []csi.NodeStatus{csi.NodeStatusDown, csi.NodeStatusUnknown} {
		t.Run(st.String(), func(t *testing.T) {
			h := newHarness(t, harnessOptions{})
			h.addVolume("vol", csi.AccessModeSingleNodeWriter)
			h.claim("vol", "a1", "n2")
			h.statuses.set("n2", st)
			w := h.startWorker(h.workerConfig(), true)

			h.release("a1")
			h.settle(w)
			c := h.claimOf("vol", "a1")
			if c == nil || c.State != csi.ClaimUnpublishing || !strings.Contains(c.LastError, "node not ready") {
				t.Fatalf("claim while the node is %s = %+v", st, c)
			}
			if got := h.nodes["n2"].fake.CallCount(nodeUnpublish); got != 0 {
				t.Errorf("node calls while %s = %d", st, got)
			}
			h.statuses.set("n2", csi.NodeStatusReady)
			h.advance(w, 8*time.Second)
			h.requireNoPastClaims("once the node was ready")
			h.requireDetached("vol", "a1")
			h.requireNoViolations()
		})
	}
}

func TestWorker_Release_TwoAllocationsOneNode(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.addVolume("vol", csi.AccessModeMultiNodeMultiWriter)
	h.claim("vol", "a1", "n1")
	h.claim("vol", "a2", "n1")
	w := h.startWorker(h.workerConfig(), true)

	h.release("a1")
	h.settle(w)
	// Only the detach waits for a2; a1's claim is freed at once (with
	// the free deferred too, a release of one of two allocations on a
	// node waited for the other one to stop).
	if c := h.claimOf("vol", "a1"); c != nil {
		t.Fatalf("first claim = %+v, want it freed while a2 keeps the volume attached", c)
	}
	if got := h.ctrl.CallCount(ctrlUnpublish); got != 0 {
		t.Fatalf("ControllerUnpublish while a2 still uses the volume on n1 (%d calls)", got)
	}
	if a := h.volume("vol").Attachments["n1"]; a == nil || a.State != csi.AttachmentAttached {
		t.Fatalf("attachment to n1 = %+v, want it kept attached for a2", a)
	}
	n1 := h.nodes["n1"]
	if u, s := n1.fake.CallCount(nodeUnpublish), n1.fake.CallCount(nodeUnstage); u != 1 || s != 0 {
		t.Fatalf("node calls = %d unpublish, %d unstage; want only a1's unpublish", u, s)
	}
	if st := w.Stats(); st.Ready+st.Running+st.Waiting != 0 || st.FailedAttempts != 0 || st.Freed != 1 {
		t.Errorf("stats = %+v, want a1 freed, nothing left in the queue, no failures", st)
	}

	h.release("a2")
	h.settle(w)
	h.requireNoPastClaims("after both released")
	if got := h.ctrl.CallCount(ctrlUnpublish); got != 1 {
		t.Errorf("ControllerUnpublish calls = %d, want 1 for the node", got)
	}
	got := h.order.list()
	want := []string{
		"n1:" + nodeUnpublish + ":vol", // a1
		"n1:" + nodeUnpublish + ":vol", // a2
		"n1:" + nodeUnstage + ":vol",
		"ctrl:" + ctrlUnpublish + ":vol",
	}
	if !slices.Equal(got, want) {
		t.Errorf("calls = %v, want %v", got, want)
	}
	h.requireDetached("vol", "a1", "a2")
	h.requireNoViolations()
}

func TestWorker_Release_TwoAllocationsOneNode_Together(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.addVolume("vol", csi.AccessModeMultiNodeMultiWriter)
	h.claim("vol", "a1", "n2")
	h.claim("vol", "a2", "n2")
	w := h.startWorker(h.workerConfig(), true)

	h.release("a1", "a2")
	h.settle(w)
	h.requireNoPastClaims("after both were released together")
	want := []string{
		"n2:" + nodeUnpublish + ":vol",
		"n2:" + nodeUnpublish + ":vol",
		"n2:" + nodeUnstage + ":vol",
		"ctrl:" + ctrlUnpublish + ":vol", // one for both claims of the node
	}
	if got := h.order.list(); !slices.Equal(got, want) {
		t.Errorf("calls = %v, want %v", got, want)
	}
	if st := w.Stats(); st.Freed != 2 || st.ControllerDetached != 2 || st.NodeDetached != 2 {
		t.Errorf("stats = %+v", st)
	}
	h.requireDetached("vol", "a1", "a2")
	h.requireNoViolations()
}

func TestWorker_Release_OtherNodeDoesNotDefer(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.addVolume("vol", csi.AccessModeMultiNodeMultiWriter)
	h.claim("vol", "a1", "n1")
	h.claim("vol", "a2", "n2")
	w := h.startWorker(h.workerConfig(), true)

	h.release("a1")
	h.settle(w)
	if c := h.claimOf("vol", "a1"); c != nil {
		t.Fatalf("a1's claim = %+v, want freed: a2 is on another node", c)
	}
	calls := h.ctrl.CallsTo(ctrlUnpublish)
	if len(calls) != 1 || !strings.Contains(calls[0].String(), "csi-n1") {
		t.Errorf("ControllerUnpublish calls = %v, want one for csi-n1", calls)
	}
	if c := h.claimOf("vol", "a2"); c == nil || c.State != csi.ClaimTaken {
		t.Errorf("a2's claim = %+v, want untouched", c)
	}
	h.requireNoViolations()
}

func TestWorker_SetEnabled(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	for _, v := range []string{"v1", "v2", "v3"} {
		h.addVolume(v, csi.AccessModeSingleNodeWriter)
	}
	h.claim("v1", "a1", "n1")
	h.claim("v2", "a2", "n2")
	h.claim("v3", "a3", "n3")
	w := h.startWorker(h.workerConfig(), false)

	h.release("a1", "a2")
	h.settle(w)
	h.advance(w, time.Hour)
	if n := h.pastClaims(); n != 2 {
		t.Fatalf("a disabled worker released claims: %d past claims left, want 2", n)
	}
	if got := len(h.order.list()); got != 0 {
		t.Fatalf("a disabled worker made %d plugin calls: %v", got, h.order.list())
	}
	if st := w.Stats(); st.Enabled || st.Freed != 0 {
		t.Errorf("stats = %+v", st)
	}

	w.SetEnabled(true)
	h.settle(w)
	h.requireNoPastClaims("after enabling")

	w.SetEnabled(false)
	h.settle(w)
	h.release("a3")
	h.settle(w)
	if c := h.claimOf("v3", "a3"); c == nil || c.State != csi.ClaimUnpublishing {
		t.Fatalf("disabled again, a3's claim = %+v, want unpublishing", c)
	}
	w.SetEnabled(true)
	h.settle(w)
	h.requireNoPastClaims("after enabling again")
	h.requireDetached("v3", "a3")

	// A quick loss and regain of leadership still starts a new enabled
	// period, with its scan of everything.
	before := w.Stats().Scans
	w.SetEnabled(false)
	w.SetEnabled(true)
	h.settle(w)
	if got := w.Stats().Scans; got <= before {
		t.Errorf("scans after a quick off-on = %d, want more than %d", got, before)
	}
	h.requireNoViolations()
}

func TestWorker_SetEnabled_DisableStopsInFlightStep(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.addVolume("vol", csi.AccessModeSingleNodeWriter)
	h.claim("vol", "a1", "n1")
	n1 := h.nodes["n1"]
	entered := make(chan struct{}, 1)
	n1.fake.SetHook(nodeUnpublish, func(ctx context.Context, _ string, _ any) error {
		select {
		case entered <- struct{}{}:
		default:
		}
		<-ctx.Done() // a node that hangs until the caller gives up
		return ctx.Err()
	})
	w := h.startWorker(h.workerConfig(), true)
	h.release("a1")
	<-entered

	w.SetEnabled(false)
	h.settle(w) // returns once the step in flight stopped
	if c := h.claimOf("vol", "a1"); c == nil || c.State != csi.ClaimUnpublishing {
		t.Fatalf("claim after disabling mid-step = %+v, want unpublishing (no checkpoint of a cut step)", c)
	}
	if st := w.Stats(); st.Running != 0 || st.Ready != 0 {
		t.Errorf("stats after disable = %+v", st)
	}

	h.clearFaults()
	w.SetEnabled(true)
	h.settle(w)
	h.requireNoPastClaims("after re-enabling")
	h.requireDetached("vol", "a1")
	h.requireNoViolations()
}

func TestWorker_Release_FinalErrorRecordedAndRetriedSlowly(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.addVolume("vol", csi.AccessModeSingleNodeWriter)
	h.claim("vol", "a1", "n2")
	n2 := h.nodes["n2"]
	n2.fake.FailAlways(nodeUnpublish, codes.Internal)
	obs := &recorder{}
	cfg := h.workerConfig()
	cfg.Observer = obs
	w := h.startWorker(cfg, true)

	h.release("a1")
	h.settle(w)
	c := h.claimOf("vol", "a1")
	if c == nil || c.State != csi.ClaimUnpublishing {
		t.Fatalf("claim = %+v, want unpublishing", c)
	}
	if !strings.Contains(c.LastError, "Internal") || !strings.Contains(c.LastError, string(claimgc.StepNodeDetach)) {
		t.Errorf("LastError = %q, want the step and the plugin's error", c.LastError)
	}
	if strings.Contains(c.LastError, "s3cr3t") {
		t.Errorf("LastError holds a secret: %q", c.LastError)
	}
	if f := obs.failures(); len(f) != 1 || !f[0].final || f[0].step != claimgc.StepNodeDetach {
		t.Errorf("observed failures = %+v, want one final node-detach failure", f)
	}

	// Not retried on the fast schedule…
	h.advance(w, 9*time.Minute)
	if got := n2.fake.CallCount(nodeUnpublish); got != 1 {
		t.Fatalf("NodeUnpublish calls before the slow retry = %d, want 1", got)
	}
	// …but on the slow one, and never dropped.
	h.advance(w, time.Minute)
	if got := n2.fake.CallCount(nodeUnpublish); got != 2 {
		t.Fatalf("NodeUnpublish calls after the slow retry = %d, want 2", got)
	}
	h.clearFaults()
	h.advance(w, 10*time.Minute)
	h.requireNoPastClaims("after the fault cleared")
	h.requireDetached("vol", "a1")
	h.requireNoViolations()
}

func TestWorker_Release_NoControllerPublish(t *testing.T) {
	h := newHarness(t, harnessOptions{noControllerPublish: true})
	h.addVolume("vol", csi.AccessModeSingleNodeWriter)
	h.claim("vol", "a1", "n2")
	w := h.startWorker(h.workerConfig(), true)
	h.release("a1")
	h.settle(w)
	h.requireNoPastClaims("after the release")
	if got := h.ctrl.CallCount(ctrlUnpublish); got != 0 {
		t.Errorf("ControllerUnpublish calls = %d, want 0: the plugin has no PUBLISH_UNPUBLISH_VOLUME", got)
	}
	if got := h.nodes["n2"].fake.CallCount(nodeUnstage); got != 1 {
		t.Errorf("NodeUnstage calls = %d, want 1", got)
	}
	h.requireNoViolations()
}

func TestWorker_Release_PluginGoneWaits(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.addVolume("vol", csi.AccessModeSingleNodeWriter)
	h.claim("vol", "a1", "n2")
	w := h.startWorker(h.workerConfig(), true)
	// Every node stops reporting the plugin: its row is gone.
	for _, id := range h.nodeIDs {
		h.apply(state.UpsertNodePlugins{NodeID: id})
	}
	if _, err := h.store.Plugin(testPluginID); !errors.Is(err, csi.ErrPluginNotFound) {
		t.Fatalf("plugin still registered: %v", err)
	}

	h.release("a1")
	h.settle(w)
	c := h.claimOf("vol", "a1")
	if c == nil || c.State != csi.ClaimNodeDetached || !strings.Contains(c.LastError, "not registered") {
		t.Fatalf("claim with the plugin gone = %+v, want node-detached, waiting for the plugin", c)
	}
	h.advance(w, 8*time.Second)
	if c := h.claimOf("vol", "a1"); c == nil {
		t.Fatal("claim freed while the plugin is unknown: the attachment may leak")
	}

	for _, id := range h.nodeIDs {
		plugins := []csi.PluginInfo{*h.nodes[id].registry.info}
		if id == controllerNode {
			plugins = append(plugins, csi.PluginInfo{
				PluginID: testPluginID, Type: csi.PluginTypeController, Healthy: true, RequiresController: true,
				ControllerInfo: &csi.ControllerInfo{Capabilities: csi.ControllerCapabilities{PublishUnpublishVolume: true}},
			})
		}
		h.apply(state.UpsertNodePlugins{NodeID: id, Plugins: plugins})
	}
	h.advance(w, 8*time.Second)
	h.requireNoPastClaims("once the plugin came back")
	if got := h.ctrl.CallCount(ctrlUnpublish); got != 1 {
		t.Errorf("ControllerUnpublish calls = %d, want 1", got)
	}
	h.requireNoViolations()
}

// TestWorker_Release_NoHealthyControllerWaits: a plugin that requires a
// controller whose only controller instance is unhealthy cannot tell
// whether the volume needs ControllerUnpublish: the claim waits in
// NodeDetached, with no detach intent written (a new claim may still
// join the attachment meanwhile), until a healthy controller is back,
// and is then detached and freed.
func TestWorker_Release_NoHealthyControllerWaits(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.addVolume("vol", csi.AccessModeSingleNodeWriter)
	h.claim("vol", "a1", "n2")
	w := h.startWorker(h.workerConfig(), true)
	setController := func(healthy bool) {
		h.apply(state.UpsertNodePlugins{NodeID: controllerNode, Plugins: []csi.PluginInfo{
			*h.nodes[controllerNode].registry.info,
			{
				PluginID: testPluginID, Type: csi.PluginTypeController, Healthy: healthy, RequiresController: true,
				UpdateTime: epoch, ControllerInfo: &csi.ControllerInfo{Capabilities: csi.ControllerCapabilities{PublishUnpublishVolume: true}},
			},
		}})
	}
	setController(false)

	h.release("a1")
	h.settle(w)
	c := h.claimOf("vol", "a1")
	if c == nil || c.State != csi.ClaimNodeDetached || !strings.Contains(c.LastError, "no controller") {
		t.Fatalf("claim with no healthy controller = %+v, want node-detached, waiting for a controller", c)
	}
	if a := h.volume("vol").Attachments["n2"]; a == nil || a.State != csi.AttachmentAttached {
		t.Errorf("attachment with no healthy controller = %+v, want it attached: nothing can detach it yet", a)
	}
	h.advance(w, 8*time.Second)
	if c := h.claimOf("vol", "a1"); c == nil {
		t.Fatal("claim freed while no controller could detach the volume: the attachment may leak")
	}

	setController(true)
	h.advance(w, 8*time.Second)
	h.requireNoPastClaims("once the controller was healthy")
	if got := h.ctrl.CallCount(ctrlUnpublish); got != 1 {
		t.Errorf("ControllerUnpublish calls = %d, want 1", got)
	}
	h.requireDetached("vol", "a1")
	h.requireNoViolations()
}

func TestWorker_BackstopScan(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.addVolume("vol", csi.AccessModeSingleNodeWriter)
	h.claim("vol", "a1", "n1")
	w := h.startWorker(h.workerConfig(), true)
	h.settle(w)
	before := w.Stats().Scans
	h.advance(w, time.Hour)
	if got := w.Stats().Scans; got != before+1 {
		t.Errorf("scans after the backstop interval = %d, want %d", got, before+1)
	}
}

// TestWorker_Watch_PastClaimsOnly: with a store that tells changes of
// the volumes with past claims apart (state.MemStore), claims and
// publishes do not make the Worker scan; with one that does not, every
// write to the volume table does. Either way it settles, and releases.
func TestWorker_Watch_PastClaimsOnly(t *testing.T) {
	for _, tc := range []struct {
		name       string
		hidePast   bool
		scansAfter func(before, after uint64) bool
		want       string
	}{
		{"past claims watch", false, func(b, a uint64) bool { return a == b }, "none"},
		{"volume table watch", true, func(b, a uint64) bool { return a > b }, "at least one"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessOptions{})
			h.addVolume("vol", csi.AccessModeMultiNodeMultiWriter)
			cfg := h.workerConfig()
			if tc.hidePast {
				cfg.Store = struct{ state.Reader }{h.store}
			}
			w := h.startWorker(cfg, true)
			h.settle(w)
			before := w.Stats().Scans
			h.claim("vol", "a1", "n1")
			h.claim("vol", "a2", "n2")
			h.settle(w)
			if after := w.Stats().Scans; !tc.scansAfter(before, after) {
				t.Errorf("%d scans for two claims, want %s", after-before, tc.want)
			}
			h.release("a1", "a2")
			h.settle(w)
			h.requireNoPastClaims("after the release")
		})
	}
}

func TestNew_InvalidConfig(t *testing.T) {
	h := newHarness(t, harnessOptions{nodes: 1})
	tests := []struct {
		name   string
		change func(*claimgc.Config)
		field  string
	}{
		{"no store", func(c *claimgc.Config) { c.Store = nil }, "Store"},
		{"no applier", func(c *claimgc.Config) { c.Applier = nil }, "Applier"},
		{"no nodes", func(c *claimgc.Config) { c.Nodes = nil }, "Nodes"},
		{"no controllers", func(c *claimgc.Config) { c.Controllers = nil }, "Controllers"},
		{"no node statuses", func(c *claimgc.Config) { c.NodeStatuses = nil }, "NodeStatuses"},
		{"negative parallelism", func(c *claimgc.Config) { c.Parallelism = -1 }, "Parallelism"},
		{"negative retry base", func(c *claimgc.Config) { c.RetryBase = -time.Second }, "RetryBase"},
		{"retry max below base", func(c *claimgc.Config) { c.RetryBase, c.RetryMax = time.Minute, time.Second }, "RetryMax"},
		{"negative scan interval", func(c *claimgc.Config) { c.ScanInterval = -1 }, "ScanInterval"},
		{"negative final retry", func(c *claimgc.Config) { c.FinalRetryInterval = -1 }, "FinalRetryInterval"},
		{"negative step timeout", func(c *claimgc.Config) { c.StepTimeout = -1 }, "StepTimeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := h.workerConfig()
			tt.change(&cfg)
			_, err := claimgc.New(cfg)
			if !errors.Is(err, csi.ErrInvalidRequest) || !strings.Contains(err.Error(), tt.field) {
				t.Fatalf("New = %v, want ErrInvalidRequest naming %s", err, tt.field)
			}
		})
	}
	t.Run("defaults", func(t *testing.T) {
		cfg := h.workerConfig()
		cfg.Clock, cfg.RetryBase, cfg.RetryMax, cfg.ScanInterval = nil, 0, 0, 0
		if _, err := claimgc.New(cfg); err != nil {
			t.Fatal(err)
		}
	})
}

func TestWorker_Run_Twice(t *testing.T) {
	h := newHarness(t, harnessOptions{nodes: 1})
	w, err := claimgc.New(h.workerConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errs := make(chan error, 2)
	for range 2 {
		go func() { errs <- w.Run(ctx) }()
	}
	if err := <-errs; !errors.Is(err, csi.ErrInvalidRequest) {
		t.Fatalf("the second Run = %v, want ErrInvalidRequest", err)
	}
	cancel()
	if err := <-errs; err != nil {
		t.Fatalf("Run returned %v after its ctx ended, want nil", err)
	}
	if err := w.Settle(context.Background()); err != nil {
		t.Fatalf("Settle after Run returned = %v", err)
	}
}

// recorder is an Observer that keeps what it saw.
type recorder struct {
	mu     sync.Mutex
	freed  []time.Duration
	failed []observedFailure
	depths [][3]int
}

type observedFailure struct {
	alloc string
	step  claimgc.Step
	final bool
}

var _ claimgc.Observer = (*recorder)(nil)

func (r *recorder) ClaimFreed(_, _, _ string, since time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.freed = append(r.freed, since)
}

func (r *recorder) StepFailed(_, _, alloc string, step claimgc.Step, _ error, final bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = append(r.failed, observedFailure{alloc, step, final})
}

func (r *recorder) QueueChanged(ready, running, waiting int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.depths = append(r.depths, [3]int{ready, running, waiting})
}

// requireDepthChanges fails t unless the queue depth was reported, each
// report differing from the one before, as Observer.QueueChanged says:
// an emit per wake-up would cost a gauge write per worker step.
func (r *recorder) requireDepthChanges(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.depths) < 2 {
		t.Errorf("depths %v: want the release's volumes in the queue reported", r.depths)
	}
	for i := 1; i < len(r.depths); i++ {
		if r.depths[i] == r.depths[i-1] {
			t.Errorf("depth %v reported twice in a row: %v", r.depths[i], r.depths)
		}
	}
}

func (r *recorder) freedCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.freed)
}

func (r *recorder) maxLatency() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Max(append([]time.Duration{0}, r.freed...))
}

func (r *recorder) failures() []observedFailure {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.failed)
}
