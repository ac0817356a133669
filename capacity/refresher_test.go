package capacity_test

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"

	"github.com/csikit/csikit/capacity"
	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/clock"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/state"
)

var t0 = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)

const (
	gib      = int64(1) << 30
	interval = time.Minute
	wait     = 10 * time.Second // real-time bound on waiting for the Refresher
)

var gp3 = map[string]string{"type": "gp3"}

func zone(z string) *csi.Topology { return &csi.Topology{Segments: map[string]string{"zone": z}} }

// event is one Observer call.
type event struct {
	plugin        string
	calls, failed int
	changed       bool
	err           error
}

type observer chan event

func (o observer) Refreshed(pluginID string, calls, failed int, changed bool, err error) {
	o <- event{pluginID, calls, failed, changed, err}
}

// countingApplier counts the commands the Refresher hands over.
type countingApplier struct {
	state.Applier
	mu sync.Mutex
	n  int
}

func (a *countingApplier) Apply(ctx context.Context, cmd state.Command) (state.Result, error) {
	a.mu.Lock()
	a.n++
	a.mu.Unlock()
	return a.Applier.Apply(ctx, cmd)
}

func (a *countingApplier) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n
}

// logBuffer is an io.Writer safe for the Refresher's goroutine.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), s)
}

// harness: plugin "zonal" (a csitest controller advertising
// GET_CAPACITY, pools in zones a and b) with node instances on n1 (zone
// a), n2 (zone b) and n3 (zone a again), and plugin "plain" (a csitest
// monolith without GET_CAPACITY) on n1. Both are reached over real gRPC
// on unix sockets through plugin.Client.
type harness struct {
	store   *state.MemStore
	clock   *clock.Fake
	zonal   *csitest.Plugin
	plain   *csitest.Plugin
	clients map[string]*plugin.Client
	events  observer
	logs    *logBuffer
	r       *capacity.Refresher
	applies *countingApplier
	// reportN1 applies n1's fingerprints, zonal's controller advertising
	// GET_CAPACITY or not.
	reportN1 func(getCapacity bool) error

	ctx  context.Context
	stop func()
}

type options struct {
	parallelism int
	callTimeout time.Duration
	controllers func(h *harness) capacity.Controllers
}

func newHarness(t *testing.T, o options) *harness {
	t.Helper()
	dir := t.TempDir()
	h := &harness{clock: clock.NewFake(t0), events: make(observer, 64), logs: &logBuffer{}, clients: map[string]*plugin.Client{}}
	h.zonal = csitest.Start(t, csitest.Config{
		Type:               csi.PluginTypeController,
		Controller:         csi.ControllerCapabilities{CreateDeleteVolume: true, GetCapacity: true},
		RequiresTopologies: true,
		Pools: []csitest.Pool{
			{Topology: zone("a"), Parameters: gp3, Capacity: 10 * gib, MaxVolumeSize: new(4 * gib)},
			{Topology: zone("b"), Capacity: 5 * gib},
		},
		Endpoint: filepath.Join(dir, "zonal.sock"),
	})
	h.plain = csitest.Start(t, csitest.Config{Endpoint: filepath.Join(dir, "plain.sock")})
	for id, p := range map[string]*csitest.Plugin{"zonal": h.zonal, "plain": h.plain} {
		c, err := plugin.New(plugin.Config{Endpoint: p.Endpoint(), MaxRetries: -1}) // the Refresher retries on its next pass
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		h.clients[id] = c
	}

	st, err := state.NewMemStore(state.Config{})
	if err != nil {
		t.Fatal(err)
	}
	h.store = st
	app := &countingApplier{Applier: state.NewLocalApplier(st)}
	h.applies = app
	node := func(id, csiID string, topo *csi.Topology) csi.PluginInfo {
		return csi.PluginInfo{PluginID: id, Type: csi.PluginTypeNode, Healthy: true, UpdateTime: t0,
			NodeInfo: &csi.NodeInfo{ID: csiID, AccessibleTopology: topo}}
	}
	ctrl := csi.PluginInfo{PluginID: "zonal", Type: csi.PluginTypeController, Healthy: true, UpdateTime: t0, RequiresController: true,
		ControllerInfo: &csi.ControllerInfo{Capabilities: csi.ControllerCapabilities{CreateDeleteVolume: true, GetCapacity: true}}}
	plain := csi.PluginInfo{PluginID: "plain", Type: csi.PluginTypeMonolith, Healthy: true, UpdateTime: t0, RequiresController: true,
		ControllerInfo: &csi.ControllerInfo{Capabilities: csi.ControllerCapabilities{CreateDeleteVolume: true}},
		NodeInfo:       &csi.NodeInfo{ID: "csi-n1"}}
	h.reportN1 = func(getCapacity bool) error {
		c := ctrl
		c.ControllerInfo = &csi.ControllerInfo{Capabilities: csi.ControllerCapabilities{CreateDeleteVolume: true, GetCapacity: getCapacity}}
		_, err := app.Apply(context.Background(), state.UpsertNodePlugins{NodeID: "n1", Plugins: []csi.PluginInfo{c, node("zonal", "csi-n1", zone("a")), plain}})
		return err
	}
	if err := h.reportN1(true); err != nil {
		t.Fatal(err)
	}
	for _, c := range []state.Command{
		state.UpsertNodePlugins{NodeID: "n2", Plugins: []csi.PluginInfo{node("zonal", "csi-n2", zone("b"))}},
		state.UpsertNodePlugins{NodeID: "n3", Plugins: []csi.PluginInfo{node("zonal", "csi-n3", zone("a"))}},
	} {
		if _, err := app.Apply(context.Background(), c); err != nil {
			t.Fatal(err)
		}
	}

	var ctrls capacity.Controllers = capacity.ControllerFunc(func(ctx context.Context, id string, req *plugin.GetCapacityRequest) (*plugin.GetCapacityResponse, error) {
		return h.clients[id].GetCapacity(ctx, req)
	})
	if o.controllers != nil {
		ctrls = o.controllers(h)
	}
	h.r, err = capacity.New(capacity.Config{
		Store: st, Applier: app, Controllers: ctrls,
		Classes:     []map[string]string{nil, gp3},
		Interval:    interval,
		Parallelism: o.parallelism,
		CallTimeout: o.callTimeout,
		Clock:       h.clock,
		Observer:    h.events,
		Logger:      hclog.New(&hclog.LoggerOptions{Output: h.logs, Level: hclog.Info}),
	})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// run starts Run; the test's cleanup stops it and waits for it.
func (h *harness) run(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.r.Run(ctx) }()
	h.ctx = ctx
	h.stop = func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(wait):
			t.Errorf("Run did not return within %s of its ctx ending", wait)
		}
	}
	t.Cleanup(h.stop)
}

