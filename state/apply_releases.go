// apply_releases.go owns the release of claims: ReleaseClaims (and
// UpsertAllocations, for an allocation that stops) turns live claims
// into past claims, CheckpointClaim walks a past claim forward,
// RecordClaimError notes why a step failed, FreeClaim removes a past
// claim once released, and RemoveClaim removes any claim outright.
//
// Rules a reader must know:
//
//   - A past claim's State only moves forward: Unpublishing,
//     NodeDetached, ControllerDetached, ReadyToFree. A checkpoint to
//     the state it is in changes nothing; one backwards is refused.
//   - An attachment outlives the claims on its node until the release
//     worker removes it (RemoveAttachment, after ControllerUnpublish):
//     freeing the last claim on a node that is still attached is
//     refused. RemoveClaim of the last claim removes an Attaching
//     attachment with it (nothing was published) and refuses any other.
//   - ReleasedAt comes from the command, never from a clock, so that
//     every replica stores the same time.

package state

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/csikit/csikit/csi"
)

// lastOnNode reports whether v, as edited, has no claim left on node.
func lastOnNode(v *csi.Volume, node string) bool {
	for _, m := range []map[string]*csi.Claim{v.ReadClaims, v.WriteClaims, v.PastClaims} {
		for _, c := range m {
			if c.NodeID == node {
				return false
			}
		}
	}
	return true
}

// removeClaim removes allocID's claim from its volume once check allows
// it; orphan decides the fate of the claim's attachment when no claim is
// left on its node: removed with the claim, or the removal refused.
func (w *writer) removeClaim(ns, volID, allocID string, check func(c *csi.Claim, past bool) error,
	orphan func(a *csi.Attachment) (remove bool, err error)) error {
	v, old, past, err := w.claimOf(ns, volID, allocID)
	if err != nil {
		return err
	}
	if err := check(old, past); err != nil {
		return err
	}
	nv := editable(v)
	delete(*claimMap(nv, allocID), allocID)
	if a := nv.Attachments[old.NodeID]; a != nil && lastOnNode(nv, old.NodeID) {
		remove, err := orphan(a)
		if err != nil {
			return err
		}
		if remove {
			delete(nv.Attachments, old.NodeID)
		}
	}
	return w.putVolume(nv)
}

// RemoveClaim deletes the claim, live or past, for a claim flow whose
// ControllerPublish failed for good.
func (c RemoveClaim) apply(w *writer) error {
	return w.removeClaim(c.Namespace, c.VolumeID, c.AllocationID, func(*csi.Claim, bool) error { return nil },
		func(a *csi.Attachment) (bool, error) {
			if a.State == csi.AttachmentAttaching {
				return true, nil // nothing was attached
			}
			return false, fmt.Errorf("%w: volume %s is %s to node %s and allocation %s holds the last claim there; release the claim so that the volume is detached",
				csi.ErrVolumeInUse, volName(c.Namespace, c.VolumeID), a.State, a.NodeID, c.AllocationID)
		})
}

// ReleaseClaims turns one allocation's live claims into past claims.
func (c ReleaseClaims) apply(w *writer) error {
	if err := csi.ValidateAllocationID(c.AllocationID); err != nil {
		return err
	}
	if c.ReleasedAt.IsZero() {
		return fmt.Errorf("%w: release claims of allocation %s without ReleasedAt; set it to when the allocation stopped",
			csi.ErrInvalidRequest, c.AllocationID)
	}
	return w.releaseClaims([]string{c.AllocationID}, c.ReleasedAt)
}

