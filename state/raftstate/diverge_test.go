package raftstate_test

import (
	"bytes"
	"crypto/rand"
	"errors"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
	"github.com/csikit/csikit/state/raftstate"
	"github.com/csikit/csikit/state/sealed"
)

// TestCluster_Diverged_FollowerMissingKey runs three in-memory servers
// after a key rotation that reached two of them: s3 holds key 1 only.
// A write sealed with key 2 is applied by the leader and the other
// follower; s3 cannot open it and, instead of skipping it, diverges:
// it fails with ErrStateDiverged (naming the missing key), its store
// holds nothing of the write, its Reader refuses every read (its ACL
// tokens too), and it shut raft down. The two others keep the quorum
// and go on writing.
func TestCluster_Diverged_FollowerMissingKey(t *testing.T) {
	key1, key2 := make([]byte, sealed.KeySize), make([]byte, sealed.KeySize)
	rand.Read(key1)
	rand.Read(key2)
	oldRing, err := sealed.New(map[uint32][]byte{1: key1})
	must(t, err)
	newRing, err := sealed.New(map[uint32][]byte{1: key1, 2: key2})
	must(t, err)
	c := newCluster(t, clusterOpts{forward: true, keyringOf: map[string]*sealed.Keyring{"s1": newRing, "s2": newRing, "s3": oldRing}})
	behind := c.member("s3")
	leader := c.leaderOtherThan(behind)

	before := snapshotOf(t, behind.store)
	apply(t, leader.srv, fingerprintCmd())
	select {
	case <-behind.srv.Failed():
	case <-waitCtx(t).Done():
		t.Fatal("s3 applied or skipped an entry sealed with a key it does not hold, and did not fail")
	}
	err = behind.srv.Err()
	expectIs(t, err, raftstate.ErrStateDiverged)
	expectIs(t, err, sealed.ErrUnknownKey)
	if !bytes.Equal(snapshotOf(t, behind.store), before) {
		t.Error("s3's store changed")
	}
	if _, err := behind.srv.Reader().Plugins(); !errors.Is(err, raftstate.ErrStateDiverged) {
		t.Errorf("a read on s3: %v, want ErrStateDiverged", err)
	}
	// Nor are its ACL tokens: a revocation it missed must not leave a
	// token working there.
	if _, err := behind.srv.Reader().ACLTokenByHash(state.HashNodeSecret("t")); !errors.Is(err, raftstate.ErrStateDiverged) {
		t.Errorf("a token read on s3: %v, want ErrStateDiverged", err)
	}
	if _, err := behind.srv.Reader().ACLTokens(); !errors.Is(err, raftstate.ErrStateDiverged) {
		t.Errorf("a token list on s3: %v, want ErrStateDiverged", err)
	}
	if behind.srv.Raft() != nil {
		t.Error("s3's raft still runs")
	}
	if _, err := behind.srv.Apply(waitCtx(t), allocsCmd("a1")); !errors.Is(err, csi.ErrUnavailable) {
		t.Errorf("a write on s3: %v, want csi.ErrUnavailable", err)
	}

	res := apply(t, leader.srv, allocsCmd("a1"))
	for _, m := range c.followers(leader) {
		if m == behind {
			continue
		}
		waitIndexes(t, m.store, map[state.Table]uint64{state.TableAllocations: res.Index})
		if _, err := m.srv.Reader().Allocation("a1"); err != nil {
			t.Errorf("server %s with the new key: %v", m.id, err)
		}
	}
}

// leaderOtherThan waits for a leader that is not m, moving leadership
// away from m if it leads.
func (c *cluster) leaderOtherThan(m *member) *member {
	c.t.Helper()
	for {
		l := c.leader()
		if l != m {
			return l
		}
		c.mu.Lock()
		changed := c.changed
		c.mu.Unlock()
		must(c.t, l.srv.Raft().LeadershipTransfer().Error())
		select {
		case <-changed:
		case <-waitCtx(c.t).Done():
			c.t.Fatal("leadership did not move")
		}
	}
}