// next waits for the Refresher's next event of plugin.
func (h *harness) next(t *testing.T, pluginID string) event {
	t.Helper()
	deadline := time.After(wait)
	for {
		select {
		case e := <-h.events:
			if e.plugin == pluginID {
				return e
			}
		case <-deadline:
			t.Fatalf("no refresh of plugin %s within %s", pluginID, wait)
		}
	}
}

// available returns the stored Available per "zone/class".
func (h *harness) available(t *testing.T) map[string]int64 {
	t.Helper()
	recs, err := h.store.Capacity("zonal")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, r := range recs {
		class := "none"
		if r.Class == state.ClassOf(gp3) {
			class = "gp3"
		}
		out[r.Topology.Segments["zone"]+"/"+class] = r.Available
	}
	return out
}

func (h *harness) create(t *testing.T, name string, size int64) string {
	t.Helper()
	v, err := h.clients["zonal"].CreateVolume(context.Background(), &plugin.CreateVolumeRequest{
		Name: name, CapacityMin: size, Parameters: gp3,
		Capabilities: []csi.Capability{{AccessMode: csi.AccessModeSingleNodeWriter, AttachmentMode: csi.AttachmentModeFileSystem}},
		Topology:     &csi.TopologyRequest{Required: []*csi.Topology{zone("a")}},
	})
	if err != nil {
		t.Fatalf("CreateVolume: %v", err)
	}
	return v.ExternalID
}

func wantAvailable(t *testing.T, got map[string]int64, want map[string]int64) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("records %v, want %v", got, want)
		return
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("records %v, want %v", got, want)
			return
		}
	}
}

func TestRefresher_Run_FirstPass(t *testing.T) {
	h := newHarness(t, options{})
	h.run(t)
	e := h.next(t, "zonal")
	// Zones a and b (n3 repeats zone a) times two classes.
	if e.calls != 4 || e.failed != 0 || !e.changed || e.err != nil {
		t.Errorf("first pass %+v, want 4 calls, a write", e)
	}
	wantAvailable(t, h.available(t), map[string]int64{"a/none": 0, "a/gp3": 10 * gib, "b/none": 5 * gib, "b/gp3": 5 * gib})
	if got := h.zonal.CallCount(csitest.MethodGetCapacity); got != 4 {
		t.Errorf("zonal got %d GetCapacity calls, want 4", got)
	}
	recs, _ := h.store.Capacity("zonal")
	for _, r := range recs {
		if !r.SeenAt.Equal(t0) {
			t.Errorf("record %s SeenAt %v, want the clock's %v", r.Key(), r.SeenAt, t0)
		}
		if r.Class == state.ClassOf(gp3) && r.Topology.Equal(zone("a")) && (r.MaximumVolumeSize == nil || *r.MaximumVolumeSize != 4*gib) {
			t.Errorf("zone a gp3 MaximumVolumeSize %v, want 4 GiB", r.MaximumVolumeSize)
		}
	}
}

