package hostpath

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Defaults filled in by New when the corresponding Config field is zero.
const (
	DefaultName    = "hostpath.csikit.io"
	DefaultVersion = "0.1.0"
	// DefaultShutdownTimeout bounds the graceful stop: calls in flight
	// get this long to finish before the server closes their streams.
	DefaultShutdownTimeout = 10 * time.Second
	// DefaultCapacity is the capacity recorded for a volume whose
	// CreateVolume request gives no capacity range. A volume is a plain
	// directory, so the figure is bookkeeping, not a quota.
	DefaultCapacity int64 = 1 << 30
)

// maxSocketPath is the longest unix socket path Linux accepts (sun_path
// holds 108 bytes including the terminating NUL).
const maxSocketPath = 107

// maxNodeIDLength is the CSI spec's limit on a node ID.
const maxNodeIDLength = 256

// Mode selects which CSI services the plugin serves.
type Mode string

// The plugin modes. Identity is served in every mode.
const (
	// ModeMonolith serves Controller and Node: one process does it all.
	ModeMonolith Mode = "monolith"
	// ModeController serves Controller only; Node calls answer
	// Unimplemented.
	ModeController Mode = "controller"
	// ModeNode serves Node only; Controller calls answer Unimplemented
	// and GetPluginCapabilities does not advertise CONTROLLER_SERVICE
	// unless Config.SplitNode says a controller plugin runs apart.
	ModeNode Mode = "node"
)

func (m Mode) valid() bool {
	return m == ModeMonolith || m == ModeController || m == ModeNode
}

func (m Mode) hasController() bool { return m == ModeMonolith || m == ModeController }
func (m Mode) hasNode() bool       { return m == ModeMonolith || m == ModeNode }

// MountMethod selects how the node service makes a volume appear at a
// staging or target path.
type MountMethod string

// The mount methods.
const (
	// MountAuto picks MountBind when a probe bind mount (with a
	// read-only remount) succeeds, and MountSymlink otherwise.
	MountAuto MountMethod = "auto"
	// MountBind bind-mounts the volume directory (Linux, needs
	// CAP_SYS_ADMIN, in practice root). Read-only publishes are enforced
	// by a read-only remount.
	MountBind MountMethod = "bind"
	// MountSymlink puts a symbolic link to the volume directory at the
	// path. It works for any user, but read-only publishes are NOT
	// enforced: the link gives full access to the directory.
	MountSymlink MountMethod = "symlink"
)

func (m MountMethod) valid() bool {
	return m == MountAuto || m == MountBind || m == MountSymlink
}

// Config describes one plugin process. The zero value (plus DataDir) is
// a monolith without ControllerPublish and without staging, on the
// automatic mount method. (The hostpathplugin command's flags turn both
// capabilities on by default.)
type Config struct {
	// Name and Version are what GetPluginInfo reports; defaults
	// DefaultName and DefaultVersion.
	Name    string
	Version string

	// Endpoint is the unix socket Run listens on: a path ("/csi/csi.sock")
	// or a unix URL ("unix:///csi/csi.sock"). Required by Run, ignored by
	// Serve, which takes its listener from the caller.
	Endpoint string

	// DataDir holds the volumes (DataDir/volumes/<volume ID>) and the
	// plugin's state files. Required. Controller and node plugins that
	// work on the same volumes must share it (same path on one host).
	DataDir string

	// Mode selects the services served; default ModeMonolith.
	Mode Mode

	// SplitNode, in ModeNode only, says that this node plugin is the node
	// half of a split plugin whose controller plugin (ModeController)
	// runs apart, the spec's figure 2. GetPluginCapabilities then
	// advertises what the controller does (CONTROLLER_SERVICE, online
	// expansion): the capabilities describe the plugin, and COs such as
	// Kubernetes, and csi-sanity, learn them from the node plugin.
	// Without SplitNode a ModeNode plugin is node-only (the spec's figure
	// 4: no CONTROLLER_SERVICE), the way a CO serves pre-provisioned
	// volumes whose controller is gone. It still serves no Controller
	// call either way.
	SplitNode bool

	// NodeID is what NodeGetInfo reports; default the host name. At most
	// 256 bytes. Several node plugins may share a DataDir if their node
	// IDs differ. A node plugin (ModeNode, ModeMonolith) registers its
	// NodeID in DataDir when it first serves there, and the registration
	// stays when it stops: ControllerPublishVolume accepts exactly the
	// registered node IDs and answers NotFound for any other. So in split
	// mode the controller learns its nodes from the node plugins that
	// share its DataDir, with nothing to configure; a controller's own
	// NodeID is not a node.
	NodeID string
	// MaxVolumes is NodeGetInfo's max_volumes_per_node and, when
	// ControllerPublish is on, the number of volumes ControllerPublish
	// attaches to one node before it answers ResourceExhausted. 0 means
	// no limit.
	MaxVolumes int64

	// Topology, when set, is where the plugin's storage is, as segments
	// such as {"zone": "a", "rack": "r1"} (ParseTopology reads them from
	// "zone=a,rack=r1"). GetPluginCapabilities then advertises
	// VOLUME_ACCESSIBILITY_CONSTRAINTS, NodeGetInfo reports it as the
	// node's accessible topology, and CreateVolume places every volume
	// there (its accessible_topology) and answers ResourceExhausted when
	// no requisite topology of the request reaches it: a topology
	// reaches the volume when it holds every one of these segments. A
	// controller plugin and its node plugins, which share one data dir on
	// one host, give the same Topology. Volumes created before Topology
	// was set keep no accessible topology.
	Topology map[string]string
	// Capacity, when positive, is how many bytes the plugin's volumes may
	// hold in all: the controller advertises GET_CAPACITY and reports
	// what is left, CreateVolume answers ResourceExhausted and
	// ControllerExpandVolume OutOfRange when a volume does not fit. The
	// figure is bookkeeping, like a volume's capacity, not a quota on the
	// data dir. 0 means no limit and no GET_CAPACITY.
	Capacity int64

	// ControllerPublish advertises the controller PUBLISH_UNPUBLISH_VOLUME
	// capability: ControllerPublishVolume records the attachment and
	// returns a publish context that node calls must then carry.
	// Controller and node plugins of one deployment must agree on it.
	ControllerPublish bool
	// Staging advertises the node STAGE_UNSTAGE_VOLUME capability:
	// NodePublishVolume then requires a staged volume.
	Staging bool

	// Mount is the node's mount method; default MountAuto. MountBind
	// makes New fail when bind mounts do not work here.
	Mount MountMethod

	// ShutdownTimeout bounds the graceful stop when the context of Run or
	// Serve ends; default DefaultShutdownTimeout.
	ShutdownTimeout time.Duration

	// Logger receives one line at start, a debug line per call (secrets
	// stripped) and a line per failed call. Nil means no logging.
	Logger hclog.Logger
}

