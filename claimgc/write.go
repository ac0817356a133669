package claimgc

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
)

// write applies the commands of one step of one volume through the
// Applier, as one state.Batch (a single command on its own): one
// store transaction, one log entry on a replicated host. It waits for
// the outcome and returns each command's error.
//
// Writes of different volumes are not grouped here: each release
// applies its own, from its own goroutine, and a replicated host's log
// (hashicorp/raft, etcd's raft) already batches the applies that arrive
// together.
//
// When the batch as a whole is refused for one command's sake (a csi
// sentinel error: a claim gone, a claim that joined the node), each
// command is applied on its own to get its own answer: the Worker's
// commands are idempotent, so that is safe. Any other error (the log
// unavailable, ctx ended) is every command's.
func (w *Worker) write(ctx context.Context, cmds []state.Command) []error {
	errs := make([]error, len(cmds))
	if err := ctx.Err(); err != nil {
		// The enabled period is over: nothing more is written.
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	w.writes.Add(uint64(len(cmds)))
	w.applies.Add(1)
	if len(cmds) == 1 {
		_, errs[0] = w.cfg.Applier.Apply(ctx, cmds[0])
		return errs
	}
	_, err := w.cfg.Applier.Apply(ctx, state.Batch{Commands: cmds})
	if err != nil && ctx.Err() == nil && csi.SentinelOf(err) != nil {
		w.applies.Add(uint64(len(cmds)))
		for i, cmd := range cmds {
			_, errs[i] = w.cfg.Applier.Apply(ctx, cmd)
		}
		return errs
	}
	for i := range errs {
		errs[i] = err
	}
	return errs
}

// free frees the claims cs in one batch and accounts for each.
// detached says their ControllerUnpublish was made.
func (r *volumeRun) free(ctx context.Context, cs []*csi.Claim, detached bool) (wrote, freed int) {
	if len(cs) == 0 {
		return 0, 0
	}
	cmds := make([]state.Command, len(cs))
	for i, c := range cs {
		cmds[i] = r.freeCmd(c)
	}
	errs := r.w.write(ctx, cmds)
	for i, c := range cs {
		w, f := r.accountFree(ctx, c, errs[i], detached)
		wrote, freed = wrote+w, freed+f
	}
	return wrote, freed
}

// removeAttachment removes att and frees the claims cs, the last on its
// node, in one batch: the controller step's checkpoint. Nothing can
// happen between the two, so writing ControllerDetached first would
// cost a store write (and its wait) per claim and save nothing. A batch
// that fails leaves the claims NodeDetached and the attachment
// Detaching, and the controller step, like any step whose checkpoint
// did not land, runs again.
func (r *volumeRun) removeAttachment(ctx context.Context, att *csi.Attachment, cs []*csi.Claim, detached bool) (wrote, freed int) {
	cmds := make([]state.Command, 0, len(cs)+1)
	cmds = append(cmds, state.RemoveAttachment{Namespace: r.key.namespace, VolumeID: r.key.id, NodeID: att.NodeID})
	for _, c := range cs {
		cmds = append(cmds, r.freeCmd(c))
	}
	// When a claim joined the attachment after the pass read the volume
	// (no Detaching intent keeps it out when the plugin needs no
	// ControllerUnpublish), the store refuses the removal, and write
	// applies the frees alone: these claims are done, and the
	// attachment stays for the new claim.
	errs := r.w.write(ctx, cmds)
	for i, c := range cs {
		w, f := r.accountFree(ctx, c, errs[i+1], detached)
		wrote, freed = wrote+w, freed+f
	}
	return wrote, freed
}

func (r *volumeRun) freeCmd(c *csi.Claim) state.Command {
	return state.FreeClaim{Namespace: r.key.namespace, VolumeID: r.key.id, AllocationID: c.AllocationID}
}

// accountFree accounts for the outcome err of the free of c: freed, or
// gone already (freed by an earlier run whose outcome was lost, or by
// another writer), or a failed attempt at its step. It returns whether
// the write landed and whether it freed c. When ctx has ended, a write
// whose outcome is unknown is left alone: the next Worker reads where
// it stands.
func (r *volumeRun) accountFree(ctx context.Context, c *csi.Claim, err error, detached bool) (wrote, freed int) {
	switch {
	case err == nil:
		r.freed(c)
	case errors.Is(err, csi.ErrClaimNotFound):
	case ctx.Err() == nil:
		r.fail(c, StepFree, fmt.Errorf("free the claim of allocation %s on volume %s: %w", c.AllocationID, r.key.id, err))
		return 0, 0
	default:
		return 0, 0
	}
	if detached {
		r.w.steps[stepIndex(StepControllerDetach)].Add(1)
	}
	return 1, 1
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

// recordFailures writes each failed claim's error (LastError), in one
// batch, and says when to come back: with backoff when any error is
// Retryable or Uncertain, on the slow schedule when all are Final.
func (r *volumeRun) recordFailures(ctx context.Context, v *csi.Volume) outcome {
	final := true
	var cmds []state.Command
	for _, id := range slices.Sorted(maps.Keys(r.failures)) {
		f := r.failures[id]
		if csi.IsRetryable(f.err) {
			final = false
		}
		msg := fmt.Sprintf("%s: %v", f.step, f.err)
		if c := v.PastClaims[id]; c != nil && c.LastError != msg {
			cmds = append(cmds, state.RecordClaimError{
				Namespace: r.key.namespace, VolumeID: r.key.id, AllocationID: id, Error: msg,
			})
		}
	}
	if len(cmds) > 0 {
		for i, err := range r.w.write(ctx, cmds) {
			if err != nil && ctx.Err() == nil && !errors.Is(err, csi.ErrClaimNotFound) {
				r.w.cfg.Logger.Warn("cannot record a claim release error", "namespace", r.key.namespace,
					"volume", r.key.id, "allocation", cmds[i].(state.RecordClaimError).AllocationID, "error", err)
			}
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
