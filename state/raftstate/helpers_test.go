package raftstate_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"go.uber.org/goleak"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
	"github.com/csikit/csikit/state/raftstate"
	"github.com/csikit/csikit/state/sealed"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testRaftConfig shortens raft's timeouts so that elections in a test
// take tens of milliseconds; the tests wait on events, never on these.
func testRaftConfig() *raft.Config {
	c := raft.DefaultConfig()
	c.HeartbeatTimeout = 300 * time.Millisecond
	c.ElectionTimeout = 300 * time.Millisecond
	c.LeaderLeaseTimeout = 300 * time.Millisecond
	c.CommitTimeout = 5 * time.Millisecond
	return c
}

// waitLimit is a safety net so that a broken test fails instead of
// hanging; nothing is timed against it.
const waitLimit = 30 * time.Second

func waitCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	t.Cleanup(cancel)
	return ctx
}

type clusterOpts struct {
	tcp     bool // raft over TCP on loopback instead of the in-memory transport
	durable bool // boltdb and file snapshots in a temp dir instead of memory
	forward bool // set Config.Forward to the in-process forwarder
	raft    func(*raft.Config)
	keyring *sealed.Keyring // Config.Keyring of every server
	// keyringOf, if it names a server, is that server's Config.Keyring
	// instead.
	keyringOf map[string]*sealed.Keyring
}

// member is one server of a test cluster and what it was built from.
type member struct {
	id    string
	dir   string
	addr  string
	store *state.MemStore
	srv   *raftstate.Server
	inmem *raft.InmemTransport // nil over TCP
	up    bool
}

// cluster is three raftstate servers that formed by bootstrap-expect.
// Leadership is tracked through OnLeadership, so waiting for a leader
// waits on events.
type cluster struct {
	t       testing.TB
	opts    clusterOpts
	members []*member

	mu      sync.Mutex
	leaders map[string]bool // established leadership, by server ID
	changed chan struct{}
}

// newCluster starts three servers, tells each about the other two with
// Join, and waits for a leader.
func newCluster(t testing.TB, opts clusterOpts) *cluster {
	t.Helper()
	c := startCluster(t, opts)
	c.joinAll()
	c.leader()
	return c
}

// startCluster starts three servers that know nothing of each other.
func startCluster(t testing.TB, opts clusterOpts) *cluster {
	t.Helper()
	c := &cluster{t: t, opts: opts, leaders: map[string]bool{}, changed: make(chan struct{})}
	for i := 1; i <= 3; i++ {
		m := &member{id: fmt.Sprintf("s%d", i)}
		if opts.durable {
			m.dir = t.TempDir()
		}
		c.members = append(c.members, m)
	}
	t.Cleanup(c.shutdownAll)
	for _, m := range c.members {
		c.start(m)
	}
	return c
}

// start builds and starts m's server on a new transport and a new,
// empty store, reusing m's address and data dir.
func (c *cluster) start(m *member) {
	c.t.Helper()
	var trans raft.Transport
	addr := m.addr
	if c.opts.tcp {
		bind := addr
		if bind == "" {
			bind = "127.0.0.1:0"
		}
		nt, err := raftstate.NewTCPTransport(bind, nil, nil)
		must(c.t, err)
		addr = string(nt.LocalAddr())
		trans = nt
	} else {
		addr = m.id
		_, inmem := raft.NewInmemTransport(raft.ServerAddress(addr))
		for _, o := range c.members {
			if o != m && o.up {
				inmem.Connect(raft.ServerAddress(o.addr), o.inmem)
				o.inmem.Connect(raft.ServerAddress(addr), inmem)
			}
		}
		m.inmem = inmem
		trans = inmem
	}
	store, err := state.NewMemStore(state.Config{})
	must(c.t, err)
	rc := testRaftConfig()
	if c.opts.raft != nil {
		c.opts.raft(rc)
	}
	cfg := raftstate.Config{
		ID: m.id, Store: store, Transport: trans, BootstrapExpect: 3,
		DataDir: m.dir, InMemory: m.dir == "", Raft: rc, Keyring: c.opts.keyring,
	}
	if k := c.opts.keyringOf[m.id]; k != nil {
		cfg.Keyring = k
	}
	if c.opts.forward {
		cfg.Forward = c.forward
	}
	srv, err := raftstate.New(cfg)
	must(c.t, err)
	must(c.t, srv.Start())
	id := m.id
	srv.OnLeadership(func(leader bool) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.leaders[id] = leader
		close(c.changed)
		c.changed = make(chan struct{})
	})
	c.mu.Lock()
	m.addr, m.store, m.srv, m.up = addr, store, srv, true
	c.mu.Unlock()
}

// forward is the in-process stand-in for the host's server-to-server
// RPC: it hands the bytes to the named leader's ApplyForwarded. Values
// cross unchanged, as errors would through a transport that keeps csi
// sentinels.
func (c *cluster) forward(ctx context.Context, leaderAddr, leaderID string, cmd []byte) (state.Result, error) {
	c.mu.Lock()
	var srv *raftstate.Server
	if m := c.member(leaderID); m != nil && m.up && m.addr == leaderAddr {
		srv = m.srv
	}
	c.mu.Unlock()
	if srv == nil {
		return state.Result{}, fmt.Errorf("%w: no server %s at %s", csi.ErrUnavailable, leaderID, leaderAddr)
	}
	return srv.ApplyForwarded(ctx, cmd)
}

