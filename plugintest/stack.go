package plugintest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/csikit/csikit/claimgc"
	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/fingerprint"
	"github.com/csikit/csikit/mounter"
	"github.com/csikit/csikit/rpcshim"
	"github.com/csikit/csikit/state"
)

// The names the harness gives the plugin, the node and the workloads in
// its private csikit stack. Each run has a stack of its own, so fixed
// names cannot collide; only the CSI volume name, which the plugin sees,
// is made unique per run.
const (
	pluginID  = "plugintest"
	namespace = "plugintest"
	hostNode  = "plugintest-node"
)

// stack is the csikit stack of one run, in one process: the server side
// (MemStore, LocalApplier, Router, Server, claim release Worker) and one
// node (fingerprint Manager, Mounter, NodeEndpoint) joined by an
// InmemTransport.
type stack struct {
	store   *state.MemStore
	applier *state.LocalApplier
	router  *rpcshim.Router
	server  *rpcshim.Server
	worker  *claimgc.Worker
	tr      *rpcshim.InmemTransport
	mgr     *fingerprint.Manager
	mnt     *mounter.Mounter
	plugins recordingPlugins
	// statuses says which nodes are ready: hostNode, and secondNode
	// once its agent starts.
	statuses *rpcshim.InmemNodeStatuses
	// second is the second node's agent (Config.SecondNodeEndpoint);
	// nil until the hand-over starts it.
	second *agent
	crash  crashPoint // where Config.Faults stops the node agent
	// startNode makes the node agent's mounter and endpoint; restartNode
	// calls it again.
	startNode func() error

	cancels  []context.CancelFunc // end the Worker's and the Manager's Run
	wg       sync.WaitGroup
	registry bool // the Manager runs
	stopped  bool

	reports reportLog // the node Manager's

	mu   sync.Mutex
	done bool // the run is over: nobody reads the store
}

func newStack(cfg Config, mountRoot, stateDir string, calls *callLog, made *madePaths) (*stack, error) {
	log := cfg.Logger
	s := &stack{}
	store, err := state.NewMemStore(state.Config{Logger: log.Named("state")})
	if err != nil {
		return nil, err
	}
	s.store = store
	s.applier = state.NewLocalApplier(store)
	statuses := &rpcshim.InmemNodeStatuses{}
	statuses.Set(hostNode, csi.NodeStatusReady)
	s.statuses = statuses
	s.tr = rpcshim.NewInmemTransport()
	if s.router, err = rpcshim.NewRouter(rpcshim.RouterConfig{
		Store: store, Transport: s.tr, NodeStatuses: statuses, Logger: log.Named("router"),
	}); err != nil {
		return nil, err
	}
	if s.server, err = rpcshim.NewServer(rpcshim.ServerConfig{
		Store: store, Applier: s.applier, Router: s.router, Logger: log.Named("server"),
	}); err != nil {
		return nil, err
	}
	if s.worker, err = claimgc.New(claimgc.Config{
		Store: store, Applier: s.applier, Nodes: s.router, Controllers: s.router, NodeStatuses: statuses,
		Parallelism: 1,
		// Retry soon: the harness waits for the release, and reports the
		// first error the worker records rather than waiting it out.
		RetryBase: 20 * time.Millisecond, RetryMax: time.Second, FinalRetryInterval: time.Second,
		StepTimeout: cfg.Timeout,
		Logger:      log.Named("claimgc"),
	}); err != nil {
		return nil, err
	}
	if s.mgr, err = fingerprint.New(fingerprint.Config{
		NodeID:  hostNode,
		Report:  s.reporter(hostNode, &s.reports),
		Logger:  log.Named("fingerprint"),
		Timeout: cfg.Timeout,
		Client:  plugin.Config{CallTimeout: cfg.Timeout, Logger: log.Named("plugin")},
	}); err != nil {
		return nil, err
	}
	s.plugins = recordingPlugins{reg: s.mgr, log: calls, made: made}
	nodePlugins := faultPlugins{recordingPlugins: s.plugins, crash: &s.crash}
	s.startNode = func() error {
		mnt, err := mounter.New(mounter.Config{
			Root: mountRoot, StagingRoot: cfg.StagingDir, TargetRoot: cfg.TargetDir,
			StateDir: stateDir, Plugins: nodePlugins, Logger: log.Named("mounter"),
			// The state directory is the run's own and is thrown away.
			NoSync: true,
		})
		if err != nil {
			return err
		}
		endpoint, err := rpcshim.NewNodeEndpoint(rpcshim.NodeEndpointConfig{
			NodeID: hostNode, Plugins: nodePlugins, Mounter: mnt, Logger: log.Named("endpoint"),
		})
		if err != nil {
			_ = mnt.Close()
			return err
		}
		s.mnt = mnt
		s.tr.Register(hostNode, endpoint)
		return nil
	}
	if err := s.startNode(); err != nil {
		return nil, err
	}
	return s, nil
}

// restartNode closes the node agent's mounter and starts a new mounter
// and node endpoint from the same state directory, as a node agent that
// restarts. The caller makes sure no call is in flight on the node.
func (s *stack) restartNode() error {
	if err := s.mnt.Close(); err != nil {
		return fmt.Errorf("close the mounter: %w", err)
	}
	s.mnt = nil
	return s.startNode()
}

