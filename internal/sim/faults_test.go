package sim

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/rpcshim"
	"github.com/csikit/csikit/state"
)

// fault applies one fault decision.
func (r *run) fault(d decision) {
	w := r.w
	switch d.kind {
	case opFail:
		p := w.ctl
		if d.plugin != "ctl" {
			p = w.nodes[d.plugin].plugin
		}
		p.FailNext(d.method, d.code, d.times)
	case opPartition:
		if w.isGone(d.node) {
			return // it stays down
		}
		n := w.nodes[d.node]
		n.mu.Lock()
		n.down = !n.down
		down := n.down
		n.mu.Unlock()
		w.tr.SetDown(d.node, down)
	case opRestart:
		if w.isGone(d.node) {
			return // no agent left to restart
		}
		w.settle()
		w.restartAgent(w.nodes[d.node])
	case opCrashMount:
		r.crashMount(d)
	case opLeader:
		r.transferLeader()
	case opDetachRace:
		r.detachRace(d)
	case opUnpublishRace:
		r.unpublishRace(d)
	}
}

// detachRace claims and mounts for a first allocation, stops it while the controller refuses to
// detach its volume (Retryable), so that the attachment stays
// Detaching, and then claims the volume on the same node and mounts it:
// the claim must be refused, or find the volume attached.
func (r *run) detachRace(d decision) {
	first := d
	first.alloc = d.old
	if r.claimAndMount(first, nil) != nil {
		return
	}
	r.w.ctl.FailNext(csitest.MethodControllerUnpublishVolume, codes.Unavailable, 2)
	_ = r.stop(d.old)
	r.w.settle()
	_ = r.claimAndMount(d, nil)
}

// unpublishRace claims with a slow ControllerPublish (plugin latency)
// and, once the claim is written, has the node report the allocation
// unmounted: the release must not detach before the claim's publish
// has finished, or the publish lands after the detach.
func (r *run) unpublishRace(d decision) {
	w := r.w
	w.ctl.SetLatency(csitest.MethodControllerPublishVolume, 300*time.Millisecond)
	defer w.ctl.SetLatency(csitest.MethodControllerPublishVolume, 0)
	leader := w.leader()
	ctx, cancel := r.ctx()
	defer cancel()
	idx, err := leader.store.Index(state.TableVolumes)
	must(w.t, err)
	done := make(chan error, 1)
	go func() {
		_, err := r.claim(ctx, d)
		done <- err
	}()
	vol := r.p.volumes[d.vol].id
	for {
		// Wait for the claim's write on the leader's store (or the
		// claim's end, when it was refused).
		if v, err := leader.store.Volume(namespace, vol); err == nil && v.Claim(d.alloc) != nil {
			break
		}
		waitCtx, stop := context.WithCancel(ctx)
		go func() {
			select {
			case <-done:
				done <- nil // put it back for the final read
				stop()
			case <-waitCtx.Done():
			}
		}()
		next, err := leader.store.Wait(waitCtx, state.TableVolumes, idx)
		stop()
		if err != nil {
			<-done
			return
		}
		idx = next
	}
	_, err = leader.server.Unpublish(ctx, &rpcshim.VolumeUnpublishRequest{Namespace: namespace, VolumeID: vol,
		AllocationID: d.alloc, NodeID: d.node, NodeDetached: true})
	r.noteErr("unpublish", err)
	r.noteErr("claim", <-done)
}

// restartAgent crashes n's agent and starts it again from its state
// dir: the endpoint goes, the mounter is closed without any further
// call, and a new mounter and endpoint take over. The partition state
// stays as it was.
func (w *world) restartAgent(n *node) {
	w.tr.SetDown(n.id, true)
	if err := n.mnt().Close(); err != nil {
		w.t.Errorf("close the mounter of %s: %v", n.id, err)
	}
	w.openAgent(n)
	n.mu.Lock()
	n.restarts++
	down := n.down
	n.mu.Unlock()
	w.tr.SetDown(n.id, down)
}

// crashMount claims and mounts, and crashes the node agent once the
// node plugin has published the volume but before the mounter hears
// its reply: the plugin's reply is held, the mount's context ends, the
// agent restarts, and only then is the reply let go (to nobody).
func (r *run) crashMount(d decision) {
	w := r.w
	n := w.nodes[d.node]
	gate := n.plugin.HoldReplies(csitest.MethodNodePublishVolume)
	defer gate.Open()
	mountCtx, cancelMount := context.WithCancel(context.Background())
	defer cancelMount()
	done := make(chan error, 1)
	arrived := make(chan struct{})
	go func() { done <- r.claimAndMount(d, mountCtx) }()
	waitCtx, cancelWait := context.WithTimeout(context.Background(), waitLimit)
	defer cancelWait()
	go func() {
		if gate.Wait(waitCtx, 1) == nil {
			close(arrived)
		}
	}()
	select {
	case <-done:
		// Refused or failed before NodePublish answered: no crash.
		return
	case <-arrived:
	case <-time.After(waitLimit):
		w.t.Fatalf("seed %d: %s: the mount neither returned nor reached NodePublish", r.p.seed, d)
	}
	cancelMount()
	select {
	case <-done:
	case <-time.After(waitLimit):
		w.t.Fatalf("seed %d: %s: the mount did not return after its context ended", r.p.seed, d)
	}
	w.restartAgent(n)
}

// transferLeader hands leadership to another server and waits for a
// leader.
func (r *run) transferLeader() {
	f := r.w.leader().srv.Raft().LeadershipTransfer()
	r.noteErr("leader-transfer", f.Error())
	r.w.leader()
}
