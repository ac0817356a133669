package csitest

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/clock"
)

// Defaults filled in by New.
const (
	DefaultName    = "csitest.csikit.io"
	DefaultVersion = "1.0.0"
	DefaultNodeID  = "csitest-node"
	// DefaultVolumeCapacity is what CreateVolume provisions when the
	// request gives no capacity range.
	DefaultVolumeCapacity int64 = 1 << 30
	// DefaultAvailableCapacity is the pool CreateVolume draws from and
	// GetCapacity reports, when Config.AvailableCapacity is 0.
	DefaultAvailableCapacity int64 = 1 << 40
)

// maxSocketPath is the longest unix socket path that fits sun_path on
// every platform Go supports (104 bytes on BSD and macOS, 108 on Linux,
// both including the terminating NUL).
const maxSocketPath = 103

// Config describes the fake plugin. The zero value is a monolith with no
// optional capabilities, serving on a fresh temporary socket.
type Config struct {
	// Type selects the services the fake serves usefully. The default is
	// csi.PluginTypeMonolith. A controller-only fake answers every Node
	// RPC Unimplemented; a node-only fake answers every Controller RPC
	// Unimplemented and does not advertise CONTROLLER_SERVICE.
	Type csi.PluginType
	// Name is the provider name GetPluginInfo reports; default
	// DefaultName.
	Name string
	// Version is the vendor version GetPluginInfo reports; default
	// DefaultVersion.
	Version string

	// Controller and Node are the advertised capabilities. An RPC whose
	// capability is not advertised answers Unimplemented.
	Controller csi.ControllerCapabilities
	Node       csi.NodeCapabilities
	// RequiresTopologies advertises VOLUME_ACCESSIBILITY_CONSTRAINTS.
	RequiresTopologies bool

	// NodeID is the CSI node ID NodeGetInfo reports; default
	// DefaultNodeID. The lifecycle checker treats it as the one node this
	// fake serves.
	NodeID string
	// MaxVolumes is NodeGetInfo's max_volumes_per_node (0: no limit).
	// ControllerPublishVolume answers ResourceExhausted when a node
	// already holds this many attachments.
	MaxVolumes int64
	// Topology is NodeGetInfo's accessible topology, and the topology of
	// created volumes when RequiresTopologies is set and the request has
	// no accessibility requirements. Without RequiresTopologies created
	// volumes have no accessible_topology, whatever Topology says.
	Topology *csi.Topology

	// PublishContext chooses the publish_context ControllerPublishVolume
	// returns; the default, ContextSet, is {"devicePath":
	// "/dev/fake-<volume ID>"}. Whatever it returns, the attachment is
	// recorded, and node calls must pass the same context back (an empty
	// and an absent one count as the same, as they do on the wire).
	PublishContext ContextReply
	// VolumeContext chooses the volume_context of the volumes CreateVolume
	// makes; the default, ContextSet, is {"name": <the request's name>}.
	// AddVolume and AdmitUnknownVolumes keep the context they are given.
	VolumeContext ContextReply
	// UnknownCapacity makes CreateVolume, ListVolumes and
	// ControllerGetVolume report capacity_bytes 0, which the spec defines
	// as "capacity unknown" (an NFS share, say). The model still holds
	// what was provisioned (VolumeState.Capacity), GetCapacity still
	// counts it, and the expansion RPCs, whose capacity_bytes the spec
	// requires, still report it.
	UnknownCapacity bool

	// AvailableCapacity is the pool that CreateVolume draws from and
	// GetCapacity reports when Pools is empty; default
	// DefaultAvailableCapacity. That one pool is accessible from
	// wherever a CreateVolume asks (see Topology), serves every
	// parameters class, and holds every volume of the model, AddVolume's
	// too.
	AvailableCapacity int64
	// Pools, when set, replace AvailableCapacity with storage per
	// topology and parameters class, so that a test can give zone a 10
	// GiB and zone b none. CreateVolume then places a volume in the first
	// pool of the request's class, in the order of the request's
	// preferred topologies, then its requisite ones (without requisite
	// topologies, first the pools the fake's node reaches, then any),
	// whose volume size bounds allow the range and that has room; its
	// accessible_topology is the pool's. It answers InvalidArgument when
	// no pool serves the parameters, ResourceExhausted when none
	// accessible from the requisite topologies has room (or exists), and
	// OutOfRange when the range is outside every such pool's volume
	// sizes. GetCapacity sums the room left in the pools of the
	// request's class whose volumes are accessible from its
	// accessible_topology (all of them without one). Volumes that
	// AddVolume or AdmitUnknownVolumes put in the model take no pool's
	// room. A pool is accessible from a topology by csikit's rule
	// (csi.Reachable): every segment of the pool's topology is on it.
	Pools []Pool
	// VolumeStatus chooses the status ControllerGetVolume returns (the
	// RPC answers only when Controller.GetVolume is advertised); the
	// default, StatusPublishedNodes, lists the nodes the volume is
	// controller published to.
	VolumeStatus StatusReply
	// AdmitUnknownVolumes makes NodeStageVolume and NodePublishVolume add
	// a volume they do not know to the model instead of answering
	// NotFound. Use it for a node-only fake paired with a separate
	// controller fake, so that the test need not AddVolume on both.
	AdmitUnknownVolumes bool
	// OfflineExpansion makes the plugin advertise the OFFLINE
	// VolumeExpansion capability instead of ONLINE, and refuse to
	// expand a published volume (see expand.go).
	OfflineExpansion bool

	// SnapshotReadyAfter makes the first N replies that report a new
	// snapshot (CreateSnapshot, repeated or not, ListSnapshots,
	// GetSnapshot) say ready_to_use false, as a plugin that uploads
	// its snapshots does; SnapshotReadyDelay, on Clock, holds it not
	// ready for that long after its creation. Both must pass; once a
	// reply reported it ready it stays ready. 0 for both: ready at once.
	SnapshotReadyAfter int
	SnapshotReadyDelay time.Duration

	// Endpoint is the unix socket path; a relative one is made absolute.
	// The default is "csi.sock" in a new, short temporary directory that
	// Stop removes. The path must fit a unix socket address (at most 103
	// bytes).
	Endpoint string

	// MaxCalls bounds the call log: when it is set, Calls, CallsTo,
	// Methods and RequireSequence see only the most recent MaxCalls calls,
	// so a long benchmark or soak test holds a fixed amount of memory.
	// CallCount counts every call regardless. 0 keeps every call; a
	// negative value is an error.
	MaxCalls int

	// Logger receives one debug line per call (requests with secrets
	// stripped); nil means no logging.
	Logger hclog.Logger
	// Clock times injected latency and stamps the call log and
	// snapshots; nil means the wall clock.
	Clock clock.Clock
}

