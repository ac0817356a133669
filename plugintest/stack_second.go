package plugintest

import (
	"context"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/fingerprint"
	"github.com/csikit/csikit/mounter"
	"github.com/csikit/csikit/rpcshim"
)

// secondNode is the second node of the stack, where the hand-over
// takes the volume (Config.SecondNodeEndpoint).
const secondNode = "plugintest-node-2"

// agent is the second node's agent, as a host runs one on every node:
// its registry (a fingerprint Manager of the plugin's node service at
// Config.SecondNodeEndpoint), its mounter, and its node endpoint on the
// stack's transport. Its registry reports to the stack's store, so the
// server and the claim release worker reach the node as they reach the
// first. Its plugin calls go to the run's call log.
type agent struct {
	mgr     *fingerprint.Manager
	mnt     *mounter.Mounter
	running bool      // the Manager runs
	reports reportLog // the Manager's
}

// agentDirs are where an agent stages and publishes (root, and staging
// and target when Config.StagingDir and TargetDir are set) and keeps
// its mounter's state.
type agentDirs struct{ root, staging, target, state string }

// startSecond builds the second node's agent and registers the plugin's
// node service at socket with its registry, which does not run yet (see
// runSecond). The node is reported ready.
func (s *stack) startSecond(cfg Config, dirs agentDirs, socket string, calls *callLog, made *madePaths) (*agent, error) {
	log := cfg.Logger.Named("node-2")
	a := &agent{}
	var err error
	if a.mgr, err = fingerprint.New(fingerprint.Config{
		NodeID:  secondNode,
		Report:  s.reporter(secondNode, &a.reports),
		Logger:  log.Named("fingerprint"),
		Timeout: cfg.Timeout,
		Client:  plugin.Config{CallTimeout: cfg.Timeout, Logger: log.Named("plugin")},
	}); err != nil {
		return nil, err
	}
	// Closed by stop from here on: a Manager that never runs still
	// closes the clients Register made.
	s.second = a
	if err := a.mgr.Register(fingerprint.Instance{PluginID: pluginID, AllocationID: "plugin-node-2", Type: csi.PluginTypeNode, Socket: socket}); err != nil {
		return nil, err
	}
	plugins := recordingPlugins{reg: a.mgr, log: calls, made: made}
	if a.mnt, err = mounter.New(mounter.Config{
		Root: dirs.root, StagingRoot: dirs.staging, TargetRoot: dirs.target,
		StateDir: dirs.state, Plugins: plugins, Logger: log.Named("mounter"), NoSync: true,
	}); err != nil {
		return nil, err
	}
	endpoint, err := rpcshim.NewNodeEndpoint(rpcshim.NodeEndpointConfig{
		NodeID: secondNode, Plugins: plugins, Mounter: a.mnt, Logger: log.Named("endpoint"),
	})
	if err != nil {
		return nil, err
	}
	s.tr.Register(secondNode, endpoint)
	s.statuses.Set(secondNode, csi.NodeStatusReady)
	return a, nil
}

// runSecond runs the second node's registry until stop: it fingerprints
// the plugin's node service and reports it to the store.
func (s *stack) runSecond(parent context.Context) {
	a := s.second
	a.running = true
	ctx := s.untilStop(parent)
	s.wg.Go(func() { _ = a.mgr.Run(ctx) })
}

// lastReport describes the agent's last report, for an error.
func (a *agent) lastReport() string { return a.reports.describe("the second node") }

// close closes the agent's plugin clients (through a stopped Manager
// when it never ran; a running one closed them as it stopped) and its
// mounter. The stack's stop calls it once every caller has returned.
func (a *agent) close() {
	if !a.running {
		runStopped(a.mgr)
	}
	if a.mnt != nil {
		_ = a.mnt.Close()
	}
}
