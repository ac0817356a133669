package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/clock"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/examples/hostpathplugin/hostpath"
	"github.com/csikit/csikit/examples/refserver/api"
	"github.com/csikit/csikit/fingerprint"
	"github.com/csikit/csikit/mounter"
	"github.com/csikit/csikit/rpcshim"
)

// Agent is a node agent: csikit's node side (plugin registry, mounter,
// node endpoint) serving the server over gRPC, registered with the
// server's API by heartbeat. See the package doc.
type Agent struct {
	cfg      Config
	servers  []*api.Client
	manager  *fingerprint.Manager
	mounter  *mounter.Mounter
	endpoint *rpcshim.NodeEndpoint
	node     *rpcshim.GRPCNodeServer
	hostpath *hostpath.Plugin
	plugins  *observedPlugins

	advertise atomic.Value // string, set by Run

	mu         sync.Mutex
	lastReport []*csi.PluginInfo
	ran        atomic.Bool
}

// New validates cfg and builds the agent: its plugin registry, its
// mounter (which loads its state from DataDir/state) and its node
// endpoint, and the hostpath plugin if configured. It starts no
// goroutine and opens no socket: Run does.
func New(cfg Config) (*Agent, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	secret, err := loadNodeSecret(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("agent %s: %w", cfg.NodeID, err)
	}
	a := &Agent{cfg: cfg}
	for _, srv := range cfg.servers() {
		a.servers = append(a.servers, srv.WithNodeSecret(secret))
	}
	a.manager, err = fingerprint.New(fingerprint.Config{
		NodeID:   cfg.NodeID,
		Report:   a.report,
		Interval: cfg.FingerprintInterval,
		Clock:    cfg.Clock,
		Logger:   cfg.Logger.Named("fingerprint"),
		Client:   plugin.Config{MetricSink: cfg.MetricSink},
	})
	if err != nil {
		return nil, err
	}
	a.plugins = &observedPlugins{m: a.manager, node: cfg.NodeID, log: cfg.Events, root: filepath.Join(cfg.DataDir, "mnt")}
	a.mounter, err = mounter.New(mounter.Config{
		Root:       filepath.Join(cfg.DataDir, "mnt"),
		StateDir:   filepath.Join(cfg.DataDir, "state"),
		Plugins:    a.plugins,
		NoSync:     cfg.NoSync,
		Logger:     cfg.Logger.Named("mounter"),
		MetricSink: cfg.MetricSink,
	})
	if err != nil {
		return nil, fmt.Errorf("agent %s: %w", cfg.NodeID, err)
	}
	built := false
	defer func() {
		if !built {
			// The next Agent on this DataDir must be able to open it.
			_ = a.mounter.Close()
		}
	}()
	a.endpoint, err = rpcshim.NewNodeEndpoint(rpcshim.NodeEndpointConfig{
		NodeID: cfg.NodeID, Plugins: a.plugins, Mounter: a.mounter, Logger: cfg.Logger.Named("endpoint"),
	})
	if err != nil {
		return nil, err
	}
	rpcshim.Handle(a.endpoint.Mux(), api.MethodMountVolume, a.mount)
	a.node, err = rpcshim.NewGRPCNodeServer(rpcshim.GRPCNodeServerConfig{Handler: a.endpoint, Logger: cfg.Logger.Named("node-service"),
		ClusterToken: cfg.ClusterToken, TLS: cfg.TLS, Insecure: cfg.ClusterToken == "" && cfg.TLS == nil})
	if err != nil {
		return nil, err
	}
	if cfg.Hostpath != nil {
		hp := *cfg.Hostpath
		if hp.Logger == nil {
			hp.Logger = cfg.Logger.Named("hostpath")
		}
		if a.hostpath, err = hostpath.New(hp); err != nil {
			return nil, fmt.Errorf("agent %s: hostpath plugin: %w", cfg.NodeID, err)
		}
	}
	built = true
	return a, nil
}

// NodeID returns the agent's node ID.
func (a *Agent) NodeID() string { return a.cfg.NodeID }

// Mounter returns the agent's mounter.
func (a *Agent) Mounter() *mounter.Mounter { return a.mounter }