// ContextReply chooses how a string map the spec marks OPTIONAL (a
// publish or volume context) comes back in a reply. The zero value is
// the fake's usual, non-empty map.
//
// Protocol buffers encode an empty map and an absent one alike, so a
// client over gRPC sees no entries either way; both exist so that a
// test can say which a plugin meant and so that a shapes matrix names
// both of the forms a plugin's code may return.
type ContextReply int

const (
	// ContextSet replies with the fake's map (see the Config field).
	ContextSet ContextReply = iota
	// ContextEmpty replies with an empty, non-nil map.
	ContextEmpty
	// ContextAbsent replies with no map (nil).
	ContextAbsent
)

func (r ContextReply) valid() bool { return r >= ContextSet && r <= ContextAbsent }

func (r ContextReply) String() string {
	switch r {
	case ContextSet:
		return "set"
	case ContextEmpty:
		return "empty"
	case ContextAbsent:
		return "absent"
	}
	return fmt.Sprintf("ContextReply(%d)", int(r))
}

// apply returns the map to reply with: set, an empty map or nil.
func (r ContextReply) apply(set map[string]string) map[string]string {
	switch r {
	case ContextEmpty:
		return map[string]string{}
	case ContextAbsent:
		return nil
	}
	return set
}

// StatusReply chooses the form of ControllerGetVolume's optional
// status. The zero value is what a CSI 1.13 plugin sends.
type StatusReply int

const (
	// StatusPublishedNodes replies with a status listing the CSI node
	// IDs the volume is controller published to, and no condition.
	StatusPublishedNodes StatusReply = iota
	// StatusWithCondition adds the volume's condition (normal unless
	// SetVolumeCondition says otherwise) as field 2 of the status, the
	// way a plugin built on CSI 1.3 to 1.12 with VOLUME_CONDITION sends
	// it; spec 1.13 removed the field and reserved its number.
	// ListVolumes entries carry it too, in a status of their own when
	// LIST_VOLUMES_PUBLISHED_NODES is not advertised.
	StatusWithCondition
	// StatusAbsent replies with no status at all.
	StatusAbsent
)

func (r StatusReply) valid() bool { return r >= StatusPublishedNodes && r <= StatusAbsent }

func (r StatusReply) String() string {
	switch r {
	case StatusPublishedNodes:
		return "published-nodes"
	case StatusWithCondition:
		return "with-condition"
	case StatusAbsent:
		return "absent"
	}
	return fmt.Sprintf("StatusReply(%d)", int(r))
}

