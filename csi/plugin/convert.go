package plugin

// This file and the other convert*.go files are the one place where
// csikit types become CSI spec (csipb) messages and back. Requests are
// validated before they get here, so the ...ToPB functions do not fail;
// responses come from a plugin and are checked where a wrong value would
// mislead the caller.

import (
	"fmt"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/csikit/csikit/csi"
)

// ResponseError is a plugin answer the Client could not use (a required
// field missing, an undefined enum value). The call happened; its class
// is Final.
type ResponseError struct {
	Method string
	Reason string
}

func (e *ResponseError) Error() string {
	return fmt.Sprintf("%s: the plugin sent an invalid response: %s", e.Method, e.Reason)
}

// CapabilityToPB builds the CSI spec's VolumeCapability for c. Mount
// options go into the mount access type; a block capability ignores them.
// It is exported for code that speaks the spec directly (conformance
// harnesses, fake plugins) so that csikit converts capabilities in one
// place.
func CapabilityToPB(c csi.Capability, mo *csi.MountOptions) *csipb.VolumeCapability {
	vc := &csipb.VolumeCapability{
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_Mode(c.AccessMode)},
	}
	if c.AttachmentMode == csi.AttachmentModeBlockDevice {
		vc.AccessType = &csipb.VolumeCapability_Block{Block: &csipb.VolumeCapability_BlockVolume{}}
		return vc
	}
	m := &csipb.VolumeCapability_MountVolume{}
	if mo != nil {
		m.FsType = mo.FSType
		m.MountFlags = mo.MountFlags
		m.VolumeMountGroup = mo.VolumeMountGroup
	}
	vc.AccessType = &csipb.VolumeCapability_Mount{Mount: m}
	return vc
}

// capabilityFromPB reads a VolumeCapability. The mount options are nil
// for a block capability and for a mount capability without any.
func capabilityFromPB(vc *csipb.VolumeCapability) (csi.Capability, *csi.MountOptions, error) {
	if vc == nil {
		return csi.Capability{}, nil, fmt.Errorf("volume capability is missing")
	}
	c := csi.Capability{AccessMode: csi.AccessMode(vc.GetAccessMode().GetMode())}
	if !c.AccessMode.Valid() {
		return csi.Capability{}, nil, fmt.Errorf("access mode %d is not a CSI access mode", int32(c.AccessMode))
	}
	var mo *csi.MountOptions
	switch t := vc.GetAccessType().(type) {
	case *csipb.VolumeCapability_Block:
		c.AttachmentMode = csi.AttachmentModeBlockDevice
	case *csipb.VolumeCapability_Mount:
		c.AttachmentMode = csi.AttachmentModeFileSystem
		m := t.Mount
		if m.GetFsType() != "" || len(m.GetMountFlags()) > 0 || m.GetVolumeMountGroup() != "" {
			mo = &csi.MountOptions{
				FSType:           m.GetFsType(),
				MountFlags:       append([]string(nil), m.GetMountFlags()...),
				VolumeMountGroup: m.GetVolumeMountGroup(),
			}
		}
	default:
		return csi.Capability{}, nil, fmt.Errorf("volume capability has neither block nor mount access type")
	}
	return c, mo, nil
}

func capabilitiesToPB(cs []csi.Capability, mo *csi.MountOptions) []*csipb.VolumeCapability {
	out := make([]*csipb.VolumeCapability, len(cs))
	for i, c := range cs {
		out[i] = CapabilityToPB(c, mo)
	}
	return out
}

// optionalCapabilityToPB converts a capability that a request may leave
// out.
func optionalCapabilityToPB(c *csi.Capability, mo *csi.MountOptions) *csipb.VolumeCapability {
	if c == nil {
		return nil
	}
	return CapabilityToPB(*c, mo)
}

func topologyToPB(t *csi.Topology) *csipb.Topology {
	if t == nil {
		return nil
	}
	return &csipb.Topology{Segments: t.Segments}
}

func topologyFromPB(t *csipb.Topology) *csi.Topology {
	if t == nil {
		return nil
	}
	return &csi.Topology{Segments: t.GetSegments()}
}

