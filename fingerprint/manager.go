package fingerprint

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/backoff"
	"github.com/csikit/csikit/csi/clock"
	"github.com/csikit/csikit/csi/metrics"
	"github.com/csikit/csikit/csi/plugin"
)

// Defaults used when the corresponding Config field is zero.
const (
	// DefaultInterval is the time between two fingerprints of a plugin
	// that answered.
	DefaultInterval = 30 * time.Second
	// DefaultSocketWait bounds the wait for a new plugin's socket to
	// appear before its first fingerprint. A plugin task usually creates
	// its socket within seconds of starting; after a minute it is more
	// useful to report it unhealthy than to stay silent.
	DefaultSocketWait = time.Minute
	// DefaultTimeout bounds one fingerprint (all its RPCs). The RPCs are
	// cheap queries; a plugin that takes longer is not healthy.
	DefaultTimeout = 10 * time.Second
	// DefaultFinalReportTimeout bounds each of the two reports Run makes
	// after its ctx ended.
	DefaultFinalReportTimeout = 10 * time.Second
	// DefaultBackoffBase is the first retry delay of the default Backoff.
	DefaultBackoffBase = time.Second
)

// Config configures a Manager.
type Config struct {
	// NodeID is the host's ID of this node; it names the node in errors
	// and logs. Required (csi.ValidateNodeID).
	NodeID string

	// Report receives the fingerprints of every plugin instance on this
	// node, each time one of them changes (compared with
	// csi.PluginInfo.SameAs, so UpdateTime alone is no change). The host
	// forwards them to the server, which upserts the node's plugins.
	// Required.
	//
	// The Manager calls Report from one goroutine at a time, in order, so
	// a later call always carries newer state. The slice and the infos
	// belong to the callee. Report should return once the server has the
	// list; an error makes the Manager retry with Backoff, with whatever
	// state is newest by then. After Run's ctx ended, Report is called
	// with a ctx bounded by FinalReportTimeout, at most twice, and its
	// errors are only logged.
	Report func(ctx context.Context, infos []*csi.PluginInfo) error

	// Logger receives the manager's logs; nil means no logging.
	Logger hclog.Logger
	// Clock times intervals, backoff, the socket wait and UpdateTime;
	// nil means clock.Real.
	Clock clock.Clock

	// Interval is the time between two fingerprints of an instance that
	// is healthy; 0 means DefaultInterval.
	Interval time.Duration
	// Backoff spaces the fingerprints of an unhealthy instance, the
	// retries of a failed Report and the checks for a socket that is
	// not there yet. No delay exceeds Interval. The zero value means
	// DefaultBackoffBase doubling up to Interval, with backoff's default
	// jitter.
	Backoff backoff.Policy
	// SocketWait bounds how long a newly registered instance waits for
	// its socket before its first fingerprint (which then reports it
	// unhealthy); 0 means DefaultSocketWait.
	SocketWait time.Duration
	// StaticRefresh is how long the cached GetPluginInfo,
	// GetPluginCapabilities and NodeGetInfo answers are trusted; 0 means
	// DefaultStaticRefresh.
	StaticRefresh time.Duration
	// Timeout bounds one fingerprint; 0 means DefaultTimeout.
	Timeout time.Duration
	// FinalReportTimeout bounds each report made after Run's ctx ended;
	// 0 means DefaultFinalReportTimeout.
	FinalReportTimeout time.Duration

	// Client is the template for the plugin clients the Manager creates,
	// one per registered instance. Endpoint is ignored (each instance
	// brings its socket); a nil Logger means a sub-logger of Logger, a
	// nil Clock means Clock. Other zero fields take plugin's defaults.
	// The clients also serve the NodePlugin and ControllerPlugin lookups.
	// Each client's metrics get a "plugin" label with its plugin ID.
	Client plugin.Config
}

// Instance is one plugin instance: a plugin served by an allocation on
// this node.
type Instance struct {
	// PluginID is the plugin's ID (csi.ValidatePluginID).
	PluginID string
	// AllocationID is the allocation running the plugin
	// (csi.ValidateAllocationID).
	AllocationID string
	// Type says which services the instance serves.
	Type csi.PluginType
	// Socket is the plugin's unix socket, an absolute path or
	// unix:///path. It need not exist yet.
	Socket string
}

// instanceKey identifies an instance. One allocation may run several
// plugins, and one plugin may be run by several allocations.
type instanceKey struct {
	pluginID     string
	allocationID string
}

func (k instanceKey) less(o instanceKey) bool {
	if k.pluginID != o.pluginID {
		return k.pluginID < o.pluginID
	}
	return k.allocationID < o.allocationID
}

