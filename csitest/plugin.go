package csitest

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/clock"
)

// Plugin is a fake CSI plugin serving the Identity, Controller and Node
// services on a unix socket, backed by an in-memory model. All methods
// are safe for concurrent use, including while calls are being served.
type Plugin struct {
	// Fixed at New.
	endpoint           string
	ownDir             string // temporary socket directory we create and remove, or ""
	typ                csi.PluginType
	name, version      string
	requiresTopologies bool
	pools              []Pool // Config.Pools, or the one implicit pool of AvailableCapacity
	explicitPools      bool   // Config.Pools was set
	volumeStatus       StatusReply
	admitUnknown       bool
	offlineExpansion   bool
	publishContext     ContextReply
	volumeContext      ContextReply
	unknownCapacity    bool
	maxCalls           int
	log                hclog.Logger
	clock              clock.Clock

	// lifeMu serializes Start and Stop. It is never held while mu is
	// wanted by a handler, so Stop can wait for Serve to return.
	lifeMu sync.Mutex
	server *grpc.Server
	served chan struct{} // closed when Serve returns

	// mu guards everything below: knobs, model, call log, violations.
	mu          sync.Mutex
	ctrlCaps    csi.ControllerCapabilities
	nodeCaps    csi.NodeCapabilities
	nodeID      string
	maxVolumes  int64
	topology    *csi.Topology
	probeReady  bool
	faults      map[string]*fault
	volumes     map[string]*volume
	snapshots   map[string]*snapshot
	volumeSeq   int
	snapshotSeq int
	calls       []*Call        // the retained log, oldest first; at most maxCalls when that is set
	callCounts  map[string]int // calls per method since New or ResetCalls, dropped ones included
	dropped     int            // calls MaxCalls dropped from the log since New or ResetCalls
	violations  []Violation
}

// New validates cfg, fills its defaults and returns a plugin that is not
// serving yet; call Start. New creates no file and starts no goroutine.
func New(cfg Config) (*Plugin, error) {
	c, ownDir, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	explicit := len(c.Pools) > 0
	if !explicit {
		c.Pools = []Pool{{Capacity: c.AvailableCapacity}}
	}
	return &Plugin{
		endpoint:           c.Endpoint,
		ownDir:             ownDir,
		typ:                c.Type,
		name:               c.Name,
		version:            c.Version,
		requiresTopologies: c.RequiresTopologies,
		pools:              c.Pools,
		explicitPools:      explicit,
		volumeStatus:       c.VolumeStatus,
		admitUnknown:       c.AdmitUnknownVolumes,
		offlineExpansion:   c.OfflineExpansion,
		publishContext:     c.PublishContext,
		volumeContext:      c.VolumeContext,
		unknownCapacity:    c.UnknownCapacity,
		maxCalls:           c.MaxCalls,
		log:                c.Logger,
		clock:              c.Clock,
		ctrlCaps:           c.Controller,
		nodeCaps:           c.Node,
		nodeID:             c.NodeID,
		maxVolumes:         c.MaxVolumes,
		topology:           c.Topology,
		probeReady:         true,
		faults:             make(map[string]*fault),
		volumes:            make(map[string]*volume),
		snapshots:          make(map[string]*snapshot),
		callCounts:         make(map[string]int),
	}, nil
}

// Start is New followed by Plugin.Start for a test: it fails the test on
// error and stops the plugin when the test ends.
func Start(t testing.TB, cfg Config) *Plugin {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatalf("csitest: %v", err)
	}
	if err := p.Start(); err != nil {
		t.Fatalf("csitest: %v", err)
	}
	t.Cleanup(p.Stop)
	return p
}

// Endpoint returns the socket path.
func (p *Plugin) Endpoint() string { return p.endpoint }

// Addr returns the gRPC target of the socket, "unix://" + Endpoint(), for
// grpc.NewClient.
func (p *Plugin) Addr() string { return "unix://" + p.endpoint }

