package csi

import (
	"fmt"
	"maps"
	"slices"
)

// AttachmentState is where the attachment of a volume to a node stands.
type AttachmentState int

// Attachment states, in the order an attachment walks them.
const (
	// AttachmentAttaching: a claim on the node was written and
	// ControllerPublishVolume has not (yet) succeeded, or whether it is
	// needed is not known yet. The volume may or may not be attached:
	// a release of the last claim there detaches it all the same.
	AttachmentAttaching AttachmentState = iota + 1
	// AttachmentAttached: ControllerPublishVolume succeeded (its
	// publish context, possibly empty, is on the record), or the
	// plugin needs no controller publish. Claims on the node share it.
	AttachmentAttached
	// AttachmentDetaching: the last claim on the node was released and
	// ControllerUnpublishVolume is (about to be) under way; a new claim
	// on the node is refused until the record is removed.
	AttachmentDetaching
)

var attachmentStateNames = [...]string{"", "attaching", "attached", "detaching"}

func (s AttachmentState) String() string {
	if s > 0 && int(s) < len(attachmentStateNames) {
		return attachmentStateNames[s]
	}
	return fmt.Sprintf("AttachmentState(%d)", int(s))
}

// Valid reports whether s is a defined state.
func (s AttachmentState) Valid() bool { return s >= AttachmentAttaching && s <= AttachmentDetaching }

// MarshalText implements encoding.TextMarshaler.
func (s AttachmentState) MarshalText() ([]byte, error) {
	if !s.Valid() {
		return nil, fmt.Errorf("%w: attachment state %d", ErrInvalidRequest, int(s))
	}
	return []byte(s.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (s *AttachmentState) UnmarshalText(b []byte) error {
	for i, n := range attachmentStateNames {
		if i > 0 && n == string(b) {
			*s = AttachmentState(i)
			return nil
		}
	}
	return fmt.Errorf("%w: unknown attachment state %q", ErrInvalidRequest, b)
}

// Attachment is the record of one volume attached (or being attached or
// detached) to one node: the volume's owner holds it in
// Volume.Attachments, keyed by node ID, and the store writes it in the
// same transaction as the claims that need it. Every claim on the node,
// live or past, shares it; it is the one place a publish context is
// kept. Whether a volume is attached is read from State, never inferred
// from the publish context, which a plugin may leave empty.
//
// An Attachment in Volume.Attachments, and its PublishContext map, may be
// shared by several versions of the volume (see Volume): replace it with
// a changed Copy, never modify it in place.
type Attachment struct {
	NodeID string
	// ExternalNodeID is the CSI node ID ControllerPublishVolume was (or
	// will be) called with, and ControllerUnpublishVolume will be.
	ExternalNodeID string
	State          AttachmentState
	// PublishContext is what ControllerPublishVolume returned; it may be
	// empty even once attached.
	PublishContext map[string]string `json:",omitempty"`
	// CreateIndex is the index of the write that made the record (the
	// first claim on the node); ModifyIndex of its last change.
	CreateIndex uint64
	ModifyIndex uint64
}

// Copy returns a deep copy; nil stays nil.
func (a *Attachment) Copy() *Attachment {
	if a == nil {
		return nil
	}
	c := *a
	c.PublishContext = maps.Clone(a.PublishContext)
	return &c
}

func copyAttachments(m map[string]*Attachment) map[string]*Attachment {
	if m == nil {
		return nil
	}
	c := make(map[string]*Attachment, len(m))
	for k, a := range m {
		c[k] = a.Copy()
	}
	return c
}

// ClaimsOnNode returns the allocation IDs of v's claims on node, live or
// past, other than exceptAlloc's, whose node step is not done (live
// claims, and past claims before ClaimNodeDetached): while any remains,
// the volume must stay attached to the node.
func (v *Volume) ClaimsOnNode(node, exceptAlloc string) []string {
	var ids []string
	for _, m := range []map[string]*Claim{v.ReadClaims, v.WriteClaims, v.PastClaims} {
		for id, c := range m {
			if id != exceptAlloc && c.NodeID == node && c.State < ClaimNodeDetached {
				ids = append(ids, id)
			}
		}
	}
	slices.Sort(ids)
	return ids
}
