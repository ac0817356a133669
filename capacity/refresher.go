package capacity

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/state"
)

// Refresher keeps the capacity records of every plugin whose controller
// advertises GET_CAPACITY. Build it with New, start Run once, and call
// Refresh after each create and delete. Refresh is safe from any
// goroutine; the rest of the work happens in Run's goroutine and the
// call workers it starts and waits for.
type Refresher struct {
	cfg     Config
	kick    chan struct{} // holds one token while a Refresh is pending
	running atomic.Bool

	mu      sync.Mutex
	pending map[string]bool // plugin IDs kicked since the last pass

	// failing holds, per plugin and record key, the GetCapacity calls
	// whose last attempt failed, so that a run of failures logs once.
	// Only Run's goroutine touches it.
	failing map[string]bool
}

// New validates cfg and returns a Refresher. It starts nothing.
func New(cfg Config) (*Refresher, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Refresher{cfg: cfg, kick: make(chan struct{}, 1), pending: map[string]bool{}, failing: map[string]bool{}}, nil
}

// Refresh asks for a refresh of one plugin as soon as the current pass
// (if any) is done, without waiting for it: the host calls it after each
// CreateVolume and DeleteVolume of the plugin. Kicks coalesce: several
// before the next pass make one refresh of each plugin named.
func (r *Refresher) Refresh(pluginID string) {
	r.mu.Lock()
	r.pending[pluginID] = true
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default: // a pass is already due
	}
}

// Run refreshes every plugin at once, then every Config.Interval, and
// the plugins named by Refresh in between, one pass at a time, until
// ctx ends; it then returns nil once every call it started has
// returned. A Refresher runs once.
func (r *Refresher) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return fmt.Errorf("%w: capacity: Run was already called; a Refresher runs once, build a new one with New", csi.ErrInvalidRequest)
	}
	r.pass(ctx, nil)
	timer := r.cfg.Clock.NewTimer(r.cfg.Interval)
	defer func() { timer.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C():
			r.pass(ctx, nil)
			timer = r.cfg.Clock.NewTimer(r.cfg.Interval)
		case <-r.kick:
			// The interval timer keeps running: kicks never postpone
			// the full refresh.
			r.mu.Lock()
			ids := make([]string, 0, len(r.pending))
			for id := range r.pending {
				ids = append(ids, id)
			}
			clear(r.pending)
			r.mu.Unlock()
			slices.Sort(ids)
			r.pass(ctx, ids)
		}
	}
}

// call is one GetCapacity of a pass.
type call struct {
	plugin int // index in the pass's plugins
	id     string
	req    plugin.GetCapacityRequest
	class  string
	resp   *plugin.GetCapacityResponse
	err    error
}

// failKey names the call in Refresher.failing.
func (c *call) failKey() string {
	rec := state.Capacity{Topology: c.req.Topology, Class: c.class}
	return c.id + "\x00" + rec.Key()
}

// pass refreshes the plugins ids, or all of them when ids is nil.
func (r *Refresher) pass(ctx context.Context, ids []string) {
	if ids == nil {
		// A full pass covers every kick made before it reads the plugins.
		r.mu.Lock()
		clear(r.pending)
		r.mu.Unlock()
	}
	plugins, err := r.plugins(ids)
	if err != nil {
		r.cfg.Logger.Warn("capacity: cannot list plugins; retrying on the next pass", "error", err)
		return
	}
	var calls []*call
	for i, p := range plugins {
		if !advertises(p) {
			continue
		}
		for _, topo := range nodeTopologies(p) {
			for _, params := range r.cfg.Classes {
				calls = append(calls, &call{plugin: i, id: p.ID, class: state.ClassOf(params),
					req: plugin.GetCapacityRequest{Parameters: params, Topology: topo}})
			}
		}
	}
	r.run(ctx, calls)
	if ctx.Err() != nil {
		return // a pass cut short writes nothing: its failures are the stop's
	}
	if ids == nil {
		// Forget the failures of plugins, topologies and classes no
		// longer asked about, so that failing does not grow for good.
		asked := make(map[string]bool, len(calls))
		for _, c := range calls {
			asked[c.failKey()] = true
		}
		maps.DeleteFunc(r.failing, func(k string, _ bool) bool { return !asked[k] })
	}
	for i, p := range plugins {
		var own []*call
		for _, c := range calls {
			if c.plugin == i {
				own = append(own, c)
			}
		}
		r.finish(ctx, p, own)
	}
}

