package cluster_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"go.uber.org/goleak"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/hostpathplugin/hostpath"
	"github.com/csikit/csikit/examples/refserver/agent"
	"github.com/csikit/csikit/examples/refserver/api"
	"github.com/csikit/csikit/examples/refserver/cli"
	"github.com/csikit/csikit/examples/refserver/cluster"
	"github.com/csikit/csikit/examples/refserver/events"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// waitLimit is a safety net so that a broken test fails instead of
// hanging; nothing is timed against it.
const waitLimit = 30 * time.Second

func waitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	t.Cleanup(cancel)
	return ctx
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// testRaftConfig shortens raft's timeouts so that elections take tens
// of milliseconds; the tests wait on events, never on these.
func testRaftConfig() *raft.Config {
	c := raft.DefaultConfig()
	c.HeartbeatTimeout = 300 * time.Millisecond
	c.ElectionTimeout = 300 * time.Millisecond
	c.LeaderLeaseTimeout = 300 * time.Millisecond
	c.CommitTimeout = 5 * time.Millisecond
	return c
}

// syncBuffer is an io.Writer safe for concurrent writers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// shortTempDir is a temporary directory short enough for unix sockets.
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "rscl")
	must(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// leaders tracks which servers lead, from raftstate's OnLeadership, so
// tests wait for a leader on events.
type leaders struct {
	mu      sync.Mutex
	now     map[string]bool
	changed chan struct{}
}

func newLeaders() *leaders { return &leaders{now: map[string]bool{}, changed: make(chan struct{})} }

func (l *leaders) set(id string, leader bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.now[id] = leader
	close(l.changed)
	l.changed = make(chan struct{})
}

// wait returns the one server among ids that leads.
func (l *leaders) wait(t *testing.T, ids ...string) string {
	t.Helper()
	ctx := waitCtx(t)
	for {
		l.mu.Lock()
		ch := l.changed
		var leading []string
		for _, id := range ids {
			if l.now[id] {
				leading = append(leading, id)
			}
		}
		l.mu.Unlock()
		if len(leading) == 1 {
			return leading[0]
		}
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("no single leader among %v after %s: leading %v", ids, waitLimit, leading)
		}
	}
}

// member is one server of a test cluster.
type member struct {
	id       string
	apiAddr  string // fixed across restarts
	raftAddr string // learned at the first start, fixed after
	srv      *cluster.Server
	client   *api.Client
	events   *syncBuffer
	stop     context.CancelFunc
	done     chan error
}

func (m *member) url() string { return "http://" + m.apiAddr }

// testCluster is three cluster servers over TCP on loopback, each with
// a data dir, formed by bootstrap-expect through their -join status
// calls; optionally two node agents with the hostpath plugin.
type testCluster struct {
	t       *testing.T
	dir     string
	members map[string]*member
	ids     []string
	leaders *leaders

	agents      map[string]*runningAgent
	agentEvents *syncBuffer
	// opts change each server's Config before it is built.
	opts []func(*cluster.Config)
}

type runningAgent struct {
	a    *agent.Agent
	stop context.CancelFunc
	done chan error
}

// testClusterToken is the test clusters' shared secret.
const testClusterToken = "test-cluster-token-0123456789"

// startCluster starts three servers s1, s2, s3 (each told the other two
// API addresses) and waits until each has joined the others and one
// leads.
func startCluster(t *testing.T, opts ...func(*cluster.Config)) *testCluster {
	t.Helper()
	c := &testCluster{t: t, dir: shortTempDir(t), members: map[string]*member{}, ids: []string{"s1", "s2", "s3"},
		leaders: newLeaders(), agents: map[string]*runningAgent{}, agentEvents: &syncBuffer{}, opts: opts}
	lis := map[string]net.Listener{}
	for _, id := range c.ids {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		must(t, err)
		lis[id] = l
		c.members[id] = &member{id: id, apiAddr: l.Addr().String(), raftAddr: "127.0.0.1:0"}
	}
	t.Cleanup(c.close)
	for _, id := range c.ids {
		c.run(id, lis[id])
	}
	for _, id := range c.ids {
		c.waitJoined(id)
	}
	c.leaders.wait(t, c.ids...)
	return c
}

