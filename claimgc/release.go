package claimgc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
)

// A release of one volume runs in passes. Each pass reads the volume
// once and moves each of its past claims forward by at most one step:
//
//  1. node step for claims in Unpublishing (skipped when the node is
//     gone), then checkpoint NodeDetached; the claims whose checkpoint
//     landed go on to step 2 in the same pass, on the pass's read of
//     the volume: the store refuses the controller step's writes when
//     the volume changed under them in a way that matters (a claim
//     joined the node), and the step takes the refusal as its answer;
//  2. controller step for claims in NodeDetached, grouped by node. While
//     another claim on the node still needs the volume attached (a live
//     claim, or a past claim whose node step is not done), the claims
//     are freed at once and the attachment is left to the others: only
//     the detach waits, never the free. Otherwise, when the plugin needs
//     ControllerUnpublish, the attachment goes to Detaching
//     (state.DetachVolume, written and waited for before the call, so
//     that no new claim joins it), one ControllerUnpublish is made with
//     the attachment's CSI node ID, and the attachment is removed and
//     the claims freed in one state.Batch; when it needs none, the
//     remove and the frees go at once. The batch is the step's
//     checkpoint;
//  3. free for claims in ControllerDetached or ReadyToFree (written by
//     another writer, such as an earlier version of this worker).
//
// Every checkpoint is written only after its step succeeded, and a pass
// waits for its writes before it ends, so a claim's next step never
// starts before the previous one's checkpoint is written: a run cut
// short at any point (crash, lost leadership) leaves each claim at the
// last finished step, and the next run resumes there. The writes of a
// pass are submitted without waiting, so the step of one claim overlaps
// the checkpoint of the one before, and the frees of a group go out in
// one transaction. A claim whose step failed is left alone for the rest
// of the run; the others go on.

// failure is a failed step of one claim in the current run.
type failure struct {
	claim *csi.Claim
	step  Step
	err   error
}

// volumeRun is one run of releaseVolume.
type volumeRun struct {
	w        *Worker
	key      volKey
	failures map[string]*failure // by allocation ID
	// pending are the checkpoints and frees submitted to the committer
	// and not yet collected (settle), in submission order.
	pending []pendingWrite
	// plugin decision, computed at most once per pass
	ctrlKnown  bool
	ctrlNeeded bool
	ctrlErr    error
}

// releaseVolume runs the release passes of one volume until a pass makes
// no progress, and says when to come back.
func (w *Worker) releaseVolume(ctx context.Context, k volKey) outcome {
	r := &volumeRun{w: w, key: k, failures: map[string]*failure{}}
	var v *csi.Volume
	for {
		if ctx.Err() != nil {
			return outcome{kind: outcomeAborted}
		}
		var err error
		v, err = w.cfg.Store.Volume(k.namespace, k.id)
		if errors.Is(err, csi.ErrVolumeNotFound) {
			return outcome{kind: outcomeDone}
		}
		if err != nil {
			w.cfg.Logger.Warn("cannot read volume to release its claims; retrying", "namespace", k.namespace, "volume", k.id, "error", err)
			return outcome{kind: outcomeRetry}
		}
		if len(v.PastClaims) == 0 {
			return outcome{kind: outcomeDone, index: v.ModifyIndex}
		}
		r.ctrlKnown = false
		progress, allFreed := r.pass(ctx, v)
		if ctx.Err() != nil {
			return outcome{kind: outcomeAborted}
		}
		if allFreed {
			// Claims released after this read are found by the scan that
			// follows the writes of this pass.
			return outcome{kind: outcomeDone, index: v.ModifyIndex}
		}
		if !progress {
			break
		}
	}
	if len(r.failures) > 0 {
		return r.recordFailures(ctx, v)
	}
	// A pass without progress or failure cannot happen; come
	// back on the slow schedule rather than spin.
	w.cfg.Logger.Error("claim release made no progress and met no error", "namespace", k.namespace, "volume", k.id)
	return outcome{kind: outcomeRetry, final: true}
}

