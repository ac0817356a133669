package csi

import (
	"maps"
	"slices"
	"time"
)

// Expansion errors. Like the other sentinels they cross transports by
// Code, so errors.Is works on the caller's side of the wire.
var (
	// ErrShrinkRefused: an expansion asks for less than the volume's
	// recorded capacity. CSI volumes only grow. Final.
	ErrShrinkRefused = newSentinel("shrink_refused", "volume shrink refused", ClassFinal)
	// ErrExpansionOffline: the plugin expands volumes only while they are
	// not published (OFFLINE), and the volume is claimed or attached.
	// Retryable once its claims are released.
	ErrExpansionOffline = newSentinel("expansion_offline", "plugin expands only unpublished volumes", ClassRetryable)
	// ErrExpansionUnsupported: neither the plugin's controller nor its
	// node advertises EXPAND_VOLUME. Final.
	ErrExpansionUnsupported = newSentinel("expansion_unsupported", "plugin does not support volume expansion", ClassFinal)
)

// ExpansionState is where a volume's latest expansion stands.
type ExpansionState string

// The expansion states, in the order an expansion goes through them.
const (
	// ExpansionController: the intent is written and
	// ControllerExpandVolume is to be called (or was, without its
	// answer recorded).
	ExpansionController ExpansionState = "controller"
	// ExpansionNode: the controller step is done (or there is none) and
	// NodeExpandVolume is pending on PendingNodes.
	ExpansionNode ExpansionState = "node"
	// ExpansionDone: every step is done.
	ExpansionDone ExpansionState = "done"
)

// Expansion is a volume's latest expansion: the written intent, then the
// progress of its controller and node steps. A new expansion replaces a
// done one.
type Expansion struct {
	// RequiredBytes and LimitBytes are the requested capacity range
	// (LimitBytes 0: no limit).
	RequiredBytes int64
	LimitBytes    int64 `json:",omitempty"`
	State         ExpansionState
	// NodeRequired says NodeExpandVolume must run wherever the volume is
	// staged or published: the controller answered
	// node_expansion_required, or the plugin expands on nodes only. A
	// node that stages the volume later runs it too (NeedsNode).
	NodeRequired bool `json:",omitempty"`
	// PendingNodes and DoneNodes are host node IDs, sorted.
	PendingNodes []string `json:",omitempty"`
	DoneNodes    []string `json:",omitempty"`
	// LastError is the last failure of a step, for operators; it never
	// holds a secret.
	LastError   string    `json:",omitempty"`
	RequestedAt time.Time `json:",omitzero"`
}

// Copy returns a deep copy; nil stays nil.
func (e *Expansion) Copy() *Expansion {
	if e == nil {
		return nil
	}
	c := *e
	c.PendingNodes = slices.Clone(e.PendingNodes)
	c.DoneNodes = slices.Clone(e.DoneNodes)
	return &c
}

// Pending reports whether the expansion has a step left.
func (e *Expansion) Pending() bool { return e != nil && e.State != ExpansionDone }

// NeedsNode reports whether node must still run NodeExpandVolume for
// this expansion: it is pending there, or the expansion needs a node
// step and node has not done it (a node that staged the volume after
// the expansion).
func (e *Expansion) NeedsNode(node string) bool {
	if e == nil || !e.NodeRequired || e.State == ExpansionController {
		return false
	}
	return slices.Contains(e.PendingNodes, node) || !slices.Contains(e.DoneNodes, node)
}

// SameRange reports whether the expansion asks for required and limit.
func (e *Expansion) SameRange(required, limit int64) bool {
	return e != nil && e.RequiredBytes == required && e.LimitBytes == limit
}

// ExpansionMode is how a plugin can expand volumes, read from its
// instances' capabilities.
type ExpansionMode struct {
	// Controller: a controller advertises EXPAND_VOLUME.
	Controller bool
	// Node: a node instance advertises EXPAND_VOLUME.
	Node bool
	// Online and Offline are the plugin's VolumeExpansion capabilities:
	// grow while published, or only while not published. A plugin that
	// advertises neither is taken as Online, as CSI's ONLINE is the
	// default external-resizer assumes.
	Online  bool
	Offline bool
}

// Supported reports whether the plugin can expand at all.
func (m ExpansionMode) Supported() bool { return m.Controller || m.Node }

// OfflineOnly reports whether a published volume must not be expanded.
func (m ExpansionMode) OfflineOnly() bool { return m.Offline && !m.Online }

// ExpansionMode reads how the plugin expands volumes from its healthy
// and unhealthy instances alike: capabilities do not change with health.
func (p *Plugin) ExpansionMode() ExpansionMode {
	var m ExpansionMode
	if p == nil {
		return m
	}
	for _, in := range p.Controllers {
		if in.ControllerInfo != nil && in.ControllerInfo.Capabilities.ExpandVolume {
			m.Controller = true
		}
		m.Online, m.Offline = m.Online || in.OnlineExpansion, m.Offline || in.OfflineExpansion
	}
	for _, in := range p.Nodes {
		if in.NodeInfo != nil && in.NodeInfo.Capabilities.ExpandVolume {
			m.Node = true
		}
		m.Online, m.Offline = m.Online || in.OnlineExpansion, m.Offline || in.OfflineExpansion
	}
	return m
}

// ModifiesVolumes reports whether a controller of the plugin advertises
// MODIFY_VOLUME (ControllerModifyVolume, CSI 1.12's mutable parameters).
func (p *Plugin) ModifiesVolumes() bool {
	if p == nil {
		return false
	}
	for _, in := range p.Controllers {
		if in.ControllerInfo != nil && in.ControllerInfo.Capabilities.ModifyVolume {
			return true
		}
	}
	return false
}

// ExpansionNodes returns the host node IDs where v may be staged or
// published, sorted: the nodes of its attachments and of its live
// claims. NodeExpandVolume runs on each.
func (v *Volume) ExpansionNodes() []string {
	set := make(map[string]bool, len(v.Attachments))
	for n := range v.Attachments {
		set[n] = true
	}
	for _, m := range []map[string]*Claim{v.ReadClaims, v.WriteClaims} {
		for _, c := range m {
			set[c.NodeID] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// Published reports whether v has a live claim or an attachment: an
// OFFLINE plugin must not expand it.
func (v *Volume) Published() bool {
	return len(v.ReadClaims)+len(v.WriteClaims)+len(v.Attachments) > 0
}
