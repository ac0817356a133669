package rpcshim

import (
	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
)

// The methods of expansion and modify, beside those in messages.go.
const (
	// MethodControllerModifyVolume: ModifyVolumeRequest →
	// ModifyVolumeResponse (ControllerModifyVolume).
	MethodControllerModifyVolume = "ClientCSI.ControllerModifyVolume"
	// MethodNodeExpand: NodeExpandRequest → NodeExpandResponse
	// (NodeExpandVolume, by the node's mounter, at the paths it tracks).
	MethodNodeExpand = "ClientCSI.NodeExpandVolume"
)

// ModifyVolumeRequest asks the controller to change a volume's mutable
// parameters.
type ModifyVolumeRequest struct {
	CSIControllerQuery
	plugin.ControllerModifyRequest
}

// ModifyVolumeResponse is empty but for the serving node.
type ModifyVolumeResponse struct {
	CSIControllerReply
}

// NodeExpandRequest asks a node to grow a volume it has staged or
// published. The node finds the plugin, external ID and paths in its
// mounter's state.
type NodeExpandRequest struct {
	// NodeID is the node the router meant to call; the endpoint refuses
	// a request for another node.
	NodeID    string
	Namespace string
	VolumeID  string
	// PluginID names the volume's plugin, for logs and errors.
	PluginID      string `json:",omitempty"`
	RequiredBytes int64
	LimitBytes    int64       `json:",omitempty"`
	Secrets       csi.Secrets `json:",omitempty"`
}

// NodeExpandResponse is the node's answer: whether it holds a mount of
// the volume, and the size NodeExpandVolume reported (0: unknown).
type NodeExpandResponse struct {
	Mounted  bool  `json:",omitempty"`
	Capacity int64 `json:",omitempty"`
}
