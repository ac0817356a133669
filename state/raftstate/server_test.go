package raftstate_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
	"github.com/csikit/csikit/state/raftstate"
)

// storeOnly hides MemStore's Snapshot and Restore.
type storeOnly struct{ state.Store }

func TestNew_Config(t *testing.T) {
	used, err := state.NewMemStore(state.Config{})
	must(t, err)
	apply(t, state.NewLocalApplier(used), state.DeleteNode{NodeID: "n1"})
	apply(t, state.NewLocalApplier(used), allocsCmd("web-1"))

	tests := []struct {
		name   string
		modify func(*raftstate.Config)
		is     error
	}{
		{"no ID", func(c *raftstate.Config) { c.ID = "" }, csi.ErrInvalidID},
		{"ID with a slash", func(c *raftstate.Config) { c.ID = "a/b" }, csi.ErrInvalidID},
		{"no store", func(c *raftstate.Config) { c.Store = nil }, csi.ErrInvalidRequest},
		{"store without snapshots", func(c *raftstate.Config) { c.Store = storeOnly{c.Store} }, csi.ErrInvalidRequest},
		{"store already written", func(c *raftstate.Config) { c.Store = used }, csi.ErrInvalidRequest},
		{"no transport", func(c *raftstate.Config) { c.Transport = nil }, csi.ErrInvalidRequest},
		{"no storage", func(c *raftstate.Config) { c.InMemory = false }, csi.ErrInvalidRequest},
		{"both storages", func(c *raftstate.Config) { c.DataDir = t.TempDir() }, csi.ErrInvalidRequest},
		{"no expected count", func(c *raftstate.Config) { c.BootstrapExpect = 0 }, csi.ErrInvalidRequest},
		{"negative retain", func(c *raftstate.Config) { c.SnapshotRetain = -1 }, csi.ErrInvalidRequest},
		{"raft NotifyCh set", func(c *raftstate.Config) { c.Raft.NotifyCh = make(chan bool) }, csi.ErrInvalidRequest},
		{"raft LocalID differs", func(c *raftstate.Config) { c.Raft.LocalID = "other" }, csi.ErrInvalidRequest},
		{"raft config invalid", func(c *raftstate.Config) { c.Raft.HeartbeatTimeout = time.Millisecond }, csi.ErrInvalidRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store, err := state.NewMemStore(state.Config{})
			must(t, err)
			_, trans := raft.NewInmemTransport("s1")
			defer trans.Close()
			cfg := raftstate.Config{ID: "s1", Store: store, Transport: trans, InMemory: true, BootstrapExpect: 3, Raft: testRaftConfig()}
			tt.modify(&cfg)
			srv, err := raftstate.New(cfg)
			if err == nil {
				srv.Shutdown()
				t.Fatal("New accepted the config")
			}
			expectIs(t, err, tt.is)
		})
	}
}

// TestServer_Start_Lifecycle checks the calls made out of order: before
// Start, after Shutdown, twice.
func TestServer_Start_Lifecycle(t *testing.T) {
	ctx := context.Background()
	t.Run("shutdown before start", func(t *testing.T) {
		srv := newIdleServer(t, "s1")
		must(t, srv.Shutdown())
		must(t, srv.Shutdown())
		err := srv.Start()
		expectIs(t, err, csi.ErrInvalidRequest)
		_, err = srv.Apply(ctx, state.DeleteNode{NodeID: "n1"})
		expectIs(t, err, csi.ErrUnavailable)
		expectEqual(t, csi.Classify(err), csi.ClassRetryable)
		_, _, err = srv.WaitLeader(ctx)
		expectIs(t, err, csi.ErrUnavailable)
		_, err = srv.Servers()
		expectIs(t, err, csi.ErrUnavailable)
		expectIs(t, srv.Join(raftstate.Peer{ID: "s2", Addr: "s2"}), csi.ErrUnavailable)
		if srv.IsLeader() || srv.Raft() != nil {
			t.Error("a server never started claims to lead or run")
		}
	})
	t.Run("apply before start", func(t *testing.T) {
		srv := newIdleServer(t, "s1")
		_, err := srv.Apply(ctx, state.DeleteNode{NodeID: "n1"})
		expectIs(t, err, csi.ErrUnavailable)
	})
	t.Run("start twice, stop twice", func(t *testing.T) {
		srv := newIdleServer(t, "s1")
		must(t, srv.Start())
		expectIs(t, srv.Start(), csi.ErrInvalidRequest)
		// Not formed (it knows one of three): a write says no leader.
		_, err := srv.Apply(ctx, state.DeleteNode{NodeID: "n1"})
		var nl *raftstate.NotLeaderError
		if !errors.As(err, &nl) || nl.LeaderAddr != "" {
			t.Errorf("write on an unformed cluster: %v", err)
		}
		must(t, srv.Shutdown())
		must(t, srv.Shutdown())
		expectIs(t, srv.Start(), csi.ErrInvalidRequest)
	})
	t.Run("data dir in use", func(t *testing.T) {
		dir := t.TempDir()
		newServer := func() *raftstate.Server {
			store, err := state.NewMemStore(state.Config{})
			must(t, err)
			_, trans := raft.NewInmemTransport("s1")
			srv, err := raftstate.New(raftstate.Config{ID: "s1", Store: store, Transport: trans, DataDir: dir, BootstrapExpect: 3, Raft: testRaftConfig()})
			must(t, err)
			t.Cleanup(func() { srv.Shutdown() })
			return srv
		}
		must(t, newServer().Start())
		err := newServer().Start()
		expectIs(t, err, csi.ErrUnavailable)
	})
	t.Run("ctx ended", func(t *testing.T) {
		srv := newIdleServer(t, "s1")
		must(t, srv.Start())
		done, cancel := context.WithCancel(ctx)
		cancel()
		_, err := srv.Apply(done, state.DeleteNode{NodeID: "n1"})
		expectIs(t, err, context.Canceled)
		_, _, err = srv.WaitLeader(done)
		expectIs(t, err, context.Canceled)
	})
}