// pass moves each past claim of v forward by one step. progress reports
// whether any write happened; allFreed whether every past claim of v was
// freed.
//
// A step's write is submitted as soon as the step succeeded, and the
// pass goes on with the next claim's step (or the next node's); while
// other releases run, the committer writes it meanwhile, with theirs
// (steps of different claims do not depend on each other's
// checkpoints, and writes that pile up meanwhile go out in one
// transaction); a release running alone writes its pass's writes in
// one batch at settle. Every write is collected (settle) before the pass
// ends, so the next pass, and in particular the controller step of a
// claim, starts only once the claim's node checkpoint is written.
func (r *volumeRun) pass(ctx context.Context, v *csi.Volume) (progress, allFreed bool) {
	claims := slices.SortedFunc(maps.Values(v.PastClaims), func(a, b *csi.Claim) int {
		return cmp.Compare(a.AllocationID, b.AllocationID)
	})

	var todo []*csi.Claim
	for _, c := range claims {
		if c.State == csi.ClaimUnpublishing && !r.failed(c) {
			todo = append(todo, c)
		}
	}
	var stepped []*csi.Claim
	for i, c := range todo {
		if r.nodeStep(ctx, v, c) {
			stepped = append(stepped, c)
			if i < len(todo)-1 && r.w.releasing.Load() > 1 {
				// Written, with the other releases' writes, while the
				// next node step runs. A release running alone writes
				// its checkpoints in one batch at settle instead: waking
				// the committer on another processor for each costs
				// more than the write.
				r.w.commit.kick()
			}
		}
		if ctx.Err() != nil {
			break
		}
	}
	progress = false
	if len(stepped) > 0 {
		// The controller step of a claim starts only once its node
		// checkpoint is written. It goes on from this pass's read of
		// the volume: what may have changed since (a claim joining the
		// node, a free by another writer) the store refuses in the
		// controller step's own writes (DetachVolume, RemoveAttachment,
		// FreeClaim), which the step takes as its answer.
		wrote, _ := r.settle(ctx)
		if ctx.Err() != nil {
			return wrote > 0, false
		}
		progress = wrote > 0
		claims = slices.Clone(claims)
		for i, c := range claims {
			if slices.Contains(stepped, c) && !r.failed(c) {
				d := c.Copy()
				d.State = csi.ClaimNodeDetached
				claims[i] = d
			}
		}
	}

	// Nodes where a past claim still waits for its node step: detaching
	// the controller there would pull the volume from under a mount.
	nodeBusy := map[string]bool{}
	for _, c := range claims {
		if c.State < csi.ClaimNodeDetached {
			nodeBusy[c.NodeID] = true
		}
	}
	groups := map[string][]*csi.Claim{}
	var done []*csi.Claim
	for _, c := range claims {
		switch {
		case r.failed(c):
		case c.State == csi.ClaimNodeDetached:
			groups[c.NodeID] = append(groups[c.NodeID], c)
		case c.State >= csi.ClaimControllerDetached:
			done = append(done, c)
		}
	}
	r.free(done, false)
	for _, node := range slices.Sorted(maps.Keys(groups)) {
		if ctx.Err() != nil {
			break
		}
		if len(r.pending) > 0 && r.w.releasing.Load() > 1 {
			// Written while this group's controller step runs (see the
			// node steps above).
			r.w.commit.kick()
		}
		cs := groups[node]
		att := v.Attachments[node]
		switch {
		case att == nil:
			// Not attached there (any more): nothing to detach.
			r.free(cs, false)
		case nodeBusy[node] || v.LiveClaimOnNode(node, ""):
			// Another claim keeps the volume attached to the node: it
			// detaches when the last one goes. These are done.
			r.free(cs, false)
		default:
			r.controllerStep(ctx, v, att, cs)
		}
	}
	wrote, freed := r.settle(ctx)
	return progress || wrote > 0, freed == len(claims)
}

func (r *volumeRun) failed(c *csi.Claim) bool { return r.failures[c.AllocationID] != nil }

// fail records a failed attempt at step for claim c.
func (r *volumeRun) fail(c *csi.Claim, step Step, err error) {
	r.failures[c.AllocationID] = &failure{claim: c, step: step, err: err}
	r.w.failedAttempts.Add(1)
	final := csi.Classify(err) == csi.ClassFinal
	r.w.cfg.Observer.StepFailed(r.key.namespace, r.key.id, c.AllocationID, step, err, final)
	r.w.cfg.Logger.Debug("claim release step failed", "namespace", r.key.namespace, "volume", r.key.id,
		"allocation", c.AllocationID, "node", c.NodeID, "step", string(step), "final", final, "error", err)
}

