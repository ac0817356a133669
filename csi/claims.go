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
// from the claim's node, or a released claim is still published), whose
// message names the volume and the allocations that hold it.
//
// The claims after the change must satisfy the access mode of every claim
// in the set, not only the new one's (see AccessMode for how each mode is
// read). For single-node modes, a past claim still attached to its node
// (not yet ControllerDetached) counts as being on that node. A past
// claim whose node step is not done (before ClaimNodeDetached) is still
// published on its node, so it keeps what it held: under
// SINGLE_NODE_SINGLE_WRITER the whole volume, and under a single-writer
// mode the write; a claim it would share with is refused with
// ErrVolumeInUse, which is retryable.
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

	// Nodes the volume is attached to with no live claim there (the
	// claims there are being released).
	var attached []*Attachment
	for node, a := range v.Attachments {
		if !slices.ContainsFunc(live, func(x *Claim) bool { return x.NodeID == node }) {
			attached = append(attached, a)
		}
	}
	slices.SortFunc(attached, func(a, b *Attachment) int { return strings.Compare(a.NodeID, b.NodeID) })

	for _, x := range live {
		if err := modeAllows(v, x, c, live, attached); err != nil {
			return err
		}
	}
	if p := releasedHolder(v, c.AllocationID, c.Mode, c.AccessMode); p != nil {
		return fmt.Errorf("%w: volume %s: allocation %s released its %s %s claim but is still published on node %s (%s); retry the claim of allocation %s once that release passes its node step",
			ErrVolumeInUse, v.ID, p.AllocationID, p.Mode, p.AccessMode, p.NodeID, p.State, c.AllocationID)
	}
	return nil
}

// releasedHolder returns the past claim of v, other than alloc's, that
// is still published on its node (before ClaimNodeDetached) and keeps a
// claim of mode and access mode am from being shared with it: any claim
// when either side is SINGLE_NODE_SINGLE_WRITER, a write claim when
// both write and either side is a single-writer mode. It returns nil
// when none does, and the first by allocation ID otherwise.
func releasedHolder(v *Volume, alloc string, mode ClaimMode, am AccessMode) *Claim {
	var found *Claim
	for id, p := range v.PastClaims {
		if id == alloc || p.State >= ClaimNodeDetached || (found != nil && found.AllocationID < id) {
			continue
		}
		if holdsAgainst(p, mode, am) {
			found = p
		}
	}
	return found
}

func holdsAgainst(p *Claim, mode ClaimMode, am AccessMode) bool {
	if am == AccessModeSingleNodeSingleWriter || p.AccessMode == AccessModeSingleNodeSingleWriter {
		return true
	}
	oneWriter := func(m AccessMode) bool {
		return m == AccessModeSingleNodeWriter || m == AccessModeMultiNodeSingleWriter
	}
	return mode == ClaimWrite && p.Mode == ClaimWrite && (oneWriter(am) || oneWriter(p.AccessMode))
}

// detachingFrom refuses a claim on a node from which the volume is
// being detached right now (its attachment there is Detaching): the
// release worker has decided ControllerUnpublishVolume, and a claim
// written now would be detached under its allocation. A claim on a node
// whose attachment is Attaching or Attached joins it.
func detachingFrom(v *Volume, c *Claim) error {
	a := v.Attachments[c.NodeID]
	if a == nil || a.State != AttachmentDetaching {
		return nil
	}
	var ids []string
	for id, p := range v.PastClaims {
		if p.NodeID == c.NodeID {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	by := ""
	if len(ids) > 0 {
		by = " (released by allocation " + strings.Join(ids, ", ") + ")"
	}
	return fmt.Errorf("%w: volume %s is being detached from node %s%s; retry the claim once the release finishes",
		ErrVolumeInUse, v.ID, c.NodeID, by)
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
// whole set of live claims and the attachments no live claim holds.
// The error names the allocations that hold the volume, never x itself
// when x is the claim being added (c): the caller asked for it.
func modeAllows(v *Volume, x, c *Claim, live []*Claim, attached []*Attachment) error {
	m := x.AccessMode
	if m.SingleNode() {
		var elsewhere []string
		for _, y := range live {
			if y.NodeID != x.NodeID {
				elsewhere = append(elsewhere, fmt.Sprintf("%s on node %s", y.AllocationID, y.NodeID))
			}
		}
		for _, a := range attached {
			if a.NodeID != x.NodeID {
				elsewhere = append(elsewhere, fmt.Sprintf("node %s (%s, its claims are being released)", a.NodeID, a.State))
			}
		}
		if len(elsewhere) > 0 {
			if x != c {
				// x already held the volume: the new claim is the one
				// elsewhere.
				return fmt.Errorf("%w: volume %s is %s (single node) and allocation %s holds it on node %s; claim it on node %s or wait until it is released",
					ErrAttachedElsewhere, v.ID, m, x.AllocationID, x.NodeID, x.NodeID)
			}
			return fmt.Errorf("%w: volume %s is %s (single node) and is held on another node by %s; place allocation %s on that node or wait until it is released",
				ErrAttachedElsewhere, v.ID, m, strings.Join(elsewhere, ", "), c.AllocationID)
		}
	}
	switch m {
	case AccessModeSingleNodeSingleWriter:
		if len(live) > 1 {
			return fmt.Errorf("%w: volume %s is %s (one allocation at a time) and allocation %s holds it; allocation %s can claim it once that claim is released",
				ErrMaxClaims, v.ID, m, allocList(others(live, c)), c.AllocationID)
		}
	case AccessModeSingleNodeWriter, AccessModeMultiNodeSingleWriter:
		var writers []*Claim
		for _, y := range live {
			if y.Mode == ClaimWrite {
				writers = append(writers, y)
			}
		}
		if len(writers) > 1 {
			return fmt.Errorf("%w: volume %s is %s (one writer) and allocation %s holds it for writing; allocation %s can claim it for reading, or for writing once that claim is released",
				ErrMaxClaims, v.ID, m, allocList(others(writers, c)), c.AllocationID)
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

// others returns cs without the claim being added (c), or cs when only
// c is left.
func others(cs []*Claim, c *Claim) []*Claim {
	out := make([]*Claim, 0, len(cs))
	for _, y := range cs {
		if y.AllocationID != c.AllocationID {
			out = append(out, y)
		}
	}
	if len(out) == 0 {
		return cs
	}
	return out
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
