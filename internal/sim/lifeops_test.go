package sim

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/rpcshim"
	"github.com/csikit/csikit/state"
)

// parkProbe is a context that reports the first time its call waits on
// it (calls Done): the racing claim of a delete waits first on the
// Server's per-volume lock, which the delete holds, and, were there no
// lock, on its own store write. Either way the wait, not a timer, tells
// that the claim has gone as far as it can while the delete is held.
type parkProbe struct {
	context.Context
	once    sync.Once
	waiting chan struct{}
}

func (p *parkProbe) Done() <-chan struct{} {
	p.once.Do(func() { close(p.waiting) })
	return p.Context.Done()
}

// deleteRace stops every allocation of the life volume, lets the claim
// worker release them, and deletes the volume while a new allocation
// claims it: the delete is held in the controller plugin until the
// claim has gone as far as it can, then let go. Either the delete wins
// (the volume is gone from the store and the plugin, nothing of it is
// left attached or mounted, and the claim is refused) or the delete is
// refused and the claim may win; never both, which would leave a
// registered volume the plugin deleted, or a published one deleted. A
// deleted volume is registered again for the steps that follow.
func (r *run) deleteRace(d decision) {
	w := r.w
	sv := r.p.volumes[lifeVolume]
	if r.controllerDown("delete") {
		return
	}
	r.stopVolume(lifeVolume)
	gate := w.ctl.Hold(csitest.MethodDeleteVolume)
	defer gate.Open()
	leader := w.leader()
	ctx, cancel := r.ctx()
	defer cancel()
	deleted := make(chan error, 1)
	go func() {
		_, err := leader.server.DeleteVolume(ctx, &rpcshim.VolumeDeleteRequest{Namespace: namespace, VolumeID: sv.id})
		deleted <- err
	}()
	arrived := make(chan struct{})
	go func() {
		if gate.Wait(ctx, 1) == nil {
			close(arrived)
		}
	}()
	select {
	case err := <-deleted: // refused before any plugin call
		deleted <- err
		gate.Open()
	case <-arrived:
	case <-ctx.Done():
	}
	claimErr := r.raceClaim(ctx, d, leader, gate)
	delErr := <-deleted
	// The host retries a delete that did not finish (a write lost to a
	// leader change, say) as it retries any write, until it is refused.
	inUse := func(err error) bool { return errors.Is(err, csi.ErrVolumeInUse) }
	if delErr != nil && csi.Classify(delErr) != csi.ClassFinal && !inUse(delErr) {
		r.w.t.Logf("seed %d: %s: the delete did not finish, retried: %v", r.p.seed, lifeString(d), delErr)
		delErr = r.retryWrite(inUse, func(leader *replica, _ bool) error {
			_, err := leader.server.DeleteVolume(ctx, &rpcshim.VolumeDeleteRequest{Namespace: namespace, VolumeID: sv.id})
			return err
		})
	}
	r.noteErr("delete", delErr)
	if delErr != nil {
		r.w.t.Logf("seed %d: %s: %v", r.p.seed, lifeString(d), delErr)
		return // VolumesInPlugin checks that the plugin still has it
	}
	if claimErr == nil {
		r.flag("volume %s was deleted, yet the racing claim of %s was admitted", sv.id, d.alloc)
	}
	r.checkDeleted(sv)
	if err := r.registerVolume(sv); err != nil {
		r.flag("register volume %s again after its delete: %v", sv.id, err)
	}
	r.life.mu.Lock()
	delete(r.life.maxCap, sv.id)
	r.life.mu.Unlock()
}

// stopVolume stops every allocation claiming volume i, as a host does
// before it deletes the volume, and lets the claim worker release them.
func (r *run) stopVolume(i int) {
	r.mu.Lock()
	var ids []string
	for id, d := range r.allocs {
		if d.vol == i {
			ids = append(ids, id)
		}
	}
	r.mu.Unlock()
	slices.Sort(ids)
	for _, id := range ids {
		_ = r.stop(id)
	}
	r.w.settle()
	for range 6 {
		v, err := r.w.leader().store.Volume(namespace, r.p.volumes[i].id)
		if err != nil || !v.InUse() {
			return
		}
		r.w.clock.Advance(5 * time.Minute)
		r.w.settle()
	}
}

// raceClaim claims the life volume for d while the delete is held at
// gate, lets the delete go once the claim waits (or the delete never
// reached the plugin), and mounts what the claim admitted.
func (r *run) raceClaim(ctx context.Context, d decision, leader *replica, gate *csitest.Gate) error {
	r.mu.Lock()
	r.allocs[d.alloc] = d
	r.mu.Unlock()
	if _, err := r.w.apply(ctx, state.UpsertAllocations{Allocations: []csi.Allocation{{ID: d.alloc, Namespace: namespace, NodeID: d.node}}}); err != nil {
		gate.Open()
		return err
	}
	sv := r.p.volumes[d.vol]
	probe := &parkProbe{Context: ctx, waiting: make(chan struct{})}
	type result struct {
		resp *rpcshim.VolumeClaimResponse
		err  error
	}
	done := make(chan result, 1)
	start := len(r.w.ctl.Calls())
	go func() {
		resp, err := leader.server.Claim(probe, &rpcshim.VolumeClaimRequest{Namespace: namespace, VolumeID: sv.id, Claim: csi.Claim{
			AllocationID: d.alloc, NodeID: d.node, Mode: d.mode, AccessMode: sv.mode, AttachmentMode: csi.AttachmentModeFileSystem}})
		done <- result{resp, err}
	}()
	var res result
	select {
	case <-probe.waiting:
		gate.Open()
		res = <-done
	case res = <-done:
		gate.Open()
	}
	r.noteClaim(sv.id, d.node, start)
	r.noteErr("claim", res.err)
	if res.err != nil {
		return res.err
	}
	_ = r.mount(ctx, d, res.resp)
	return nil
}