// nodeStep runs the node step of c and submits its NodeDetached
// checkpoint (collected by settle). It reports whether the step
// succeeded.
func (r *volumeRun) nodeStep(ctx context.Context, v *csi.Volume, c *csi.Claim) bool {
	w := r.w
	st, err := w.cfg.NodeStatuses.NodeStatus(ctx, c.NodeID)
	if err != nil {
		if ctx.Err() == nil {
			r.fail(c, StepNodeDetach, fmt.Errorf("%w: node %s: the host cannot tell whether it is up (%w); the node step is retried",
				csi.ErrNodeNotReady, c.NodeID, err))
		}
		return false
	}
	switch st {
	case csi.NodeStatusGone:
		w.cfg.Logger.Info("node is gone; skipping the node step of the claim", "namespace", r.key.namespace,
			"volume", r.key.id, "allocation", c.AllocationID, "node", c.NodeID)
	case csi.NodeStatusReady:
		sctx, cancel := context.WithTimeout(ctx, w.cfg.StepTimeout)
		err := w.cfg.Nodes.NodeDetach(sctx, v, c)
		cancel()
		if ctx.Err() != nil {
			return false
		}
		if !csi.TeardownDone(err) {
			// The detacher names the volume, allocation and node (the
			// router does); the worker only adds its step.
			r.fail(c, StepNodeDetach, fmt.Errorf("node step: %w", err))
			return false
		}
	default:
		r.fail(c, StepNodeDetach, fmt.Errorf("%w: node %s is %s; the node step of volume %s for allocation %s waits until it is ready again or the host reports it gone",
			csi.ErrNodeNotReady, c.NodeID, st, r.key.id, c.AllocationID))
		return false
	}
	r.submit(c, StepNodeDetach, false, state.CheckpointClaim{
		Namespace: r.key.namespace, VolumeID: r.key.id, AllocationID: c.AllocationID, State: csi.ClaimNodeDetached,
	})
	return true
}

// controllerStep detaches the volume from one node for the claims cs
// (all NodeDetached, on att's node, the last claims there) and submits
// the attachment's removal with their frees, in one batch, collected by
// settle.
func (r *volumeRun) controllerStep(ctx context.Context, v *csi.Volume, att *csi.Attachment, cs []*csi.Claim) {
	w := r.w
	needed, err := r.controllerNeeded(v)
	if err != nil {
		for _, c := range cs {
			r.fail(c, StepControllerDetach, err)
		}
		return
	}
	if needed {
		if att.State != csi.AttachmentDetaching {
			// The intent, written before the call: from here a claim on
			// the node is refused until the attachment is removed.
			err := w.commit.apply(ctx, state.DetachVolume{Namespace: r.key.namespace, VolumeID: r.key.id, NodeID: att.NodeID})
			switch {
			case ctx.Err() != nil:
				return
			case errors.Is(err, csi.ErrVolumeInUse), errors.Is(err, csi.ErrAttachmentNotFound):
				// A claim joined the attachment since the read (it
				// detaches when it goes), or it is gone: these claims
				// are done.
				r.free(cs, false)
				return
			case err != nil:
				err = fmt.Errorf("controller step: write the detach of volume %s from node %s: %w", r.key.id, att.NodeID, err)
				for _, c := range cs {
					r.fail(c, StepControllerDetach, err)
				}
				return
			}
		}
		c := cs[0].Copy()
		c.ExternalNodeID = att.ExternalNodeID
		sctx, cancel := context.WithTimeout(ctx, w.cfg.StepTimeout)
		err := w.cfg.Controllers.ControllerDetach(sctx, v, c)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if !csi.TeardownDone(err) {
			err = fmt.Errorf("controller step: %w", err)
			for _, c := range cs {
				r.fail(c, StepControllerDetach, err)
			}
			return
		}
	}
	// The removal and the frees are the controller step's checkpoint:
	// nothing can happen between them, so writing ControllerDetached
	// first would cost a store write (and its wait) per claim and save
	// nothing. A batch that fails leaves the claims NodeDetached and the
	// attachment Detaching, and the controller step, like any step
	// whose checkpoint did not land, runs again.
	cmds := make([]state.Command, 0, len(cs)+1)
	cmds = append(cmds, state.RemoveAttachment{Namespace: r.key.namespace, VolumeID: r.key.id, NodeID: att.NodeID})
	for _, c := range cs {
		cmds = append(cmds, state.FreeClaim{Namespace: r.key.namespace, VolumeID: r.key.id, AllocationID: c.AllocationID})
	}
	wr := w.commit.submit(state.Batch{Commands: cmds})[0]
	for _, c := range cs {
		r.pending = append(r.pending, pendingWrite{c: c, step: StepFree, detached: needed, removal: true, w: wr})
	}
}

