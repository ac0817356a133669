package csi

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Reachable reports whether a volume accessible from the topologies vol
// can be used on a node whose plugin reports the topology node, by the
// CSI rule: one of the volume's topologies has every one of its
// segments, with the same value, on the node. A volume with no topology
// is reachable from every node its plugin runs on; a node with no
// topology reaches only such volumes.
func Reachable(vol []*Topology, node *Topology) bool {
	if len(vol) == 0 {
		return true
	}
	for _, t := range vol {
		if t.Contains(node) {
			return true
		}
	}
	return false
}

// String formats the segments in key order, as "zone=a,rack=r1"; a nil
// or empty topology is "none".
func (t *Topology) String() string {
	if t == nil || len(t.Segments) == 0 {
		return "none"
	}
	var b strings.Builder
	for i, k := range slices.Sorted(maps.Keys(t.Segments)) {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(t.Segments[k])
	}
	return b.String()
}

// TopologiesString formats a list of topologies as "{zone=a} or
// {zone=b}"; an empty list is "anywhere".
func TopologiesString(ts []*Topology) string {
	if len(ts) == 0 {
		return "anywhere"
	}
	s := make([]string, len(ts))
	for i, t := range ts {
		s[i] = "{" + t.String() + "}"
	}
	return strings.Join(s, " or ")
}

// CheckTopology returns nil when volume v is reachable from a node whose
// plugin reports the topology node, and otherwise an error matching
// ErrTopologyMismatch that names both sides' segments.
func CheckTopology(v *Volume, nodeID string, node *Topology) error {
	if Reachable(v.Topologies, node) {
		return nil
	}
	return fmt.Errorf("%w: volume %s is accessible from %s and node %s is in {%s}; place the allocation on a node in one of the volume's topologies",
		ErrTopologyMismatch, v.ID, TopologiesString(v.Topologies), nodeID, node)
}

// Reasons is the set of reasons one node cannot take a claim on a
// volume; the zero value means it can. It is a bit set, so a scheduler
// branches on it without allocating: r.Has(ReasonTopology). Each reason
// has the sentinel error the claim itself would be refused with
// (Reason.Sentinel), so feasibility and the claim transaction agree.
type Reasons uint16

// Reason is one member of Reasons.
type Reason = Reasons

// The reasons, in the order a claim checks them (but for
// ReasonReleasing, see there). The first three do not depend on the
// node: when one holds, it holds for every node. The access-mode reasons
// (ReasonDetaching to ReasonClaimsTaken, and ReasonReleasing) are one
// check of the claim (CheckClaim), which may meet them in another
// order.
const (
	// ReasonNamespace: the request's namespace is not the volume's
	// (ErrNamespaceMismatch).
	ReasonNamespace Reason = 1 << iota
	// ReasonVolumeCreating: the volume's CreateVolume has not completed
	// (ErrVolumeInUse).
	ReasonVolumeCreating
	// ReasonPluginNotSchedulable: the plugin has no healthy node
	// instance, or requires a controller and has no healthy one
	// (ErrPluginUnhealthy).
	ReasonPluginNotSchedulable
	// ReasonNoNodePlugin: the plugin has no node instance on the node
	// (ErrPluginNotFound). Topology and MaxVolumes are then unknown and
	// not reported.
	ReasonNoNodePlugin
	// ReasonNodePluginUnhealthy: the node instance is unhealthy or has
	// not reported its CSI node ID (ErrPluginUnhealthy).
	ReasonNodePluginUnhealthy
	// ReasonTopology: the volume is not reachable from the node's
	// topology (ErrTopologyMismatch).
	ReasonTopology
	// ReasonDetaching: the volume is being detached from the node; retry
	// once the release finishes (ErrVolumeInUse).
	ReasonDetaching
	// ReasonModeNotAllowed: the volume does not allow the requested
	// capability, or a write claim asks for a read-only mode, or a
	// read-only claim would share the volume with a writer
	// (ErrAccessModeNotAllowed).
	ReasonModeNotAllowed
	// ReasonAttachedElsewhere: a single-node access mode (the request's
	// or a holder's) and the volume is held or still attached on
	// another node (ErrAttachedElsewhere).
	ReasonAttachedElsewhere
	// ReasonClaimsTaken: the access mode has no free claim of the
	// requested kind on any node, for example a second writer of a
	// single-writer volume (ErrMaxClaims).
	ReasonClaimsTaken
	// ReasonMaxVolumes: the node has as many volumes of the plugin
	// attached, in any attachment state, as its MaxVolumes
	// (ErrMaxVolumes).
	ReasonMaxVolumes
	// ReasonReleasing: a released claim is still published on its node
	// (its node step is not done) and keeps what the request would share
	// with it: the whole volume under SINGLE_NODE_SINGLE_WRITER, the
	// write under a single-writer mode. It holds on every node; retry
	// once the release passes its node step (ErrVolumeInUse). It is an
	// access-mode reason, numbered last only so that the earlier bits
	// keep their values.
	ReasonReleasing

	reasonEnd
)

