package rpcshim

import (
	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/mounter"
)

// The methods the router sends to node endpoints. They are the method
// names of Transport.Call and Mux; a node answers each with the request
// and response types named beside it. The names are part of the wire
// contract between server and nodes: a node running an older csikit that
// lacks one answers csi.ErrNotSupported.
const (
	// MethodControllerPublish: ControllerPublishRequest →
	// ControllerPublishResponse (ControllerPublishVolume).
	MethodControllerPublish = "ClientCSI.ControllerPublishVolume"
	// MethodControllerUnpublish: ControllerUnpublishRequest →
	// ControllerUnpublishResponse (ControllerUnpublishVolume).
	MethodControllerUnpublish = "ClientCSI.ControllerUnpublishVolume"
	// MethodControllerValidateCapabilities: ValidateCapabilitiesRequest
	// → ValidateCapabilitiesResponse (ValidateVolumeCapabilities).
	MethodControllerValidateCapabilities = "ClientCSI.ControllerValidateVolumeCapabilities"
	// MethodControllerCreateVolume: CreateVolumeRequest →
	// CreateVolumeResponse (CreateVolume).
	MethodControllerCreateVolume = "ClientCSI.ControllerCreateVolume"
	// MethodControllerDeleteVolume: DeleteVolumeRequest →
	// DeleteVolumeResponse (DeleteVolume).
	MethodControllerDeleteVolume = "ClientCSI.ControllerDeleteVolume"
	// MethodControllerListVolumes: ListVolumesRequest →
	// ListVolumesResponse (ListVolumes).
	MethodControllerListVolumes = "ClientCSI.ControllerListVolumes"
	// MethodControllerGetCapacity: GetCapacityRequest →
	// GetCapacityResponse (GetCapacity).
	MethodControllerGetCapacity = "ClientCSI.ControllerGetCapacity"
	// MethodControllerExpandVolume: ExpandVolumeRequest →
	// ExpandVolumeResponse (ControllerExpandVolume).
	MethodControllerExpandVolume = "ClientCSI.ControllerExpandVolume"
	// MethodControllerCreateSnapshot: CreateSnapshotRequest →
	// CreateSnapshotResponse (CreateSnapshot).
	MethodControllerCreateSnapshot = "ClientCSI.ControllerCreateSnapshot"
	// MethodControllerDeleteSnapshot: DeleteSnapshotRequest →
	// DeleteSnapshotResponse (DeleteSnapshot).
	MethodControllerDeleteSnapshot = "ClientCSI.ControllerDeleteSnapshot"
	// MethodControllerListSnapshots: ListSnapshotsRequest →
	// ListSnapshotsResponse (ListSnapshots).
	MethodControllerListSnapshots = "ClientCSI.ControllerListSnapshots"
	// MethodNodeDetach: NodeDetachRequest → NodeDetachResponse
	// (NodeUnpublishVolume, then NodeUnstageVolume for the last user, by
	// the node's mounter).
	MethodNodeDetach = "ClientCSI.NodeDetachVolume"
)

// CSIControllerQuery is embedded in every controller request: which
// plugin's controller serves the call, and optionally on which node.
//
// With ControllerNodeID empty the router picks a node (see Router). With
// it set, the router checks that the node is known, ready and runs a
// healthy controller of the plugin, and calls only that node. On the
// wire the router always sets it to the node it calls, so the node
// endpoint can refuse a call meant for another node.
type CSIControllerQuery struct {
	// PluginID is the plugin whose controller serves the call. Required.
	PluginID string
	// ControllerNodeID is the host node ID (not a CSI node ID) whose
	// controller instance must serve the call, or "" to let the router
	// choose.
	ControllerNodeID string `json:",omitempty"`
}

// query gives the router access to the embedded query of any request.
func (q *CSIControllerQuery) query() *CSIControllerQuery { return q }

// controllerRequest is implemented by pointers to every controller
// request type, through the embedded CSIControllerQuery.
type controllerRequest interface {
	query() *CSIControllerQuery
}

// CSIControllerReply is embedded in every controller response: the node
// whose controller instance served the call. The router fills it in; it
// is not sent by the node.
type CSIControllerReply struct {
	ControllerNodeID string `json:",omitempty"`
}

func (r *CSIControllerReply) reply() *CSIControllerReply { return r }

type controllerResponse interface {
	reply() *CSIControllerReply
}

// ControllerPublishRequest attaches a volume to a node: ExternalNodeID
// is the CSI node ID of the node the volume is attached to (a claim's
// ExternalNodeID), not the controller's node.
type ControllerPublishRequest struct {
	CSIControllerQuery
	plugin.ControllerPublishRequest
}

// ControllerPublishResponse carries the publish context the node calls
// need.
type ControllerPublishResponse struct {
	CSIControllerReply
	PublishContext map[string]string `json:",omitempty"`
}