// withDefaults validates c and returns it with defaults filled. ownDir is
// the temporary directory reserved for the default socket, or "".
func (c Config) withDefaults() (cfg Config, ownDir string, err error) {
	if c.Type == "" {
		c.Type = csi.PluginTypeMonolith
	}
	if !c.Type.Valid() {
		return c, "", fmt.Errorf("%w: csitest: plugin type %q is not controller, node or monolith", csi.ErrInvalidRequest, c.Type)
	}
	if c.Name == "" {
		c.Name = DefaultName
	}
	if c.Version == "" {
		c.Version = DefaultVersion
	}
	if c.NodeID == "" {
		c.NodeID = DefaultNodeID
	}
	if err := csi.ValidateExternalNodeID("CSI node ID", c.NodeID); err != nil {
		return c, "", fmt.Errorf("csitest: Config.NodeID: %w", err)
	}
	if c.MaxVolumes < 0 {
		return c, "", fmt.Errorf("%w: csitest: MaxVolumes is %d; use 0 for no limit", csi.ErrInvalidRequest, c.MaxVolumes)
	}
	if c.AvailableCapacity < 0 {
		return c, "", fmt.Errorf("%w: csitest: AvailableCapacity is %d; use 0 for the default", csi.ErrInvalidRequest, c.AvailableCapacity)
	}
	for _, k := range []struct {
		field string
		v     ContextReply
	}{{"PublishContext", c.PublishContext}, {"VolumeContext", c.VolumeContext}} {
		if !k.v.valid() {
			return c, "", fmt.Errorf("%w: csitest: %s is %d; use ContextSet, ContextEmpty or ContextAbsent", csi.ErrInvalidRequest, k.field, k.v)
		}
	}
	if !c.VolumeStatus.valid() {
		return c, "", fmt.Errorf("%w: csitest: VolumeStatus is %d; use StatusPublishedNodes, StatusWithCondition or StatusAbsent", csi.ErrInvalidRequest, c.VolumeStatus)
	}
	if len(c.Pools) > 0 && c.AvailableCapacity != 0 {
		return c, "", fmt.Errorf("%w: csitest: both AvailableCapacity and Pools are set; give the capacity in the Pools", csi.ErrInvalidRequest)
	}
	pools := make([]Pool, len(c.Pools))
	for i, pool := range c.Pools {
		if err := pool.validate(i, c.RequiresTopologies); err != nil {
			return c, "", err
		}
		pools[i] = pool.copy()
	}
	c.Pools = pools
	if c.MaxCalls < 0 {
		return c, "", fmt.Errorf("%w: csitest: MaxCalls is %d; use 0 to keep every call", csi.ErrInvalidRequest, c.MaxCalls)
	}
	if c.SnapshotReadyAfter < 0 || c.SnapshotReadyDelay < 0 {
		return c, "", fmt.Errorf("%w: csitest: SnapshotReadyAfter %d, SnapshotReadyDelay %s; neither may be negative",
			csi.ErrInvalidRequest, c.SnapshotReadyAfter, c.SnapshotReadyDelay)
	}
	if c.AvailableCapacity == 0 {
		c.AvailableCapacity = DefaultAvailableCapacity
	}
	c.Topology = c.Topology.Copy()
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	c.Clock = clock.Or(c.Clock)
	return c.withEndpoint()
}

// withEndpoint fills c.Endpoint with a reserved temporary socket path
// when it is empty (ownDir is its directory), and makes it absolute.
func (c Config) withEndpoint() (cfg Config, ownDir string, err error) {
	if c.Endpoint == "" {
		// Reserve a unique short name now and create the directory in
		// Start, so that New touches nothing that could leak when the
		// plugin is never started.
		d, err := os.MkdirTemp("", "csitest")
		if err != nil {
			return c, "", fmt.Errorf("csitest: create a temporary directory for the socket: %w", err)
		}
		if err := os.Remove(d); err != nil {
			return c, "", fmt.Errorf("csitest: reserve a temporary socket directory: %w", err)
		}
		ownDir = d
		c.Endpoint = filepath.Join(d, "csi.sock")
	}
	// grpc's unix:// target needs an absolute path.
	abs, err := filepath.Abs(c.Endpoint)
	if err != nil {
		return c, "", fmt.Errorf("csitest: make socket path %q absolute: %w", c.Endpoint, err)
	}
	c.Endpoint = abs
	if len(c.Endpoint) > maxSocketPath {
		return c, "", fmt.Errorf("%w: csitest: socket path %q is %d bytes; a unix socket path may be at most %d, so choose a shorter Endpoint (for example under os.MkdirTemp(\"\", \"csi\"))",
			csi.ErrInvalidRequest, c.Endpoint, len(c.Endpoint), maxSocketPath)
	}
	return c, ownDir, nil
}