var reasonNames = [...]string{
	"namespace", "volume-creating", "plugin-not-schedulable", "no-node-plugin",
	"node-plugin-unhealthy", "topology", "detaching", "mode-not-allowed",
	"attached-elsewhere", "claims-taken", "max-volumes", "releasing",
}

var reasonSentinels = [...]*Sentinel{
	ErrNamespaceMismatch, ErrVolumeInUse, ErrPluginUnhealthy, ErrPluginNotFound,
	ErrPluginUnhealthy, ErrTopologyMismatch, ErrVolumeInUse, ErrAccessModeNotAllowed,
	ErrAttachedElsewhere, ErrMaxClaims, ErrMaxVolumes, ErrVolumeInUse,
}

// Has reports whether every reason in o is in r.
func (r Reasons) Has(o Reasons) bool { return r&o == o && o != 0 }

// First returns the first reason of r in check order, or 0.
func (r Reasons) First() Reason { return r & -r }

// Sentinel returns the sentinel error of r's first reason, or nil when
// r is empty: the error a claim is refused with, unless the first
// reason is an access-mode one (or ReasonMaxVolumes with
// ReasonReleasing in r) and the claim meets another access-mode reason
// of r first.
func (r Reasons) Sentinel() *Sentinel {
	if i := r.First().index(); i >= 0 {
		return reasonSentinels[i]
	}
	return nil
}

func (r Reason) index() int {
	for i := range reasonNames {
		if r == 1<<i {
			return i
		}
	}
	return -1
}

// String lists the reasons as "topology,max-volumes"; the empty set is
// "feasible".
func (r Reasons) String() string {
	if r == 0 {
		return "feasible"
	}
	var s []string
	for i, n := range reasonNames {
		if r&(1<<i) != 0 {
			s = append(s, n)
		}
	}
	if r >= reasonEnd {
		s = append(s, fmt.Sprintf("Reasons(%#x)", uint16(r&^(reasonEnd-1))))
	}
	return strings.Join(s, ",")
}

