package rpcshim

import (
	"unicode/utf8"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/mounter"
)

// Wire copies: what the in-memory transport hands a NodeEndpoint method
// instead of a JSON round trip, for the calls a volume's lifecycle makes
// (attach, detach, create, delete, validate, node detach).
//
// A wire copy of a request or reply is exactly what the other side would
// decode from its JSON, made without encoding anything: every map, slice
// and pointer is new (caller and handler share no memory, as over a
// network), nil stays nil, and an empty map or slice in an omitempty
// field becomes nil, as encoding/json leaves it. A value JSON would not
// carry unchanged makes the copy refuse (ok false) and the call go
// through JSON as any other: a string that is not valid UTF-8 (encoding/
// json replaces the bad bytes), an access, attachment or claim mode
// outside its defined values (they encode as text that does not decode,
// or decodes to another mode), a usage that does not validate. Copying
// costs a few allocations; the JSON round trip it replaces costs
// reflection over every field, twice per direction, which was most of
// an in-memory call.
//
// Each function names the fields it copies; the package's tests fill
// every field of every message with random values and check that the
// copy equals the JSON round trip and shares nothing with the original,
// so a field added to a message (or to a csi or plugin type it holds)
// that a copy misses fails them.

// wireString reports whether s crosses JSON unchanged.
func wireString(s string) bool { return utf8.ValidString(s) }

// wireStrings reports whether every string crosses JSON unchanged.
func wireStrings(ss ...string) bool {
	for _, s := range ss {
		if !utf8.ValidString(s) {
			return false
		}
	}
	return true
}

// copyStringMap copies m; omitEmpty is the field's json tag.
func copyStringMap(m map[string]string, omitEmpty bool) (map[string]string, bool) {
	if m == nil || (omitEmpty && len(m) == 0) {
		return nil, true
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		if !wireString(k) || !wireString(v) {
			return nil, false
		}
		out[k] = v
	}
	return out, true
}

// copyStrings copies s; omitEmpty is the field's json tag.
func copyStrings(s []string, omitEmpty bool) ([]string, bool) {
	if s == nil || (omitEmpty && len(s) == 0) {
		return nil, true
	}
	if !wireStrings(s...) {
		return nil, false
	}
	return append(make([]string, 0, len(s)), s...), true
}

// wireAccessMode and its kin report whether a mode crosses JSON
// unchanged: the unknown (zero) mode and the defined ones do.
func wireAccessMode(m csi.AccessMode) bool { return m == csi.AccessModeUnknown || m.Valid() }

func wireAttachmentMode(m csi.AttachmentMode) bool {
	return m == csi.AttachmentModeUnknown || m.Valid()
}

func wireCapability(c csi.Capability) bool {
	return wireAccessMode(c.AccessMode) && wireAttachmentMode(c.AttachmentMode)
}

func copyCapabilities(cs []csi.Capability) ([]csi.Capability, bool) {
	if cs == nil {
		return nil, true
	}
	for _, c := range cs {
		if !wireCapability(c) {
			return nil, false
		}
	}
	return append(make([]csi.Capability, 0, len(cs)), cs...), true
}

func copyMountOptions(o *csi.MountOptions) (*csi.MountOptions, bool) {
	if o == nil {
		return nil, true
	}
	flags, ok := copyStrings(o.MountFlags, true)
	if !ok || !wireStrings(o.FSType, o.VolumeMountGroup) {
		return nil, false
	}
	return &csi.MountOptions{FSType: o.FSType, MountFlags: flags, VolumeMountGroup: o.VolumeMountGroup}, true
}

func copyTopology(t *csi.Topology) (*csi.Topology, bool) {
	if t == nil {
		return nil, true
	}
	seg, ok := copyStringMap(t.Segments, false)
	if !ok {
		return nil, false
	}
	return &csi.Topology{Segments: seg}, true
}

func copyTopologies(ts []*csi.Topology, omitEmpty bool) ([]*csi.Topology, bool) {
	if ts == nil || (omitEmpty && len(ts) == 0) {
		return nil, true
	}
	out := make([]*csi.Topology, len(ts))
	for i, t := range ts {
		c, ok := copyTopology(t)
		if !ok {
			return nil, false
		}
		out[i] = c
	}
	return out, true
}

func copyTopologyRequest(r *csi.TopologyRequest) (*csi.TopologyRequest, bool) {
	if r == nil {
		return nil, true
	}
	req, ok1 := copyTopologies(r.Required, true)
	pref, ok2 := copyTopologies(r.Preferred, true)
	if !ok1 || !ok2 {
		return nil, false
	}
	return &csi.TopologyRequest{Required: req, Preferred: pref}, true
}