// ErrInvalidConfig is matched (errors.Is) by every error New returns for
// a bad Config.
var ErrInvalidConfig = errors.New("invalid hostpath plugin config")

func configError(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
}

// withDefaults validates c and returns a copy with defaults filled in.
// It does no I/O except reading the host name when NodeID is empty.
func (c Config) withDefaults() (Config, error) {
	if c.Name == "" {
		c.Name = DefaultName
	}
	if c.Version == "" {
		c.Version = DefaultVersion
	}
	if c.Mode == "" {
		c.Mode = ModeMonolith
	}
	if !c.Mode.valid() {
		return c, configError("mode %q is not one of monolith, controller, node", c.Mode)
	}
	if c.SplitNode && c.Mode != ModeNode {
		return c, configError("SplitNode is for mode node only (mode is %s): a plugin that serves the controller advertises it anyway", c.Mode)
	}
	if c.Mount == "" {
		c.Mount = MountAuto
	}
	if !c.Mount.valid() {
		return c, configError("mount method %q is not one of auto, bind, symlink", c.Mount)
	}
	if c.DataDir == "" {
		return c, configError("DataDir is required: give the directory that holds the volumes")
	}
	dir, err := filepath.Abs(c.DataDir)
	if err != nil {
		return c, configError("DataDir %q: %v", c.DataDir, err)
	}
	c.DataDir = dir
	if c.NodeID == "" {
		h, err := os.Hostname()
		if err != nil || h == "" {
			return c, configError("NodeID is empty and the host name is unknown (%v): set NodeID", err)
		}
		c.NodeID = h
	}
	if len(c.NodeID) > maxNodeIDLength {
		return c, configError("NodeID is %d bytes long, the CSI limit is %d", len(c.NodeID), maxNodeIDLength)
	}
	if c.MaxVolumes < 0 {
		return c, configError("MaxVolumes is %d; use 0 for no limit or a positive number", c.MaxVolumes)
	}
	if c.Capacity < 0 {
		return c, configError("Capacity is %d; use 0 for no limit or a positive number of bytes", c.Capacity)
	}
	if err := checkTopology(c.Topology); err != nil {
		return c, err
	}
	c.Topology = maps.Clone(c.Topology)
	if len(c.Topology) == 0 {
		c.Topology = nil
	}
	if c.ShutdownTimeout < 0 {
		return c, configError("ShutdownTimeout is %s; it must not be negative", c.ShutdownTimeout)
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.Endpoint != "" {
		if _, err := SocketPath(c.Endpoint); err != nil {
			return c, err
		}
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	return c, nil
}

// SocketPath returns the file system path of a unix socket endpoint
// given as a path or as a "unix://" URL. Other schemes are refused, as
// are paths too long for a unix socket address.
func SocketPath(endpoint string) (string, error) {
	p := endpoint
	switch {
	case strings.HasPrefix(endpoint, "unix://"):
		p = strings.TrimPrefix(endpoint, "unix://")
	case strings.HasPrefix(endpoint, "unix:"):
		p = strings.TrimPrefix(endpoint, "unix:")
	case strings.Contains(endpoint, "://"):
		return "", configError("endpoint %q: only unix sockets are supported (a path or unix:///path)", endpoint)
	}
	if p == "" {
		return "", configError("endpoint %q has no socket path", endpoint)
	}
	p = filepath.Clean(p)
	if len(p) > maxSocketPath {
		return "", configError("endpoint %q: the socket path is %d bytes long, the unix socket limit is %d; use a shorter path", endpoint, len(p), maxSocketPath)
	}
	return p, nil
}
