package health

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/metrics"
	"github.com/csikit/csikit/state"
)

// Monitor reads the health of every volume from its plugins and
// reconciles the attachment records with what the backend reports. Run
// it on the leader only, like the claim release worker: it writes
// through the Applier and detaches leaked attachments. Build it with
// New and start Run once; or call Pass yourself, never while Run runs.
type Monitor struct {
	cfg     Config
	running atomic.Bool

	// leaks holds when each backend attachment without a record was
	// first seen, so that it is detached only after Config.LeakGrace.
	// Only the pass's goroutine touches it.
	leaks map[leakKey]time.Time
}

type leakKey struct{ plugin, volume, node string }

// New validates cfg and returns a Monitor. It starts nothing.
func New(cfg Config) (*Monitor, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Monitor{cfg: cfg, leaks: map[leakKey]time.Time{}}, nil
}

// Run makes a pass at once and then every Config.Interval until ctx
// ends; it then returns nil once every call it started has returned. A
// Monitor runs once.
func (m *Monitor) Run(ctx context.Context) error {
	if !m.running.CompareAndSwap(false, true) {
		return fmt.Errorf("%w: health: Run was already called; a Monitor runs once, build a new one with New", csi.ErrInvalidRequest)
	}
	for {
		if err := m.Pass(ctx); err != nil && ctx.Err() == nil {
			m.cfg.Logger.Warn("health: pass failed; trying again on the next one", "error", err)
		}
		timer := m.cfg.Clock.NewTimer(m.cfg.Interval)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-timer.C():
		}
	}
}

// pass is what one Pass gathers before it writes.
type pass struct {
	now     time.Time
	healths map[state.VolumeKey]*state.VolumeHealth
	reports []state.HealthReport
	events  []Event // emitted after the reports are written
	seen    map[leakKey]bool
}

// Pass checks every plugin once: conditions, usage and drift. It
// returns an error only when the store cannot be read or the health
// reports cannot be written; a plugin's failing calls are logged and
// asked again on the next pass.
func (m *Monitor) Pass(ctx context.Context) error {
	start := time.Now()
	err := m.pass(ctx)
	if m.cfg.metricsOn {
		m.cfg.MetricSink.IncrCounterWithLabels(metrics.HealthPasses, 1, []metrics.Label{{Name: "result", Value: metrics.Reason(err)}})
		metrics.Since(m.cfg.MetricSink, metrics.HealthPassLatency, start)
		if hs, err := m.cfg.Store.Healths(); err == nil {
			n := 0
			for _, h := range hs {
				if h.Abnormal() {
					n++
				}
			}
			m.cfg.MetricSink.SetGauge(metrics.HealthAbnormal, float32(n))
		}
	}
	return err
}

func (m *Monitor) pass(ctx context.Context) error {
	plugins, err := m.cfg.Store.Plugins()
	if err != nil {
		return fmt.Errorf("health: list plugins: %w", err)
	}
	hs, err := m.cfg.Store.Healths()
	if err != nil {
		return fmt.Errorf("health: read health records: %w", err)
	}
	ps := &pass{now: m.cfg.Clock.Now(), healths: make(map[state.VolumeKey]*state.VolumeHealth, len(hs)), seen: map[leakKey]bool{}}
	for _, h := range hs {
		ps.healths[state.VolumeKey{Namespace: h.Namespace, ID: h.VolumeID}] = h
	}
	for _, p := range plugins {
		if ctx.Err() != nil {
			return nil // a pass cut short writes nothing more
		}
		m.plugin(ctx, p, ps)
	}
	for k := range m.leaks {
		if !ps.seen[k] {
			delete(m.leaks, k)
		}
	}
	for len(ps.reports) > 0 {
		n := min(len(ps.reports), maxReports)
		if _, err := m.cfg.Applier.Apply(ctx, state.SetVolumeHealth{Reports: ps.reports[:n]}); err != nil {
			return fmt.Errorf("health: write %d health reports: %w", n, err)
		}
		ps.reports = ps.reports[n:]
	}
	for _, e := range ps.events {
		m.cfg.MetricSink.IncrCounterWithLabels(metrics.HealthResults, 1, []metrics.Label{{Name: "result", Value: e.Kind.String()}})
		m.cfg.Observer.Observe(e)
	}
	return nil
}

// plugin checks the volumes of one plugin.
func (m *Monitor) plugin(ctx context.Context, p *csi.Plugin, ps *pass) {
	vols, err := m.cfg.Store.VolumesByPlugin(p.ID)
	if err != nil {
		m.cfg.Logger.Warn("health: cannot list the plugin's volumes; trying again on the next pass", "plugin", p.ID, "error", err)
		return
	}
	live := vols[:0:0]
	for _, v := range vols {
		if !v.Creating && v.ExternalID != "" {
			live = append(live, v)
		}
	}
	caps := controllerCaps(p)
	views := m.controllerViews(ctx, p, caps, live)
	for _, v := range live {
		view, ok := views[v.ExternalID]
		if ok && view.err == nil {
			m.controllerReport(p, v, caps, view, ps)
			if caps.ListVolumesPublishedNodes && view.found {
				m.drift(ctx, p, v, view.published, ps)
			}
		}
		m.resumeLeaks(ctx, p, v, ps)
	}
	if m.cfg.Nodes != nil {
		m.nodeStats(ctx, p, live, ps)
	}
}

// controllerCaps is what p's healthy controllers advertise, together.
func controllerCaps(p *csi.Plugin) csi.ControllerCapabilities {
	var c csi.ControllerCapabilities
	for _, in := range p.Controllers {
		if in == nil || !in.Healthy || in.ControllerInfo == nil {
			continue
		}
		x := in.ControllerInfo.Capabilities
		c.ListVolumes = c.ListVolumes || x.ListVolumes
		c.GetVolume = c.GetVolume || x.GetVolume
		c.GetVolumeHealth = c.GetVolumeHealth || x.GetVolumeHealth
		c.ListVolumesPublishedNodes = c.ListVolumesPublishedNodes || x.ListVolumesPublishedNodes
		c.PublishUnpublishVolume = c.PublishUnpublishVolume || x.PublishUnpublishVolume
	}
	return c
}

// each calls fn(i) for i in [0, n), m.cfg.Parallelism at a time, and
// returns once every call has.
func (m *Monitor) each(n int, fn func(i int)) {
	work := make(chan int)
	var wg sync.WaitGroup
	for range min(m.cfg.Parallelism, n) {
		wg.Go(func() {
			for i := range work {
				fn(i)
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
}

// callCtx bounds one plugin call by Config.CallTimeout.
func (m *Monitor) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, m.cfg.CallTimeout)
}