// reporter is a node Manager's Report: node's fingerprints go to the
// store, as a host would forward them to its server, and the last one
// written, with the store's answer, to log.
func (s *stack) reporter(node string, log *reportLog) func(context.Context, []*csi.PluginInfo) error {
	return func(ctx context.Context, infos []*csi.PluginInfo) error {
		written, err := s.forward(ctx, node, infos)
		if written {
			log.record(infos, err)
		}
		return err
	}
}

// forward writes node's fingerprints to the store, as a host forwards
// them to its server, and reports whether it tried. Once the run is
// over it writes nothing: those are the Managers' final reports, as
// they stop with the run.
func (s *stack) forward(ctx context.Context, node string, infos []*csi.PluginInfo) (bool, error) {
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	if done {
		return false, nil
	}
	list := make([]csi.PluginInfo, len(infos))
	for i, in := range infos {
		list[i] = *in
	}
	_, err := s.applier.Apply(ctx, state.UpsertNodePlugins{NodeID: node, Plugins: list})
	return true, err
}

// startWorker runs the claim release Worker until stop. A host starts
// its worker with its server, before any volume exists, and the harness
// does too, before the lifecycle's first step: the worker then waits on
// the store and the lifecycle's steps do not pay for its start.
func (s *stack) startWorker(parent context.Context) {
	ctx := s.untilStop(parent)
	s.worker.SetEnabled(true)
	s.wg.Go(func() { _ = s.worker.Run(ctx) })
}

// startRegistry runs the Manager until stop, which fingerprints the
// instances registered so far and reports them.
func (s *stack) startRegistry(parent context.Context) {
	s.registry = true
	ctx := s.untilStop(parent)
	s.wg.Go(func() { _ = s.mgr.Run(ctx) })
}

// untilStop returns a ctx with parent's values that ends at stop, not
// with parent: the stack's parts outlive the step that starts them.
func (s *stack) untilStop(parent context.Context) context.Context {
	ctx, cancel := context.WithCancel(context.WithoutCancel(parent))
	s.cancels = append(s.cancels, cancel)
	return ctx
}

// stop ends the Worker and the Manager, waits for their goroutines, and
// closes the transport, which waits for its own.
// The Manager closes the plugin clients it made, so a Manager that never
// started runs once, already stopped, to close those that Register made.
func (s *stack) stop() {
	if s.stopped {
		return
	}
	s.stopped = true
	s.mu.Lock()
	s.done = true
	s.mu.Unlock()
	for _, cancel := range s.cancels {
		cancel()
	}
	s.wg.Wait()
	_ = s.tr.Close() // no caller is left; it always returns nil
	if !s.registry {
		runStopped(s.mgr)
	}
	if s.mnt != nil {
		// The run's calls have all returned; its state database goes.
		_ = s.mnt.Close()
	}
	if s.second != nil {
		s.second.close()
	}
}

// runStopped runs a Manager that never ran, already stopped, which
// closes the plugin clients that Register made.
func runStopped(mgr *fingerprint.Manager) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = mgr.Run(ctx)
}

// waitHealthy blocks until the store holds the plugin with a healthy
// instance on node for each role wanted, or ctx ends. On timeout it
// says what the node last reported (last).
func (s *stack) waitHealthy(ctx context.Context, node string, controller, nodeRole bool, last func() string) error {
	for {
		idx, err := s.store.Index(state.TablePlugins)
		if err != nil {
			return err
		}
		p, err := s.store.Plugin(pluginID)
		if err == nil && (!controller || healthy(p.Controllers[node])) && (!nodeRole || healthy(p.Nodes[node])) {
			return nil
		}
		if err != nil && !errors.Is(err, csi.ErrPluginNotFound) {
			return err
		}
		if _, err := s.store.Wait(ctx, state.TablePlugins, idx); err != nil {
			return fmt.Errorf("%w; %s", err, last())
		}
	}
}

func healthy(p *csi.PluginInfo) bool { return p != nil && p.Healthy }

// lastReport describes the Manager's last report, for an error.
func (s *stack) lastReport() string { return s.reports.describe("the node") }

// reportLog is a node Manager's last report written to the store, and
// the store's answer to it.
type reportLog struct {
	mu       sync.Mutex
	reported []*csi.PluginInfo
	applyErr error
}

func (r *reportLog) record(infos []*csi.PluginInfo, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reported, r.applyErr = infos, err
}

// describe describes node's last report: what it reported, or the
// store's refusal.
func (r *reportLog) describe(node string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.applyErr != nil {
		return "the store refused " + node + "'s last report: " + r.applyErr.Error()
	}
	if len(r.reported) == 0 {
		return node + "'s registry has reported nothing yet"
	}
	msg := node + "'s registry last reported"
	for _, in := range r.reported {
		h := "healthy"
		if !in.Healthy {
			h = "unhealthy: " + in.HealthDescription
		}
		msg += fmt.Sprintf(" %s instance %s (%s);", in.Type, in.AllocationID, h)
	}
	return msg
}