func TestRefresher_Refresh_AfterCreateAndDelete(t *testing.T) {
	h := newHarness(t, options{})
	h.run(t)
	h.next(t, "zonal")

	id := h.create(t, "v1", gib)
	h.r.Refresh("zonal")
	if e := h.next(t, "zonal"); !e.changed {
		t.Errorf("refresh after create: %+v, want a write", e)
	}
	wantAvailable(t, h.available(t), map[string]int64{"a/none": 0, "a/gp3": 9 * gib, "b/none": 5 * gib, "b/gp3": 5 * gib})

	if err := h.clients["zonal"].DeleteVolume(context.Background(), &plugin.DeleteVolumeRequest{ExternalID: id}); err != nil {
		t.Fatal(err)
	}
	h.r.Refresh("zonal")
	if e := h.next(t, "zonal"); !e.changed {
		t.Errorf("refresh after delete: %+v, want a write", e)
	}
	wantAvailable(t, h.available(t), map[string]int64{"a/none": 0, "a/gp3": 10 * gib, "b/none": 5 * gib, "b/gp3": 5 * gib})
	if h.plain.CallCount(csitest.MethodGetCapacity) != 0 {
		t.Errorf("plain (no GET_CAPACITY) was asked")
	}
}

func TestRefresher_Run_Interval(t *testing.T) {
	h := newHarness(t, options{})
	h.run(t)
	h.next(t, "zonal")
	h.create(t, "v1", 2*gib) // no Refresh: only the interval notices

	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := h.clock.BlockUntil(ctx, 1); err != nil {
		t.Fatalf("the Refresher never waited on its clock: %v", err)
	}
	h.clock.Advance(interval - time.Nanosecond)
	h.r.Refresh("plain") // a kick does not postpone the interval
	h.next(t, "plain")
	if got := h.available(t)["a/gp3"]; got != 10*gib {
		t.Errorf("before the interval: a/gp3 %d, want the first pass's %d", got, 10*gib)
	}
	h.clock.Advance(time.Nanosecond)
	if e := h.next(t, "zonal"); !e.changed {
		t.Errorf("interval pass %+v, want a write", e)
	}
	if got := h.available(t)["a/gp3"]; got != 8*gib {
		t.Errorf("after the interval: a/gp3 %d, want %d", got, 8*gib)
	}
	recs, _ := h.store.Capacity("zonal")
	for _, r := range recs {
		want := t0 // unchanged records keep the first report's time
		if r.Class == state.ClassOf(gp3) && r.Topology.Equal(zone("a")) {
			want = t0.Add(interval)
		}
		if !r.SeenAt.Equal(want) {
			t.Errorf("record %s SeenAt %v, want %v", r.Key(), r.SeenAt, want)
		}
	}
}

func TestRefresher_Refresh_PluginWithoutGetCapacity(t *testing.T) {
	h := newHarness(t, options{})
	h.run(t)
	if e := h.next(t, "plain"); e.calls != 0 || e.changed {
		t.Errorf("plain's first pass %+v, want no call and no write", e)
	}
	h.r.Refresh("plain")
	h.next(t, "plain")
	if n := h.plain.CallCount(csitest.MethodGetCapacity); n != 0 {
		t.Errorf("plain was asked %d times; it does not advertise GET_CAPACITY", n)
	}
	if recs, err := h.store.Capacity("plain"); err != nil || len(recs) != 0 {
		t.Errorf("plain has records %v, %v", recs, err)
	}
}

func TestRefresher_Refresh_NothingChanged(t *testing.T) {
	h := newHarness(t, options{})
	h.run(t)
	h.next(t, "zonal")
	before, err := h.store.Index(state.TablePlugins)
	if err != nil {
		t.Fatal(err)
	}
	applied := h.applies.count()
	h.clock.Advance(time.Second) // a later SeenAt alone is no change
	h.r.Refresh("zonal")
	if e := h.next(t, "zonal"); e.calls != 4 || e.changed || e.err != nil {
		t.Errorf("second refresh %+v, want 4 calls and no write", e)
	}
	if after, _ := h.store.Index(state.TablePlugins); after != before {
		t.Errorf("TablePlugins index %d after a refresh that found nothing new, was %d", after, before)
	}
	if n := h.applies.count() - applied; n != 0 {
		t.Errorf("%d commands applied for a refresh that found nothing new, want none", n)
	}
}

