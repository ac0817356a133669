package csi

import (
	"fmt"
	"slices"
	"strings"
)

// ValidateClaim checks a claim request on its own: valid allocation and
// node IDs, defined modes. It does not look at any volume.
func ValidateClaim(c *Claim) error {
	if c == nil {
		return fmt.Errorf("%w: nil claim", ErrInvalidRequest)
	}
	if err := ValidateAllocationID(c.AllocationID); err != nil {
		return err
	}
	if err := ValidateNodeID(c.NodeID); err != nil {
		return err
	}
	if c.Mode != ClaimRead && c.Mode != ClaimWrite {
		return fmt.Errorf("%w: claim mode %d is neither read nor write", ErrInvalidRequest, c.Mode)
	}
	return c.Capability().Validate()
}

// CheckClaim decides whether claim c may be added to volume v. It is a
// pure function: it reads v and c and changes neither.
//
// It returns nil when the claim is allowed, including when the same
// allocation already holds an identical live claim (a repeated claim is
// idempotent; IsRepeatClaim tells the caller so). Otherwise it returns an
// error matching one of ErrInvalidRequest, ErrInvalidID,
// ErrAllocationTerminal, ErrAccessModeNotAllowed, ErrMaxClaims,
// ErrAttachedElsewhere or ErrVolumeInUse (the volume is being detached
// from the claim's node), whose message names the volume and the
// allocations that hold it.
//
// The claims after the change must satisfy the access mode of every claim
// in the set, not only the new one's (see AccessMode for how each mode is
// read). For single-node modes, a past claim still attached to its node
// (not yet ControllerDetached) counts as being on that node.
func CheckClaim(v *Volume, c *Claim) error {
	if err := ValidateClaim(c); err != nil {
		return err
	}
	if v == nil {
		return ErrVolumeNotFound
	}
	if p := v.PastClaims[c.AllocationID]; p != nil {
		return fmt.Errorf("%w: allocation %s released its claim on volume %s (state %s) and cannot claim it again",
			ErrAllocationTerminal, c.AllocationID, v.ID, p.State)
	}
	if old := v.Claim(c.AllocationID); old != nil && !sameRequest(old, c) {
		return fmt.Errorf("%w: allocation %s already claims volume %s as %s %s on node %s; release it before claiming it as %s %s on node %s",
			ErrInvalidRequest, c.AllocationID, v.ID, old.Mode, old.Capability(), old.NodeID, c.Mode, c.Capability(), c.NodeID)
	}
	if err := detachingFrom(v, c); err != nil {
		return err
	}
	capab := c.Capability()
	if !v.Allows(capab) {
		return fmt.Errorf("%w: volume %s allows %s, not %s", ErrAccessModeNotAllowed, v.ID, capsString(v.Capabilities), capab)
	}
	if c.Mode == ClaimWrite && c.AccessMode.ReadOnly() {
		return fmt.Errorf("%w: volume %s: a write claim cannot use the read-only mode %s", ErrAccessModeNotAllowed, v.ID, c.AccessMode)
	}

	live := make([]*Claim, 0, len(v.ReadClaims)+len(v.WriteClaims)+1)
	for _, m := range []map[string]*Claim{v.ReadClaims, v.WriteClaims} {
		for id, x := range m {
			if id != c.AllocationID {
				live = append(live, x)
			}
		}
	}
	live = append(live, c)
	slices.SortFunc(live, func(a, b *Claim) int { return strings.Compare(a.AllocationID, b.AllocationID) })

	var attached []*Claim // past claims still attached to a node
	for _, x := range v.PastClaims {
		if x.State < ClaimControllerDetached {
			attached = append(attached, x)
		}
	}
	slices.SortFunc(attached, func(a, b *Claim) int { return strings.Compare(a.AllocationID, b.AllocationID) })

	for _, x := range live {
		if err := modeAllows(v, x, live, attached); err != nil {
			return err
		}
	}
	return nil
}