// Manager is the node's plugin registry: it fingerprints every registered
// plugin instance, reports the node's plugins to the host, and hands the
// other node-side parts a client for a plugin. See the package doc for
// the host's duties.
//
// All methods are safe for concurrent use.
type Manager struct {
	cfg     Config
	logger  hclog.Logger
	clock   clock.Clock
	backoff backoff.Policy

	// startCh wakes Run to start the goroutines of new instances;
	// changed wakes the reporter. Both hold at most one pending signal.
	startCh chan struct{}
	changed chan struct{}

	mu        sync.Mutex
	state     runState
	instances map[instanceKey]*instance
	// leaving holds deregistered instances whose final, unhealthy
	// fingerprint has not been reported yet.
	leaving []*instance
	// delivered is the last list Report accepted. Its infos, like every
	// instance's info, are never modified once stored.
	delivered []*csi.PluginInfo
	// attempted is the last list handed to Report, accepted or not: a
	// report that failed may still have reached the host.
	attempted []*csi.PluginInfo
	seq       uint64
}

type runState int

const (
	stateIdle runState = iota
	stateRunning
	stateStopped
)

// instance is the manager's record of one registered instance.
type instance struct {
	Instance
	key    instanceKey
	seq    uint64 // registration order; larger is newer
	client *plugin.Client
	fp     *Fingerprinter

	// Guarded by Manager.mu.
	info    *csi.PluginInfo // latest fingerprint, nil before the first
	started bool
	cancel  context.CancelFunc // ends the instance's goroutine once started
}

