package sim

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/csikit/csikit/claimgc"
	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/backoff"
	"github.com/csikit/csikit/csi/clock"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/fingerprint"
	"github.com/csikit/csikit/mounter"
	"github.com/csikit/csikit/rpcshim"
	"github.com/csikit/csikit/state"
	"github.com/csikit/csikit/state/raftstate"
)

const (
	simPlugin   = "sim-plugin"
	simProvider = "sim.csikit.io"
	namespace   = "default"
	// waitLimit bounds every wait on another goroutine: a hang guard,
	// never a timing assertion.
	waitLimit = 30 * time.Second
)

var simNodes = []string{"n1", "n2", "n3"}

// replica is one raftstate server with the server-side parts a host
// runs on it: a Router and a Server reading its store, and a claim
// release Worker enabled while the server leads.
type replica struct {
	id     string
	store  *state.MemStore
	srv    *raftstate.Server
	inmem  *raft.InmemTransport
	router *rpcshim.Router
	server *rpcshim.Server
	worker *claimgc.Worker
	stop   context.CancelFunc // ends the worker's Run
	done   chan struct{}      // closed when the worker's Run returned
	dead   bool               // killed (life_test.go): under world.repMu
}

// node is one node agent: its node plugin (a csitest fake on a unix
// socket), its fingerprint manager, and its mounter and node endpoint,
// which an agent restart replaces with new ones on the same state dir.
type node struct {
	id       string
	plugin   *csitest.Plugin
	manager  *fingerprint.Manager
	dir      string
	mu       sync.Mutex
	mounter  *mounter.Mounter
	down     bool // partitioned: the transport refuses calls to it
	gone     bool // left the cluster for good (life_test.go)
	restarts int
	stop     context.CancelFunc // ends the fingerprint manager's Run
	done     chan struct{}      // closed when it returned
}

// world is one simulated cluster: three raftstate servers over raft's
// in-memory transport, three node agents reached through the rpcshim
// in-memory transport, a controller plugin on n1, and one fake clock
// for the claim workers' backoff.
type world struct {
	t        testing.TB
	clock    *clock.Fake
	repMu    sync.Mutex
	replicas []*replica // a restarted server replaces its slot: read through reps
	raftDir  string     // the servers' data dirs' parent; "" keeps raft in memory
	nodes    map[string]*node
	ctl      *csitest.Plugin
	tr       *rpcshim.InmemTransport
	statuses *rpcshim.InmemNodeStatuses
	cancel   context.CancelFunc

	leadMu  sync.Mutex
	changed chan struct{} // closed and replaced at every leadership change

	wedgeMu sync.Mutex
	wedged  bool // a step hung: close waits for nothing
}

// wedge marks the world as holding a stuck goroutine (see run.within).
func (w *world) wedge() {
	w.wedgeMu.Lock()
	w.wedged = true
	w.wedgeMu.Unlock()
}

func simRaftConfig() *raft.Config {
	c := raft.DefaultConfig()
	c.HeartbeatTimeout = 200 * time.Millisecond
	c.ElectionTimeout = 200 * time.Millisecond
	c.LeaderLeaseTimeout = 200 * time.Millisecond
	c.CommitTimeout = 2 * time.Millisecond
	c.LogOutput = nil
	c.LogLevel = "off"
	return c
}

// newWorld builds and starts a world, and waits until the plugin is
// fingerprinted everywhere. durable keeps the servers' raft state in
// data dirs, so that a killed server restarts from it; otherwise it
// lives in memory.
func newWorld(t testing.TB, durable bool) *world {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &world{t: t, clock: clock.NewFake(time.Unix(1_700_000_000, 0)), nodes: map[string]*node{},
		tr: rpcshim.NewInmemTransport(), statuses: &rpcshim.InmemNodeStatuses{}, cancel: cancel,
		changed: make(chan struct{})}
	t.Cleanup(w.close)
	if durable {
		var err error
		w.raftDir, err = os.MkdirTemp(raftTemp(), "sim-raft-")
		must(t, err)
	}
	w.startReplicas()
	w.ctl = csitest.Start(t, csitest.Config{
		Type: csi.PluginTypeController, Name: simProvider, AdmitUnknownVolumes: true,
		Controller: csi.ControllerCapabilities{PublishUnpublishVolume: true, CreateDeleteVolume: true,
			CreateDeleteSnapshot: true, ListSnapshots: true, ExpandVolume: true, GetVolume: true, GetVolumeHealth: true},
		// The health monitor reads each volume's condition through
		// ControllerGetVolume (health_test.go).
		VolumeStatus: csitest.StatusWithCondition,
	})
	for _, id := range simNodes {
		w.startNode(ctx, id)
	}
	w.waitPlugin(func(p *csi.Plugin) bool {
		return p.ControllersHealthy == 1 && p.NodesHealthy == len(simNodes)
	})
	return w
}

