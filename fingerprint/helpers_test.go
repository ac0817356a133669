package fingerprint_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/clock"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/fingerprint"
)

// wait is the safety timeout for anything a test waits on; reaching it
// means the test failed, it never paces the test.
const wait = 20 * time.Second

const (
	nodeID   = "node-1"
	interval = fingerprint.DefaultInterval
)

// harness runs a Manager on a fake clock and collects its reports.
type harness struct {
	t       *testing.T
	m       *fingerprint.Manager
	clk     *clock.Fake
	reports chan []*csi.PluginInfo

	mu        sync.Mutex
	reportErr []error // errors the next Report calls return, in order

	cancel context.CancelFunc
	done   chan error
}

func newHarness(t *testing.T, mutate ...func(*fingerprint.Config)) *harness {
	t.Helper()
	h := &harness{
		t:       t,
		clk:     clock.NewFake(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)),
		reports: make(chan []*csi.PluginInfo, 1000),
	}
	cfg := fingerprint.Config{
		NodeID: nodeID,
		Clock:  h.clk,
		Report: h.report,
		// The manager has its own retry loop; retries inside the client
		// would wait on the fake clock too and blur what the test sees.
		Client: plugin.Config{MaxRetries: -1},
	}
	for _, f := range mutate {
		f(&cfg)
	}
	m, err := fingerprint.New(cfg)
	must.NoError(t, err)
	h.m = m
	return h
}

func (h *harness) report(_ context.Context, infos []*csi.PluginInfo) error {
	h.mu.Lock()
	var err error
	if len(h.reportErr) > 0 {
		err, h.reportErr = h.reportErr[0], h.reportErr[1:]
	}
	h.mu.Unlock()
	if err != nil {
		return err
	}
	h.reports <- infos
	return nil
}

// failReports makes the next Report calls fail with errs.
func (h *harness) failReports(errs ...error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.reportErr = append(h.reportErr, errs...)
}

// run starts Run; the test's cleanup stops it and checks it returned nil.
func (h *harness) run() {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel, h.done = cancel, make(chan error, 1)
	go func() { h.done <- h.m.Run(ctx) }()
	h.t.Cleanup(func() { must.NoError(h.t, h.stop()) })
}

// stop ends Run and returns its result; later calls return nil.
func (h *harness) stop() error {
	if h.cancel == nil {
		return nil
	}
	h.cancel()
	h.cancel = nil
	select {
	case err := <-h.done:
		return err
	case <-time.After(wait):
		return errors.New("Run did not return after its ctx ended")
	}
}

// next returns the next report.
func (h *harness) next() []*csi.PluginInfo {
	h.t.Helper()
	select {
	case r := <-h.reports:
		return r
	case <-time.After(wait):
		h.t.Fatalf("no report within %s", wait)
		return nil
	}
}

// nextWith returns the first report for which ok holds, skipping others.
func (h *harness) nextWith(ok func([]*csi.PluginInfo) bool) []*csi.PluginInfo {
	h.t.Helper()
	for {
		if r := h.next(); ok(r) {
			return r
		}
	}
}

// park waits until n timers are pending: every instance loop is asleep.
func (h *harness) park(n int) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	must.NoError(h.t, h.clk.BlockUntil(ctx, n), "waiting for %d timers", n)
}

// tick waits until n loops are asleep, then moves time one interval,
// which wakes every one of them (backoff delays never exceed it).
func (h *harness) tick(n int) {
	h.t.Helper()
	h.park(n)
	h.clk.Advance(interval)
}

func (h *harness) register(p *csitest.Plugin, pluginID, allocID string, typ csi.PluginType) {
	h.t.Helper()
	must.NoError(h.t, h.m.Register(fingerprint.Instance{
		PluginID: pluginID, AllocationID: allocID, Type: typ, Socket: p.Endpoint(),
	}))
}

// reconnect waits until the manager's client of node plugin pluginID
// works again after the plugin restarted. Without it the first call after
// a restart may meet the old, closed connection and fail with
// Unavailable: the manager's clients do not retry in these tests.
func (h *harness) reconnect(pluginID string) {
	h.t.Helper()
	client, _, err := h.m.NodePlugin(pluginID)
	must.NoError(h.t, err)
	reconnect(h.t, client)
}

func reconnect(t testing.TB, client plugin.NodeClient) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for {
		_, err := client.NodeGetCapabilities(ctx)
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("plugin client did not reconnect: %v", err)
		}
	}
}

// only returns the one info of a report.
func only(t *testing.T, r []*csi.PluginInfo) *csi.PluginInfo {
	t.Helper()
	must.Len(t, r, 1, "report: %s", describe(r))
	return r[0]
}

func find(r []*csi.PluginInfo, pluginID, allocID string) *csi.PluginInfo {
	for _, info := range r {
		if info.PluginID == pluginID && info.AllocationID == allocID {
			return info
		}
	}
	return nil
}

func describe(r []*csi.PluginInfo) string {
	s := "["
	for i, info := range r {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("%s/%s healthy=%v %q", info.PluginID, info.AllocationID, info.Healthy, info.HealthDescription)
	}
	return s + "]"
}

// shortDir returns a fresh directory with a path short enough for unix
// sockets, removed when the test ends.
func shortDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("", "fp")
	must.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(d) })
	return d
}

func socketIn(t testing.TB, name string) string {
	return filepath.Join(shortDir(t), name)
}