// TestServer_OnLeadership_Callbacks checks the leadership signal a host wires to
// its leader-only workers.
func TestServer_OnLeadership_Callbacks(t *testing.T) {
	c := newCluster(t, clusterOpts{})
	leader := c.leader()
	follower := c.followers(leader)[0]

	var got []bool
	cancel := leader.srv.OnLeadership(func(l bool) { got = append(got, l) })
	expectEqual(t, got, []bool{true}) // already the leader: told at once
	fch := make(chan bool, 4)
	follower.srv.OnLeadership(func(l bool) { fch <- l })

	var after []bool
	leader.srv.OnLeadership(func(l bool) { after = append(after, l) })
	cancel()
	c.stop(leader)
	expectEqual(t, got, []bool{true}) // unregistered: not told
	expectEqual(t, after, []bool{true, false})

	if next := c.leader(); next == follower {
		select {
		case l := <-fch:
			expectEqual(t, l, true)
		case <-waitCtx(t).Done():
			t.Fatal("the new leader's callback was not called")
		}
	} else {
		expectEqual(t, len(fch), 0)
	}
}

// TestServer_Start_KnownServers checks the bootstrap done by Start
// itself: servers told about each other before they start, and a
// one-server cluster (BootstrapExpect 1), which has no one to wait for.
func TestServer_Start_KnownServers(t *testing.T) {
	t.Run("joined before start", func(t *testing.T) {
		ids := []string{"s1", "s2", "s3"}
		transports := map[string]*raft.InmemTransport{}
		for _, id := range ids {
			_, transports[id] = raft.NewInmemTransport(raft.ServerAddress(id))
		}
		var servers []*raftstate.Server
		leaders := make(chan string, 8)
		for _, id := range ids {
			for _, peer := range ids {
				transports[id].Connect(raft.ServerAddress(peer), transports[peer])
			}
			store, err := state.NewMemStore(state.Config{})
			must(t, err)
			srv, err := raftstate.New(raftstate.Config{ID: id, Store: store, Transport: transports[id], InMemory: true, BootstrapExpect: 3, Raft: testRaftConfig()})
			must(t, err)
			t.Cleanup(func() { must(t, srv.Shutdown()) })
			for _, peer := range ids {
				must(t, srv.Join(raftstate.Peer{ID: peer, Addr: peer}))
			}
			srv.OnLeadership(func(l bool) {
				if l {
					leaders <- id
				}
			})
			servers = append(servers, srv)
		}
		for _, srv := range servers {
			must(t, srv.Start())
		}
		select {
		case <-leaders:
		case <-waitCtx(t).Done():
			t.Fatal("no leader")
		}
		for _, srv := range servers {
			got, err := srv.Servers()
			must(t, err)
			expectEqual(t, len(got), 3)
		}
	})
	t.Run("one server", func(t *testing.T) {
		store, err := state.NewMemStore(state.Config{})
		must(t, err)
		_, trans := raft.NewInmemTransport("solo")
		srv, err := raftstate.New(raftstate.Config{ID: "solo", Store: store, Transport: trans, InMemory: true, BootstrapExpect: 1, Raft: testRaftConfig()})
		must(t, err)
		t.Cleanup(func() { must(t, srv.Shutdown()) })
		must(t, srv.Start())
		_, id, err := srv.WaitLeader(waitCtx(t))
		must(t, err)
		expectEqual(t, id, "solo")
		must(t, srv.Join(raftstate.Peer{ID: "s2", Addr: "s2"})) // formed: changes nothing
		res, err := srv.Apply(context.Background(), allocsCmd("web-1"))
		must(t, err)
		expectEqual(t, res.Changed, true)
	})
}

// TestServer_Shutdown_WritesInFlight shuts the leader down while
// writers keep it busy: every write either succeeded, and is in the
// leader's store, or failed with an error a caller knows to retry; and
// no goroutine is left waiting on raft (goleak, in TestMain).
func TestServer_Shutdown_WritesInFlight(t *testing.T) {
	c := newCluster(t, clusterOpts{})
	leader := c.leader()
	const writers = 8
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		succeeded []string
	)
	started := make(chan struct{}, writers)
	failures := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				id := fmt.Sprintf("w%d-%d", w, i)
				_, err := leader.srv.Apply(context.Background(), allocsCmd(id))
				if i == 0 {
					started <- struct{}{}
				}
				if err != nil {
					failures <- err
					return
				}
				mu.Lock()
				succeeded = append(succeeded, id)
				mu.Unlock()
			}
		}()
	}
	for range writers {
		<-started // every writer has made a write
	}
	c.stop(leader)
	wg.Wait()
	close(failures)
	for err := range failures {
		if !csi.IsRetryable(err) {
			t.Errorf("a write cut by Shutdown failed with a Final error: %v", err)
		}
	}
	for _, id := range succeeded {
		if _, err := leader.store.Allocation(id); err != nil {
			t.Errorf("allocation %s was acknowledged but is not in the leader's store: %v", id, err)
		}
	}
}
