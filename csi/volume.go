package csi

import (
	"fmt"
	"maps"
	"slices"
	"time"
)

// Topology is a set of segments (for example {"zone": "eu-1a"}) a volume
// is reachable from or a node is in.
type Topology struct {
	Segments map[string]string
}

// Copy returns a deep copy; nil stays nil.
func (t *Topology) Copy() *Topology {
	if t == nil {
		return nil
	}
	return &Topology{Segments: maps.Clone(t.Segments)}
}

// Equal reports whether t and o hold the same segments.
func (t *Topology) Equal(o *Topology) bool {
	if t == nil || o == nil {
		return t == o
	}
	if len(t.Segments) != len(o.Segments) {
		return false
	}
	for k, v := range t.Segments {
		if w, ok := o.Segments[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// Contains reports whether every segment of t is in o: a node in o can
// reach a volume accessible from t.
func (t *Topology) Contains(o *Topology) bool {
	if t == nil {
		return true
	}
	if o == nil {
		return len(t.Segments) == 0
	}
	for k, v := range t.Segments {
		if o.Segments[k] != v {
			return false
		}
	}
	return true
}

func copyTopologies(ts []*Topology) []*Topology {
	if ts == nil {
		return nil
	}
	out := make([]*Topology, len(ts))
	for i, t := range ts {
		out[i] = t.Copy()
	}
	return out
}

// TopologyRequest is what a volume creation asks of placement.
type TopologyRequest struct {
	Required  []*Topology `json:",omitempty"`
	Preferred []*Topology `json:",omitempty"`
}

// Copy returns a deep copy; nil stays nil.
func (r *TopologyRequest) Copy() *TopologyRequest {
	if r == nil {
		return nil
	}
	return &TopologyRequest{Required: copyTopologies(r.Required), Preferred: copyTopologies(r.Preferred)}
}

// Volume is a CSI volume known to the orchestrator, with its claims.
//
// The claim maps are keyed by allocation ID. ReadClaims and WriteClaims
// hold claims of running allocations (state ClaimTaken); PastClaims hold
// claims being released (any later state). An allocation appears in at
// most one of the three maps.
//
// Ownership: a Volume holds its claims and attachments by pointer, so a
// shallow copy (*v, or a cloned claim map) shares them with the
// original. Copy makes a deep copy that shares nothing, and what a
// state.Reader returns is one, owned by the caller. Code that keeps
// versions of a volume side by side, as a store does for the readers of
// older states, must treat the claims and attachments as shared:
// replace, never modify. To change one, Copy it, change the copy and
// put it in a map cloned for the new version; never write through a
// pointer taken from a version others may hold.
type Volume struct {
	ID        string
	Namespace string
	Name      string `json:",omitempty"`
	// ExternalID is the plugin's CSI volume ID; empty while Creating.
	ExternalID string
	PluginID   string
	// Creating marks the intent of a CreateVolume written before the
	// plugin is called: the volume has no ExternalID yet and cannot be
	// claimed. Repeating the create (with the same deterministic CSI
	// name) completes it, or removes it when the plugin refuses for
	// good; a crash between the plugin's reply and the record leaves the
	// intent, never a backing volume the store does not know.
	Creating bool `json:",omitempty"`
	// Deleting marks the intent of a DeleteVolume written before the
	// plugin is called: the volume cannot be claimed, and repeating the
	// delete (or a new leader's ResumeVolumeChanges) completes it. A
	// crash between the plugin's reply and the deregistration leaves the
	// intent, never a claimable record of a backing volume that is gone.
	// It is cleared when the plugin says it did not delete the volume.
	Deleting bool `json:",omitempty"`
	// Provider is the plugin's provider name (GetPluginInfo), filled by
	// the store from the plugin.
	Provider string `json:",omitempty"`

	// Capabilities are the (access, attachment) pairs claims may use.
	Capabilities []Capability
	MountOptions *MountOptions `json:",omitempty"`
	Secrets      Secrets       `json:",omitempty"`
	// Parameters were given to CreateVolume.
	Parameters map[string]string `json:",omitempty"`
	// Context is the volume context the plugin returned from
	// CreateVolume (or the host registered); it is passed to every node
	// call.
	Context map[string]string `json:",omitempty"`

	RequestedTopologies *TopologyRequest `json:",omitempty"`
	// Source is what CreateVolume filled the volume from, by the plugin's
	// IDs (nil: empty). It is written with the creation intent, so a
	// create resumed by another server fills the volume the same way.
	Source *ContentSource `json:",omitempty"`
	// Topologies are where the volume is accessible from.
	Topologies []*Topology `json:",omitempty"`

	// Capacity in bytes as reported by the plugin; RequestedCapacityMin
	// and RequestedCapacityMax bound creation and expansion (0: none).
	Capacity             int64 `json:",omitempty"`
	RequestedCapacityMin int64 `json:",omitempty"`
	RequestedCapacityMax int64 `json:",omitempty"`
	// Expansion is the volume's latest expansion, nil if it never had
	// one (see csi.Expansion).
	Expansion *Expansion `json:",omitempty"`
	// MutableParameters are the CSI mutable parameters the volume was
	// created or last modified with; ModifyingParameters, while set, are
	// those a ControllerModifyVolume in progress asks for.
	MutableParameters   map[string]string `json:",omitempty"`
	ModifyingParameters map[string]string `json:",omitempty"`

	// The claims, by allocation ID. The maps and the claims they point
	// to may be shared with other versions of the volume: replace an
	// entry, never modify it (see Volume).
	ReadClaims  map[string]*Claim `json:",omitempty"`
	WriteClaims map[string]*Claim `json:",omitempty"`
	PastClaims  map[string]*Claim `json:",omitempty"`
	// Attachments are the volume's attachments to nodes, keyed by node
	// ID: one per node with a claim there (live, or past and not yet
	// detached), written with the first claim on the node and removed
	// once the volume is detached from it. See Attachment. Like the
	// claim maps, replace an entry, never modify it.
	Attachments map[string]*Attachment `json:",omitempty"`

	// Denormalized from the plugin at read time; the store fills them.
	ControllerRequired  bool `json:",omitempty"`
	Schedulable         bool `json:",omitempty"`
	ControllersHealthy  int  `json:",omitempty"`
	ControllersExpected int  `json:",omitempty"`
	NodesHealthy        int  `json:",omitempty"`
	NodesExpected       int  `json:",omitempty"`

	CreateIndex uint64
	ModifyIndex uint64
}

// Copy returns a deep copy of v; nil stays nil.
func (v *Volume) Copy() *Volume {
	if v == nil {
		return nil
	}
	c := *v
	c.Capabilities = slices.Clone(v.Capabilities)
	c.MountOptions = v.MountOptions.Copy()
	c.Secrets = v.Secrets.Copy()
	c.Parameters = maps.Clone(v.Parameters)
	c.Context = maps.Clone(v.Context)
	c.Expansion = v.Expansion.Copy()
	c.MutableParameters = maps.Clone(v.MutableParameters)
	c.ModifyingParameters = maps.Clone(v.ModifyingParameters)
	c.RequestedTopologies = v.RequestedTopologies.Copy()
	if v.Source != nil {
		src := *v.Source
		c.Source = &src
	}
	c.Topologies = copyTopologies(v.Topologies)
	c.ReadClaims = copyClaims(v.ReadClaims)
	c.WriteClaims = copyClaims(v.WriteClaims)
	c.PastClaims = copyClaims(v.PastClaims)
	c.Attachments = copyAttachments(v.Attachments)
	return &c
}

func copyClaims(m map[string]*Claim) map[string]*Claim {
	if m == nil {
		return nil
	}
	c := make(map[string]*Claim, len(m))
	for k, v := range m {
		c[k] = v.Copy()
	}
	return c
}

// Allows reports whether c is one of the volume's capabilities.
func (v *Volume) Allows(c Capability) bool { return slices.Contains(v.Capabilities, c) }

// Claim returns the allocation's claim on v, live or past, or nil.
func (v *Volume) Claim(allocID string) *Claim {
	if c := v.WriteClaims[allocID]; c != nil {
		return c
	}
	if c := v.ReadClaims[allocID]; c != nil {
		return c
	}
	return v.PastClaims[allocID]
}

// InUse reports whether the volume has any claim, live or past, or is
// attached to any node.
func (v *Volume) InUse() bool {
	return len(v.ReadClaims)+len(v.WriteClaims)+len(v.PastClaims)+len(v.Attachments) > 0
}

// LiveClaimOnNode reports whether a running allocation other than
// exceptAlloc claims v on node. The release worker defers
// ControllerUnpublish while this holds.
func (v *Volume) LiveClaimOnNode(node, exceptAlloc string) bool {
	for _, m := range []map[string]*Claim{v.ReadClaims, v.WriteClaims} {
		for id, c := range m {
			if id != exceptAlloc && c.NodeID == node {
				return true
			}
		}
	}
	return false
}

// Claim is an allocation's hold on a volume.
//
// A Claim in a Volume's claim maps may be shared by several versions of
// the volume (see Volume): to change it, change a Copy and store the
// copy in its place. Only a Claim the caller made or copied is its own
// to modify.
type Claim struct {
	AllocationID string
	NodeID       string
	// ExternalNodeID is the CSI node ID the node plugin reported
	// (NodeGetInfo); ControllerPublish and ControllerUnpublish use it.
	ExternalNodeID string `json:",omitempty"`
	Mode           ClaimMode
	AccessMode     AccessMode
	AttachmentMode AttachmentMode
	// MountOptions, if set, override the volume's for this claim.
	MountOptions *MountOptions `json:",omitempty"`
	State        ClaimState

	// ReleasedAt is when the allocation became terminal (set by the
	// release command; zero while Taken).
	ReleasedAt time.Time `json:",omitempty"`
	// LastError is the last error a release step met, for operators; it
	// never holds a secret.
	LastError string `json:",omitempty"`
}

// Copy returns a deep copy; nil stays nil.
func (c *Claim) Copy() *Claim {
	if c == nil {
		return nil
	}
	d := *c
	d.MountOptions = c.MountOptions.Copy()
	return &d
}

// Capability returns the claim's (access, attachment) pair.
func (c *Claim) Capability() Capability {
	return Capability{AccessMode: c.AccessMode, AttachmentMode: c.AttachmentMode}
}

// Allocation is the small projection of a host allocation (a workload
// instance) that csikit needs.
type Allocation struct {
	ID        string
	Namespace string
	NodeID    string
	JobID     string `json:",omitempty"`
	TaskGroup string `json:",omitempty"`
	// Terminal is true once the allocation has stopped for good.
	Terminal bool
	// Plugins lists the plugin instances this allocation runs, if any.
	Plugins []AllocPlugin `json:",omitempty"`

	CreateIndex uint64
	ModifyIndex uint64
}

// Copy returns a deep copy; nil stays nil.
func (a *Allocation) Copy() *Allocation {
	if a == nil {
		return nil
	}
	c := *a
	c.Plugins = slices.Clone(a.Plugins)
	return &c
}

// AllocPlugin is one plugin instance an allocation runs.
type AllocPlugin struct {
	PluginID string
	Type     PluginType
}

// ContentSource names what a new volume is filled from (CSI
// VolumeContentSource): exactly one of a snapshot and a volume, by the
// plugin's IDs.
type ContentSource struct {
	SnapshotID string `json:",omitempty"`
	VolumeID   string `json:",omitempty"`
}

// Validate checks that exactly one ID is set and that it is a valid
// plugin ID (ValidateExternalID).
func (s *ContentSource) Validate() error {
	switch {
	case (s.SnapshotID == "") == (s.VolumeID == ""):
		return fmt.Errorf("%w: a content source names exactly one of a snapshot and a volume", ErrInvalidRequest)
	case s.SnapshotID != "":
		return ValidateExternalID("source snapshot ID", s.SnapshotID)
	}
	return ValidateExternalID("source volume ID", s.VolumeID)
}
