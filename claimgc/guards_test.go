package claimgc_test

// Tests that pin the Worker's guards: the Parallelism bound, one
// release at a time per volume, and the backstop scan. Each fails when
// its guard is taken out.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/csikit/csikit/claimgc"
	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/state"
)

// hangGuard bounds, in real time, the waits for something the Worker
// does at once when it works: it turns a hang into a failure and times
// nothing.
const hangGuard = 10 * time.Second

// heldCalls is a csitest hook that holds every call it sees until
// unblock, and counts how many it holds at once.
type heldCalls struct {
	entered chan string // the volume of each call as it enters
	release chan struct{}
	once    sync.Once

	mu   sync.Mutex
	now  int
	most int
}

func newHeldCalls(t *testing.T) *heldCalls {
	hc := &heldCalls{entered: make(chan string, 64), release: make(chan struct{})}
	t.Cleanup(hc.unblock)
	return hc
}

// hook holds a call, then hands it to next (the harness's recording
// hook).
func (hc *heldCalls) hook(next csitest.Hook) csitest.Hook {
	return func(ctx context.Context, method string, req any) error {
		vol := strings.TrimPrefix(req.(interface{ GetVolumeId() string }).GetVolumeId(), "ext-")
		hc.mu.Lock()
		hc.now++
		hc.most = max(hc.most, hc.now)
		hc.mu.Unlock()
		select {
		case hc.entered <- vol:
		default: // more calls than any test makes; the counts still hold
		}
		select {
		case <-hc.release:
		case <-ctx.Done():
		}
		hc.mu.Lock()
		hc.now--
		hc.mu.Unlock()
		if err := ctx.Err(); err != nil {
			return err
		}
		return next(ctx, method, req)
	}
}

// unblock lets every held call, and every later one, through.
func (hc *heldCalls) unblock() { hc.once.Do(func() { close(hc.release) }) }

// mostAtOnce is the largest number of calls held at the same time.
func (hc *heldCalls) mostAtOnce() int {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	return hc.most
}

// waitEntered returns the volume of the next call to enter.
func (hc *heldCalls) waitEntered(t *testing.T, what string) string {
	t.Helper()
	select {
	case v := <-hc.entered:
		return v
	case <-time.After(hangGuard):
		t.Fatalf("no call entered: %s", what)
		return ""
	}
}

// TestWorker_Parallelism_BoundsReleasesInFlight pins Config.Parallelism:
// with 2 slots and 5 volumes released by one write, two node steps
// enter the plugins and are held there, the three other volumes wait in
// the ready queue, and no third node step starts while the two are held.
// Then every volume is released, never more than two at once.
//
// Nothing shows that a third release will never start except that it
// does not start for a while: that one wait, short, runs out when the
// bound holds. With a worker goroutine too many, the third node step
// enters within microseconds.
func TestWorker_Parallelism_BoundsReleasesInFlight(t *testing.T) {
	const quietFor = 200 * time.Millisecond
	h := newHarness(t, harnessOptions{nodes: 5})
	held := newHeldCalls(t)
	var allocs []string
	for _, node := range h.nodeIDs {
		vol, alloc := "vol-"+node, "a-"+node
		h.addVolume(vol, csi.AccessModeSingleNodeWriter)
		h.claim(vol, alloc, node)
		allocs = append(allocs, alloc)
		h.nodes[node].fake.SetHook(nodeUnpublish, held.hook(h.order.hook(node)))
	}
	cfg := h.workerConfig()
	cfg.Parallelism = 2
	w := h.startWorker(cfg, true)
	h.settle(w)

	h.release(allocs...)
	first := held.waitEntered(t, "the first of 5 released volumes")
	second := held.waitEntered(t, "the second of 5 released volumes")
	select {
	case third := <-held.entered:
		t.Errorf("the node step of %s started while those of %s and %s were held, with Parallelism 2 (stats %+v)",
			third, first, second, w.Stats())
	case <-time.After(quietFor):
	}
	if st := w.Stats(); st.Running != 2 || st.Ready != 3 {
		t.Errorf("stats while two node steps are held = %+v, want 2 running and 3 ready", st)
	}

	held.unblock()
	h.settle(w)
	h.requireNoPastClaims("after the release")
	if most := held.mostAtOnce(); most > 2 {
		t.Errorf("%d node steps were in flight at once, want at most Parallelism (2)", most)
	}
	if st := w.Stats(); st.Freed != 5 || st.FailedAttempts != 0 {
		t.Errorf("stats = %+v, want 5 claims freed, no failure", st)
	}
	h.requireNoViolations()
}