func topologiesToPB(ts []*csi.Topology) []*csipb.Topology {
	if len(ts) == 0 {
		return nil
	}
	out := make([]*csipb.Topology, len(ts))
	for i, t := range ts {
		out[i] = topologyToPB(t)
	}
	return out
}

func topologiesFromPB(ts []*csipb.Topology) []*csi.Topology {
	if len(ts) == 0 {
		return nil
	}
	out := make([]*csi.Topology, 0, len(ts))
	for _, t := range ts {
		if t != nil {
			out = append(out, topologyFromPB(t))
		}
	}
	return out
}

func topologyRequestToPB(r *csi.TopologyRequest) *csipb.TopologyRequirement {
	if r == nil || len(r.Required)+len(r.Preferred) == 0 {
		return nil
	}
	return &csipb.TopologyRequirement{Requisite: topologiesToPB(r.Required), Preferred: topologiesToPB(r.Preferred)}
}

func topologyRequestFromPB(r *csipb.TopologyRequirement) *csi.TopologyRequest {
	if r == nil {
		return nil
	}
	return &csi.TopologyRequest{Required: topologiesFromPB(r.GetRequisite()), Preferred: topologiesFromPB(r.GetPreferred())}
}

func capacityToPB(min, max int64) *csipb.CapacityRange {
	if min == 0 && max == 0 {
		return nil
	}
	return &csipb.CapacityRange{RequiredBytes: min, LimitBytes: max}
}

func contentSourceToPB(s *ContentSource) *csipb.VolumeContentSource {
	switch {
	case s == nil:
		return nil
	case s.SnapshotID != "":
		return &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Snapshot{
			Snapshot: &csipb.VolumeContentSource_SnapshotSource{SnapshotId: s.SnapshotID}}}
	default:
		return &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Volume{
			Volume: &csipb.VolumeContentSource_VolumeSource{VolumeId: s.VolumeID}}}
	}
}

func contentSourceFromPB(s *csipb.VolumeContentSource) *ContentSource {
	switch t := s.GetType().(type) {
	case *csipb.VolumeContentSource_Snapshot:
		return &ContentSource{SnapshotID: t.Snapshot.GetSnapshotId()}
	case *csipb.VolumeContentSource_Volume:
		return &ContentSource{VolumeID: t.Volume.GetVolumeId()}
	}
	return nil
}

func infoFromPB(r *csipb.GetPluginInfoResponse) *Info {
	return &Info{Name: r.GetName(), VendorVersion: r.GetVendorVersion(), Manifest: r.GetManifest()}
}

// readyFromPB reads Probe's optional ready field: absent means ready.
func readyFromPB(r *csipb.ProbeResponse) bool {
	if r.GetReady() == nil {
		return true
	}
	return r.GetReady().GetValue()
}

func nodeInfoFromPB(r *csipb.NodeGetInfoResponse) *csi.NodeInfo {
	return &csi.NodeInfo{
		ID:                 r.GetNodeId(),
		MaxVolumes:         r.GetMaxVolumesPerNode(),
		AccessibleTopology: topologyFromPB(r.GetAccessibleTopology()),
	}
}

func volumeFromPB(v *csipb.Volume) Volume {
	return Volume{
		ExternalID: v.GetVolumeId(),
		Capacity:   v.GetCapacityBytes(),
		Context:    v.GetVolumeContext(),
		Source:     contentSourceFromPB(v.GetContentSource()),
		Topologies: topologiesFromPB(v.GetAccessibleTopology()),
	}
}

func createVolumeResponseFromPB(r *csipb.CreateVolumeResponse) (*Volume, error) {
	if r.GetVolume().GetVolumeId() == "" {
		return nil, &ResponseError{Method: "CreateVolume", Reason: "no volume ID"}
	}
	v := volumeFromPB(r.GetVolume())
	return &v, nil
}