func (w *world) startReplicas() {
	for i := 1; i <= 3; i++ {
		r := w.newReplica(fmt.Sprintf("s%d", i))
		w.connect(r)
		w.repMu.Lock()
		w.replicas = append(w.replicas, r)
		w.repMu.Unlock()
	}
	for _, r := range w.replicas {
		must(w.t, r.srv.Start())
	}
	for _, r := range w.replicas {
		for _, o := range w.replicas {
			if o != r {
				must(w.t, r.srv.Join(o.srv.Self()))
			}
		}
	}
	w.leader()
}

// newReplica builds server id on a new, empty store, over its data dir
// when the world is durable, and runs its claim worker; the caller
// connects and starts it.
func (w *world) newReplica(id string) *replica {
	_, inmem := raft.NewInmemTransport(raft.ServerAddress(id))
	store, err := state.NewMemStore(state.Config{})
	must(w.t, err)
	cfg := raftstate.Config{ID: id, Store: store, Transport: inmem, BootstrapExpect: 3,
		Raft: simRaftConfig(), Forward: w.forward, InMemory: w.raftDir == ""}
	if w.raftDir != "" {
		cfg.DataDir = filepath.Join(w.raftDir, id)
	}
	srv, err := raftstate.New(cfg)
	must(w.t, err)
	r := &replica{id: id, store: store, srv: srv, inmem: inmem, done: make(chan struct{})}
	r.router, err = rpcshim.NewRouter(rpcshim.RouterConfig{Store: store, Transport: w.tr, NodeStatuses: w.statuses})
	must(w.t, err)
	r.server, err = rpcshim.NewServer(rpcshim.ServerConfig{Store: store, Applier: srv, Router: r.router})
	must(w.t, err)
	r.worker, err = claimgc.New(claimgc.Config{Store: store, Applier: srv, Nodes: r.router, Controllers: r.router,
		NodeStatuses: w.statuses, Parallelism: 4, Clock: w.clock,
		RetryBase: time.Second, RetryMax: 30 * time.Second, FinalRetryInterval: 5 * time.Minute,
		StepTimeout: 10 * time.Second})
	must(w.t, err)
	srv.OnLeadership(func(leader bool) {
		r.worker.SetEnabled(leader)
		w.leadMu.Lock()
		close(w.changed)
		w.changed = make(chan struct{})
		w.leadMu.Unlock()
	})
	ctx, stop := context.WithCancel(context.Background())
	r.stop = stop
	go func() {
		defer close(r.done)
		_ = r.worker.Run(ctx)
	}()
	return r
}

// connect links r's raft transport with every live server's, both ways.
func (w *world) connect(r *replica) {
	for _, o := range w.reps() {
		if o.id != r.id {
			r.inmem.Connect(raft.ServerAddress(o.id), o.inmem)
			o.inmem.Connect(raft.ServerAddress(r.id), r.inmem)
		}
	}
}

// reps returns the live servers, in slot order.
func (w *world) reps() []*replica {
	w.repMu.Lock()
	defer w.repMu.Unlock()
	out := make([]*replica, 0, len(w.replicas))
	for _, r := range w.replicas {
		if !r.dead {
			out = append(out, r)
		}
	}
	return out
}

// forward is the host's server-to-server RPC, in process.
func (w *world) forward(ctx context.Context, leaderAddr, leaderID string, cmd []byte) (state.Result, error) {
	for _, r := range w.reps() {
		if r.id == leaderID {
			return r.srv.ApplyForwarded(ctx, cmd)
		}
	}
	return state.Result{}, fmt.Errorf("%w: no server %s at %s", csi.ErrUnavailable, leaderID, leaderAddr)
}

// leader waits for a replica that leads and has taken leadership in
// (OnLeadership said true, so its worker runs) and returns it.
func (w *world) leader() *replica {
	w.t.Helper()
	r, err := w.tryLeader()
	if err != nil {
		w.t.Fatal(err)
	}
	return r
}

// tryLeader is leader for other goroutines than the test's. It waits on
// the leadership changes, not on a timer.
func (w *world) tryLeader() (*replica, error) {
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	for {
		w.leadMu.Lock()
		changed := w.changed
		w.leadMu.Unlock()
		for _, r := range w.reps() {
			if r.srv.IsLeader() && r.worker.Enabled() {
				return r, nil
			}
		}
		select {
		case <-changed:
		case <-ctx.Done():
			var states []string
			for _, r := range w.reps() {
				states = append(states, fmt.Sprintf("%s leader=%v worker=%v", r.id, r.srv.IsLeader(), r.worker.Enabled()))
			}
			return nil, fmt.Errorf("no server took leadership in within %s: %v", waitLimit, states)
		}
	}
}