// watchProbe is the harness's store, watched through it: it tells the
// highest index the Worker's scanner has waited past, so a test knows
// when the scanner has listed the volumes as of an index and waits for
// the next change.
type watchProbe struct {
	*state.MemStore
	mu      sync.Mutex
	since   uint64
	changed chan struct{}
}

func newWatchProbe(s *state.MemStore) *watchProbe {
	return &watchProbe{MemStore: s, changed: make(chan struct{})}
}

func (p *watchProbe) WaitPastClaims(ctx context.Context, minIndex uint64) (uint64, error) {
	p.mu.Lock()
	p.since = max(p.since, minIndex)
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
	return p.MemStore.WaitPastClaims(ctx, minIndex)
}

// waitWatching blocks until the scanner waits for a change past index.
func (p *watchProbe) waitWatching(t *testing.T, index uint64) {
	t.Helper()
	guard := time.NewTimer(hangGuard)
	defer guard.Stop()
	for {
		p.mu.Lock()
		since, ch := p.since, p.changed
		p.mu.Unlock()
		if since >= index {
			return
		}
		select {
		case <-ch:
		case <-guard.C:
			t.Fatalf("the scanner did not wait past index %d (it waits past %d)", index, since)
		}
	}
}

// volumeFlight wraps the Worker's detachers and records every call for
// a volume that starts while another call for the same volume is in
// flight. A release makes its steps one after the other, so an overlap
// is two releases of one volume at once.
type volumeFlight struct {
	nodes claimgc.NodeDetacher
	ctrls claimgc.ControllerDetacher

	mu       sync.Mutex
	inFlight map[string]string // volume ID → the call in flight
	overlaps []string
}

var (
	_ claimgc.NodeDetacher       = (*volumeFlight)(nil)
	_ claimgc.ControllerDetacher = (*volumeFlight)(nil)
)

func (f *volumeFlight) enter(vol *csi.Volume, call string) func() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.inFlight == nil {
		f.inFlight = map[string]string{}
	}
	if other, ok := f.inFlight[vol.ID]; ok {
		f.overlaps = append(f.overlaps, fmt.Sprintf("%s started while %s was in flight", call, other))
		return func() {}
	}
	f.inFlight[vol.ID] = call
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		delete(f.inFlight, vol.ID)
	}
}

func (f *volumeFlight) NodeDetach(ctx context.Context, vol *csi.Volume, claim *csi.Claim) error {
	defer f.enter(vol, fmt.Sprintf("NodeDetach of %s for %s", vol.ID, claim.AllocationID))()
	return f.nodes.NodeDetach(ctx, vol, claim)
}

func (f *volumeFlight) ControllerDetach(ctx context.Context, vol *csi.Volume, claim *csi.Claim) error {
	defer f.enter(vol, fmt.Sprintf("ControllerDetach of %s from %s", vol.ID, claim.NodeID))()
	return f.ctrls.ControllerDetach(ctx, vol, claim)
}

func (f *volumeFlight) overlapList() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.overlaps...)
}

