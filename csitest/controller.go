package csitest

import (
	"context"
	"fmt"
	"maps"
	"slices"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/csikit/csikit/csi/plugin"
)

type controllerServer struct {
	csipb.UnimplementedControllerServer
	p *Plugin
}

var _ csipb.ControllerServer = controllerServer{}

// fits reports whether capacity satisfies a capacity range.
func fits(capacity, requiredBytes, limitBytes int64) bool {
	return capacity >= requiredBytes && (limitBytes == 0 || capacity <= limitBytes)
}

// volumeLocked finds the volume a call names, or answers NotFound; p.mu
// is held.
func (p *Plugin) volumeLocked(method, id string) (*volume, error) {
	if v := p.volumes[id]; v != nil {
		return v, nil
	}
	return nil, errorf(codes.NotFound, method, "volume %q does not exist", id)
}

func (s controllerServer) CreateVolume(_ context.Context, req *csipb.CreateVolumeRequest) (*csipb.CreateVolumeResponse, error) {
	const m = MethodCreateVolume
	name := req.GetName()
	if err := requireFields(m, "name", name); err != nil {
		return nil, err
	}
	if err := checkCapabilities(m, req.GetVolumeCapabilities(), true); err != nil {
		return nil, err
	}
	if err := checkRange(m, req.GetCapacityRange()); err != nil {
		return nil, err
	}
	reqBytes, limBytes := req.GetCapacityRange().GetRequiredBytes(), req.GetCapacityRange().GetLimitBytes()
	src := req.GetVolumeContentSource()

	p := s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, v := range p.volumes {
		if v.name != name {
			continue
		}
		if !fits(v.capacity, reqBytes, limBytes) || !maps.Equal(v.parameters, req.GetParameters()) ||
			!proto.Equal(v.source, src) {
			return nil, errorf(codes.AlreadyExists, m, "volume named %q exists as %q with capacity %d and other parameters; use another name or the same request", name, v.id, v.capacity)
		}
		if !satisfies(v.topology, req.GetAccessibilityRequirements()) {
			return nil, errorf(codes.AlreadyExists, m, "volume named %q exists as %q, accessible from %v, none of the requisite topologies %s; use another name or the same request",
				name, v.id, v.topology, requisiteString(req.GetAccessibilityRequirements()))
		}
		return &csipb.CreateVolumeResponse{Volume: v.toProto(p.unknownCapacity)}, nil
	}

	pl, err := p.placeLocked(m, req, reqBytes, limBytes)
	if err != nil {
		return nil, err
	}
	if snap := src.GetSnapshot(); snap != nil && p.snapshots[snap.GetSnapshotId()] == nil {
		return nil, errorf(codes.NotFound, m, "source snapshot %q does not exist", snap.GetSnapshotId())
	}
	if err := p.checkRestoreLocked(src); err != nil {
		return nil, err
	}
	if vol := src.GetVolume(); vol != nil && p.volumes[vol.GetVolumeId()] == nil {
		return nil, errorf(codes.NotFound, m, "source volume %q does not exist", vol.GetVolumeId())
	}

	p.volumeSeq++
	v := newVolume(seqID("vol", p.volumeSeq))
	v.name = name
	v.capacity, v.pool, v.topology = pl.capacity, pl.pool, pl.topology
	v.context = p.volumeContext.apply(map[string]string{"name": name})
	v.parameters = maps.Clone(req.GetParameters())
	v.mutableParameters = maps.Clone(req.GetMutableParameters())
	for _, vc := range req.GetVolumeCapabilities() {
		v.capabilities = append(v.capabilities, cloneCapability(vc))
	}
	if src != nil {
		v.source = proto.Clone(src).(*csipb.VolumeContentSource)
	}
	p.volumes[v.id] = v
	return &csipb.CreateVolumeResponse{Volume: v.toProto(p.unknownCapacity)}, nil
}

func (s controllerServer) DeleteVolume(_ context.Context, req *csipb.DeleteVolumeRequest) (*csipb.DeleteVolumeResponse, error) {
	const m = MethodDeleteVolume
	id := req.GetVolumeId()
	if err := requireFields(m, "volume_id", id); err != nil {
		return nil, err
	}
	p := s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	v := p.volumes[id]
	if v == nil {
		return &csipb.DeleteVolumeResponse{}, nil
	}
	if v.inUse() {
		p.violateLocked(m, id, RuleDeleteWhileInUse, "volume is attached to %v, staged at %d path(s) and published at %d target(s)",
			v.attachedNodes(), len(v.staged), len(v.published))
	}
	delete(p.volumes, id)
	p.deleted[id] = true
	return &csipb.DeleteVolumeResponse{}, nil
}