// New validates cfg, fills its defaults and returns a Manager. It starts
// no goroutine and creates no client: Run does the work.
func New(cfg Config) (*Manager, error) {
	if err := csi.ValidateNodeID(cfg.NodeID); err != nil {
		return nil, fmt.Errorf("fingerprint manager: Config.NodeID: %w", err)
	}
	if cfg.Report == nil {
		return nil, fmt.Errorf("%w: fingerprint manager for node %q: Config.Report is nil; pass a function that forwards the node's plugins to the server",
			csi.ErrInvalidRequest, cfg.NodeID)
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"Interval", &cfg.Interval, DefaultInterval},
		{"SocketWait", &cfg.SocketWait, DefaultSocketWait},
		{"StaticRefresh", &cfg.StaticRefresh, DefaultStaticRefresh},
		{"Timeout", &cfg.Timeout, DefaultTimeout},
		{"FinalReportTimeout", &cfg.FinalReportTimeout, DefaultFinalReportTimeout},
	} {
		if *d.v < 0 {
			return nil, fmt.Errorf("%w: fingerprint manager for node %q: Config.%s is %s; use a positive duration, or 0 for the default (%s)",
				csi.ErrInvalidRequest, cfg.NodeID, d.name, *d.v, d.def)
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	cfg.Clock = clock.Or(cfg.Clock)
	if cfg.Client.Logger == nil {
		cfg.Client.Logger = cfg.Logger.Named("plugin")
	}
	if cfg.Client.Clock == nil {
		cfg.Client.Clock = cfg.Clock
	}
	bo := cfg.Backoff
	if bo == (backoff.Policy{}) {
		bo.Base = DefaultBackoffBase
	}
	if bo.Max <= 0 || bo.Max > cfg.Interval {
		bo.Max = cfg.Interval
	}
	return &Manager{
		cfg:       cfg,
		logger:    cfg.Logger,
		clock:     cfg.Clock,
		backoff:   bo,
		startCh:   make(chan struct{}, 1),
		changed:   make(chan struct{}, 1),
		instances: make(map[instanceKey]*instance),
	}, nil
}

// Register adds a plugin instance, when the allocation running it
// starts. It may be called before or while Run runs, from any goroutine;
// the instance is fingerprinted once Run runs. Registering an instance
// again (same plugin and allocation) with the same type and socket does
// nothing; with another type or socket it replaces the instance, dropping
// the old client and cache.
//
// Register fails with an error wrapping csi.ErrInvalidID or
// csi.ErrInvalidRequest for bad input, and with csi.ErrUnavailable once
// Run has returned.
func (m *Manager) Register(inst Instance) error {
	if err := csi.ValidatePluginID(inst.PluginID); err != nil {
		return fmt.Errorf("register plugin on node %q: %w", m.cfg.NodeID, err)
	}
	if err := csi.ValidateAllocationID(inst.AllocationID); err != nil {
		return fmt.Errorf("register plugin %q on node %q: %w", inst.PluginID, m.cfg.NodeID, err)
	}
	if !inst.Type.Valid() {
		return fmt.Errorf("%w: register plugin %q (allocation %q) on node %q: type %q is not %q, %q or %q",
			csi.ErrInvalidRequest, inst.PluginID, inst.AllocationID, m.cfg.NodeID,
			inst.Type, csi.PluginTypeController, csi.PluginTypeNode, csi.PluginTypeMonolith)
	}
	key := instanceKey{inst.PluginID, inst.AllocationID}

	m.mu.Lock()
	if err := m.stoppedErrLocked("register", inst); err != nil {
		m.mu.Unlock()
		return err
	}
	if old := m.instances[key]; old != nil && old.Type == inst.Type && old.Socket == inst.Socket {
		m.mu.Unlock()
		return nil
	}
	m.mu.Unlock()

	// Build outside the lock: plugin.New does not connect, but it is not
	// free either.
	ccfg := m.cfg.Client
	ccfg.Endpoint = inst.Socket
	ccfg.MetricLabels = append(slices.Clip(ccfg.MetricLabels), metrics.Label{Name: "plugin", Value: inst.PluginID})
	client, err := plugin.New(ccfg)
	if err != nil {
		return fmt.Errorf("register plugin %q (allocation %q) on node %q: %w", inst.PluginID, inst.AllocationID, m.cfg.NodeID, err)
	}
	fp, err := NewFingerprinter(FingerprinterConfig{
		PluginID:      inst.PluginID,
		AllocationID:  inst.AllocationID,
		Type:          inst.Type,
		Client:        client,
		Socket:        client.Endpoint(),
		Clock:         m.clock,
		StaticRefresh: m.cfg.StaticRefresh,
	})
	if err != nil {
		_ = client.Close()
		return fmt.Errorf("register plugin %q (allocation %q) on node %q: %w", inst.PluginID, inst.AllocationID, m.cfg.NodeID, err)
	}
	n := &instance{Instance: inst, key: key, client: client, fp: fp}

	m.mu.Lock()
	if err := m.stoppedErrLocked("register", inst); err != nil {
		m.mu.Unlock()
		_ = client.Close()
		return err
	}
	m.seq++
	n.seq = m.seq
	var closeOld *plugin.Client
	if old := m.instances[key]; old != nil {
		// Keep reporting the old fingerprint until the new instance has
		// its own, so that the server sees a change, not a removal.
		n.info = old.info
		closeOld = m.endLocked(old)
	}
	m.leaving = deleteKey(m.leaving, key)
	m.instances[key] = n
	m.mu.Unlock()

	if closeOld != nil {
		_ = closeOld.Close()
	}
	m.logger.Debug("plugin registered", "plugin_id", inst.PluginID, "allocation_id", inst.AllocationID,
		"type", inst.Type, "socket", client.Endpoint())
	signal(m.startCh)
	return nil
}

// Deregister removes a plugin instance, when the allocation running it
// stops. If the instance was in a report the host accepted, the Manager
// reports it once more, unhealthy, then reports the node's plugins
// without it (an instance never reported is simply dropped). It closes
// the instance's client at once,
// so calls that a caller of NodePlugin or ControllerPlugin still makes on
// it fail.
//
// Deregistering an instance that is not registered returns an error
// wrapping csi.ErrPluginNotFound, which a host that deregisters on every
// allocation stop may ignore. After Run has returned Deregister does
// nothing: every instance was already reported removed.
func (m *Manager) Deregister(pluginID, allocationID string) error {
	key := instanceKey{pluginID, allocationID}
	m.mu.Lock()
	if m.state == stateStopped {
		m.mu.Unlock()
		return nil
	}
	inst := m.instances[key]
	if inst == nil {
		m.mu.Unlock()
		return fmt.Errorf("%w: deregister plugin %q (allocation %q): no such instance is registered on node %q",
			csi.ErrPluginNotFound, pluginID, allocationID, m.cfg.NodeID)
	}
	delete(m.instances, key)
	if inst.info != nil {
		final := inst.info.Copy()
		final.Healthy = false
		final.HealthDescription = fmt.Sprintf("plugin deregistered: allocation %s stopped", allocationID)
		final.UpdateTime = m.clock.Now()
		inst.info = final
		m.leaving = append(m.leaving, inst)
	}
	client := m.endLocked(inst)
	m.mu.Unlock()

	_ = client.Close()
	m.logger.Debug("plugin deregistered", "plugin_id", pluginID, "allocation_id", allocationID)
	signal(m.changed)
	return nil
}

// endLocked stops inst's goroutine, if it has one, and returns inst's
// client for the caller to close once it has released the lock. Closing
// it at once, rather than when the goroutine notices, means a caller that
// still holds the client from a lookup fails from now on instead of
// talking to a plugin the Manager no longer tracks.
func (m *Manager) endLocked(inst *instance) *plugin.Client {
	if inst.started {
		inst.cancel()
	}
	return inst.client
}

func (m *Manager) stoppedErrLocked(op string, inst Instance) error {
	if m.state != stateStopped {
		return nil
	}
	return fmt.Errorf("%w: %s plugin %q (allocation %q): the fingerprint manager of node %q has stopped; create a new Manager",
		csi.ErrUnavailable, op, inst.PluginID, inst.AllocationID, m.cfg.NodeID)
}

// Run fingerprints the registered instances and reports the node's
// plugins until ctx ends. It then reports every plugin it had reported
// unhealthy, then reports an empty list, closes every client, and
// returns nil once all its goroutines have stopped. Run may be called
// once; a second call returns an error wrapping csi.ErrInvalidRequest.
func (m *Manager) Run(ctx context.Context) error {
	m.mu.Lock()
	if m.state != stateIdle {
		m.mu.Unlock()
		return fmt.Errorf("%w: fingerprint manager of node %q: Run was already called; a Manager runs once",
			csi.ErrInvalidRequest, m.cfg.NodeID)
	}
	m.state = stateRunning
	m.mu.Unlock()

	var wg sync.WaitGroup
	wg.Go(func() { m.reportLoop(ctx) })
	for ctx.Err() == nil {
		m.startInstances(ctx, &wg)
		select {
		case <-ctx.Done():
		case <-m.startCh:
		}
	}

	m.mu.Lock()
	m.state = stateStopped
	var clients []*plugin.Client
	for _, inst := range m.instances {
		clients = append(clients, m.endLocked(inst))
	}
	m.mu.Unlock()
	wg.Wait()
	for _, c := range clients {
		_ = c.Close()
	}

	m.finalReports(ctx)
	m.mu.Lock()
	m.instances = make(map[instanceKey]*instance)
	m.leaving, m.delivered, m.attempted = nil, nil, nil
	m.mu.Unlock()
	return nil
}

// startInstances starts a goroutine for every instance that has none.
func (m *Manager) startInstances(ctx context.Context, wg *sync.WaitGroup) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, inst := range m.instances {
		if inst.started {
			continue
		}
		ictx, cancel := context.WithCancel(ctx)
		inst.started, inst.cancel = true, cancel
		wg.Go(func() {
			defer cancel()
			m.runInstance(ictx, inst)
		})
	}
}