// detachingFrom refuses a claim on a node from which the volume may be
// being detached right now: a past claim there has finished its node step
// (ClaimNodeDetached) and no live claim holds the attachment. The release
// worker checks for live claims on the node and then calls
// ControllerUnpublishVolume; a claim written in between would find the
// volume attached, skip ControllerPublishVolume and be detached under its
// allocation. Refusing it until the release finishes closes that window;
// with a live claim on the node the worker defers the detach instead.
func detachingFrom(v *Volume, c *Claim) error {
	if v.LiveClaimOnNode(c.NodeID, "") {
		return nil
	}
	var ids []string
	for id, p := range v.PastClaims {
		if p.NodeID == c.NodeID && p.State == ClaimNodeDetached {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	slices.Sort(ids)
	return fmt.Errorf("%w: volume %s is being detached from node %s (released by allocation %s); retry the claim once the release finishes",
		ErrVolumeInUse, v.ID, c.NodeID, strings.Join(ids, ", "))
}

// IsRepeatClaim reports whether c repeats a live claim the same allocation
// already holds on v with the same node, mode and capability.
func IsRepeatClaim(v *Volume, c *Claim) bool {
	if v == nil || c == nil {
		return false
	}
	old := v.WriteClaims[c.AllocationID]
	if old == nil {
		old = v.ReadClaims[c.AllocationID]
	}
	return old != nil && sameRequest(old, c)
}

func sameRequest(a, b *Claim) bool {
	return a.NodeID == b.NodeID && a.Mode == b.Mode && a.Capability() == b.Capability()
}

// modeAllows checks the constraints of claim x's access mode against the
// whole set of live claims and past claims still attached.
func modeAllows(v *Volume, x *Claim, live, attached []*Claim) error {
	m := x.AccessMode
	if m.SingleNode() {
		var elsewhere []string
		for _, y := range live {
			if y.NodeID != x.NodeID {
				elsewhere = append(elsewhere, fmt.Sprintf("%s on node %s", y.AllocationID, y.NodeID))
			}
		}
		for _, y := range attached {
			if y.NodeID != x.NodeID {
				elsewhere = append(elsewhere, fmt.Sprintf("%s on node %s (releasing, %s)", y.AllocationID, y.NodeID, y.State))
			}
		}
		if len(elsewhere) > 0 {
			return fmt.Errorf("%w: volume %s is %s (single node) and is claimed by allocation %s",
				ErrAttachedElsewhere, v.ID, m, strings.Join(elsewhere, ", "))
		}
	}
	switch m {
	case AccessModeSingleNodeSingleWriter:
		if len(live) > 1 {
			return fmt.Errorf("%w: volume %s is %s and is held by allocations %s",
				ErrMaxClaims, v.ID, m, allocList(live))
		}
	case AccessModeSingleNodeWriter, AccessModeMultiNodeSingleWriter:
		var writers []*Claim
		for _, y := range live {
			if y.Mode == ClaimWrite {
				writers = append(writers, y)
			}
		}
		if len(writers) > 1 {
			return fmt.Errorf("%w: volume %s is %s and allocations %s both claim it for writing",
				ErrMaxClaims, v.ID, m, allocList(writers))
		}
	}
	if m.ReadOnly() {
		for _, y := range live {
			if y.Mode == ClaimWrite {
				return fmt.Errorf("%w: volume %s: allocation %s claims it for writing but allocation %s uses the read-only mode %s",
					ErrAccessModeNotAllowed, v.ID, y.AllocationID, x.AllocationID, m)
			}
		}
	}
	return nil
}

func allocList(cs []*Claim) string {
	ids := make([]string, len(cs))
	for i, c := range cs {
		ids[i] = c.AllocationID
	}
	return strings.Join(ids, ", ")
}

func capsString(cs []Capability) string {
	if len(cs) == 0 {
		return "no capability"
	}
	s := make([]string, len(cs))
	for i, c := range cs {
		s[i] = c.String()
	}
	return strings.Join(s, ", ")
}