func TestRefresher_Refresh_FailureKeepsLastValue(t *testing.T) {
	h := newHarness(t, options{})
	h.run(t)
	h.next(t, "zonal")
	h.create(t, "v1", gib)
	h.zonal.FailAlways(csitest.MethodGetCapacity, codes.Unavailable)
	for range 2 {
		h.r.Refresh("zonal")
		if e := h.next(t, "zonal"); e.failed != 4 || e.changed {
			t.Errorf("failing refresh %+v, want 4 failures and no write", e)
		}
		wantAvailable(t, h.available(t), map[string]int64{"a/none": 0, "a/gp3": 10 * gib, "b/none": 5 * gib, "b/gp3": 5 * gib})
	}
	// One line per topology and class, not per pass.
	if n := h.logs.count("GetCapacity failed"); n != 4 {
		t.Errorf("%d failure lines after two failing passes, want 4:\n%s", n, h.logs.b.String())
	}
	h.zonal.ClearFaults()
	h.r.Refresh("zonal")
	if e := h.next(t, "zonal"); e.failed != 0 || !e.changed {
		t.Errorf("refresh after recovery %+v, want a write", e)
	}
	if got := h.available(t)["a/gp3"]; got != 9*gib {
		t.Errorf("after recovery a/gp3 %d, want %d", got, 9*gib)
	}
	if n := h.logs.count("GetCapacity answers again"); n != 4 {
		t.Errorf("%d recovery lines, want 4", n)
	}
	// A new failure logs again.
	h.zonal.FailNext(csitest.MethodGetCapacity, codes.Unavailable, 1)
	h.r.Refresh("zonal")
	h.next(t, "zonal")
	if n := h.logs.count("GetCapacity failed"); n != 5 {
		t.Errorf("%d failure lines after a new failure, want 5", n)
	}
}

// Parallelism bounds the calls in flight: with 2, a third call starts
// only once one of the first two returned. Each call is let go one at a
// time, and counts as in flight until its gRPC call returned.
func TestRefresher_Run_Parallelism(t *testing.T) {
	entered, release := make(chan struct{}, 8), make(chan struct{}, 8)
	var mu sync.Mutex
	inflight, most := 0, 0
	h := newHarness(t, options{parallelism: 2, controllers: func(h *harness) capacity.Controllers {
		return capacity.ControllerFunc(func(ctx context.Context, id string, req *plugin.GetCapacityRequest) (*plugin.GetCapacityResponse, error) {
			mu.Lock()
			inflight++
			most = max(most, inflight)
			mu.Unlock()
			entered <- struct{}{}
			<-release
			resp, err := h.clients[id].GetCapacity(ctx, req)
			mu.Lock()
			inflight--
			mu.Unlock()
			return resp, err
		})
	}})
	h.run(t)
	enter := func() {
		t.Helper()
		select {
		case <-entered:
		case <-time.After(wait):
			t.Fatal("a call did not start")
		}
	}
	enter()
	enter()
	for range 2 { // calls 3 and 4, each after one call returned
		release <- struct{}{}
		enter()
	}
	release <- struct{}{}
	release <- struct{}{}
	if e := h.next(t, "zonal"); e.calls != 4 || e.failed != 0 {
		t.Errorf("pass %+v, want 4 calls that succeeded", e)
	}
	mu.Lock()
	defer mu.Unlock()
	if most != 2 {
		t.Errorf("%d calls in flight at most, want 2 (Parallelism)", most)
	}
}

func TestNew_Config(t *testing.T) {
	st, _ := state.NewMemStore(state.Config{})
	app := state.NewLocalApplier(st)
	ctrls := capacity.ControllerFunc(func(context.Context, string, *plugin.GetCapacityRequest) (*plugin.GetCapacityResponse, error) {
		return nil, errors.New("unused")
	})
	for name, cfg := range map[string]capacity.Config{
		"NoStore":          {Applier: app, Controllers: ctrls},
		"NoApplier":        {Store: st, Controllers: ctrls},
		"NoControllers":    {Store: st, Applier: app},
		"NegativeInterval": {Store: st, Applier: app, Controllers: ctrls, Interval: -1},
		"ClassTwice":       {Store: st, Applier: app, Controllers: ctrls, Classes: []map[string]string{gp3, {"type": "gp3"}}},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := capacity.New(cfg); !errors.Is(err, csi.ErrInvalidRequest) {
				t.Errorf("New: %v, want ErrInvalidRequest", err)
			}
		})
	}
	r, err := capacity.New(capacity.Config{Store: st, Applier: app, Controllers: ctrls})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := r.Run(ctx); err != nil {
		t.Errorf("Run: %v", err)
	}
	if err := r.Run(ctx); !errors.Is(err, csi.ErrInvalidRequest) {
		t.Errorf("second Run: %v, want ErrInvalidRequest", err)
	}
}