// checkDeleted flags what a deleted volume left behind: its row, an
// attachment in the plugin, a staging or publication on a node that is
// still there.
func (r *run) checkDeleted(sv simVolume) {
	w := r.w
	if _, err := w.leader().store.Volume(namespace, sv.id); !errors.Is(err, csi.ErrVolumeNotFound) {
		r.flag("volume %s was deleted, but the store still reads it (%v)", sv.id, err)
	}
	if st, ok := w.ctl.Volume("ext-" + sv.id); ok {
		r.flag("volume %s was deleted, but the plugin still has it (attached to %v)", sv.id, st.AttachedNodes())
	}
	if nodes := w.ctl.Attachments()["ext-"+sv.id]; len(nodes) > 0 {
		r.flag("volume %s was deleted, but the plugin still attaches it to %v", sv.id, nodes)
	}
	for _, id := range simNodes {
		if w.isGone(id) {
			continue
		}
		if st, ok := w.nodes[id].plugin.Volume("ext-" + sv.id); ok && len(st.Staged)+len(st.Published) > 0 {
			r.flag("volume %s was deleted, but node %s still stages it %d times and publishes it %d times", sv.id, id, len(st.Staged), len(st.Published))
		}
	}
}

// controllerDown reports whether the controller plugin's node is
// partitioned. Expand and snapshot retry an unreachable controller on
// the wall clock for seconds (rpcshim's changeBackoff and
// snapshotBackoff), so while it is down the host defers them: the
// decision stays in the trace and is counted as deferred.
func (r *run) controllerDown(op string) bool {
	n := r.w.nodes["n1"]
	n.mu.Lock()
	down := n.down
	n.mu.Unlock()
	if down {
		r.noteErr(op+"-deferred", errors.New("the controller's node is down"))
	}
	return down
}

// expand grows a volume by d.times GiB past what the store records.
func (r *run) expand(d decision) {
	if r.controllerDown("expand") {
		return
	}
	sv := r.p.volumes[d.vol]
	leader := r.w.leader()
	v, err := leader.store.Volume(namespace, sv.id)
	if err != nil {
		return // deleted and not registered again
	}
	have := v.Capacity
	if st, ok := r.w.ctl.Volume(v.ExternalID); ok && st.Capacity > have {
		have = st.Capacity
	}
	ctx, cancel := r.ctx()
	defer cancel()
	_, err = leader.server.ExpandVolume(ctx, &rpcshim.VolumeExpandRequest{Namespace: namespace, VolumeID: sv.id,
		RequiredBytes: have + int64(d.times)<<30})
	r.noteErr("expand", err)
}

// snapshot snapshots a volume as d.snap.
func (r *run) snapshot(d decision) {
	if r.controllerDown("snapshot") {
		return
	}
	ctx, cancel := r.ctx()
	defer cancel()
	_, err := r.w.leader().server.CreateSnapshot(ctx, &rpcshim.SnapshotCreateRequest{Namespace: namespace,
		VolumeID: r.p.volumes[d.vol].id, SnapshotID: d.snap})
	r.noteErr("snapshot", err)
}

// restore creates volume d.alloc from snapshot d.snap and checks that
// it records its source.
func (r *run) restore(d decision) {
	leader := r.w.leader()
	snap, err := leader.store.VolumeSnapshot(namespace, d.snap)
	if err != nil {
		r.noteErr("restore", err) // its snapshot failed
		return
	}
	ctx, cancel := r.ctx()
	defer cancel()
	resp, err := leader.server.CreateVolume(ctx, &rpcshim.VolumeCreateRequest{Volume: csi.Volume{
		ID: d.alloc, Namespace: namespace, PluginID: simPlugin,
		Capabilities: []csi.Capability{{AccessMode: csi.AccessModeMultiNodeMultiWriter, AttachmentMode: csi.AttachmentModeFileSystem}},
	}, From: &rpcshim.VolumeSource{SnapshotID: d.snap}})
	r.noteErr("restore", err)
	if err != nil {
		return
	}
	r.life.mu.Lock()
	r.life.restored = append(r.life.restored, d.alloc)
	r.life.mu.Unlock()
	if src := resp.Volume.Source; src == nil || src.SnapshotID != snap.ExternalID {
		r.flag("volume %s restored from snapshot %s (plugin ID %s) records source %+v", d.alloc, d.snap, snap.ExternalID, src)
	}
	if resp.Volume.Capacity < snap.Size {
		r.flag("volume %s restored from snapshot %s holds %d bytes, the snapshot %d", d.alloc, d.snap, resp.Volume.Capacity, snap.Size)
	}
}