// HostpathMountMethod returns how the in-process hostpath plugin mounts
// (bind or symlink), or "" when the agent runs none.
func (a *Agent) HostpathMountMethod() hostpath.MountMethod {
	if a.hostpath == nil {
		return ""
	}
	return a.hostpath.MountMethod()
}

// report is the fingerprint manager's Report: it forwards the node's
// plugins to the server (state.UpsertNodePlugins through its applier).
// In a cluster the write is replicated, so the first server that takes
// it is enough.
func (a *Agent) report(ctx context.Context, infos []*csi.PluginInfo) error {
	a.mu.Lock()
	a.lastReport = infos
	a.mu.Unlock()
	var errs []error
	for _, srv := range a.servers {
		err := srv.ReportPlugins(ctx, a.cfg.NodeID, infos)
		if err == nil {
			return nil
		}
		errs = append(errs, a.serverErr(srv, err))
		if ctx.Err() != nil {
			break
		}
	}
	return errors.Join(errs...)
}

// serverErr names the server of a failed call when the agent has more
// than one.
func (a *Agent) serverErr(srv *api.Client, err error) error {
	if len(a.servers) == 1 {
		return err
	}
	return fmt.Errorf("server %s: %w", srv.Address(), err)
}

// Close releases what New opened: the mounter's state database, which
// a second Agent on the same DataDir waits for. Call it once Run has
// returned, or instead of Run.
func (a *Agent) Close() error { return a.mounter.Close() }

// Run serves the node service on lis, registers with the server, runs
// the plugin registry (and the in-process hostpath plugin) and
// heartbeats until ctx ends. It then stops the node service, lets the
// registry report the node's plugins gone, and stops the hostpath
// plugin last, so that nothing the other parts still call disappears
// under them. Mounts are left as they are: a restarted agent resumes
// them from its state, and the server releases them through the claim
// worker when their allocations stop. Run closes lis; an Agent runs
// once.
func (a *Agent) Run(ctx context.Context, lis net.Listener) error {
	if !a.ran.CompareAndSwap(false, true) {
		_ = lis.Close()
		return fmt.Errorf("%w: agent %s has already run; build a new one", csi.ErrInvalidRequest, a.cfg.NodeID)
	}
	addr := a.cfg.Advertise
	if addr == "" {
		addr = advertised(lis.Addr())
	}
	a.advertise.Store(addr)

	var wg sync.WaitGroup
	defer wg.Wait()
	errs := make(chan error, 3)

	// The plugin lives longest: the registry and the mounter call it.
	pctx, stopPlugin := context.WithCancel(context.Background())
	defer stopPlugin()
	if a.hostpath != nil {
		plis, err := listenUnix(a.cfg.Hostpath.Endpoint)
		if err != nil {
			_ = lis.Close()
			return fmt.Errorf("agent %s: hostpath plugin: %w", a.cfg.NodeID, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := a.hostpath.Serve(pctx, plis); err != nil {
				errs <- fmt.Errorf("hostpath plugin: %w", err)
			}
		}()
		a.cfg.Events.Printf(a.cfg.NodeID, "hostpath plugin (%s, %s mounts) serving on unix://%s",
			a.cfg.Hostpath.Mode, a.hostpath.MountMethod(), plis.Addr())
	}

	nctx, stopNode := context.WithCancel(context.Background())
	defer stopNode()
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := a.node.Serve(nctx, lis); err != nil {
			errs <- fmt.Errorf("node service: %w", err)
		}
	}()

	var err error
	if err = a.register(ctx); err == nil {
		err = a.runRegistered(ctx, errs)
		a.leave()
	}
	stopNode()
	stopPlugin()
	wg.Wait()
	if errors.Is(err, ctx.Err()) {
		err = nil
	}
	return err
}