// TestWorker_Release_OneAtATimePerVolume pins one release at a time per
// volume: while a1's node step is held in the plugin (a csitest gate), a
// write that moves the volume's ModifyIndex (another claim released, an
// error recorded on the claim in flight) wakes the scanner, which lists
// the volume again; the volume must stay the one running release, not
// be queued for a second worker. The scanner waiting for the next change
// after that listing is the point where a second release would show:
// the scanner watches again only once the ready queue is empty, so a
// volume queued twice is running twice by then. Once the step is let
// through, the change is taken up by the same release or the next one,
// and no detach call of the volume ever overlapped another.
func TestWorker_Release_OneAtATimePerVolume(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(h *harness)
		freed  []string
	}{
		{"another claim released", func(h *harness) { h.release("a2") }, []string{"a1", "a2"}},
		{"an error recorded on the claim in flight", func(h *harness) {
			h.apply(state.RecordClaimError{Namespace: testNamespace, VolumeID: "vol", AllocationID: "a1", Error: "noted by an operator"})
		}, []string{"a1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessOptions{})
			h.addVolume("vol", csi.AccessModeMultiNodeMultiWriter)
			h.claim("vol", "a1", "n1")
			h.claim("vol", "a2", "n2")
			gate := h.nodes["n1"].fake.Hold(nodeUnpublish)
			t.Cleanup(gate.Open)
			watch := newWatchProbe(h.store)
			flight := &volumeFlight{nodes: testNodes{h}, ctrls: testController{h}}
			cfg := h.workerConfig()
			cfg.Store, cfg.Nodes, cfg.Controllers = watch, flight, flight
			w := h.startWorker(cfg, true)
			h.settle(w)

			h.release("a1")
			hang, cancel := context.WithTimeout(context.Background(), hangGuard)
			defer cancel()
			if err := gate.Wait(hang, 1); err != nil {
				t.Fatalf("a1's node step made no NodeUnpublishVolume: %v", err)
			}
			tc.change(h)
			idx, err := h.store.PastClaimsIndex()
			if err != nil {
				t.Fatal(err)
			}
			watch.waitWatching(t, idx)
			if st := w.Stats(); st.Running != 1 || st.Ready != 0 {
				t.Errorf("after the scan that saw the change, stats = %+v, want the volume's one release running and nothing ready: a volume is released by one worker at a time", st)
			}

			gate.Open()
			h.settle(w)
			for _, a := range tc.freed {
				if c := h.claimOf("vol", a); c != nil {
					t.Errorf("claim of %s after the release = %+v, want it freed", a, c)
				}
			}
			if o := flight.overlapList(); len(o) > 0 {
				t.Errorf("two releases of one volume at once:\n  %s", strings.Join(o, "\n  "))
			}
			if n := h.nodes["n1"].fake.CallCount(nodeUnpublish); n != 1 {
				t.Errorf("NodeUnpublish calls on n1 = %d, want 1", n)
			}
			h.requireNoViolations()
		})
	}
}

// deafStore is the harness's store with a watch that never fires: the
// Worker's blocking queries on it return only when their ctx ends, and
// the index they watch stays where it was when the store was wrapped, as
// with a store or host that missed every change. Reads are the store's.
type deafStore struct {
	state.Reader
	index uint64
}

var _ state.PastClaimWatcher = deafStore{}

func newDeafStore(t *testing.T, s *state.MemStore) deafStore {
	t.Helper()
	idx, err := s.PastClaimsIndex()
	if err != nil {
		t.Fatal(err)
	}
	return deafStore{Reader: s, index: idx}
}

func (s deafStore) PastClaimsIndex() (uint64, error) { return s.index, nil }

func (s deafStore) WaitPastClaims(ctx context.Context, _ uint64) (uint64, error) {
	<-ctx.Done()
	return 0, ctx.Err()
}

func (s deafStore) Wait(ctx context.Context, _ state.Table, _ uint64) (uint64, error) {
	<-ctx.Done()
	return 0, ctx.Err()
}

// TestWorker_BackstopScan_ReleasesWhatNoWatchAnnounced pins the backstop
// scan (Config.ScanInterval, on Config.Clock): on a store whose watch
// never fires, a released claim is left alone, whatever the clock, until
// the interval has passed since the Worker was enabled; then the
// backstop lists it and the claim is released.
func TestWorker_BackstopScan_ReleasesWhatNoWatchAnnounced(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.addVolume("vol", csi.AccessModeSingleNodeWriter)
	h.claim("vol", "a1", "n2")
	cfg := h.workerConfig()
	cfg.Store = newDeafStore(t, h.store)
	w := h.startWorker(cfg, true)
	h.settle(w)
	scans := w.Stats().Scans

	h.release("a1")
	requireUnreleased := func(when string) {
		t.Helper()
		if c := h.claimOf("vol", "a1"); c == nil || c.State != csi.ClaimUnpublishing {
			t.Fatalf("claim %s = %+v, want it untouched (unpublishing): no watch announced the release", when, c)
		}
		if n := h.nodes["n2"].fake.CallCount(nodeUnpublish); n != 0 {
			t.Fatalf("%d NodeUnpublish calls %s, want none", n, when)
		}
		if st := w.Stats(); st.Scans != scans {
			t.Fatalf("stats %s = %+v, want no scan since the first (%d)", when, st, scans)
		}
	}
	h.settle(w)
	requireUnreleased("right after the release")
	h.advance(w, cfg.ScanInterval-time.Second)
	requireUnreleased("a second before the backstop")

	h.advance(w, time.Second)
	h.requireNoPastClaims("after the backstop scan")
	if st := w.Stats(); st.Scans != scans+1 || st.Freed != 1 {
		t.Errorf("stats after the backstop = %+v, want one scan more (%d) and the claim freed", st, scans+1)
	}
	h.requireDetached("vol", "a1")
	h.requireNoViolations()
}