func (s controllerServer) ControllerPublishVolume(_ context.Context, req *csipb.ControllerPublishVolumeRequest) (*csipb.ControllerPublishVolumeResponse, error) {
	const m = MethodControllerPublishVolume
	id, node, vc := req.GetVolumeId(), req.GetNodeId(), req.GetVolumeCapability()
	if err := requireFieldsAndCapability(m, vc, "volume_id", id, "node_id", node); err != nil {
		return nil, err
	}
	p := s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	v, err := p.volumeLocked(m, id)
	if err != nil {
		return nil, err
	}
	if a := v.attachments[node]; a != nil {
		if a.readonly != req.GetReadonly() || !proto.Equal(a.capability, vc) {
			return nil, errorf(codes.AlreadyExists, m, "volume %q is already published to node %q with another capability or readonly flag; unpublish it first", id, node)
		}
		return &csipb.ControllerPublishVolumeResponse{PublishContext: maps.Clone(a.publishContext)}, nil
	}
	for other, a := range v.attachments {
		if singleNode(vc) || singleNode(a.capability) {
			p.violateLocked(m, id, RuleIncompatiblePublish, "single-node volume is published to node %q and was asked for node %q", other, node)
			return nil, errorf(codes.FailedPrecondition, m, "volume %q is published to node %q and its access mode is single-node; unpublish it there first", id, other)
		}
	}
	if p.maxVolumes > 0 && p.attachmentsOnLocked(node) >= p.maxVolumes {
		return nil, errorf(codes.ResourceExhausted, m, "node %q already holds %d volumes, its maximum", node, p.maxVolumes)
	}
	a := &attachment{
		readonly:       req.GetReadonly(),
		capability:     cloneCapability(vc),
		publishContext: p.publishContext.apply(map[string]string{"devicePath": "/dev/fake-" + id}),
	}
	v.attachments[node] = a
	return &csipb.ControllerPublishVolumeResponse{PublishContext: maps.Clone(a.publishContext)}, nil
}

func (s controllerServer) ControllerUnpublishVolume(_ context.Context, req *csipb.ControllerUnpublishVolumeRequest) (*csipb.ControllerUnpublishVolumeResponse, error) {
	const m = MethodControllerUnpublishVolume
	id, node := req.GetVolumeId(), req.GetNodeId()
	if err := requireFields(m, "volume_id", id); err != nil {
		return nil, err
	}
	p := s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	v := p.volumes[id]
	if v == nil {
		return &csipb.ControllerUnpublishVolumeResponse{}, nil
	}
	// An empty node_id means every node, this fake's included.
	if (node == "" || node == p.nodeID) && len(v.staged)+len(v.published) > 0 {
		p.violateLocked(m, id, RuleControllerUnpublishWhileNodeInUse, "node %q still has the volume staged at %d path(s) and published at %d target(s)",
			p.nodeID, len(v.staged), len(v.published))
	}
	if node == "" {
		clear(v.attachments)
	} else {
		delete(v.attachments, node)
	}
	return &csipb.ControllerUnpublishVolumeResponse{}, nil
}

func (s controllerServer) ValidateVolumeCapabilities(_ context.Context, req *csipb.ValidateVolumeCapabilitiesRequest) (*csipb.ValidateVolumeCapabilitiesResponse, error) {
	const m = MethodValidateVolumeCapabilities
	id := req.GetVolumeId()
	if err := requireFields(m, "volume_id", id); err != nil {
		return nil, err
	}
	if err := checkCapabilities(m, req.GetVolumeCapabilities(), true); err != nil {
		return nil, err
	}
	p := s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	v, err := p.volumeLocked(m, id)
	if err != nil {
		return nil, err
	}
	// A created volume supports the access modes and types it was
	// created with; a pre-provisioned one supports anything.
	if v.capabilities != nil {
		for _, want := range req.GetVolumeCapabilities() {
			if !slices.ContainsFunc(v.capabilities, func(have *csipb.VolumeCapability) bool { return sameKind(have, want) }) {
				return &csipb.ValidateVolumeCapabilitiesResponse{
					Message: fmt.Sprintf("volume %q was not created with access mode %s and this access type", id, want.GetAccessMode().GetMode()),
				}, nil
			}
		}
	}
	confirmed := &csipb.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext:      maps.Clone(req.GetVolumeContext()),
		Parameters:         maps.Clone(req.GetParameters()),
		MutableParameters:  maps.Clone(req.GetMutableParameters()),
		VolumeCapabilities: make([]*csipb.VolumeCapability, 0, len(req.GetVolumeCapabilities())),
	}
	for _, vc := range req.GetVolumeCapabilities() {
		confirmed.VolumeCapabilities = append(confirmed.VolumeCapabilities, cloneCapability(vc))
	}
	return &csipb.ValidateVolumeCapabilitiesResponse{Confirmed: confirmed}, nil
}

func (s controllerServer) ListVolumes(_ context.Context, req *csipb.ListVolumesRequest) (*csipb.ListVolumesResponse, error) {
	p := s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	ids, next, err := page(MethodListVolumes, slices.Sorted(maps.Keys(p.volumes)), req.GetMaxEntries(), req.GetStartingToken())
	if err != nil {
		return nil, err
	}
	resp := &csipb.ListVolumesResponse{NextToken: next}
	for _, id := range ids {
		v := p.volumes[id]
		e := &csipb.ListVolumesResponse_Entry{Volume: v.toProto(p.unknownCapacity)}
		if p.ctrlCaps.ListVolumesPublishedNodes {
			e.Status = &csipb.ListVolumesResponse_VolumeStatus{PublishedNodeIds: v.attachedNodes()}
		}
		if p.volumeStatus == StatusWithCondition {
			if e.Status == nil {
				e.Status = &csipb.ListVolumesResponse_VolumeStatus{}
			}
			setLegacyCondition(e.Status, v.abnormal, v.conditionMessage)
		}
		resp.Entries = append(resp.Entries, e)
	}
	return resp, nil
}

