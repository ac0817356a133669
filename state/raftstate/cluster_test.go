package raftstate_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
	"github.com/csikit/csikit/state/raftstate"
)

// TestServer_Join_BootstrapExpect forms a cluster step by step: while
// no server knows all three, none has a raft configuration, so no
// election can run; once they all know each other, they share one
// configuration and elect a leader.
func TestServer_Join_BootstrapExpect(t *testing.T) {
	c := startCluster(t, clusterOpts{})
	s1, s2, s3 := c.members[0], c.members[1], c.members[2]
	noConfiguration := func(step string) {
		t.Helper()
		for _, m := range c.members {
			servers, err := m.srv.Servers()
			must(t, err)
			if len(servers) != 0 {
				t.Fatalf("%s: %s already has the configuration %v", step, m.id, servers)
			}
			if addr, _ := m.srv.Leader(); addr != "" {
				t.Fatalf("%s: %s knows leader %s", step, m.id, addr)
			}
		}
	}
	noConfiguration("started")
	must(t, s1.srv.Join(s2.srv.Self()))
	must(t, s2.srv.Join(s1.srv.Self(), s2.srv.Self())) // listing itself is allowed
	must(t, s3.srv.Join(s1.srv.Self()))
	noConfiguration("each server knows two of three")

	must(t, s1.srv.Join(s3.srv.Self()))
	must(t, s2.srv.Join(s3.srv.Self()))
	must(t, s3.srv.Join(s2.srv.Self()))
	leader := c.leader()
	want := c.peers()
	for _, m := range c.members {
		got, err := m.srv.Servers()
		must(t, err)
		expectEqual(t, got, want)
		addr, id, err := m.srv.WaitLeader(waitCtx(t))
		must(t, err)
		expectEqual(t, raftstate.Peer{ID: id, Addr: addr}, leader.srv.Self())
		addr, id = m.srv.Leader()
		expectEqual(t, raftstate.Peer{ID: id, Addr: addr}, leader.srv.Self())
	}
	if !leader.srv.IsLeader() {
		t.Errorf("%s took leadership but IsLeader is false", leader.id)
	}
	for _, f := range c.followers(leader) {
		if f.srv.IsLeader() {
			t.Errorf("follower %s says it leads", f.id)
		}
	}
}

// TestServer_Join_Refused checks that a Join that shows the servers were
// not given the same configuration is refused whole.
func TestServer_Join_Refused(t *testing.T) {
	self := raftstate.Peer{ID: "s1", Addr: "s1"}
	tests := []struct {
		name  string
		first []raftstate.Peer // joined before, successfully
		join  []raftstate.Peer
		is    error
	}{
		{"malformed ID", nil, []raftstate.Peer{{ID: "s 2", Addr: "s2"}}, csi.ErrInvalidID},
		{"empty address", nil, []raftstate.Peer{{ID: "s2"}}, csi.ErrInvalidRequest},
		{"address with a space", nil, []raftstate.Peer{{ID: "s2", Addr: "s2 "}}, csi.ErrInvalidRequest},
		{"own ID at another address", nil, []raftstate.Peer{{ID: "s1", Addr: "elsewhere"}}, csi.ErrInvalidRequest},
		{"known ID at another address", []raftstate.Peer{{ID: "s2", Addr: "s2"}}, []raftstate.Peer{{ID: "s2", Addr: "s9"}}, csi.ErrInvalidRequest},
		{"known address under another ID", []raftstate.Peer{{ID: "s2", Addr: "s2"}}, []raftstate.Peer{{ID: "s9", Addr: "s2"}}, csi.ErrInvalidRequest},
		{"more servers than expected", nil, []raftstate.Peer{{ID: "s2", Addr: "s2"}, {ID: "s3", Addr: "s3"}, {ID: "s4", Addr: "s4"}}, csi.ErrInvalidRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newIdleServer(t, self.ID)
			must(t, srv.Join(tt.first...))
			err := srv.Join(append(tt.join, raftstate.Peer{ID: "s3", Addr: "s3"})...)
			if err == nil {
				t.Fatal("Join succeeded")
			}
			expectIs(t, err, tt.is)
			// Refused whole: s3, listed with the bad peer, is not known,
			// so the two right peers still fit.
			must(t, srv.Join(raftstate.Peer{ID: "s2", Addr: "s2"}, raftstate.Peer{ID: "s3", Addr: "s3"}))
		})
	}
}