// plugins reads the plugins of a pass, sorted by ID; a kicked plugin
// that is gone is skipped.
func (r *Refresher) plugins(ids []string) ([]*csi.Plugin, error) {
	if ids == nil {
		return r.cfg.Store.Plugins()
	}
	var out []*csi.Plugin
	for _, id := range ids {
		p, err := r.cfg.Store.Plugin(id)
		switch {
		case errors.Is(err, csi.ErrPluginNotFound) || errors.Is(err, csi.ErrInvalidID):
			continue
		case err != nil:
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// run makes the calls, Config.Parallelism at a time.
func (r *Refresher) run(ctx context.Context, calls []*call) {
	work := make(chan *call)
	var wg sync.WaitGroup
	for range min(r.cfg.Parallelism, len(calls)) {
		wg.Go(func() {
			for c := range work {
				cctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
				c.resp, c.err = r.cfg.Controllers.GetCapacity(cctx, c.id, &c.req)
				cancel()
			}
		})
	}
	for _, c := range calls {
		work <- c
	}
	close(work)
	wg.Wait()
}

// finish builds a plugin's records from its calls and writes them when
// they differ from the stored ones.
func (r *Refresher) finish(ctx context.Context, p *csi.Plugin, calls []*call) {
	failed := 0
	report := func(changed bool, err error) {
		if r.cfg.Observer != nil {
			r.cfg.Observer.Refreshed(p.ID, len(calls), failed, changed, err)
		}
	}
	stored, err := r.cfg.Store.Capacity(p.ID)
	if errors.Is(err, csi.ErrPluginNotFound) {
		report(false, nil) // gone since the list: its records went with it
		return
	}
	if err != nil {
		r.cfg.Logger.Warn("capacity: cannot read the stored records; retrying on the next pass", "plugin", p.ID, "error", err)
		report(false, err)
		return
	}
	byKey := make(map[string]*state.Capacity, len(stored))
	for i := range stored {
		byKey[stored[i].Key()] = &stored[i]
	}
	now := r.cfg.Clock.Now()
	recs := make([]state.Capacity, 0, len(calls))
	for _, c := range calls {
		rec := state.Capacity{Topology: c.req.Topology, Class: c.class}
		key := c.failKey()
		err := c.err
		if err == nil && c.resp == nil {
			err = errors.New("GetCapacity returned no response")
		}
		if err == nil && (c.resp.Available < 0 || neg(c.resp.MaximumVolumeSize) || neg(c.resp.MinimumVolumeSize)) {
			err = fmt.Errorf("%w: GetCapacity reported a negative size", csi.ErrInvalidRequest)
		}
		if err != nil {
			failed++
			if !r.failing[key] {
				r.failing[key] = true
				r.cfg.Logger.Warn("capacity: GetCapacity failed; keeping the last value until a pass succeeds",
					"plugin", p.ID, "topology", c.req.Topology.String(), "class", c.class, "error", err)
			}
			if old := byKey[rec.Key()]; old != nil {
				recs = append(recs, *old)
			}
			continue
		}
		if r.failing[key] {
			delete(r.failing, key)
			r.cfg.Logger.Info("capacity: GetCapacity answers again", "plugin", p.ID, "topology", c.req.Topology.String(), "class", c.class)
		}
		rec.Available, rec.MaximumVolumeSize, rec.MinimumVolumeSize = c.resp.Available, c.resp.MaximumVolumeSize, c.resp.MinimumVolumeSize
		rec.SeenAt = now
		recs = append(recs, rec)
	}
	if sameRecords(stored, recs) {
		report(false, nil)
		return
	}
	res, err := r.cfg.Applier.Apply(ctx, state.SetCapacity{PluginID: p.ID, Records: recs})
	switch {
	case errors.Is(err, csi.ErrPluginNotFound):
		err = nil // gone meanwhile
	case err != nil:
		r.cfg.Logger.Warn("capacity: cannot write the records; retrying on the next pass", "plugin", p.ID, "error", err)
	}
	report(err == nil && res.Changed, err)
}

func neg(v *int64) bool { return v != nil && *v < 0 }

// sameRecords reports whether b holds the records of a, SeenAt aside,
// in any order.
func sameRecords(a, b []state.Capacity) bool {
	if len(a) != len(b) {
		return false
	}
	byKey := func(x, y state.Capacity) int { return cmp.Compare(x.Key(), y.Key()) }
	a, b = slices.Clone(a), slices.Clone(b)
	slices.SortFunc(a, byKey)
	slices.SortFunc(b, byKey)
	eq := func(x, y *int64) bool { return (x == nil) == (y == nil) && (x == nil || *x == *y) }
	for i := range a {
		if a[i].Key() != b[i].Key() || a[i].Available != b[i].Available ||
			!eq(a[i].MaximumVolumeSize, b[i].MaximumVolumeSize) || !eq(a[i].MinimumVolumeSize, b[i].MinimumVolumeSize) {
			return false
		}
	}
	return true
}

// advertises reports whether a controller instance of p advertises
// GET_CAPACITY.
func advertises(p *csi.Plugin) bool {
	for _, in := range p.Controllers {
		if in.ControllerInfo != nil && in.ControllerInfo.Capabilities.GetCapacity {
			return true
		}
	}
	return false
}

// nodeTopologies returns the distinct accessible topologies of p's node
// instances, sorted by key; a node without one counts as nil, and a
// plugin without node instances is asked about nil.
func nodeTopologies(p *csi.Plugin) []*csi.Topology {
	seen := map[string]*csi.Topology{}
	for _, in := range p.Nodes {
		t := in.NodeInfo.Topology()
		if t != nil && len(t.Segments) == 0 {
			t = nil
		}
		seen[state.TopologyKey(t)] = t
	}
	if len(seen) == 0 {
		return []*csi.Topology{nil}
	}
	keys := slices.Sorted(maps.Keys(seen))
	out := make([]*csi.Topology, len(keys))
	for i, k := range keys {
		out[i] = seen[k]
	}
	return out
}