func (s controllerServer) GetCapacity(_ context.Context, req *csipb.GetCapacityRequest) (*csipb.GetCapacityResponse, error) {
	if err := checkCapabilities(MethodGetCapacity, req.GetVolumeCapabilities(), false); err != nil {
		return nil, err
	}
	p := s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.capacityLocked(req), nil
}

func (s controllerServer) ControllerGetCapabilities(context.Context, *csipb.ControllerGetCapabilitiesRequest) (*csipb.ControllerGetCapabilitiesResponse, error) {
	p := s.p
	p.mu.Lock()
	c := p.ctrlCaps
	p.mu.Unlock()
	return &csipb.ControllerGetCapabilitiesResponse{Capabilities: plugin.ControllerCapabilitiesToPB(c)}, nil
}

func (s controllerServer) ControllerExpandVolume(_ context.Context, req *csipb.ControllerExpandVolumeRequest) (*csipb.ControllerExpandVolumeResponse, error) {
	const m = MethodControllerExpandVolume
	id := req.GetVolumeId()
	if err := requireFields(m, "volume_id", id); err != nil {
		return nil, err
	}
	if req.GetCapacityRange() == nil {
		return nil, required(m, "capacity_range")
	}
	if err := checkExpand(m, req.GetVolumeCapability(), req.GetCapacityRange()); err != nil {
		return nil, err
	}
	p := s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	v, err := p.volumeLocked(m, id)
	if err != nil {
		return nil, err
	}
	if err := p.checkOfflineLocked(m, v); err != nil {
		return nil, err
	}
	if err := p.growLocked(m, v, req.GetCapacityRange()); err != nil {
		return nil, err
	}
	return &csipb.ControllerExpandVolumeResponse{CapacityBytes: v.capacity, NodeExpansionRequired: p.nodeCaps.ExpandVolume}, nil
}

// growLocked expands v to satisfy r; it never shrinks a volume.
func (p *Plugin) growLocked(method string, v *volume, r *csipb.CapacityRange) error {
	want := max(v.capacity, r.GetRequiredBytes())
	if lim := r.GetLimitBytes(); lim > 0 && want > lim {
		return errorf(codes.OutOfRange, method, "volume %q has %d bytes, more than the limit %d; the fake does not shrink volumes", v.id, v.capacity, lim)
	}
	if v.pool != noPool {
		if mx := p.pools[v.pool].MaxVolumeSize; mx != nil && want > *mx {
			return errorf(codes.OutOfRange, method, "volume %q cannot grow to %d bytes; its pool %s takes volumes of at most %d", v.id, want, p.pools[v.pool], *mx)
		}
	}
	if grow, avail := want-v.capacity, p.availableLocked(v.pool); grow > avail {
		return errorf(codes.OutOfRange, method, "volume %q cannot grow by %d bytes; %d are available", v.id, grow, avail)
	}
	v.capacity = want
	return nil
}

func (s controllerServer) ControllerGetVolume(_ context.Context, req *csipb.ControllerGetVolumeRequest) (*csipb.ControllerGetVolumeResponse, error) {
	const m = MethodControllerGetVolume
	id := req.GetVolumeId()
	if err := requireFields(m, "volume_id", id); err != nil {
		return nil, err
	}
	p := s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	v, err := p.volumeLocked(m, id)
	if err != nil {
		return nil, err
	}
	resp := &csipb.ControllerGetVolumeResponse{Volume: v.toProto(p.unknownCapacity)}
	if p.volumeStatus != StatusAbsent {
		resp.Status = &csipb.ControllerGetVolumeResponse_VolumeStatus{PublishedNodeIds: v.attachedNodes()}
	}
	if p.volumeStatus == StatusWithCondition {
		setLegacyCondition(resp.Status, v.abnormal, v.conditionMessage)
	}
	return resp, nil
}

func (s controllerServer) ControllerModifyVolume(_ context.Context, req *csipb.ControllerModifyVolumeRequest) (*csipb.ControllerModifyVolumeResponse, error) {
	const m = MethodControllerModifyVolume
	id := req.GetVolumeId()
	if err := requireFields(m, "volume_id", id); err != nil {
		return nil, err
	}
	if len(req.GetMutableParameters()) == 0 {
		return nil, required(m, "mutable_parameters")
	}
	p := s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	v, err := p.volumeLocked(m, id)
	if err != nil {
		return nil, err
	}
	if v.mutableParameters == nil {
		v.mutableParameters = make(map[string]string)
	}
	maps.Copy(v.mutableParameters, req.GetMutableParameters())
	return &csipb.ControllerModifyVolumeResponse{}, nil
}