// newIdleServer builds a server that is never started.
func newIdleServer(t *testing.T, id string) *raftstate.Server {
	t.Helper()
	store, err := state.NewMemStore(state.Config{})
	must(t, err)
	_, trans := raft.NewInmemTransport(raft.ServerAddress(id))
	srv, err := raftstate.New(raftstate.Config{ID: id, Store: store, Transport: trans, InMemory: true, BootstrapExpect: 3})
	must(t, err)
	t.Cleanup(func() { must(t, srv.Shutdown()) })
	return srv
}

// setupClaims writes a fingerprint, n allocations and n volumes through
// a, and returns the claim commands for them.
func setupClaims(t testing.TB, a state.Applier, prefix string, n int) []state.ClaimVolume {
	t.Helper()
	apply(t, a, fingerprintCmd())
	var allocs []string
	var claims []state.ClaimVolume
	for i := range n {
		vol, alloc := fmt.Sprintf("%s-vol-%d", prefix, i), fmt.Sprintf("%s-web-%d", prefix, i)
		allocs = append(allocs, alloc)
		apply(t, a, volumeCmd(vol))
		claims = append(claims, claimCmd(vol, alloc))
	}
	apply(t, a, allocsCmd(allocs...))
	return claims
}

// TestServer_Apply_ReplicatesAtSameIndex writes claims on the leader and
// reads them on every follower, each at the index the leader reported.
func TestServer_Apply_ReplicatesAtSameIndex(t *testing.T) {
	c := newCluster(t, clusterOpts{})
	leader := c.leader()
	claims := setupClaims(t, leader.srv, "a", 5)
	var results []state.Result
	for _, cl := range claims {
		res := apply(t, leader.srv, cl)
		if !res.Changed || res.Claim == nil || res.Claim.ExternalNodeID != "csi-n1" {
			t.Fatalf("claim %s: result %+v", cl.VolumeID, res)
		}
		results = append(results, res)
	}
	want := indexes(t, leader.store)
	for _, f := range c.followers(leader) {
		waitIndexes(t, f.store, want)
		for i, cl := range claims {
			v, err := f.store.Volume("default", cl.VolumeID)
			must(t, err)
			expectEqual(t, v.ModifyIndex, results[i].Index)
			expectEqual(t, v.WriteClaims[cl.Claim.AllocationID], results[i].Claim)
		}
		if !bytes.Equal(snapshotOf(t, f.store), snapshotOf(t, leader.store)) {
			t.Errorf("follower %s's store differs from the leader's", f.id)
		}
	}

	// A refusal keeps its sentinel and class, and writes nothing.
	before := indexes(t, leader.store)
	second := claims[0]
	second.Claim.AllocationID = claims[1].Claim.AllocationID
	_, err := leader.srv.Apply(context.Background(), second)
	expectIs(t, err, csi.ErrMaxClaims)
	expectEqual(t, csi.Classify(err), csi.ClassRetryable)
	expectEqual(t, indexes(t, leader.store), before)
	_, err = leader.srv.Apply(context.Background(), (*state.ClaimVolume)(nil))
	expectIs(t, err, csi.ErrInvalidRequest)
}