// A plugin whose controller stops advertising GET_CAPACITY loses its
// records: they would never be refreshed again.
func TestRefresher_Refresh_CapabilityDropped(t *testing.T) {
	h := newHarness(t, options{})
	h.run(t)
	h.next(t, "zonal")
	if err := h.reportN1(false); err != nil {
		t.Fatal(err)
	}
	calls := h.zonal.CallCount(csitest.MethodGetCapacity)
	h.r.Refresh("zonal")
	if e := h.next(t, "zonal"); e.calls != 0 || !e.changed {
		t.Errorf("refresh without GET_CAPACITY %+v, want no call and a write", e)
	}
	if got := h.available(t); len(got) != 0 {
		t.Errorf("records %v left after GET_CAPACITY went away", got)
	}
	if n := h.zonal.CallCount(csitest.MethodGetCapacity); n != calls {
		t.Errorf("%d GetCapacity calls after the capability went away", n-calls)
	}
}

// A failure of a topology no longer asked about is forgotten by the next
// full pass: when the topology comes back and fails again, it is logged
// again.
func TestRefresher_Run_ForgetsGoneFailures(t *testing.T) {
	h := newHarness(t, options{})
	h.zonal.FailAlways(csitest.MethodGetCapacity, codes.Internal)
	h.run(t)
	h.next(t, "zonal")
	if n := h.logs.count("GetCapacity failed"); n != 4 {
		t.Fatalf("%d failure lines after the first pass, want 4", n)
	}
	n2 := func(cmd state.Command) {
		t.Helper()
		if _, err := h.applies.Apply(context.Background(), cmd); err != nil {
			t.Fatal(err)
		}
	}
	n2(state.DeleteNode{NodeID: "n2"}) // zone b goes
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := h.clock.BlockUntil(ctx, 1); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(interval) // a full pass: zone a only
	if e := h.next(t, "zonal"); e.calls != 2 {
		t.Fatalf("full pass without zone b: %+v, want 2 calls", e)
	}
	n2(state.UpsertNodePlugins{NodeID: "n2", Plugins: []csi.PluginInfo{{PluginID: "zonal", Type: csi.PluginTypeNode, Healthy: true,
		UpdateTime: t0, NodeInfo: &csi.NodeInfo{ID: "csi-n2", AccessibleTopology: zone("b")}}}})
	h.r.Refresh("zonal")
	h.next(t, "zonal")
	if n := h.logs.count("GetCapacity failed"); n != 6 {
		t.Errorf("%d failure lines, want 6: zone b's two failing again are news", n)
	}
}

// A kick made before a full pass reads the plugins is covered by it:
// the plugin is not asked twice.
func TestRefresher_Refresh_CoveredByFullPass(t *testing.T) {
	h := newHarness(t, options{})
	h.r.Refresh("zonal") // before Run: its first pass is a full one
	h.run(t)
	h.next(t, "zonal") // the full pass reports plain, then zonal
	h.r.Refresh("plain")
	h.next(t, "plain") // serialized after any pass the early kick made
	if n := h.zonal.CallCount(csitest.MethodGetCapacity); n != 4 {
		t.Errorf("zonal asked %d times, want 4: the full pass covered the kick", n)
	}
}

// CallTimeout ends a call to a controller that does not answer: the
// pass goes on, and the call counts as failed.
func TestRefresher_Run_CallTimeout(t *testing.T) {
	h := newHarness(t, options{callTimeout: 50 * time.Millisecond})
	gate := h.zonal.Hold(csitest.MethodGetCapacity) // never let go
	defer gate.Open()
	h.run(t)
	if e := h.next(t, "zonal"); e.calls != 4 || e.failed != 4 || e.changed {
		t.Errorf("pass against a hung controller %+v, want 4 failed calls and no write", e)
	}
	if n := h.logs.count("deadline"); n == 0 {
		t.Errorf("the failures do not say the deadline ended them:\n%s", h.logs.b.String())
	}
}