func listVolumesResponseFromPB(r *csipb.ListVolumesResponse) (*ListVolumesResponse, error) {
	out := &ListVolumesResponse{NextToken: r.GetNextToken()}
	if n := len(r.GetEntries()); n > 0 {
		out.Entries = make([]VolumeEntry, 0, n)
	}
	for i, e := range r.GetEntries() {
		if e.GetVolume().GetVolumeId() == "" {
			return nil, &ResponseError{Method: "ListVolumes", Reason: fmt.Sprintf("entry %d has no volume ID", i)}
		}
		entry := VolumeEntry{
			Volume:           volumeFromPB(e.GetVolume()),
			PublishedNodeIDs: e.GetStatus().GetPublishedNodeIds(),
		}
		if st := e.GetStatus(); st != nil {
			cond, err := legacyConditionFromPB(st)
			if err != nil {
				return nil, &ResponseError{Method: "ListVolumes", Reason: fmt.Sprintf("entry %d (volume %q): %v", i, entry.Volume.ExternalID, err)}
			}
			entry.Condition = cond
		}
		out.Entries = append(out.Entries, entry)
	}
	return out, nil
}

func capacityResponseFromPB(r *csipb.GetCapacityResponse) (*GetCapacityResponse, error) {
	bad := func(format string, args ...any) error {
		return &ResponseError{Method: "GetCapacity", Reason: fmt.Sprintf(format, args...)}
	}
	out := &GetCapacityResponse{Available: r.GetAvailableCapacity()}
	if out.Available < 0 {
		return nil, bad("available_capacity is %d bytes", out.Available)
	}
	if w := r.GetMaximumVolumeSize(); w != nil {
		out.MaximumVolumeSize = new(w.GetValue())
		if *out.MaximumVolumeSize < 0 {
			return nil, bad("maximum_volume_size is %d bytes", *out.MaximumVolumeSize)
		}
	}
	if w := r.GetMinimumVolumeSize(); w != nil {
		out.MinimumVolumeSize = new(w.GetValue())
		if *out.MinimumVolumeSize < 0 {
			return nil, bad("minimum_volume_size is %d bytes", *out.MinimumVolumeSize)
		}
	}
	if mx, mn := out.MaximumVolumeSize, out.MinimumVolumeSize; mx != nil && mn != nil && *mn > *mx {
		return nil, bad("minimum_volume_size (%d) exceeds maximum_volume_size (%d)", *mn, *mx)
	}
	return out, nil
}

// getVolumeResponseFromPB reads ControllerGetVolume's reply to a request
// for the volume id: a reply about another volume would mislead the
// caller as much as one without a volume.
func getVolumeResponseFromPB(id string, r *csipb.ControllerGetVolumeResponse) (*ControllerGetVolumeResponse, error) {
	bad := func(format string, args ...any) error {
		return &ResponseError{Method: "ControllerGetVolume", Reason: fmt.Sprintf(format, args...)}
	}
	v := r.GetVolume()
	switch {
	case v == nil:
		return nil, bad("no volume")
	case v.GetVolumeId() != id:
		return nil, bad("volume ID %q, but volume %q was asked for", v.GetVolumeId(), id)
	case v.GetCapacityBytes() < 0:
		return nil, bad("volume %s has capacity_bytes %d", id, v.GetCapacityBytes())
	}
	out := &ControllerGetVolumeResponse{Volume: volumeFromPB(v)}
	if st := r.GetStatus(); st != nil {
		cond, err := legacyConditionFromPB(st)
		if err != nil {
			return nil, bad("volume %s: %v", id, err)
		}
		out.Status = &VolumeStatus{PublishedNodeIDs: st.GetPublishedNodeIds(), Condition: cond}
	}
	return out, nil
}

func validateResponseFromPB(r *csipb.ValidateVolumeCapabilitiesResponse) (*ValidateCapabilitiesResponse, error) {
	out := &ValidateCapabilitiesResponse{Confirmed: r.GetConfirmed() != nil, Message: r.GetMessage()}
	for i, vc := range r.GetConfirmed().GetVolumeCapabilities() {
		c, _, err := capabilityFromPB(vc)
		if err != nil {
			return nil, &ResponseError{Method: "ValidateVolumeCapabilities", Reason: fmt.Sprintf("confirmed capability %d: %v", i, err)}
		}
		out.Capabilities = append(out.Capabilities, c)
	}
	return out, nil
}

func snapshotFromPB(s *csipb.Snapshot) Snapshot {
	out := Snapshot{
		ID:              s.GetSnapshotId(),
		SourceID:        s.GetSourceVolumeId(),
		Size:            s.GetSizeBytes(),
		ReadyToUse:      s.GetReadyToUse(),
		GroupSnapshotID: s.GetGroupSnapshotId(),
		Topologies:      topologiesFromPB(s.GetAccessibleTopology()),
	}
	if t := s.GetCreationTime(); t != nil {
		out.CreateTime = t.AsTime()
	}
	return out
}

