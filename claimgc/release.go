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
// once and moves each of its past claims forward by at most one step,
// writing each step's checkpoints where the step is decided, through
// the Applier, and waiting for them before the next step:
//
//  1. node step for claims in Unpublishing (skipped when the node is
//     gone); the NodeDetached checkpoints of the pass go in one
//     state.Batch once every node step of the pass has answered, with
//     the detach intents of step 2 for the nodes of those claims. The
//     claims whose checkpoint landed go on to step 2 in the same pass,
//     on the pass's read of the volume: the store refuses the
//     controller step's writes when the volume changed under them in a
//     way that matters (a claim joined the node), and the step takes
//     the refusal as its answer;
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
// The frees that need no plugin call (step 3, and step 2 where the node
// is held by another claim or not attached) go together in one batch,
// before the controller steps. Every checkpoint is written only after
// its step succeeded, and is written before the claim's next step
// starts: a run cut short at any point (crash, lost leadership) leaves
// each claim at the last finished step, and the next run resumes there.
// A claim whose step failed is left alone for the rest of the run; the
// others go on.

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

	// Of the current pass: the answers of the detach intents written
	// with the node checkpoints, by node (nodeSteps), and whether the
	// volume needs ControllerUnpublish, read once (controllerNeeded).
	intents map[string]error
	need    *neededAnswer
}

