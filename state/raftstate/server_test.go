package raftstate_test

import (
	"context"
	"errors"
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

// TestServer_Lifecycle checks the calls made out of order: before
// Start, after Shutdown, twice.
func TestServer_Lifecycle(t *testing.T) {
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

// TestServer_OnLeadership checks the leadership signal a host wires to
// its leader-only workers.
func TestServer_OnLeadership(t *testing.T) {
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