// run starts member id's server on lis.
func (c *testCluster) run(id string, lis net.Listener) {
	t := c.t
	t.Helper()
	m := c.members[id]
	var join []string
	for _, other := range c.ids {
		if other != id {
			join = append(join, c.members[other].apiAddr)
		}
	}
	if m.events == nil {
		m.events = &syncBuffer{} // kept across restarts
	}
	cfg := cluster.Config{
		ID: id, DataDir: filepath.Join(c.dir, id), BootstrapExpect: len(c.ids),
		RaftAddr: m.raftAddr, Join: join, Raft: testRaftConfig(),
		HeartbeatTTL: time.Hour, // liveness is not under test; agents heartbeat on their own schedule
		Events:       events.New(m.events),
		ClusterToken: testClusterToken,
		KeyringDir:   filepath.Join(c.dir, "keyring"), // one keyring the servers share
	}
	for _, o := range c.opts {
		o(&cfg)
	}
	srv, err := cluster.New(cfg)
	if err != nil {
		_ = lis.Close()
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	m.srv, m.stop, m.done = srv, stop, make(chan error, 1)
	go func() { m.done <- srv.Run(ctx, lis) }()
	select {
	case <-srv.Ready():
	case err := <-m.done:
		m.done <- err
		t.Fatalf("server %s stopped at start: %v", id, err)
	}
	rs := srv.Raft()
	if rs == nil {
		t.Fatalf("server %s did not start", id)
	}
	m.raftAddr = rs.Self().Addr
	rs.OnLeadership(func(leader bool) { c.leaders.set(id, leader) })
	if m.client == nil {
		m.client, err = api.NewClient(m.apiAddr, nil)
		must(t, err)
		m.client = m.client.WithClusterToken(testClusterToken)
	}
}

func (c *testCluster) waitJoined(id string) {
	c.t.Helper()
	m := c.members[id]
	select {
	case <-m.srv.Joined():
	case err := <-m.done:
		m.done <- err
		c.t.Fatalf("server %s stopped before joining the others: %v", id, err)
	case <-waitCtx(c.t).Done():
		c.t.Fatalf("server %s did not join the others within %s\nevents:\n%s", id, waitLimit, m.events)
	}
}

// stopServer stops member id's server, as if its process ended.
func (c *testCluster) stopServer(id string) {
	c.t.Helper()
	m := c.members[id]
	if m.stop == nil {
		return
	}
	m.stop()
	if err := <-m.done; err != nil {
		c.t.Errorf("server %s: %v", id, err)
	}
	m.stop = nil
}

// restartServer runs member id's server again on the same data dir,
// API address and raft address, and waits until it has joined the
// others again.
func (c *testCluster) restartServer(id string) {
	c.t.Helper()
	m := c.members[id]
	lis, err := net.Listen("tcp", m.apiAddr)
	must(c.t, err)
	c.run(id, lis)
	c.waitJoined(id)
}

// others returns the cluster's members but the given ones.
func (c *testCluster) others(but ...string) []string {
	var out []string
	for _, id := range c.ids {
		if !slices.Contains(but, id) {
			out = append(out, id)
		}
	}
	return out
}

func (c *testCluster) urls() []string {
	var out []string
	for _, id := range c.ids {
		out = append(out, c.members[id].url())
	}
	return out
}

// startAgents starts node-1 (the hostpath plugin as a monolith) and
// node-2 (as a node plugin), each given every server, and waits until
// every server sees the plugin healthy on both.
func (c *testCluster) startAgents() {
	t := c.t
	t.Helper()
	for i, id := range []string{"node-1", "node-2"} {
		var clients []*api.Client
		for _, u := range c.urls() {
			cl, err := api.NewClient(u, nil)
			must(t, err)
			clients = append(clients, cl)
		}
		mode := hostpath.ModeNode
		if i == 0 {
			mode = hostpath.ModeMonolith
		}
		a, err := agent.New(agent.Config{
			NodeID: id, Servers: clients, DataDir: filepath.Join(c.dir, id), NoSync: true,
			Hostpath: &hostpath.Config{
				DataDir: filepath.Join(c.dir, "plugin"), Mode: mode, Mount: hostpath.MountSymlink, ControllerPublish: true, Staging: true,
			},
			Events: events.New(c.agentEvents),
		})
		must(t, err)
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		must(t, err)
		ctx, stop := context.WithCancel(context.Background())
		ra := &runningAgent{a: a, stop: stop, done: make(chan error, 1)}
		go func() {
			ra.done <- a.Run(ctx, lis)
			for _, cl := range clients {
				cl.Close()
			}
		}()
		c.agents[id] = ra
	}
	ctx := waitCtx(t)
	for _, id := range c.ids {
		_, err := c.members[id].client.WaitPlugin(ctx, "hostpath", func(p *csi.Plugin) bool {
			return p != nil && p.ControllersHealthy == 1 && p.NodesHealthy == 2
		})
		if err != nil {
			t.Fatalf("server %s: the hostpath plugin is not healthy on both nodes: %v\nagents:\n%s", id, err, c.agentEvents)
		}
	}
}

func (c *testCluster) close() {
	for _, id := range []string{"node-2", "node-1"} {
		if ra := c.agents[id]; ra != nil {
			ra.stop()
			if err := <-ra.done; err != nil {
				c.t.Errorf("agent %s: %v", id, err)
			}
		}
	}
	for _, id := range c.ids {
		c.stopServer(id)
		if m := c.members[id]; m.client != nil {
			m.client.Close()
		}
	}
}

// cli runs the refserver CLI against member id and fails the test
// unless it succeeds.
func (c *testCluster) cli(id string, args ...string) string {
	c.t.Helper()
	var out, errOut bytes.Buffer
	args = append(args, "-address", c.members[id].url())
	if code := cli.Run(context.Background(), args, &out, &errOut); code != cli.ExitOK {
		c.t.Fatalf("refserver %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out.String(), errOut.String())
	}
	return out.String()
}

// volumesAt waits until member id's replica has applied the volume
// writes up to index (a blocking query on its store) and returns the
// CLI's `volume status -json` there.
func (c *testCluster) volumesAt(id string, index uint64) string {
	c.t.Helper()
	_, meta, err := c.members[id].client.Volumes(waitCtx(c.t), "", "", &api.QueryOptions{WaitIndex: index - 1, WaitTime: waitLimit})
	must(c.t, err)
	if meta.Index < index {
		c.t.Fatalf("server %s: its volumes are at index %d after %s, want %d", id, meta.Index, waitLimit, index)
	}
	return c.cli(id, "volume", "status", "-json")
}

// sameVolumes checks that every listed member shows the same volumes as
// from, once it has applied the same writes, and returns them.
func (c *testCluster) sameVolumes(from string, ids ...string) string {
	c.t.Helper()
	_, meta, err := c.members[from].client.Volumes(waitCtx(c.t), "", "", nil)
	must(c.t, err)
	want := c.volumesAt(from, meta.Index)
	for _, id := range ids {
		if got := c.volumesAt(id, meta.Index); got != want {
			c.t.Errorf("server %s shows other volumes than %s:\n%s\nwant:\n%s", id, from, got, want)
		}
	}
	return want
}

func requireLine(t *testing.T, out, want string) {
	t.Helper()
	if !strings.Contains(out, want) {
		t.Fatalf("%q is not printed:\n%s", want, out)
	}
}

func describe(c *testCluster) string {
	var b strings.Builder
	for _, id := range c.ids {
		fmt.Fprintf(&b, "--- %s events:\n%s", id, c.members[id].events)
	}
	fmt.Fprintf(&b, "--- agents:\n%s", c.agentEvents)
	return b.String()
}