// neededAnswer is Worker.controllerNeeded's answer for one pass.
type neededAnswer struct {
	needed bool
	err    error
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
// whether any write landed; allFreed whether every past claim of v was
// freed.
func (r *volumeRun) pass(ctx context.Context, v *csi.Volume) (progress, allFreed bool) {
	r.intents, r.need = map[string]error{}, nil
	claims := slices.SortedFunc(maps.Values(v.PastClaims), func(a, b *csi.Claim) int {
		return cmp.Compare(a.AllocationID, b.AllocationID)
	})
	claims, wrote := r.nodeSteps(ctx, v, claims)
	if ctx.Err() != nil {
		return wrote > 0, false
	}
	p := r.plan(v, claims)
	w, freed := r.free(ctx, p.atOnce, false)
	wrote += w
	for _, node := range slices.Sorted(maps.Keys(p.detach)) {
		if ctx.Err() != nil {
			break
		}
		w, f := r.controllerStep(ctx, v, v.Attachments[node], p.detach[node])
		wrote, freed = wrote+w, freed+f
	}
	return wrote > 0, freed == len(claims)
}

// nodeSteps runs the node step of each claim in Unpublishing and writes
// the NodeDetached checkpoints of those that succeeded, in one batch.
// It returns claims with the checkpointed ones as NodeDetached (copies:
// the pass's read is not changed), and how many writes landed.
//
// The controller step of a claim starts only once its node checkpoint
// is written. It goes on from this pass's read of the volume: what may
// have changed since (a claim joining the node, a free by another
// writer) the store refuses in the controller step's own writes
// (DetachVolume, RemoveAttachment, FreeClaim), which the step takes as
// its answer.
//
// The detach intents (DetachVolume) of the nodes whose controller step
// follows in this pass go in the same batch, after the checkpoints:
// the batch is the node step's checkpoint and the controller step's
// intent, both written before the ControllerUnpublish, in one store
// write instead of two. When the store refuses an intent (a claim
// joined the node), write applies each command on its own, so the
// checkpoints still land; controllerStep takes the intent's answer
// from r.intents.
func (r *volumeRun) nodeSteps(ctx context.Context, v *csi.Volume, claims []*csi.Claim) ([]*csi.Claim, int) {
	stepped := map[string]bool{}
	var order []*csi.Claim
	for _, c := range claims {
		if c.State != csi.ClaimUnpublishing || r.failed(c) {
			continue
		}
		if r.nodeStep(ctx, v, c) {
			stepped[c.AllocationID] = true
			order = append(order, c)
		}
		if ctx.Err() != nil {
			return claims, 0
		}
	}
	if len(order) == 0 {
		return claims, 0
	}
	cmds := make([]state.Command, len(order), len(order)+1)
	for i, c := range order {
		cmds[i] = state.CheckpointClaim{
			Namespace: r.key.namespace, VolumeID: r.key.id, AllocationID: c.AllocationID, State: csi.ClaimNodeDetached,
		}
	}
	intents := r.intentNodes(v, asNodeDetached(claims, stepped), stepped)
	for _, node := range intents {
		cmds = append(cmds, state.DetachVolume{Namespace: r.key.namespace, VolumeID: r.key.id, NodeID: node})
	}
	errs := r.w.write(ctx, cmds)
	wrote := 0
	landed := map[string]bool{}
	for i, c := range order {
		switch err := errs[i]; {
		case err == nil, errors.Is(err, csi.ErrClaimNotFound):
			wrote++
			landed[c.AllocationID] = true
			r.w.steps[stepIndex(StepNodeDetach)].Add(1)
		case ctx.Err() == nil:
			r.fail(c, StepNodeDetach, fmt.Errorf("checkpoint the claim of allocation %s on volume %s as %s: %w",
				c.AllocationID, r.key.id, csi.ClaimNodeDetached, err))
		}
	}
	for i, node := range intents {
		err := errs[len(order)+i]
		if err == nil {
			wrote++
		}
		r.intents[node] = err
	}
	return asNodeDetached(claims, landed), wrote
}

// asNodeDetached returns claims with those of the allocations in ids as
// NodeDetached: copies, the pass's read is not changed.
func asNodeDetached(claims []*csi.Claim, ids map[string]bool) []*csi.Claim {
	out := slices.Clone(claims)
	for i, c := range out {
		if ids[c.AllocationID] {
			d := c.Copy()
			d.State = csi.ClaimNodeDetached
			out[i] = d
		}
	}
	return out
}

// intentNodes returns, in order, the nodes whose controller step this
// pass runs after the node steps, for a claim of stepped among others,
// and whose attachment needs its detach intent written: claims are as
// they stand once the node checkpoints land. None when whether the
// volume needs ControllerUnpublish cannot be told: the controller step
// reports that.
//
// A node none of whose claims is in the batch (all were NodeDetached
// before this pass) writes its intent on its own in controllerStep: a
// batch that fails fails every command in it, and a checkpoint that
// cannot be written must hold only its own claim's node.
func (r *volumeRun) intentNodes(v *csi.Volume, claims []*csi.Claim, stepped map[string]bool) []string {
	p := r.plan(v, claims)
	if len(p.detach) == 0 {
		return nil
	}
	if needed, err := r.controllerNeeded(v); err != nil || !needed {
		return nil
	}
	var nodes []string
	for _, node := range slices.Sorted(maps.Keys(p.detach)) {
		inBatch := slices.ContainsFunc(p.detach[node], func(c *csi.Claim) bool { return stepped[c.AllocationID] })
		if inBatch && v.Attachments[node].State != csi.AttachmentDetaching {
			nodes = append(nodes, node)
		}
	}
	return nodes
}

// plan is what the controller part of a pass does: the claims freed
// with no plugin call, and by node the claims whose controller step
// runs now.
type plan struct {
	atOnce []*csi.Claim
	detach map[string][]*csi.Claim
}

// plan sorts the claims that finished their node step into those freed
// at once and those whose node the volume is detached from.
func (r *volumeRun) plan(v *csi.Volume, claims []*csi.Claim) plan {
	// Nodes where a past claim still waits for its node step: detaching
	// the controller there would pull the volume from under a mount.
	nodeBusy := map[string]bool{}
	for _, c := range claims {
		if c.State < csi.ClaimNodeDetached {
			nodeBusy[c.NodeID] = true
		}
	}
	p := plan{detach: map[string][]*csi.Claim{}}
	for _, c := range claims {
		switch {
		case r.failed(c), c.State < csi.ClaimNodeDetached:
		case c.State >= csi.ClaimControllerDetached:
			p.atOnce = append(p.atOnce, c)
		case v.Attachments[c.NodeID] == nil:
			// Not attached there (any more): nothing to detach.
			p.atOnce = append(p.atOnce, c)
		case nodeBusy[c.NodeID] || v.LiveClaimOnNode(c.NodeID, ""):
			// Another claim keeps the volume attached to the node: it
			// detaches when the last one goes. These are done.
			p.atOnce = append(p.atOnce, c)
		default:
			p.detach[c.NodeID] = append(p.detach[c.NodeID], c)
		}
	}
	return p
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

// nodeStep runs the node step of c. It reports whether the step
// succeeded; its checkpoint is written by nodeSteps.
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
		return true
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
		return true
	}
	r.fail(c, StepNodeDetach, fmt.Errorf("%w: node %s is %s; the node step of volume %s for allocation %s waits until it is ready again or the host reports it gone",
		csi.ErrNodeNotReady, c.NodeID, st, r.key.id, c.AllocationID))
	return false
}