func createSnapshotResponseFromPB(r *csipb.CreateSnapshotResponse) (*Snapshot, error) {
	if r.GetSnapshot().GetSnapshotId() == "" {
		return nil, &ResponseError{Method: "CreateSnapshot", Reason: "no snapshot ID"}
	}
	s := snapshotFromPB(r.GetSnapshot())
	return &s, nil
}

func listSnapshotsResponseFromPB(r *csipb.ListSnapshotsResponse) *ListSnapshotsResponse {
	out := &ListSnapshotsResponse{NextToken: r.GetNextToken()}
	for _, e := range r.GetEntries() {
		if e.GetSnapshot() != nil {
			out.Entries = append(out.Entries, snapshotFromPB(e.GetSnapshot()))
		}
	}
	return out
}

func volumeStatsFromPB(r *csipb.NodeGetVolumeStatsResponse) (*VolumeStats, error) {
	cond, err := legacyConditionFromPB(r)
	if err != nil {
		return nil, &ResponseError{Method: "NodeGetVolumeStats", Reason: err.Error()}
	}
	out := &VolumeStats{Condition: cond}
	for _, u := range r.GetUsage() {
		x := &Usage{Available: u.GetAvailable(), Total: u.GetTotal(), Used: u.GetUsed()}
		switch u.GetUnit() {
		case csipb.VolumeUsage_BYTES:
			out.Bytes = x
		case csipb.VolumeUsage_INODES:
			out.Inodes = x
		}
	}
	return out, nil
}

func (r *ControllerPublishRequest) toPB() *csipb.ControllerPublishVolumeRequest {
	return &csipb.ControllerPublishVolumeRequest{
		VolumeId:         r.ExternalID,
		NodeId:           r.ExternalNodeID,
		VolumeCapability: CapabilityToPB(r.Capability, r.MountOptions),
		Readonly:         r.ReadOnly,
		Secrets:          r.Secrets,
		VolumeContext:    r.VolumeContext,
	}
}

func (r *ControllerUnpublishRequest) toPB() *csipb.ControllerUnpublishVolumeRequest {
	return &csipb.ControllerUnpublishVolumeRequest{VolumeId: r.ExternalID, NodeId: r.ExternalNodeID, Secrets: r.Secrets}
}

func (r *ValidateCapabilitiesRequest) toPB() *csipb.ValidateVolumeCapabilitiesRequest {
	return &csipb.ValidateVolumeCapabilitiesRequest{
		VolumeId:           r.ExternalID,
		VolumeContext:      r.VolumeContext,
		VolumeCapabilities: capabilitiesToPB(r.Capabilities, r.MountOptions),
		Parameters:         r.Parameters,
		MutableParameters:  r.MutableParameters,
		Secrets:            r.Secrets,
	}
}

func (r *CreateVolumeRequest) toPB() *csipb.CreateVolumeRequest {
	return &csipb.CreateVolumeRequest{
		Name:                      r.Name,
		CapacityRange:             capacityToPB(r.CapacityMin, r.CapacityMax),
		VolumeCapabilities:        capabilitiesToPB(r.Capabilities, r.MountOptions),
		Parameters:                r.Parameters,
		MutableParameters:         r.MutableParameters,
		Secrets:                   r.Secrets,
		VolumeContentSource:       contentSourceToPB(r.Source),
		AccessibilityRequirements: topologyRequestToPB(r.Topology),
	}
}

func (r *DeleteVolumeRequest) toPB() *csipb.DeleteVolumeRequest {
	return &csipb.DeleteVolumeRequest{VolumeId: r.ExternalID, Secrets: r.Secrets}
}

func (r *ListVolumesRequest) toPB() *csipb.ListVolumesRequest {
	if r == nil {
		return &csipb.ListVolumesRequest{}
	}
	return &csipb.ListVolumesRequest{MaxEntries: r.MaxEntries, StartingToken: r.StartingToken}
}