// runRegistered runs the plugin registry and the heartbeat loop until
// ctx ends or a part fails, then stops the registry.
func (a *Agent) runRegistered(ctx context.Context, errs <-chan error) error {
	mctx, stopManager := context.WithCancel(context.Background())
	managerDone := make(chan error, 1)
	go func() { managerDone <- a.manager.Run(mctx) }()
	defer func() {
		stopManager()
		<-managerDone
	}()

	for _, p := range a.instances() {
		err := a.manager.Register(fingerprint.Instance{
			PluginID: p.ID, AllocationID: pluginAllocID(p, a.cfg.NodeID), Type: p.Type, Socket: p.Endpoint,
		})
		if err != nil {
			return fmt.Errorf("agent %s: register plugin %s: %w", a.cfg.NodeID, p.ID, err)
		}
	}

	// A timer re-armed after each heartbeat rather than a ticker: a slow
	// heartbeat delays the next one instead of queueing another.
	t := a.cfg.Clock.NewTimer(a.cfg.HeartbeatInterval)
	defer func() { t.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-errs:
			return fmt.Errorf("agent %s: %w", a.cfg.NodeID, err)
		case err := <-managerDone:
			managerDone <- err // for the deferred wait
			return fmt.Errorf("agent %s: plugin registry stopped: %v", a.cfg.NodeID, err)
		case <-t.C():
			if err := a.Heartbeat(ctx); err != nil && ctx.Err() == nil {
				a.cfg.Logger.Warn("heartbeat failed; retrying at the next interval", "error", err)
			}
			t = a.cfg.Clock.NewTimer(a.cfg.HeartbeatInterval)
		}
	}
}

// instances lists the plugin instances the agent runs.
func (a *Agent) instances() []Plugin {
	regs := append([]Plugin(nil), a.cfg.Plugins...)
	if a.hostpath != nil {
		regs = append(regs, Plugin{ID: a.cfg.HostpathPluginID, Type: hostpathType(a.cfg.Hostpath.Mode), Endpoint: a.cfg.Hostpath.Endpoint})
	}
	return regs
}

// registration is the agent's registration request.
func (a *Agent) registration() *api.RegisterNodeRequest {
	req := &api.RegisterNodeRequest{Address: a.advertise.Load().(string)}
	for _, p := range a.instances() {
		req.Plugins = append(req.Plugins, api.PluginInstance{PluginID: p.ID, Type: p.Type, AllocationID: pluginAllocID(p, a.cfg.NodeID)})
	}
	return req
}

// pluginAllocID names the allocation that runs a plugin instance: the
// reference agent runs plugins itself, not in allocations, so it makes
// up one stable ID per instance.
func pluginAllocID(p Plugin, node string) string {
	return "plugin-" + p.ID + "-" + string(p.Type) + "-" + node
}

func hostpathType(m hostpath.Mode) csi.PluginType {
	switch m {
	case hostpath.ModeController:
		return csi.PluginTypeController
	case hostpath.ModeNode:
		return csi.PluginTypeNode
	}
	return csi.PluginTypeMonolith
}

// register registers the agent with the server, retrying while no
// server can be reached (they may start after the agent, or a cluster
// may not have formed yet). With several servers it returns once one
// took the registration; the others get it at the next heartbeat. A
// registration refused for good by any server is an error.
func (a *Agent) register(ctx context.Context) error {
	req := a.registration()
	delay := 200 * time.Millisecond
	for {
		var failed []error
		for _, srv := range a.servers {
			err := srv.RegisterNode(ctx, a.cfg.NodeID, req)
			if err == nil {
				a.cfg.Events.Printf(a.cfg.NodeID, "node service on %s, registered with %s", req.Address, srv.Address())
				continue
			}
			if !csi.IsRetryable(err) || ctx.Err() != nil {
				return fmt.Errorf("agent %s: register with %s: %w", a.cfg.NodeID, srv.Address(), err)
			}
			failed = append(failed, a.serverErr(srv, err))
		}
		if len(failed) < len(a.servers) {
			if len(failed) > 0 {
				a.cfg.Logger.Warn("not registered with every server yet; the next heartbeats retry", "error", errors.Join(failed...))
			}
			return nil
		}
		a.cfg.Logger.Warn("cannot register with the server yet; retrying", "error", errors.Join(failed...), "retry_in", delay)
		if err := clock.Sleep(ctx, a.cfg.Clock, delay); err != nil {
			return err
		}
		delay = min(2*delay, 5*time.Second)
	}
}