// ControllerUnpublishRequest detaches a volume from the node named by
// ExternalNodeID.
type ControllerUnpublishRequest struct {
	CSIControllerQuery
	plugin.ControllerUnpublishRequest
}

// ControllerUnpublishResponse is empty but for the serving node.
type ControllerUnpublishResponse struct {
	CSIControllerReply
}

// ValidateCapabilitiesRequest asks the controller whether a volume
// supports capabilities.
type ValidateCapabilitiesRequest struct {
	CSIControllerQuery
	plugin.ValidateCapabilitiesRequest
}

// ValidateCapabilitiesResponse is the plugin's answer.
type ValidateCapabilitiesResponse struct {
	CSIControllerReply
	plugin.ValidateCapabilitiesResponse
}

// CreateVolumeRequest asks the controller to provision a volume.
type CreateVolumeRequest struct {
	CSIControllerQuery
	plugin.CreateVolumeRequest
}

// CreateVolumeResponse is the provisioned volume.
type CreateVolumeResponse struct {
	CSIControllerReply
	Volume plugin.Volume
}

// DeleteVolumeRequest asks the controller to delete a volume.
type DeleteVolumeRequest struct {
	CSIControllerQuery
	plugin.DeleteVolumeRequest
}

// DeleteVolumeResponse is empty but for the serving node.
type DeleteVolumeResponse struct {
	CSIControllerReply
}

// ListVolumesRequest asks for one page of the plugin's volumes.
type ListVolumesRequest struct {
	CSIControllerQuery
	plugin.ListVolumesRequest
}

// ListVolumesResponse is one page of volumes.
type ListVolumesResponse struct {
	CSIControllerReply
	plugin.ListVolumesResponse
}

// GetCapacityRequest asks the controller how much it can still
// provision for a topology and class.
type GetCapacityRequest struct {
	CSIControllerQuery
	plugin.GetCapacityRequest
}

// GetCapacityResponse is the controller's capacity.
type GetCapacityResponse struct {
	CSIControllerReply
	plugin.GetCapacityResponse
}

// ExpandVolumeRequest asks the controller to grow a volume.
type ExpandVolumeRequest struct {
	CSIControllerQuery
	plugin.ControllerExpandRequest
}

// ExpandVolumeResponse is the new size.
type ExpandVolumeResponse struct {
	CSIControllerReply
	plugin.ControllerExpandResponse
}

// CreateSnapshotRequest asks the controller to snapshot a volume.
type CreateSnapshotRequest struct {
	CSIControllerQuery
	plugin.CreateSnapshotRequest
}

// CreateSnapshotResponse is the snapshot.
type CreateSnapshotResponse struct {
	CSIControllerReply
	Snapshot plugin.Snapshot
}

// DeleteSnapshotRequest asks the controller to delete a snapshot.
type DeleteSnapshotRequest struct {
	CSIControllerQuery
	plugin.DeleteSnapshotRequest
}

// DeleteSnapshotResponse is empty but for the serving node.
type DeleteSnapshotResponse struct {
	CSIControllerReply
}

// ListSnapshotsRequest asks for one page of snapshots.
type ListSnapshotsRequest struct {
	CSIControllerQuery
	plugin.ListSnapshotsRequest
}

// ListSnapshotsResponse is one page of snapshots.
type ListSnapshotsResponse struct {
	CSIControllerReply
	plugin.ListSnapshotsResponse
}

// NodeDetachRequest asks the node that owns a claim to undo its mounts:
// NodeUnpublishVolume for the allocation, then NodeUnstageVolume when no
// other allocation on the node uses the volume the same way. Everything
// else the node needs (plugin, external ID, paths) is in its mounter's
// persisted state.
type NodeDetachRequest struct {
	// NodeID is the node the router meant to call; the endpoint refuses
	// a request for another node.
	NodeID       string
	Namespace    string
	VolumeID     string
	AllocationID string
	// PluginID names the volume's plugin, for logs and errors.
	PluginID string `json:",omitempty"`
	// Usage is the claim's usage; nil means every usage the allocation
	// has on the volume.
	Usage *mounter.Usage `json:",omitempty"`
}

// NodeDetachResponse is empty.
type NodeDetachResponse struct{}

// newNodeDetachRequest builds the node detach request of a claim.
func newNodeDetachRequest(vol *csi.Volume, claim *csi.Claim) *NodeDetachRequest {
	u := mounter.UsageOf(claim.Mode, claim.Capability())
	return &NodeDetachRequest{
		NodeID:       claim.NodeID,
		Namespace:    vol.Namespace,
		VolumeID:     vol.ID,
		AllocationID: claim.AllocationID,
		PluginID:     vol.PluginID,
		Usage:        &u,
	}
}
