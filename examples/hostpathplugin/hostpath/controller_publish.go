package hostpath

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"maps"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func (c *controller) ControllerPublishVolume(ctx context.Context, req *csipb.ControllerPublishVolumeRequest) (*csipb.ControllerPublishVolumeResponse, error) {
	if !c.cfg.ControllerPublish {
		return nil, status.Error(codes.Unimplemented, "ControllerPublishVolume: this plugin runs without the PUBLISH_UNPUBLISH_VOLUME capability (start it with -controller-publish)")
	}
	id, nodeID := req.GetVolumeId(), req.GetNodeId()
	if err := requireVolumeID(id); err != nil {
		return nil, err
	}
	if nodeID == "" {
		return nil, status.Error(codes.InvalidArgument, "node_id is required: use the node ID NodeGetInfo reports")
	}
	if len(nodeID) > maxNodeIDLength {
		return nil, status.Errorf(codes.InvalidArgument, "node_id is %d bytes long, the CSI limit is %d", len(nodeID), maxNodeIDLength)
	}
	capab, err := checkCapability("volume_capability", req.GetVolumeCapability())
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	v := c.volume(id)
	if v == nil {
		return nil, notFound(id)
	}
	if err := c.requireNode(nodeID); err != nil {
		return nil, err
	}
	if p := v.Published[nodeID]; p != nil {
		if p.Readonly == req.GetReadonly() && p.Capability.equal(capab) {
			return &csipb.ControllerPublishVolumeResponse{PublishContext: maps.Clone(p.Context)}, nil
		}
		return nil, status.Errorf(codes.AlreadyExists,
			"volume %s is already published to node %q with readonly=%t and access mode %s; unpublish it before publishing it with readonly=%t and access mode %s",
			id, nodeID, p.Readonly, p.Capability.AccessMode, req.GetReadonly(), capab.AccessMode)
	}
	for _, other := range v.nodes() {
		p := v.Published[other]
		if capab.singleNode() || p.Capability.singleNode() {
			return nil, status.Errorf(codes.FailedPrecondition,
				"volume %s is published to node %q (access mode %s) and a single-node access mode forbids a second node; call ControllerUnpublishVolume for node %q first",
				id, other, p.Capability.AccessMode, other)
		}
	}
	if max := c.cfg.MaxVolumes; max > 0 {
		var n int64
		for _, o := range c.st.Volumes {
			if o.Published[nodeID] != nil {
				n++
			}
		}
		if n >= max {
			return nil, status.Errorf(codes.ResourceExhausted,
				"node %q already has %d volumes published, its maximum; unpublish one first", nodeID, n)
		}
	}
	var token [8]byte
	_, _ = rand.Read(token[:])
	p := &publishRecord{
		Readonly:   req.GetReadonly(),
		Capability: capab,
		Context: map[string]string{
			publishContextNode:       nodeID,
			publishContextAttachment: hex.EncodeToString(token[:]),
		},
	}
	v.Published[nodeID] = p
	if err := c.save(func() { delete(v.Published, nodeID) }); err != nil {
		return nil, err
	}
	c.log.Info("volume published", "volume_id", id, "node_id", nodeID, "readonly", p.Readonly)
	return &csipb.ControllerPublishVolumeResponse{PublishContext: maps.Clone(p.Context)}, nil
}

func (c *controller) ControllerUnpublishVolume(ctx context.Context, req *csipb.ControllerUnpublishVolumeRequest) (*csipb.ControllerUnpublishVolumeResponse, error) {
	if !c.cfg.ControllerPublish {
		return nil, status.Error(codes.Unimplemented, "ControllerUnpublishVolume: this plugin runs without the PUBLISH_UNPUBLISH_VOLUME capability (start it with -controller-publish)")
	}
	id, nodeID := req.GetVolumeId(), req.GetNodeId()
	if err := requireVolumeID(id); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	v := c.volume(id)
	if v == nil {
		// A volume the plugin does not know is attached nowhere.
		return &csipb.ControllerUnpublishVolumeResponse{}, nil
	}
	old := v.clone().Published
	if nodeID == "" {
		clear(v.Published) // the spec: no node ID means every node
	} else {
		if v.Published[nodeID] == nil {
			return &csipb.ControllerUnpublishVolumeResponse{}, nil
		}
		delete(v.Published, nodeID)
	}
	if err := c.save(func() { v.Published = old }); err != nil {
		return nil, err
	}
	c.log.Info("volume unpublished", "volume_id", id, "node_id", nodeID)
	return &csipb.ControllerUnpublishVolumeResponse{}, nil
}