func copyContentSource(s *plugin.ContentSource) (*plugin.ContentSource, bool) {
	if s == nil {
		return nil, true
	}
	if !wireStrings(s.SnapshotID, s.VolumeID) {
		return nil, false
	}
	return &plugin.ContentSource{SnapshotID: s.SnapshotID, VolumeID: s.VolumeID}, true
}

func wireQuery(q CSIControllerQuery) bool { return wireStrings(q.PluginID, q.ControllerNodeID) }

func wireReply(r CSIControllerReply) bool { return wireString(r.ControllerNodeID) }

// allOK reports whether every copy above succeeded.
func allOK(oks ...bool) bool {
	for _, ok := range oks {
		if !ok {
			return false
		}
	}
	return true
}

// The messages. Each copy builds its result field by field, so that a
// field it does not name stays zero and the tests notice.

func (r *ControllerPublishRequest) wireCopy() (*ControllerPublishRequest, bool) {
	mo, ok1 := copyMountOptions(r.MountOptions)
	sec, ok2 := copyStringMap(r.Secrets, false)
	vc, ok3 := copyStringMap(r.VolumeContext, false)
	if !allOK(ok1, ok2, ok3, wireQuery(r.CSIControllerQuery), wireCapability(r.Capability),
		wireStrings(r.ExternalID, r.ExternalNodeID)) {
		return nil, false
	}
	return &ControllerPublishRequest{
		CSIControllerQuery: r.CSIControllerQuery,
		ControllerPublishRequest: plugin.ControllerPublishRequest{
			ExternalID: r.ExternalID, ExternalNodeID: r.ExternalNodeID, Capability: r.Capability,
			MountOptions: mo, ReadOnly: r.ReadOnly, Secrets: sec, VolumeContext: vc,
		},
	}, true
}

func (r *ControllerPublishResponse) wireCopy() (*ControllerPublishResponse, bool) {
	pc, ok := copyStringMap(r.PublishContext, true)
	if !ok || !wireReply(r.CSIControllerReply) {
		return nil, false
	}
	return &ControllerPublishResponse{
		CSIControllerReply: r.CSIControllerReply,
		PublishContext:     pc,
	}, true
}

func (r *ControllerPublishResponse) wireZero() bool {
	return r.ControllerNodeID == "" && r.PublishContext == nil
}

func (r *ControllerUnpublishRequest) wireCopy() (*ControllerUnpublishRequest, bool) {
	sec, ok := copyStringMap(r.Secrets, false)
	if !allOK(ok, wireQuery(r.CSIControllerQuery), wireStrings(r.ExternalID, r.ExternalNodeID)) {
		return nil, false
	}
	return &ControllerUnpublishRequest{
		CSIControllerQuery: r.CSIControllerQuery,
		ControllerUnpublishRequest: plugin.ControllerUnpublishRequest{
			ExternalID: r.ExternalID, ExternalNodeID: r.ExternalNodeID, Secrets: sec,
		},
	}, true
}

func (r *ControllerUnpublishResponse) wireCopy() (*ControllerUnpublishResponse, bool) {
	if !wireReply(r.CSIControllerReply) {
		return nil, false
	}
	return &ControllerUnpublishResponse{CSIControllerReply: r.CSIControllerReply}, true
}

func (r *ControllerUnpublishResponse) wireZero() bool { return r.ControllerNodeID == "" }

func (r *ValidateCapabilitiesRequest) wireCopy() (*ValidateCapabilitiesRequest, bool) {
	caps, ok1 := copyCapabilities(r.Capabilities)
	mo, ok2 := copyMountOptions(r.MountOptions)
	vc, ok3 := copyStringMap(r.VolumeContext, false)
	params, ok4 := copyStringMap(r.Parameters, false)
	mparams, ok5 := copyStringMap(r.MutableParameters, false)
	sec, ok6 := copyStringMap(r.Secrets, false)
	if !allOK(ok1, ok2, ok3, ok4, ok5, ok6, wireQuery(r.CSIControllerQuery), wireString(r.ExternalID)) {
		return nil, false
	}
	return &ValidateCapabilitiesRequest{
		CSIControllerQuery: r.CSIControllerQuery,
		ValidateCapabilitiesRequest: plugin.ValidateCapabilitiesRequest{
			ExternalID: r.ExternalID, Capabilities: caps, MountOptions: mo, VolumeContext: vc,
			Parameters: params, MutableParameters: mparams, Secrets: sec,
		},
	}, true
}