// controllerNeeded decides whether the volume's claims go through
// ControllerUnpublishVolume, once per pass.
//
// The plugin decides (csi.Plugin.NeedsControllerPublish). When the
// plugin is not registered at all, or requires a controller of which no
// instance is running, the answer is unknown: skipping could leave the
// volume attached to the node for good, so the step fails with a
// Retryable error and waits, with backoff, for the plugin to come back.
// A volume whose plugin never comes back keeps its past claims until an
// operator deregisters it with Force.
func (r *volumeRun) controllerNeeded(v *csi.Volume) (bool, error) {
	if r.ctrlKnown {
		return r.ctrlNeeded, r.ctrlErr
	}
	needed, err := r.w.controllerNeeded(v)
	r.ctrlKnown, r.ctrlNeeded, r.ctrlErr = true, needed, err
	return needed, err
}

func (w *Worker) controllerNeeded(v *csi.Volume) (bool, error) {
	p, err := w.pluginView(v.PluginID)
	switch {
	case errors.Is(err, csi.ErrPluginNotFound):
		return false, fmt.Errorf("%w: plugin %s of volume %s is not registered, so whether the volume needs ControllerUnpublishVolume is unknown; the controller step waits for the plugin (deregister the volume with Force if it will never come back)",
			csi.ErrPluginNotFound, v.PluginID, v.ID)
	case err != nil:
		return false, err
	case p.NeedsControllerPublish():
		return true, nil
	case p.ControllerRequired && len(p.Controllers) == 0:
		return false, fmt.Errorf("%w: plugin %s requires a controller but none is running, so whether volume %s needs ControllerUnpublishVolume is unknown; the controller step waits for a controller",
			csi.ErrNoController, v.PluginID, v.ID)
	}
	return false, nil
}

// pluginEntry caches a plugin read, valid while the plugin table stays
// at index.
type pluginEntry struct {
	index  uint64
	plugin *csi.Plugin
	err    error
}

// pluginView returns the plugin, read again only when the plugin table
// changed: a plugin read copies every instance, which for a plugin on
// many nodes costs more than the rest of a release. The returned plugin
// is shared and must not be changed.
func (w *Worker) pluginView(id string) (*csi.Plugin, error) {
	idx, err := w.cfg.Store.Index(state.TablePlugins)
	if err != nil {
		return nil, &storeError{what: "read the plugin table index", err: err}
	}
	w.pluginMu.Lock()
	e, ok := w.plugins[id]
	w.pluginMu.Unlock()
	if ok && e.index == idx {
		return e.plugin, e.err
	}
	p, err := w.cfg.Store.Plugin(id)
	if err != nil && !errors.Is(err, csi.ErrPluginNotFound) {
		return nil, &storeError{what: "read plugin " + id, err: err}
	}
	// Kept even over an entry of a higher index: a restore can move the
	// index back, and an entry is only used at its own index.
	w.pluginMu.Lock()
	w.plugins[id] = pluginEntry{index: idx, plugin: p, err: err}
	w.pluginMu.Unlock()
	return p, err
}

// pendingWrite is a checkpoint or free submitted for claim c.
type pendingWrite struct {
	c    *csi.Claim
	step Step // StepNodeDetach for a checkpoint, StepFree for a free
	// detached: a free that follows a ControllerUnpublish this run made
	detached bool
	// removal: a free in the batch that removes the node's attachment
	removal bool
	w       *write
}

// submit hands cmd, the write that ends step for claim c, to the
// committer without waiting for it.
func (r *volumeRun) submit(c *csi.Claim, step Step, detached bool, cmd state.Command) {
	r.pending = append(r.pending, pendingWrite{c: c, step: step, detached: detached, w: r.w.commit.submit(cmd)[0]})
}

// free submits the frees of cs, together so that they go out in one
// transaction. detached says their ControllerUnpublish was made.
func (r *volumeRun) free(cs []*csi.Claim, detached bool) {
	if len(cs) == 0 {
		return
	}
	cmds := make([]state.Command, len(cs))
	for i, c := range cs {
		cmds[i] = state.FreeClaim{Namespace: r.key.namespace, VolumeID: r.key.id, AllocationID: c.AllocationID}
	}
	for i, w := range r.w.commit.submit(cmds...) {
		r.pending = append(r.pending, pendingWrite{c: cs[i], step: StepFree, detached: detached, w: w})
	}
}

