package csi

import (
	"maps"
	"slices"
	"time"
)

// ControllerCapabilities are the controller RPCs a plugin advertises
// (ControllerGetCapabilities). The struct is comparable with ==.
type ControllerCapabilities struct {
	CreateDeleteVolume        bool `json:",omitempty"`
	PublishUnpublishVolume    bool `json:",omitempty"`
	ListVolumes               bool `json:",omitempty"`
	GetCapacity               bool `json:",omitempty"`
	CreateDeleteSnapshot      bool `json:",omitempty"`
	ListSnapshots             bool `json:",omitempty"`
	CloneVolume               bool `json:",omitempty"`
	PublishReadonly           bool `json:",omitempty"`
	ExpandVolume              bool `json:",omitempty"`
	ListVolumesPublishedNodes bool `json:",omitempty"`
	// GetVolumeHealth and ListVolumeHealth are CSI 1.13's
	// GET_VOLUME_HEALTH and LIST_VOLUME_HEALTH (which replaced
	// VOLUME_CONDITION).
	GetVolumeHealth       bool `json:",omitempty"`
	ListVolumeHealth      bool `json:",omitempty"`
	GetVolume             bool `json:",omitempty"`
	SingleNodeMultiWriter bool `json:",omitempty"`
	ModifyVolume          bool `json:",omitempty"`
	GetSnapshot           bool `json:",omitempty"`
}

// NodeCapabilities are the node RPCs a plugin advertises
// (NodeGetCapabilities). The struct is comparable with ==.
type NodeCapabilities struct {
	StageUnstageVolume bool `json:",omitempty"`
	GetVolumeStats     bool `json:",omitempty"`
	ExpandVolume       bool `json:",omitempty"`
	// GetVolumeHealth and GetStorageHealth are CSI 1.13's
	// GET_VOLUME_HEALTH and GET_STORAGE_HEALTH (which replaced
	// VOLUME_CONDITION).
	GetVolumeHealth       bool `json:",omitempty"`
	GetStorageHealth      bool `json:",omitempty"`
	SingleNodeMultiWriter bool `json:",omitempty"`
	VolumeMountGroup      bool `json:",omitempty"`
}

// ControllerInfo is what a controller instance reports.
type ControllerInfo struct {
	Capabilities ControllerCapabilities
}

// NodeInfo is what a node instance reports (NodeGetInfo and
// NodeGetCapabilities).
type NodeInfo struct {
	// ID is the CSI node ID the plugin uses for this node.
	ID string
	// MaxVolumes is how many volumes the plugin can attach here; 0 means
	// no limit.
	MaxVolumes         int64
	AccessibleTopology *Topology `json:",omitempty"`
	Capabilities       NodeCapabilities
}

// Topology returns the node's accessible topology; nil for a nil
// NodeInfo or one that reported none.
func (n *NodeInfo) Topology() *Topology {
	if n == nil {
		return nil
	}
	return n.AccessibleTopology
}

// RequiresStage reports whether the node plugin wants NodeStageVolume
// before NodePublishVolume.
func (n *NodeInfo) RequiresStage() bool { return n != nil && n.Capabilities.StageUnstageVolume }

// PluginInfo is what one node reports about one plugin instance: the
// result of a fingerprint.
type PluginInfo struct {
	PluginID     string
	AllocationID string
	Type         PluginType

	Healthy           bool
	HealthDescription string `json:",omitempty"`
	UpdateTime        time.Time

	Provider        string `json:",omitempty"`
	ProviderVersion string `json:",omitempty"`
	// RequiresController: the plugin advertises CONTROLLER_SERVICE.
	RequiresController bool `json:",omitempty"`
	// RequiresTopologies: the plugin advertises
	// VOLUME_ACCESSIBILITY_CONSTRAINTS.
	RequiresTopologies bool `json:",omitempty"`
	// OnlineExpansion and OfflineExpansion are the plugin's
	// VolumeExpansion capabilities (ONLINE, OFFLINE).
	OnlineExpansion  bool `json:",omitempty"`
	OfflineExpansion bool `json:",omitempty"`

	// ControllerInfo is set for controller and monolith instances.
	ControllerInfo *ControllerInfo `json:",omitempty"`
	// NodeInfo is set for node and monolith instances.
	NodeInfo *NodeInfo `json:",omitempty"`
}