func (r *ValidateCapabilitiesResponse) wireCopy() (*ValidateCapabilitiesResponse, bool) {
	caps, ok := copyCapabilities(r.Capabilities)
	if !allOK(ok, wireReply(r.CSIControllerReply), wireString(r.Message)) {
		return nil, false
	}
	return &ValidateCapabilitiesResponse{
		CSIControllerReply: r.CSIControllerReply,
		ValidateCapabilitiesResponse: plugin.ValidateCapabilitiesResponse{
			Confirmed: r.Confirmed, Capabilities: caps, Message: r.Message,
		},
	}, true
}

func (r *ValidateCapabilitiesResponse) wireZero() bool {
	return r.ControllerNodeID == "" && !r.Confirmed && r.Capabilities == nil && r.Message == ""
}

func (r *CreateVolumeRequest) wireCopy() (*CreateVolumeRequest, bool) {
	caps, ok1 := copyCapabilities(r.Capabilities)
	mo, ok2 := copyMountOptions(r.MountOptions)
	params, ok3 := copyStringMap(r.Parameters, false)
	mparams, ok4 := copyStringMap(r.MutableParameters, false)
	sec, ok5 := copyStringMap(r.Secrets, false)
	src, ok6 := copyContentSource(r.Source)
	topo, ok7 := copyTopologyRequest(r.Topology)
	if !allOK(ok1, ok2, ok3, ok4, ok5, ok6, ok7, wireQuery(r.CSIControllerQuery), wireString(r.Name)) {
		return nil, false
	}
	return &CreateVolumeRequest{
		CSIControllerQuery: r.CSIControllerQuery,
		CreateVolumeRequest: plugin.CreateVolumeRequest{
			Name: r.Name, CapacityMin: r.CapacityMin, CapacityMax: r.CapacityMax, Capabilities: caps,
			MountOptions: mo, Parameters: params, MutableParameters: mparams, Secrets: sec,
			Source: src, Topology: topo,
		},
	}, true
}

func (r *CreateVolumeResponse) wireCopy() (*CreateVolumeResponse, bool) {
	v := &r.Volume
	vctx, ok1 := copyStringMap(v.Context, false)
	src, ok2 := copyContentSource(v.Source)
	topo, ok3 := copyTopologies(v.Topologies, false)
	if !allOK(ok1, ok2, ok3, wireReply(r.CSIControllerReply), wireString(v.ExternalID)) {
		return nil, false
	}
	return &CreateVolumeResponse{
		CSIControllerReply: r.CSIControllerReply,
		Volume: plugin.Volume{
			ExternalID: v.ExternalID, Capacity: v.Capacity, Context: vctx, Source: src, Topologies: topo,
		},
	}, true
}

func (r *CreateVolumeResponse) wireZero() bool {
	v := &r.Volume
	return r.ControllerNodeID == "" && v.ExternalID == "" && v.Capacity == 0 && v.Context == nil &&
		v.Source == nil && v.Topologies == nil
}

func (r *DeleteVolumeRequest) wireCopy() (*DeleteVolumeRequest, bool) {
	sec, ok := copyStringMap(r.Secrets, false)
	if !allOK(ok, wireQuery(r.CSIControllerQuery), wireString(r.ExternalID)) {
		return nil, false
	}
	return &DeleteVolumeRequest{
		CSIControllerQuery:  r.CSIControllerQuery,
		DeleteVolumeRequest: plugin.DeleteVolumeRequest{ExternalID: r.ExternalID, Secrets: sec},
	}, true
}

func (r *DeleteVolumeResponse) wireCopy() (*DeleteVolumeResponse, bool) {
	if !wireReply(r.CSIControllerReply) {
		return nil, false
	}
	return &DeleteVolumeResponse{CSIControllerReply: r.CSIControllerReply}, true
}

func (r *DeleteVolumeResponse) wireZero() bool { return r.ControllerNodeID == "" }

func (r *NodeDetachRequest) wireCopy() (*NodeDetachRequest, bool) {
	if !wireStrings(r.NodeID, r.Namespace, r.VolumeID, r.AllocationID, r.PluginID) {
		return nil, false
	}
	var u *mounter.Usage
	if r.Usage != nil {
		if !r.Usage.IsZero() && r.Usage.Validate() != nil {
			return nil, false
		}
		c := *r.Usage
		u = &c
	}
	return &NodeDetachRequest{
		NodeID: r.NodeID, Namespace: r.Namespace, VolumeID: r.VolumeID, AllocationID: r.AllocationID,
		PluginID: r.PluginID, Usage: u,
	}, true
}

func (r *NodeDetachResponse) wireCopy() (*NodeDetachResponse, bool) {
	return &NodeDetachResponse{}, true
}

func (r *NodeDetachResponse) wireZero() bool { return true }