// settle waits for every pending write and accounts for each: a claim
// checkpointed or freed moves on (a claim that is gone, or already
// further along because another worker got there, counts as done); a
// failed write is a failed attempt at its step. It returns how many
// writes landed and how many of them freed a claim. When ctx ends,
// writes whose outcome is unknown are left alone: the next Worker reads
// where they stand.
func (r *volumeRun) settle(ctx context.Context) (wrote, freed int) {
	w := r.w
	switch {
	case len(r.pending) == 0:
	case w.releasing.Load() <= 1:
		// No other release runs, so no other write could join the
		// batch: write it here rather than wake the committer and wait
		// to be woken in turn.
		w.commit.flush()
	default:
		// The committer gathers the writes of the releases running
		// together into one batch.
		w.commit.kick()
	}
	for _, p := range r.pending {
		err := p.w.wait(ctx)
		if p.step == StepNodeDetach {
			switch {
			case err == nil, errors.Is(err, csi.ErrClaimNotFound):
				wrote++
				w.steps[stepIndex(StepNodeDetach)].Add(1)
			case ctx.Err() == nil:
				r.fail(p.c, StepNodeDetach, fmt.Errorf("checkpoint the claim of allocation %s on volume %s as %s: %w",
					p.c.AllocationID, r.key.id, csi.ClaimNodeDetached, err))
			}
			continue
		}
		switch {
		case err == nil:
			r.freed(p.c)
		case errors.Is(err, csi.ErrClaimNotFound):
			// freed by an earlier run whose outcome was lost
		case p.removal && errors.Is(err, csi.ErrVolumeInUse):
			// A claim joined the attachment after the pass read the
			// volume (no Detaching intent keeps it out when the plugin
			// needs no ControllerUnpublish). Not a failure: the next
			// pass reads it and frees these claims at once.
			wrote++
			continue
		case ctx.Err() == nil:
			r.fail(p.c, StepFree, fmt.Errorf("free the claim of allocation %s on volume %s: %w", p.c.AllocationID, r.key.id, err))
			continue
		default:
			continue
		}
		wrote++
		freed++
		if p.detached {
			w.steps[stepIndex(StepControllerDetach)].Add(1)
		}
	}
	r.pending = r.pending[:0]
	return wrote, freed
}

// freed accounts for the free of c.
func (r *volumeRun) freed(c *csi.Claim) {
	w := r.w
	var since = w.cfg.Clock.Now().Sub(c.ReleasedAt)
	if c.ReleasedAt.IsZero() || since < 0 {
		since = 0
	}
	w.freed.Add(1)
	w.freeLatencySum.Add(int64(since))
	for {
		m := w.freeLatencyMax.Load()
		if int64(since) <= m || w.freeLatencyMax.CompareAndSwap(m, int64(since)) {
			break
		}
	}
	w.cfg.Observer.ClaimFreed(r.key.namespace, r.key.id, c.AllocationID, since)
	w.cfg.Logger.Debug("claim freed", "namespace", r.key.namespace, "volume", r.key.id, "allocation", c.AllocationID, "since_released", since)
}

// recordFailures writes each failed claim's error (LastError) and says
// when to come back: with backoff when any error is Retryable or
// Uncertain, on the slow schedule when all are Final.
func (r *volumeRun) recordFailures(ctx context.Context, v *csi.Volume) outcome {
	final := true
	for _, id := range slices.Sorted(maps.Keys(r.failures)) {
		f := r.failures[id]
		if csi.IsRetryable(f.err) {
			final = false
		}
		msg := fmt.Sprintf("%s: %v", f.step, f.err)
		if c := v.PastClaims[id]; c == nil || c.LastError == msg {
			continue
		}
		err := r.w.commit.apply(ctx, state.RecordClaimError{
			Namespace: r.key.namespace, VolumeID: r.key.id, AllocationID: id, Error: msg,
		})
		if err != nil && ctx.Err() == nil && !errors.Is(err, csi.ErrClaimNotFound) {
			r.w.cfg.Logger.Warn("cannot record a claim release error", "namespace", r.key.namespace,
				"volume", r.key.id, "allocation", id, "error", err)
		}
	}
	if ctx.Err() != nil {
		return outcome{kind: outcomeAborted}
	}
	if final {
		r.w.cfg.Logger.Warn("claim release failed with a final error; retrying on the slow schedule",
			"namespace", r.key.namespace, "volume", r.key.id, "claims", len(r.failures), "retry_in", r.w.cfg.FinalRetryInterval)
	}
	return outcome{kind: outcomeRetry, final: final}
}

// storeError is a failed store read: Retryable, the store may answer
// next time.
type storeError struct {
	what string
	err  error
}

func (e *storeError) Error() string         { return e.what + ": " + e.err.Error() }
func (e *storeError) Unwrap() error         { return e.err }
func (e *storeError) ErrorClass() csi.Class { return csi.ClassRetryable }