// TestServer_Apply_Follower checks both documented behaviours of a write
// made on a follower.
func TestServer_Apply_Follower(t *testing.T) {
	t.Run("without Forward it names the leader", func(t *testing.T) {
		c := newCluster(t, clusterOpts{})
		leader := c.leader()
		claims := setupClaims(t, leader.srv, "f", 1)
		f := c.followers(leader)[0]
		waitKnowsLeader(t, f, leader)
		before := indexes(t, leader.store)
		_, err := f.srv.Apply(context.Background(), claims[0])
		var nl *raftstate.NotLeaderError
		if !errors.As(err, &nl) {
			t.Fatalf("error %v is not a *NotLeaderError", err)
		}
		expectEqual(t, raftstate.Peer{ID: nl.LeaderID, Addr: nl.LeaderAddr}, leader.srv.Self())
		expectIs(t, err, raftstate.ErrNotLeader)
		expectEqual(t, csi.Classify(err), csi.ClassRetryable)
		expectEqual(t, err.Error(), "raftstate: not leader, leader is "+leader.id+" (server "+leader.id+"); send the write there")
		expectEqual(t, indexes(t, leader.store), before)
		// ApplyForwarded never forwards.
		b, err := state.EncodeCommand(claims[0])
		must(t, err)
		_, err = f.srv.ApplyForwarded(context.Background(), b)
		expectIs(t, err, raftstate.ErrNotLeader)
	})
	t.Run("with Forward the leader applies it", func(t *testing.T) {
		c := newCluster(t, clusterOpts{forward: true})
		leader := c.leader()
		f := c.followers(leader)[0]
		waitKnowsLeader(t, f, leader)
		claims := setupClaims(t, f.srv, "f", 2) // every write forwarded
		res := apply(t, f.srv, claims[0])
		// The follower's own store holds it when Apply returns.
		v, err := f.store.Volume("default", claims[0].VolumeID)
		must(t, err)
		expectEqual(t, v.ModifyIndex, res.Index)
		expectEqual(t, v.WriteClaims[claims[0].Claim.AllocationID], res.Claim)
		lv, err := leader.store.Volume("default", claims[0].VolumeID)
		must(t, err)
		expectEqual(t, lv.ModifyIndex, res.Index)
		// A refusal comes back with its sentinel.
		second := claims[0]
		second.Claim.AllocationID = claims[1].Claim.AllocationID
		_, err = f.srv.Apply(context.Background(), second)
		expectIs(t, err, csi.ErrMaxClaims)
		// Bytes that are no command never reach the log.
		_, err = leader.srv.ApplyForwarded(context.Background(), []byte(`{"kind":"nope","body":{}}`))
		expectIs(t, err, csi.ErrInvalidRequest)
	})
}

// waitKnowsLeader waits until f has heard from the leader: right after
// an election a follower may not know it yet, and then refuses writes
// (or cannot forward them) with a *NotLeaderError naming no leader.
func waitKnowsLeader(t *testing.T, f, leader *member) {
	t.Helper()
	_, id, err := f.srv.WaitLeader(waitCtx(t))
	must(t, err)
	expectEqual(t, id, leader.id)
}