// MarshalText implements encoding.TextMarshaler with the String form.
func (r Reasons) MarshalText() ([]byte, error) {
	if r >= reasonEnd {
		return nil, fmt.Errorf("%w: unknown placement reasons %#x", ErrInvalidRequest, uint16(r))
	}
	return []byte(r.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (r *Reasons) UnmarshalText(b []byte) error {
	*r = 0
	if string(b) == "feasible" || len(b) == 0 {
		return nil
	}
	for n := range strings.SplitSeq(string(b), ",") {
		i := slices.Index(reasonNames[:], n)
		if i < 0 {
			return fmt.Errorf("%w: unknown placement reason %q", ErrInvalidRequest, n)
		}
		*r |= 1 << i
	}
	return nil
}

// PlacementRequest is the claim a scheduler wants to place: an
// allocation of Namespace claiming the volume with Mode and Capability
// on a node still to be chosen.
type PlacementRequest struct {
	Namespace  string
	Mode       ClaimMode
	Capability Capability
}

// NodeFacts is what a store knows of one candidate node for the
// volume's plugin.
type NodeFacts struct {
	NodeID string
	// Instance is the plugin's node instance on the node, nil when it
	// has none.
	Instance *PluginInfo
	// Attached is how many volumes of the plugin are attached to the
	// node, in any attachment state. It is read only when Instance
	// reports a MaxVolumes and the volume is not attached there.
	Attached int64
}

// Placement answers, for one volume and one PlacementRequest, which
// nodes can take the claim. NewPlacement does the work that does not
// depend on the node once; Node is then a few map lookups and
// comparisons, with no allocation, so a scheduler can call it for every
// candidate in its inner loop.
//
// Placement agrees with the claim transaction: Node(f) is zero exactly
// when a claim of the request on f's node would be written (the store
// adds only its own checks of the allocation), and otherwise the claim
// is refused with the Sentinel of one of the reasons.
//
// A Placement reads v and plugin when it is made and when Node is
// called and changes neither; the caller keeps them unchanged while it
// uses the Placement.
type Placement struct {
	v      *Volume
	base   Reasons // reasons that hold on every node
	pinned bool    // a single-node mode is in play
	// holders are the nodes that hold the volume (live claims and
	// attachments); when pinned, only a sole holder can take the claim.
	holder  string
	holders int
}

// NewPlacement prepares the placement of req on volume v of plugin. A
// nil plugin (not registered) makes every node ReasonPluginNotSchedulable.
func NewPlacement(v *Volume, plugin *Plugin, req PlacementRequest) Placement {
	p := Placement{v: v}
	if req.Namespace != v.Namespace {
		p.base |= ReasonNamespace
	}
	if v.Creating {
		p.base |= ReasonVolumeCreating
	}
	if !plugin.Schedulable() {
		p.base |= ReasonPluginNotSchedulable
	}
	p.base |= modeReasons(v, req)
	if releasedHolder(v, "", req.Mode, req.Capability.AccessMode) != nil {
		p.base |= ReasonReleasing
	}
	p.pinned = req.Capability.AccessMode.SingleNode()
	var seen string
	count := func(node string) {
		if p.holders == 0 || (p.holders == 1 && node != seen) {
			p.holders++
		}
		seen = node
	}
	for _, m := range []map[string]*Claim{v.ReadClaims, v.WriteClaims} {
		for _, c := range m {
			p.pinned = p.pinned || c.AccessMode.SingleNode()
			count(c.NodeID)
		}
	}
	for node := range v.Attachments {
		count(node)
	}
	p.holder = seen
	return p
}

// modeReasons checks what the access modes of the request and of the
// live claims allow without looking at nodes, as CheckClaim does.
func modeReasons(v *Volume, req PlacementRequest) Reasons {
	c := req.Capability
	if c.Validate() != nil || (req.Mode != ClaimRead && req.Mode != ClaimWrite) ||
		!v.Allows(c) || (req.Mode == ClaimWrite && c.AccessMode.ReadOnly()) {
		return ReasonModeNotAllowed
	}
	live, writers := 1, 0
	if req.Mode == ClaimWrite {
		writers = 1
	}
	readOnly := c.AccessMode.ReadOnly()
	var modes [AccessModeSingleNodeMultiWriter + 1]bool // modes in play
	modes[c.AccessMode] = true
	for _, m := range []map[string]*Claim{v.ReadClaims, v.WriteClaims} {
		for _, x := range m {
			live++
			if x.Mode == ClaimWrite {
				writers++
			}
			if x.AccessMode.Valid() {
				modes[x.AccessMode] = true
			}
			readOnly = readOnly || x.AccessMode.ReadOnly()
		}
	}
	var r Reasons
	if (modes[AccessModeSingleNodeSingleWriter] && live > 1) ||
		((modes[AccessModeSingleNodeWriter] || modes[AccessModeMultiNodeSingleWriter]) && writers > 1) {
		r |= ReasonClaimsTaken
	}
	if readOnly && writers > 0 {
		r |= ReasonModeNotAllowed
	}
	return r
}

// Node returns the reasons f's node cannot take the claim, or zero.
func (p *Placement) Node(f NodeFacts) Reasons {
	r := p.base
	if p.pinned && (p.holders > 1 || (p.holders == 1 && p.holder != f.NodeID)) {
		r |= ReasonAttachedElsewhere
	}
	a := p.v.Attachments[f.NodeID]
	if a != nil && a.State == AttachmentDetaching {
		r |= ReasonDetaching
	}
	in := f.Instance
	if in == nil {
		return r | ReasonNoNodePlugin
	}
	ni := in.NodeInfo
	if !in.Healthy || ni == nil || ni.ID == "" {
		r |= ReasonNodePluginUnhealthy
	}
	if !Reachable(p.v.Topologies, ni.Topology()) {
		r |= ReasonTopology
	}
	if a == nil && ni != nil && ni.MaxVolumes > 0 && f.Attached >= ni.MaxVolumes {
		r |= ReasonMaxVolumes
	}
	return r
}

// NeedsAttachedCount reports whether Node reads f.Attached for a node
// whose plugin instance is in: the instance has a MaxVolumes and the
// volume is not attached to the node. A store counts attachments only
// then.
func (p *Placement) NeedsAttachedCount(node string, in *PluginInfo) bool {
	return in != nil && in.NodeInfo != nil && in.NodeInfo.MaxVolumes > 0 && p.v.Attachments[node] == nil
}