// releaseClaims turns the allocations' live claims into past claims,
// Unpublishing since at. A volume claimed by several of them is written
// once: every lookup comes before the first write, and a write of a
// volume costs about the same for one claim as for many. Past claims
// stay as they are, so a repeated release changes nothing.
func (w *writer) releaseClaims(allocIDs []string, at time.Time) error {
	type release struct {
		v      *csi.Volume // as stored, then the edited copy
		edited bool
	}
	var order []VolumeKey
	vols := map[VolumeKey]*release{}
	// Each allocation's own volumes, as the lookups found them: the
	// edits visit each claim once, not each allocation on each volume.
	type claimRef struct {
		allocID string
		r       *release
	}
	var claims []claimRef
	for _, allocID := range allocIDs {
		it, err := byRef(w.txn, tVolumes, refAlloc, allocID)
		if err != nil {
			return dbErr("list claims of allocation", err)
		}
		for raw := it.Next(); raw != nil; raw = it.Next() {
			v := raw.(*csi.Volume)
			k := VolumeKey{v.Namespace, v.ID}
			r := vols[k]
			if r == nil {
				r = &release{v: v}
				vols[k] = r
				order = append(order, k)
			}
			claims = append(claims, claimRef{allocID, r})
		}
		if err := it.Err(); err != nil {
			return dbErr("list claims of allocation", err)
		}
	}
	for _, cr := range claims {
		allocID, r := cr.allocID, cr.r
		m := claimMap(r.v, allocID)
		if m == nil || m == &r.v.PastClaims {
			continue
		}
		nc := (*m)[allocID].Copy()
		nc.State = csi.ClaimUnpublishing
		nc.ReleasedAt = at
		normalizeClaim(nc)
		if !r.edited {
			r.v, r.edited = editable(r.v), true
		}
		delete(*claimMap(r.v, allocID), allocID)
		if r.v.PastClaims == nil {
			r.v.PastClaims = map[string]*csi.Claim{}
		}
		r.v.PastClaims[allocID] = nc
	}
	for _, k := range order {
		if r := vols[k]; r.edited {
			if err := w.putVolume(r.v); err != nil {
				return err
			}
		}
	}
	return nil
}

// CheckpointClaim moves a past claim forward to c.State and clears its
// LastError: the step that failed has now succeeded.
func (c CheckpointClaim) apply(w *writer) error {
	if c.State <= csi.ClaimTaken || c.State > csi.ClaimReadyToFree {
		return fmt.Errorf("%w: checkpoint claim of allocation %s on volume %s to state %s; a checkpoint is unpublishing, node-detached, controller-detached or ready-to-free",
			csi.ErrInvalidRequest, c.AllocationID, volName(c.Namespace, c.VolumeID), c.State)
	}
	return w.editClaim(c.Namespace, c.VolumeID, c.AllocationID, func(old *csi.Claim, past bool) (*csi.Claim, error) {
		switch {
		case !past:
			return nil, fmt.Errorf("%w: the claim of allocation %s on volume %s is live; release the allocation before checkpointing its release",
				csi.ErrInvalidRequest, c.AllocationID, volName(c.Namespace, c.VolumeID))
		case c.State == old.State:
			return old, nil
		case c.State < old.State:
			return nil, fmt.Errorf("%w: the claim of allocation %s on volume %s is already %s and cannot go back to %s; checkpoints only move forward",
				csi.ErrInvalidRequest, c.AllocationID, volName(c.Namespace, c.VolumeID), old.State, c.State)
		}
		nc := old.Copy()
		nc.State = c.State
		nc.LastError = ""
		return nc, nil
	})
}

// RecordClaimError sets a claim's LastError, made valid UTF-8 and cut
// to MaxClaimError bytes, so that a plugin's long or binary error
// cannot grow the state.
func (c RecordClaimError) apply(w *writer) error {
	msg := truncateUTF8(strings.ToValidUTF8(c.Error, "\uFFFD"), MaxClaimError)
	return w.editClaim(c.Namespace, c.VolumeID, c.AllocationID, func(old *csi.Claim, _ bool) (*csi.Claim, error) {
		if old.LastError == msg {
			return old, nil
		}
		nc := old.Copy()
		nc.LastError = msg
		return nc, nil
	})
}

// truncateUTF8 cuts s to at most n bytes without splitting a rune.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// FreeClaim removes a past claim at the end of its release.
func (c FreeClaim) apply(w *writer) error {
	return w.removeClaim(c.Namespace, c.VolumeID, c.AllocationID, func(_ *csi.Claim, past bool) error {
		if !past {
			return fmt.Errorf("%w: the claim of allocation %s on volume %s is live; release the allocation before freeing its claim",
				csi.ErrInvalidRequest, c.AllocationID, volName(c.Namespace, c.VolumeID))
		}
		return nil
	}, func(a *csi.Attachment) (bool, error) {
		return false, fmt.Errorf("%w: volume %s is still %s to node %s and allocation %s holds the last claim there; detach it (RemoveAttachment) before freeing the claim",
			csi.ErrVolumeInUse, volName(c.Namespace, c.VolumeID), a.State, a.NodeID, c.AllocationID)
	})
}
