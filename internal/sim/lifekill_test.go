package sim

import (
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/raft"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
)

// storeView is what must survive a leader change: every volume with
// its live claims, and every snapshot.
type storeView struct {
	claims map[string][]string // volume ID: its live claims' allocation IDs, sorted
	snaps  []string
}

func viewOf(store *state.MemStore) (storeView, error) {
	v := storeView{claims: map[string][]string{}}
	vols, err := store.Volumes(namespace, "")
	if err != nil {
		return v, err
	}
	for _, vol := range vols {
		var ids []string
		for _, m := range []map[string]*csi.Claim{vol.ReadClaims, vol.WriteClaims} {
			for id := range m {
				ids = append(ids, id)
			}
		}
		slices.Sort(ids)
		v.claims[vol.ID] = ids
	}
	snaps, err := store.Snapshots(namespace)
	if err != nil {
		return v, err
	}
	for _, s := range snaps {
		v.snaps = append(v.snaps, s.ID)
	}
	return v, nil
}

// lost returns what of before the store no longer holds.
func (before storeView) lost(who string, store *state.MemStore) []string {
	after, err := viewOf(store)
	if err != nil {
		return []string{fmt.Sprintf("%s: read the store: %v", who, err)}
	}
	var bad []string
	for id, claims := range before.claims {
		now, ok := after.claims[id]
		if !ok {
			bad = append(bad, fmt.Sprintf("%s lost volume %s", who, id))
			continue
		}
		for _, c := range claims {
			if !slices.Contains(now, c) {
				bad = append(bad, fmt.Sprintf("%s lost the live claim of %s on volume %s", who, c, id))
			}
		}
	}
	for _, s := range before.snaps {
		if !slices.Contains(after.snaps, s) {
			bad = append(bad, fmt.Sprintf("%s lost snapshot %s", who, s))
		}
	}
	slices.Sort(bad)
	return bad
}

// killLeader kills the leading server (its worker, raft and transport
// stop at once) and, once another has taken leadership, starts it again
// on its data dir with a new, empty store. No workload runs meanwhile,
// so the new leader and then the restarted server must hold every
// volume, live claim and snapshot the old leader had applied; the
// restarted server must then catch up with the leader byte for byte.
func (r *run) killLeader() {
	w := r.w
	w.settle()
	old := w.leader()
	before, err := viewOf(old.store)
	must(w.t, err)
	idx := old.srv.FSM().AppliedIndex()
	w.kill(old)
	ctx, cancel := r.ctx()
	defer cancel()
	leader, err := w.tryLeader()
	if err != nil {
		r.flag("after killing leader %s: %v", old.id, err)
	} else if err := leader.srv.FSM().WaitApplied(ctx, idx); err != nil {
		r.flag("new leader %s did not reach index %d of killed leader %s: %v", leader.id, idx, old.id, err)
	} else {
		for _, b := range before.lost("new leader "+leader.id, leader.store) {
			r.flag("%s", b)
		}
	}
	nr := w.restart(old.id)
	if err := nr.srv.FSM().WaitApplied(ctx, idx); err != nil {
		r.flag("restarted server %s did not reach index %d: %v", nr.id, idx, err)
		return
	}
	for _, b := range before.lost("restarted server "+nr.id, nr.store) {
		r.flag("%s", b)
	}
	for _, b := range invReplicasIdentical(r) {
		r.flag("after the restart of %s: %s", nr.id, b)
	}
}

// kill stops server r as a crash would: nothing of it runs afterwards
// and its peers can no longer reach it.
func (w *world) kill(r *replica) {
	w.repMu.Lock()
	r.dead = true
	w.repMu.Unlock()
	r.stop()
	w.waitDone(r.done, "the claim worker of server "+r.id)
	if err := r.srv.Shutdown(); err != nil {
		w.t.Errorf("shut down server %s: %v", r.id, err)
	}
	for _, o := range w.reps() {
		o.inmem.Disconnect(raft.ServerAddress(r.id))
	}
}

// waitDone waits for a goroutine told to stop to end, at most
// waitLimit: a hang guard.
func (w *world) waitDone(done <-chan struct{}, what string) {
	select {
	case <-done:
	case <-time.After(waitLimit):
		w.t.Errorf("%s did not stop within %s", what, waitLimit)
	}
}

// restart builds server id again on its data dir and a new store, in
// the slot of its killed self, and starts it: it rejoins the cluster
// from its raft state.
func (w *world) restart(id string) *replica {
	nr := w.newReplica(id)
	w.connect(nr)
	w.repMu.Lock()
	for i, r := range w.replicas {
		if r.id == id {
			w.replicas[i] = nr
		}
	}
	w.repMu.Unlock()
	must(w.t, nr.srv.Start())
	return nr
}

// nodeGone has a node leave for good, as a host sees it: the node is
// unreachable and reported gone, its fingerprints stop and its record
// is deleted, and its allocations are stopped. Its claims must then be
// freed without any call to it (the node step is skipped), and a new
// claim on it is refused. Its plugin's leftovers are those of a machine
// that no longer exists: the node invariants leave it out.
func (r *run) nodeGone(d decision) {
	w := r.w
	n := w.nodes[d.node]
	n.mu.Lock()
	n.gone, n.down = true, true
	n.mu.Unlock()
	w.tr.SetDown(d.node, true)
	w.statuses.Set(d.node, csi.NodeStatusGone)
	n.stop()
	w.waitDone(n.done, "the fingerprint manager of node "+d.node)
	ctx, cancel := r.ctx()
	defer cancel()
	err := r.retryWrite(nil, func(leader *replica, _ bool) error {
		_, err := leader.srv.Apply(ctx, state.DeleteNode{NodeID: d.node})
		return err
	})
	if err != nil {
		r.flag("delete node %s: %v", d.node, err)
	}
	r.drain(d.node)
	probe := decision{kind: opLifeClaim, alloc: "gone-" + d.node, vol: numVolumes, node: d.node, mode: csi.ClaimRead}
	if _, err := r.claim(ctx, probe); err == nil {
		r.flag("node %s is gone, yet a claim on it was admitted", d.node)
	}
}