// Copy returns a deep copy; nil stays nil.
func (p *PluginInfo) Copy() *PluginInfo {
	if p == nil {
		return nil
	}
	c := *p
	if p.ControllerInfo != nil {
		ci := *p.ControllerInfo
		c.ControllerInfo = &ci
	}
	if p.NodeInfo != nil {
		ni := *p.NodeInfo
		ni.AccessibleTopology = p.NodeInfo.AccessibleTopology.Copy()
		c.NodeInfo = &ni
	}
	return &c
}

// SameAs reports whether p and o describe the same state, ignoring
// UpdateTime. A fingerprinter reports only when this is false.
func (p *PluginInfo) SameAs(o *PluginInfo) bool {
	if p == nil || o == nil {
		return p == o
	}
	a, b := *p, *o
	a.UpdateTime, b.UpdateTime = time.Time{}, time.Time{}
	a.ControllerInfo, b.ControllerInfo = nil, nil
	a.NodeInfo, b.NodeInfo = nil, nil
	if a != b {
		return false
	}
	if (p.ControllerInfo == nil) != (o.ControllerInfo == nil) ||
		p.ControllerInfo != nil && *p.ControllerInfo != *o.ControllerInfo {
		return false
	}
	if (p.NodeInfo == nil) != (o.NodeInfo == nil) {
		return false
	}
	if p.NodeInfo != nil {
		x, y := *p.NodeInfo, *o.NodeInfo
		x.AccessibleTopology, y.AccessibleTopology = nil, nil
		if x != y || !p.NodeInfo.AccessibleTopology.Equal(o.NodeInfo.AccessibleTopology) {
			return false
		}
	}
	return true
}

// Plugin is the cluster-wide view of one plugin ID: its instances on every
// node and the allocations that run them.
//
// Like a Volume's claims, the instances in Controllers and Nodes are held
// by pointer and may be shared with other copies of the plugin (a cached
// view, an older version in a store): replace an entry with a changed
// PluginInfo copy, never modify it. What a state.Reader returns is the
// caller's own.
type Plugin struct {
	ID                 string
	Provider           string `json:",omitempty"`
	Version            string `json:",omitempty"`
	ControllerRequired bool

	// Controllers and Nodes are the instances by host node ID.
	Controllers map[string]*PluginInfo `json:",omitempty"`
	Nodes       map[string]*PluginInfo `json:",omitempty"`
	// Allocations run instances of this plugin.
	Allocations []PluginAllocation `json:",omitempty"`

	ControllersHealthy  int
	ControllersExpected int
	NodesHealthy        int
	NodesExpected       int

	CreateIndex uint64
	ModifyIndex uint64
}

// PluginAllocation is one allocation running an instance of a plugin.
type PluginAllocation struct {
	AllocationID string
	NodeID       string
	JobID        string `json:",omitempty"`
	TaskGroup    string `json:",omitempty"`
	Type         PluginType
}

// Copy returns a deep copy; nil stays nil.
func (p *Plugin) Copy() *Plugin {
	if p == nil {
		return nil
	}
	c := *p
	c.Controllers = copyInfos(p.Controllers)
	c.Nodes = copyInfos(p.Nodes)
	c.Allocations = slices.Clone(p.Allocations)
	return &c
}

func copyInfos(m map[string]*PluginInfo) map[string]*PluginInfo {
	if m == nil {
		return nil
	}
	c := maps.Clone(m)
	for k, v := range c {
		c[k] = v.Copy()
	}
	return c
}

// Schedulable reports whether claims may be placed on the plugin: at least
// one healthy node instance, and a healthy controller when one is
// required.
func (p *Plugin) Schedulable() bool {
	if p == nil || p.NodesHealthy == 0 {
		return false
	}
	return !p.ControllerRequired || p.ControllersHealthy > 0
}

// NeedsControllerPublish reports whether claims of this plugin's volumes
// go through ControllerPublishVolume / ControllerUnpublishVolume: the
// plugin requires a controller and a controller advertises
// PUBLISH_UNPUBLISH_VOLUME.
func (p *Plugin) NeedsControllerPublish() bool {
	if p == nil || !p.ControllerRequired {
		return false
	}
	for _, c := range p.Controllers {
		if c.ControllerInfo != nil && c.ControllerInfo.Capabilities.PublishUnpublishVolume {
			return true
		}
	}
	return false
}