// leave tells every server the agent stops, so that they mark the node
// down at once rather than after their heartbeat TTL. A server that
// does not answer in LeaveTimeout finds out by the TTL.
func (a *Agent) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), LeaveTimeout)
	defer cancel()
	for _, srv := range a.servers {
		if err := srv.Leave(ctx, a.cfg.NodeID); err != nil {
			a.cfg.Logger.Warn("could not tell a server this node stops; it marks the node down after its heartbeat TTL", "server", srv.Address(), "error", err)
			continue
		}
		a.cfg.Events.Printf(a.cfg.NodeID, "left %s: the node is down there until the agent starts again", srv.Address())
	}
}

// Heartbeat sends one heartbeat now to every server. A server that does
// not know the node (it restarted, or missed the registration) gets the
// registration again and the latest plugin report, so its view of the
// node is whole again. It returns the failures, naming the servers.
func (a *Agent) Heartbeat(ctx context.Context) error {
	var errs []error
	for _, srv := range a.servers {
		if err := a.heartbeat(ctx, srv); err != nil {
			errs = append(errs, a.serverErr(srv, err))
		}
	}
	return errors.Join(errs...)
}

func (a *Agent) heartbeat(ctx context.Context, srv *api.Client) error {
	err := srv.Heartbeat(ctx, a.cfg.NodeID)
	if !errors.Is(err, csi.ErrNodeNotFound) {
		return err
	}
	if addr, _ := a.advertise.Load().(string); addr == "" {
		return fmt.Errorf("%w: agent %s is not running", csi.ErrUnavailable, a.cfg.NodeID)
	}
	if err := srv.RegisterNode(ctx, a.cfg.NodeID, a.registration()); err != nil {
		return err
	}
	a.cfg.Events.Printf(a.cfg.NodeID, "registered again with %s (the server did not know this node)", srv.Address())
	a.mu.Lock()
	last := a.lastReport
	a.mu.Unlock()
	if last == nil {
		return nil
	}
	return srv.ReportPlugins(ctx, a.cfg.NodeID, last)
}

// mount serves api.MethodMountVolume: mount a claimed volume for its
// allocation through the mounter (NodeStageVolume once per volume, then
// NodePublishVolume).
func (a *Agent) mount(ctx context.Context, req *api.NodeMountRequest) (*api.NodeMountResponse, error) {
	if req.Volume == nil || req.Claim == nil {
		return nil, fmt.Errorf("%w: node %s: a mount request needs the volume and the claim", csi.ErrInvalidRequest, a.cfg.NodeID)
	}
	if req.Claim.NodeID != a.cfg.NodeID {
		return nil, fmt.Errorf("%w: node %s: the claim of %s on volume %s is for node %s",
			csi.ErrInvalidRequest, a.cfg.NodeID, req.Claim.AllocationID, req.Volume.ID, req.Claim.NodeID)
	}
	mr, err := mounter.NewMountRequest(req.Volume, req.Claim)
	if err != nil {
		return nil, err
	}
	info, err := a.mounter.MountVolume(ctx, mr)
	if err != nil {
		a.cfg.Events.Printf(a.cfg.NodeID, "mount of %s for %s failed: %v", req.Volume.ID, req.Claim.AllocationID, err)
		return nil, err
	}
	a.cfg.Events.Printf(a.cfg.NodeID, "mounted %s for %s at %s", req.Volume.ID, req.Claim.AllocationID, info.Path)
	return &api.NodeMountResponse{Path: info.Path, Usage: info.Usage.String(), NodeExpandedBytes: info.NodeExpandedBytes}, nil
}

// advertised is the gRPC target of a listener's address.
func advertised(addr net.Addr) string {
	switch a := addr.(type) {
	case *net.UnixAddr:
		return "unix://" + a.Name
	case *net.TCPAddr:
		if a.IP == nil || a.IP.IsUnspecified() {
			return net.JoinHostPort("127.0.0.1", fmt.Sprint(a.Port))
		}
	}
	return addr.String()
}

// listenUnix listens on a unix socket, replacing a stale socket file
// that nothing answers on (left by a crash). A live socket is an error.
func listenUnix(endpoint string) (net.Listener, error) {
	path, err := hostpath.SocketPath(endpoint)
	if err != nil {
		return nil, err
	}
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			_ = c.Close()
			return nil, fmt.Errorf("%w: socket %s is in use by another process", csi.ErrInvalidRequest, path)
		}
		_ = os.Remove(path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	return net.Listen("unix", path)
}
