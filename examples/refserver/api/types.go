package api

import (
	"time"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/rpcshim"
)

// IndexHeader carries the store index of a read, for the next blocking
// query.
const IndexHeader = "X-Refserver-Index"

// Blocking query bounds.
const (
	// DefaultWait is how long a blocking query waits when it gives no
	// wait.
	DefaultWait = 5 * time.Minute
	// MaxWait caps the wait a blocking query may ask for.
	MaxWait = 10 * time.Minute
)

// DefaultNamespace is the namespace used when a request names none.
const DefaultNamespace = "default"

// ErrorResponse is the body of a failed request.
type ErrorResponse struct {
	Error *rpcshim.WireError `json:"error"`
}

// ClaimRequest claims a volume for an allocation. The server records the
// allocation (running, on NodeID, in the volume's namespace) and then
// claims: the claim is written first, then ControllerPublishVolume runs
// for a new attachment.
type ClaimRequest struct {
	AllocationID string
	NodeID       string
	Mode         csi.ClaimMode
	// AccessMode and AttachmentMode may be left unknown when the volume
	// allows exactly one capability: the server uses it.
	AccessMode     csi.AccessMode
	AttachmentMode csi.AttachmentMode
	MountOptions   *csi.MountOptions `json:",omitempty"`
	// Mount asks the claim's node agent to mount the volume for the
	// allocation once claimed (NodeStageVolume and NodePublishVolume
	// through its mounter).
	Mount bool `json:",omitempty"`
}

// PlaceRequest asks which nodes can take a claim on a volume, before an
// allocation is placed (POST /v1/volumes/{namespace}/{id}/place).
type PlaceRequest struct {
	// Namespace is the allocation's; empty means the volume's.
	Namespace string `json:",omitempty"`
	Mode      csi.ClaimMode
	// AccessMode and AttachmentMode may be left unknown when the volume
	// allows exactly one capability: the server uses it.
	AccessMode     csi.AccessMode
	AttachmentMode csi.AttachmentMode
	// Nodes are the candidate nodes; empty means every node running the
	// volume's node plugin.
	Nodes []string `json:",omitempty"`
}

// PlaceResponse is rpcshim's answer per node: Reasons is "feasible" or
// the reasons a claim there would be refused, such as "topology".
type PlaceResponse = rpcshim.FeasibilityResponse

// ClaimResponse is a claim after it was written and, if asked, mounted.
// It never holds the volume's secrets.
type ClaimResponse struct {
	Namespace string
	VolumeID  string
	Claim     *csi.Claim
	// ControllerNodeID is the node whose controller plugin attached the
	// volume (ControllerPublishVolume), empty when no call was made.
	ControllerNodeID string `json:",omitempty"`
	// Mount is where the volume is mounted, when the request asked.
	Mount *MountInfo `json:",omitempty"`
	Index uint64
}

// MountInfo says where a node agent mounted a volume.
type MountInfo struct {
	NodeID string
	// Path is the published target on the node.
	Path string
	// Usage is the mount's usage, for example "w-snw-fs".
	Usage string
}

// ReleaseResponse is an allocation after it was marked terminal, with
// the claims the claim worker now releases.
type ReleaseResponse struct {
	Allocation *csi.Allocation
	Claims     []AllocationClaim `json:",omitempty"`
	Index      uint64
}

// AllocationClaim is one claim of an allocation, live or past.
type AllocationClaim struct {
	Namespace string
	VolumeID  string
	Claim     *csi.Claim
}

// Node is a node agent as the server sees it.
type Node struct {
	ID string
	// Address is the gRPC target of the agent's node service.
	Address string `json:",omitempty"`
	// Status is the node's liveness: ready while it heartbeats within
	// the server's TTL, down after, unknown if it never registered with
	// this server.
	Status        csi.NodeStatus
	LastHeartbeat time.Time `json:",omitzero"`
	// Plugins are the node's latest fingerprints.
	Plugins []*csi.PluginInfo `json:",omitempty"`
}

// RegisterNodeRequest registers a node agent.
type RegisterNodeRequest struct {
	// Address is the gRPC target the server dials to reach the agent's
	// node service: "host:port" or "unix:///path".
	Address string
	// Plugins are the plugin instances the agent runs. The server records
	// each as a running allocation on the node that runs the plugin, so
	// the plugin's expected counts include it; a plugin instance the
	// node ran before and no longer lists is stopped and forgotten.
	Plugins []PluginInstance `json:",omitempty"`
}

// PluginInstance is one plugin instance a node agent runs.
type PluginInstance struct {
	PluginID string
	Type     csi.PluginType
	// AllocationID names the allocation that runs it; the agent's
	// fingerprints carry the same ID.
	AllocationID string
}

// PluginNamespace is the namespace of the allocations that run plugin
// instances.
const PluginNamespace = "system"

// ReportPluginsRequest is a node's full list of plugin fingerprints.
type ReportPluginsRequest struct {
	Plugins []*csi.PluginInfo
}

// WriteResponse is the store index of a write.
type WriteResponse struct {
	Index uint64
}

// MethodMountVolume is the node-service method the server sends to a
// claim's node agent to mount the claimed volume: NodeMountRequest →
// NodeMountResponse.
const MethodMountVolume = "refserver.MountVolume"

// NodeMountRequest asks a node agent to mount a claimed volume. Volume
// holds its secrets (the node's plugin needs them): send it to the
// claim's node only.
type NodeMountRequest struct {
	Volume *csi.Volume
	Claim  *csi.Claim
}

// NodeMountResponse is where the volume was mounted.
type NodeMountResponse struct {
	Path  string
	Usage string
	// NodeExpandedBytes is the capacity NodeExpandVolume reported when
	// the mount staged a volume whose expansion this node still owed
	// (mounter.MountInfo.NodeExpandedBytes); 0 when it ran none.
	NodeExpandedBytes int64 `json:",omitempty"`
}