// Start listens on the endpoint and serves until Stop. A stale socket
// file left by an earlier run is removed first; any other file at the
// path is an error, never deleted. Starting a plugin that is already
// serving is an error.
func (p *Plugin) Start() error {
	p.lifeMu.Lock()
	defer p.lifeMu.Unlock()
	if p.server != nil {
		return fmt.Errorf("csitest: plugin on %s is already serving; call Stop or Restart first", p.endpoint)
	}
	if err := os.MkdirAll(filepath.Dir(p.endpoint), 0o700); err != nil {
		return fmt.Errorf("csitest: create the socket directory for %s: %w", p.endpoint, err)
	}
	if err := removeStaleSocket(p.endpoint); err != nil {
		return err
	}
	lis, err := net.Listen("unix", p.endpoint)
	if err != nil {
		return fmt.Errorf("csitest: listen on %s: %w", p.endpoint, err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(p.intercept))
	csipb.RegisterIdentityServer(srv, identityServer{p: p})
	csipb.RegisterControllerServer(srv, controllerServer{p: p})
	csipb.RegisterNodeServer(srv, nodeServer{p: p})
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(lis); err != nil {
			p.log.Error("csitest: serve stopped", "endpoint", p.endpoint, "error", err)
		}
	}()
	p.server, p.served = srv, done
	p.log.Debug("csitest: serving", "endpoint", p.endpoint)
	return nil
}

func removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("csitest: inspect %s: %w", path, err)
	case fi.Mode().Type() != fs.ModeSocket:
		return fmt.Errorf("csitest: %s exists and is not a socket; refusing to remove it, choose another Endpoint", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("csitest: remove stale socket %s: %w", path, err)
	}
	return nil
}

// Stop stops serving at once, like a crashed plugin: open connections
// close and calls in flight fail on the client side. The socket file
// (and the temporary directory New chose for it) is removed. The model,
// fault knobs, call log and violations are kept. Stop is idempotent and
// returns once the serving goroutine has ended; a handler still running a
// hook that ignores its context finishes on its own.
func (p *Plugin) Stop() {
	p.lifeMu.Lock()
	defer p.lifeMu.Unlock()
	if p.server == nil {
		return
	}
	p.server.Stop()
	<-p.served
	p.server, p.served = nil, nil
	if err := os.Remove(p.endpoint); err != nil && !errors.Is(err, fs.ErrNotExist) {
		p.log.Warn("csitest: remove socket", "endpoint", p.endpoint, "error", err)
	}
	if p.ownDir != "" {
		if err := os.Remove(p.ownDir); err != nil && !errors.Is(err, fs.ErrNotExist) {
			p.log.Warn("csitest: remove socket directory", "dir", p.ownDir, "error", err)
		}
	}
	p.log.Debug("csitest: stopped", "endpoint", p.endpoint)
}

// Restart stops the plugin and serves again on the same socket, keeping
// the model, knobs and logs: a plugin crash and restart. A client that
// keeps its connection reconnects on its own; the first call on it may
// still fail Unavailable if it raced with the client noticing the crash,
// and calls made with grpc.WaitForReady(true) wait for the reconnection.
func (p *Plugin) Restart() error {
	p.Stop()
	return p.Start()
}

// SetProbeReady sets what Probe reports; a new plugin is ready.
func (p *Plugin) SetProbeReady(ready bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.probeReady = ready
}

// SetCapabilities changes the advertised capabilities; calls that arrive
// afterwards see the new set.
func (p *Plugin) SetCapabilities(ctrl csi.ControllerCapabilities, node csi.NodeCapabilities) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ctrlCaps, p.nodeCaps = ctrl, node
}

// SetNodeInfo changes what NodeGetInfo reports. The lifecycle checker
// follows the new node ID from then on.
func (p *Plugin) SetNodeInfo(nodeID string, maxVolumes int64, topo *csi.Topology) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.nodeID, p.maxVolumes, p.topology = nodeID, maxVolumes, topo.Copy()
}