func (r *ControllerExpandRequest) toPB() *csipb.ControllerExpandVolumeRequest {
	return &csipb.ControllerExpandVolumeRequest{
		VolumeId:         r.ExternalID,
		CapacityRange:    capacityToPB(r.CapacityMin, r.CapacityMax),
		Secrets:          r.Secrets,
		VolumeCapability: optionalCapabilityToPB(r.Capability, r.MountOptions),
	}
}

func (r *CreateSnapshotRequest) toPB() *csipb.CreateSnapshotRequest {
	return &csipb.CreateSnapshotRequest{
		SourceVolumeId: r.SourceID,
		Name:           r.Name,
		Secrets:        r.Secrets,
		Parameters:     r.Parameters,
	}
}

func (r *DeleteSnapshotRequest) toPB() *csipb.DeleteSnapshotRequest {
	return &csipb.DeleteSnapshotRequest{SnapshotId: r.ID, Secrets: r.Secrets}
}

func (r *ListSnapshotsRequest) toPB() *csipb.ListSnapshotsRequest {
	if r == nil {
		return &csipb.ListSnapshotsRequest{}
	}
	return &csipb.ListSnapshotsRequest{
		MaxEntries:     r.MaxEntries,
		StartingToken:  r.StartingToken,
		SourceVolumeId: r.SourceID,
		SnapshotId:     r.ID,
		Secrets:        r.Secrets,
	}
}

func (r *GetCapacityRequest) toPB() *csipb.GetCapacityRequest {
	if r == nil {
		return &csipb.GetCapacityRequest{}
	}
	return &csipb.GetCapacityRequest{
		VolumeCapabilities: capabilitiesToPB(r.Capabilities, r.MountOptions),
		Parameters:         r.Parameters,
		AccessibleTopology: topologyToPB(r.Topology),
	}
}

func (r *ControllerGetVolumeRequest) toPB() *csipb.ControllerGetVolumeRequest {
	return &csipb.ControllerGetVolumeRequest{VolumeId: r.ExternalID}
}

func (r *NodeStageRequest) toPB() *csipb.NodeStageVolumeRequest {
	return &csipb.NodeStageVolumeRequest{
		VolumeId:          r.ExternalID,
		PublishContext:    r.PublishContext,
		StagingTargetPath: r.StagingPath,
		VolumeCapability:  CapabilityToPB(r.Capability, r.MountOptions),
		Secrets:           r.Secrets,
		VolumeContext:     r.VolumeContext,
	}
}

func (r *NodeUnstageRequest) toPB() *csipb.NodeUnstageVolumeRequest {
	return &csipb.NodeUnstageVolumeRequest{VolumeId: r.ExternalID, StagingTargetPath: r.StagingPath}
}

func (r *NodePublishRequest) toPB() *csipb.NodePublishVolumeRequest {
	return &csipb.NodePublishVolumeRequest{
		VolumeId:          r.ExternalID,
		PublishContext:    r.PublishContext,
		StagingTargetPath: r.StagingPath,
		TargetPath:        r.TargetPath,
		VolumeCapability:  CapabilityToPB(r.Capability, r.MountOptions),
		Readonly:          r.ReadOnly,
		Secrets:           r.Secrets,
		VolumeContext:     r.VolumeContext,
	}
}

func (r *NodeUnpublishRequest) toPB() *csipb.NodeUnpublishVolumeRequest {
	return &csipb.NodeUnpublishVolumeRequest{VolumeId: r.ExternalID, TargetPath: r.TargetPath}
}

func (r *NodeExpandRequest) toPB() *csipb.NodeExpandVolumeRequest {
	return &csipb.NodeExpandVolumeRequest{
		VolumeId:          r.ExternalID,
		VolumePath:        r.VolumePath,
		CapacityRange:     capacityToPB(r.CapacityMin, r.CapacityMax),
		StagingTargetPath: r.StagingPath,
		VolumeCapability:  optionalCapabilityToPB(r.Capability, r.MountOptions),
		Secrets:           r.Secrets,
	}
}

func (r *NodeVolumeStatsRequest) toPB() *csipb.NodeGetVolumeStatsRequest {
	return &csipb.NodeGetVolumeStatsRequest{VolumeId: r.ExternalID, VolumePath: r.VolumePath, StagingTargetPath: r.StagingPath}
}