// runInstance is the loop of one instance: wait for the socket, then
// fingerprint every Interval, or sooner with backoff while unhealthy.
func (m *Manager) runInstance(ctx context.Context, inst *instance) {
	log := m.logger.With("plugin_id", inst.PluginID, "allocation_id", inst.AllocationID)
	if !m.waitSocket(ctx, inst, log) {
		return
	}
	failures := 0
	for {
		fctx, cancel := context.WithTimeout(ctx, m.cfg.Timeout)
		info, err := inst.fp.Fingerprint(fctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		m.update(inst, info)
		delay := m.cfg.Interval
		if err != nil {
			failures++
			delay = m.delay(failures)
			log.Debug("plugin unhealthy", "error", err, "next", delay)
		} else {
			failures = 0
		}
		if clock.Sleep(ctx, m.clock, delay) != nil {
			return
		}
	}
}

// waitSocket waits, up to SocketWait, for inst's socket to exist. It
// returns false when ctx ended.
func (m *Manager) waitSocket(ctx context.Context, inst *instance, log hclog.Logger) bool {
	path := inst.client.Endpoint()
	if socketExists(path) {
		return true
	}
	log.Debug("waiting for plugin socket", "socket", path, "limit", m.cfg.SocketWait)
	deadline := m.clock.Now().Add(m.cfg.SocketWait)
	for attempt := 1; ; attempt++ {
		left := deadline.Sub(m.clock.Now())
		if left <= 0 {
			log.Warn("plugin socket did not appear in time; fingerprinting anyway", "socket", path, "waited", m.cfg.SocketWait)
			return true
		}
		if err := clock.Sleep(ctx, m.clock, min(m.delay(attempt), left)); err != nil {
			return false
		}
		if socketExists(path) {
			return true
		}
	}
}

// delay is the backoff before retry number attempt, never over Interval.
func (m *Manager) delay(attempt int) time.Duration {
	return min(m.backoff.Delay(attempt), m.cfg.Interval)
}

// update stores inst's new fingerprint, unless inst was deregistered or
// replaced meanwhile.
func (m *Manager) update(inst *instance, info *csi.PluginInfo) {
	m.mu.Lock()
	if m.instances[inst.key] != inst {
		m.mu.Unlock()
		return
	}
	inst.info = info
	m.mu.Unlock()
	signal(m.changed)
}

// signal leaves one pending wake-up on ch.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func deleteKey(list []*instance, key instanceKey) []*instance {
	out := list[:0]
	for _, inst := range list {
		if inst.key != key {
			out = append(out, inst)
		}
	}
	clear(list[len(out):])
	return out
}