// apply writes a command through the first live server, which
// forwards it to the leader.
func (w *world) apply(ctx context.Context, cmd state.Command) (state.Result, error) {
	return w.reps()[0].srv.Apply(ctx, cmd)
}

func (w *world) startNode(ctx context.Context, id string) {
	n := &node{id: id}
	n.plugin = csitest.Start(w.t, csitest.Config{
		Type: csi.PluginTypeMonolith, Name: simProvider, NodeID: "csi-" + id,
		Node: csi.NodeCapabilities{StageUnstageVolume: true}, AdmitUnknownVolumes: true,
	})
	var err error
	// The plugin clients retry a Retryable failure on the wall clock:
	// short delays keep a world's real time down.
	n.manager, err = fingerprint.New(fingerprint.Config{NodeID: id, Interval: time.Hour,
		Client: plugin.Config{Backoff: backoff.Policy{Base: 5 * time.Millisecond, Max: 50 * time.Millisecond}},
		Report: func(ctx context.Context, infos []*csi.PluginInfo) error {
			cmd := state.UpsertNodePlugins{NodeID: id}
			for _, in := range infos {
				cmd.Plugins = append(cmd.Plugins, *in)
			}
			_, err := w.apply(ctx, cmd)
			return err
		}})
	must(w.t, err)
	must(w.t, n.manager.Register(fingerprint.Instance{PluginID: simPlugin, AllocationID: "plugin-node-" + id,
		Type: csi.PluginTypeNode, Socket: n.plugin.Endpoint()}))
	if id == "n1" {
		must(w.t, n.manager.Register(fingerprint.Instance{PluginID: simPlugin, AllocationID: "plugin-ctl-n1",
			Type: csi.PluginTypeController, Socket: w.ctl.Endpoint()}))
	}
	mctx, stop := context.WithCancel(ctx)
	n.stop, n.done = stop, make(chan struct{})
	go func() {
		defer close(n.done)
		_ = n.manager.Run(mctx)
	}()
	n.dir, err = os.MkdirTemp("", "sim-"+id+"-")
	must(w.t, err)
	w.nodes[id] = n
	w.openAgent(n)
	w.statuses.Set(id, csi.NodeStatusReady)
}

// openAgent starts n's mounter on its state dir and registers a node
// endpoint over it: the agent's start, or its restart after a crash.
func (w *world) openAgent(n *node) {
	m, err := mounter.New(mounter.Config{Root: filepath.Join(n.dir, "mnt"), StateDir: filepath.Join(n.dir, "state"),
		Plugins: n.manager, NoSync: true})
	must(w.t, err)
	ep, err := rpcshim.NewNodeEndpoint(rpcshim.NodeEndpointConfig{NodeID: n.id, Plugins: n.manager, Mounter: m})
	must(w.t, err)
	n.mu.Lock()
	n.mounter = m
	n.mu.Unlock()
	w.tr.Register(n.id, ep)
}

func (n *node) mnt() *mounter.Mounter {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.mounter
}

// waitPlugin blocks on the leader's store until the plugin satisfies ok.
func (w *world) waitPlugin(ok func(*csi.Plugin) bool) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	store := w.leader().store
	for {
		idx, err := store.Index(state.TablePlugins)
		must(w.t, err)
		if p, err := store.Plugin(simPlugin); err == nil && ok(p) {
			return
		}
		if _, err := store.Wait(ctx, state.TablePlugins, idx); err != nil {
			w.t.Fatalf("waiting for the plugin's fingerprints: %v", err)
		}
	}
}

// settle lets the leading worker finish what it can do now.
func (w *world) settle() {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	for _, r := range w.reps() {
		if err := r.worker.Settle(ctx); err != nil {
			w.t.Fatalf("worker on %s did not settle: %v", r.id, err)
		}
	}
}

func (w *world) close() {
	w.cancel()
	w.wedgeMu.Lock()
	wedged := w.wedged
	w.wedgeMu.Unlock()
	if wedged {
		// Its stuck goroutine may hold what closing would wait for;
		// the seed has failed and the process ends with it.
		return
	}
	for _, r := range w.reps() {
		r.stop()
		<-r.done
	}
	for _, n := range w.nodes {
		<-n.done
	}
	_ = w.tr.Close()
	for _, r := range w.reps() {
		_ = r.srv.Shutdown()
	}
	if w.raftDir != "" {
		_ = os.RemoveAll(w.raftDir)
	}
	for _, n := range w.nodes {
		if m := n.mnt(); m != nil {
			_ = m.Close()
		}
		_ = os.RemoveAll(n.dir)
	}
}

// raftTemp is where the servers' data dirs go: a memory file system
// when the machine has one, since raft's boltdb syncs every append and
// the simulation needs the data to outlive a server, not the machine.
func raftTemp() string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		return "/dev/shm"
	}
	return ""
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