// TestServer_Start_FromDataDir stops the whole cluster and starts it
// again from its data dirs: no server bootstraps again, and every store
// comes back with the same state, from the log alone or from a snapshot
// whose log was truncated.
func TestServer_Start_FromDataDir(t *testing.T) {
	for _, snapshot := range []bool{false, true} {
		t.Run(fmt.Sprintf("snapshot=%v", snapshot), func(t *testing.T) {
			c := newCluster(t, clusterOpts{durable: true, raft: func(rc *raft.Config) { rc.TrailingLogs = 0 }})
			leader := c.leader()
			claims := setupClaims(t, leader.srv, "r", 4)
			for _, cl := range claims[:2] {
				apply(t, leader.srv, cl)
			}
			var snapIndex uint64
			if snapshot {
				// Every server snapshots and drops its log up to there.
				for _, m := range c.members {
					waitIndexes(t, m.store, indexes(t, leader.store))
					f := m.srv.Raft().Snapshot()
					must(t, f.Error())
					meta, rc, err := f.Open()
					must(t, err)
					rc.Close()
					snapIndex = max(snapIndex, meta.Index)
				}
			}
			for _, cl := range claims[2:] {
				apply(t, leader.srv, cl)
			}
			want, wantIdx := snapshotOf(t, leader.store), indexes(t, leader.store)
			config := c.peers()
			c.shutdownAll()

			if snapshot {
				// The log really was truncated: it starts after the snapshot.
				for _, m := range c.members {
					db, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(m.dir, "raft.db")})
					must(t, err)
					first, err := db.FirstIndex()
					must(t, err)
					must(t, db.Close())
					if first <= 1 {
						t.Errorf("%s's log starts at %d; the snapshot did not truncate it", m.id, first)
					}
				}
			}

			for _, m := range c.members {
				c.start(m)
				if snapshot && m.srv.FSM().AppliedIndex() == 0 {
					t.Errorf("%s did not restore its snapshot at start", m.id)
				}
			}
			// Join again, even with a peer that was never there: the
			// cluster has formed, nothing changes.
			for _, m := range c.members {
				must(t, m.srv.Join(append(config, raftstate.Peer{ID: "s9", Addr: "s9"})...))
			}
			c.leader()
			for _, m := range c.members {
				got, err := m.srv.Servers()
				must(t, err)
				expectEqual(t, got, config)
				waitIndexes(t, m.store, wantIdx)
				if !bytes.Equal(snapshotOf(t, m.store), want) {
					t.Errorf("%s came back with another state", m.id)
				}
			}
		})
	}
}

// TestServer_Start_FollowerBehindSnapshot restarts a follower that
// missed writes the leader has already compacted away: the leader sends
// its snapshot, and the follower's FSM restores it.
func TestServer_Start_FollowerBehindSnapshot(t *testing.T) {
	c := newCluster(t, clusterOpts{durable: true, raft: func(rc *raft.Config) { rc.TrailingLogs = 0 }})
	leader := c.leader()
	claims := setupClaims(t, leader.srv, "b", 3)
	f := c.followers(leader)[0]
	waitIndexes(t, f.store, indexes(t, leader.store))
	c.stop(f)
	for _, cl := range claims {
		apply(t, leader.srv, cl)
	}
	must(t, leader.srv.Raft().Snapshot().Error())
	c.start(f)
	waitIndexes(t, f.store, indexes(t, leader.store))
	if !bytes.Equal(snapshotOf(t, f.store), snapshotOf(t, leader.store)) {
		t.Error("the restarted follower's store differs from the leader's")
	}
	// It follows the log again after the snapshot.
	res := apply(t, leader.srv, state.DeleteNode{NodeID: "n9"})
	must(t, f.srv.FSM().WaitApplied(waitCtx(t), res.Index))
}

// TestServer_Apply_OverTCP runs a cluster over TCP on loopback with data dirs:
// claims replicate, and after the leader stops the other two elect a
// new one that takes writes.
func TestServer_Apply_OverTCP(t *testing.T) {
	c := newCluster(t, clusterOpts{tcp: true, durable: true})
	leader := c.leader()
	claims := setupClaims(t, leader.srv, "t", 3)
	apply(t, leader.srv, claims[0])
	for _, f := range c.followers(leader) {
		waitIndexes(t, f.store, indexes(t, leader.store))
		if !bytes.Equal(snapshotOf(t, f.store), snapshotOf(t, leader.store)) {
			t.Errorf("follower %s's store differs from the leader's", f.id)
		}
	}
	c.stop(leader)
	next := c.leader()
	apply(t, next.srv, claims[1])
	for _, f := range c.followers(next) {
		waitIndexes(t, f.store, indexes(t, next.store))
		v, err := f.store.Volume("default", claims[1].VolumeID)
		must(t, err)
		if v.WriteClaims[claims[1].Claim.AllocationID] == nil {
			t.Errorf("follower %s lacks the claim written on the new leader", f.id)
		}
	}
}