func (c *cluster) member(id string) *member {
	for _, m := range c.members {
		if m.id == id {
			return m
		}
	}
	return nil
}

func (c *cluster) peers() []raftstate.Peer {
	var ps []raftstate.Peer
	for _, m := range c.members {
		ps = append(ps, m.srv.Self())
	}
	return ps
}

// joinAll tells every server about the two others.
func (c *cluster) joinAll() {
	c.t.Helper()
	for _, m := range c.members {
		for _, p := range c.peers() {
			if p.ID != m.id {
				must(c.t, m.srv.Join(p))
			}
		}
	}
}

// leader waits until exactly one running server has taken leadership
// (OnLeadership said true) and returns it.
func (c *cluster) leader() *member {
	c.t.Helper()
	ctx := waitCtx(c.t)
	for {
		c.mu.Lock()
		changed := c.changed
		var found []*member
		for _, m := range c.members {
			if m.up && c.leaders[m.id] {
				found = append(found, m)
			}
		}
		c.mu.Unlock()
		if len(found) == 1 {
			return found[0]
		}
		select {
		case <-changed:
		case <-ctx.Done():
			c.t.Fatalf("no single leader among %v: %v", c.ids(), ctx.Err())
		}
	}
}

func (c *cluster) ids() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ids []string
	for _, m := range c.members {
		if m.up {
			ids = append(ids, m.id)
		}
	}
	return ids
}

func (c *cluster) followers(leader *member) []*member {
	c.mu.Lock()
	defer c.mu.Unlock()
	var fs []*member
	for _, m := range c.members {
		if m != leader && m.up {
			fs = append(fs, m)
		}
	}
	return fs
}

// anyUp returns a running server.
func (c *cluster) anyUp() *raftstate.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.members {
		if m.up {
			return m.srv
		}
	}
	return nil
}

// stop shuts m's server down; its data dir stays.
func (c *cluster) stop(m *member) {
	c.t.Helper()
	c.mu.Lock()
	up := m.up
	m.up = false
	c.mu.Unlock()
	if !up {
		return
	}
	if err := m.srv.Shutdown(); err != nil {
		c.t.Errorf("shut down %s: %v", m.id, err)
	}
}

func (c *cluster) shutdownAll() {
	for _, m := range c.members {
		c.stop(m)
	}
}

// waitIndexes blocks on store until every table's index is at least the
// one in want.
func waitIndexes(t testing.TB, store state.Watcher, want map[state.Table]uint64) {
	t.Helper()
	ctx := waitCtx(t)
	for table, idx := range want {
		for {
			got, err := store.Index(table)
			must(t, err)
			if got >= idx {
				break
			}
			if _, err := store.Wait(ctx, table, got); err != nil {
				t.Fatalf("waiting for table %s to reach index %d (at %d): %v", table, idx, got, err)
			}
		}
	}
}

func indexes(t testing.TB, store state.Watcher) map[state.Table]uint64 {
	t.Helper()
	out := map[state.Table]uint64{}
	for _, table := range state.Tables() {
		idx, err := store.Index(table)
		must(t, err)
		out[table] = idx
	}
	return out
}

func snapshotOf(t testing.TB, store *state.MemStore) []byte {
	t.Helper()
	var buf bytes.Buffer
	must(t, store.Snapshot(context.Background(), &buf))
	return buf.Bytes()
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func expectEqual[T any](t testing.TB, got, want T) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func expectIs(t testing.TB, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("error %v does not match %v", err, target)
	}
}

// The objects the tests write: one plugin fingerprinted on node n1,
// workloads on n1, and volumes.
var (
	testTime = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	snw      = csi.Capability{AccessMode: csi.AccessModeSingleNodeWriter, AttachmentMode: csi.AttachmentModeFileSystem}
)

const testPlugin = "hostpath"

func fingerprintCmd() state.Command {
	return state.UpsertNodePlugins{NodeID: "n1", Plugins: []csi.PluginInfo{{
		PluginID: testPlugin, AllocationID: "plugin-n1", Type: csi.PluginTypeMonolith, Healthy: true,
		UpdateTime: testTime, Provider: "hostpath.csikit.io",
		ControllerInfo: &csi.ControllerInfo{},
		NodeInfo:       &csi.NodeInfo{ID: "csi-n1"},
	}}}
}

func allocsCmd(ids ...string) state.Command {
	cmd := state.UpsertAllocations{}
	for _, id := range ids {
		cmd.Allocations = append(cmd.Allocations, csi.Allocation{ID: id, Namespace: "default", NodeID: "n1"})
	}
	return cmd
}

func volumeCmd(id string) state.Command {
	return state.RegisterVolume{Volume: csi.Volume{
		ID: id, Namespace: "default", PluginID: testPlugin, ExternalID: "ext-" + id, Capabilities: []csi.Capability{snw},
	}}
}

func claimCmd(volID, allocID string) state.ClaimVolume {
	return state.ClaimVolume{Namespace: "default", VolumeID: volID, Claim: csi.Claim{
		AllocationID: allocID, NodeID: "n1", Mode: csi.ClaimWrite, AccessMode: snw.AccessMode, AttachmentMode: snw.AttachmentMode,
	}}
}

func apply(t testing.TB, a state.Applier, cmd state.Command) state.Result {
	t.Helper()
	res, err := a.Apply(context.Background(), cmd)
	if err != nil {
		t.Fatalf("apply %s: %v", cmd.Kind(), err)
	}
	return res
}