// controllerStep detaches the volume from one node for the claims cs
// (all NodeDetached, on att's node, the last claims there), then
// removes the attachment and frees them in one batch. It returns how
// many writes landed and how many claims were freed.
func (r *volumeRun) controllerStep(ctx context.Context, v *csi.Volume, att *csi.Attachment, cs []*csi.Claim) (wrote, freed int) {
	needed, err := r.controllerNeeded(v)
	if err != nil {
		r.failAll(cs, StepControllerDetach, err)
		return 0, 0
	}
	if needed {
		if att.State != csi.AttachmentDetaching {
			err, written := r.intents[att.NodeID]
			if !written {
				err = r.detachIntent(ctx, att)
			}
			switch {
			case ctx.Err() != nil:
				return 0, 0
			case errors.Is(err, csi.ErrVolumeInUse), errors.Is(err, csi.ErrAttachmentNotFound):
				// A claim joined the attachment since the read (it
				// detaches when it goes), or it is gone: these claims
				// are done.
				return r.free(ctx, cs, false)
			case err != nil:
				r.failAll(cs, StepControllerDetach, fmt.Errorf("controller step: write the detach of volume %s from node %s: %w", r.key.id, att.NodeID, err))
				return 0, 0
			}
			if !written {
				wrote++ // an intent written with the node checkpoints counted there
			}
		}
		c := cs[0].Copy()
		c.ExternalNodeID = att.ExternalNodeID
		sctx, cancel := context.WithTimeout(ctx, r.w.cfg.StepTimeout)
		err := r.w.cfg.Controllers.ControllerDetach(sctx, v, c)
		cancel()
		if ctx.Err() != nil {
			return wrote, 0
		}
		if !csi.TeardownDone(err) {
			r.failAll(cs, StepControllerDetach, fmt.Errorf("controller step: %w", err))
			return wrote, 0
		}
	}
	w, f := r.removeAttachment(ctx, att, cs, needed)
	return wrote + w, f
}

// detachIntent writes the attachment's move to Detaching, before the
// ControllerUnpublish: from here a claim on the node is refused until
// the attachment is removed.
func (r *volumeRun) detachIntent(ctx context.Context, att *csi.Attachment) error {
	return r.w.write(ctx, []state.Command{
		state.DetachVolume{Namespace: r.key.namespace, VolumeID: r.key.id, NodeID: att.NodeID},
	})[0]
}

// failAll records the same failed step for each claim of cs.
func (r *volumeRun) failAll(cs []*csi.Claim, step Step, err error) {
	for _, c := range cs {
		r.fail(c, step, err)
	}
}

// controllerNeeded decides whether the volume's claims go through
// ControllerUnpublishVolume.
//
// The plugin decides: it requires a controller
// (csi.Volume.ControllerRequired, filled in from the plugin) and a
// healthy controller advertises PUBLISH_UNPUBLISH_VOLUME (as
// csi.Plugin.NeedsControllerPublish tells it). When the plugin is not
// registered at all, or requires a controller of which no healthy
// instance runs, the answer is unknown: skipping could leave the volume
// attached to the node for good, so the step fails with a Retryable
// error and waits, with backoff, for the plugin to come back. A volume
// whose plugin never comes back keeps its past claims until an operator
// deregisters it with Force.
//
// It reads the plugin's healthy controllers (state.PluginReader), whose
// cost grows with the controllers only: a whole plugin read copies every
// node instance, which for a plugin on many nodes costs more than the
// rest of a release.
func (w *Worker) controllerNeeded(v *csi.Volume) (bool, error) {
	ctrls, err := w.cfg.Store.HealthyControllers(v.PluginID)
	switch {
	case errors.Is(err, csi.ErrPluginNotFound):
		return false, fmt.Errorf("%w: plugin %s of volume %s is not registered, so whether the volume needs ControllerUnpublishVolume is unknown; the controller step waits for the plugin (deregister the volume with Force if it will never come back)",
			csi.ErrPluginNotFound, v.PluginID, v.ID)
	case err != nil:
		return false, &storeError{what: "read the controllers of plugin " + v.PluginID, err: err}
	case !v.ControllerRequired:
		return false, nil
	case len(ctrls) == 0:
		return false, fmt.Errorf("%w: plugin %s requires a controller but none is running, so whether volume %s needs ControllerUnpublishVolume is unknown; the controller step waits for a controller",
			csi.ErrNoController, v.PluginID, v.ID)
	}
	p := csi.Plugin{ControllerRequired: true, Controllers: ctrls}
	return p.NeedsControllerPublish(), nil
}

// controllerNeeded is Worker.controllerNeeded for v, read once per
// pass: the node steps' intents and the controller steps decide on the
// same answer.
func (r *volumeRun) controllerNeeded(v *csi.Volume) (bool, error) {
	if r.need == nil {
		needed, err := r.w.controllerNeeded(v)
		r.need = &neededAnswer{needed: needed, err: err}
	}
	return r.need.needed, r.need.err
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
