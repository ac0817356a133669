package hostpath

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Layout of the data dir.
const (
	volumesDirName      = "volumes"
	controllerStateName = "controller.json"
	controllerLockName  = "controller.lock"
)

// Keys of the publish context ControllerPublishVolume returns. The node
// service checks them when ControllerPublish is on, so that a CO that
// skips ControllerPublishVolume, or passes the context of another node,
// gets FailedPrecondition instead of a silent success.
const (
	publishContextNode       = "hostpath.csikit.io/node"
	publishContextAttachment = "hostpath.csikit.io/attachment"
)

// controllerState is the content of controller.json.
type controllerState struct {
	Version int                      `json:"version"`
	Volumes map[string]*volumeRecord `json:"volumes"`
}

type volumeRecord struct {
	ID            string            `json:"id"`
	Name          string            `json:"name"`
	CapacityBytes int64             `json:"capacity_bytes"`
	Capabilities  []capRecord       `json:"capabilities"`
	Parameters    map[string]string `json:"parameters,omitempty"`
	// MutableParameters are CreateVolume's and ControllerModifyVolume's
	// (expand.go).
	MutableParameters map[string]string `json:"mutable_parameters,omitempty"`
	// Topology is the plugin's Config.Topology when the volume was
	// created: where the volume is accessible from. Nil: everywhere.
	Topology map[string]string `json:"accessible_topology,omitempty"`
	// Published holds the ControllerPublish attachments, by node ID.
	Published map[string]*publishRecord `json:"published,omitempty"`
}

type publishRecord struct {
	Readonly   bool              `json:"readonly"`
	Capability capRecord         `json:"capability"`
	Context    map[string]string `json:"context"`
}

func (v *volumeRecord) clone() *volumeRecord {
	c := *v
	c.Capabilities = slices.Clone(v.Capabilities)
	c.Parameters = maps.Clone(v.Parameters)
	c.MutableParameters = maps.Clone(v.MutableParameters)
	c.Topology = maps.Clone(v.Topology)
	c.Published = make(map[string]*publishRecord, len(v.Published))
	for n, p := range v.Published {
		pc := *p
		pc.Context = maps.Clone(p.Context)
		c.Published[n] = &pc
	}
	return &c
}

func (v *volumeRecord) toProto() *csipb.Volume {
	return &csipb.Volume{VolumeId: v.ID, CapacityBytes: v.CapacityBytes, AccessibleTopology: topologyToProto(v.Topology)}
}

func (v *volumeRecord) nodes() []string {
	return slices.Sorted(maps.Keys(v.Published))
}

// controller serves the CSI Controller service. One mutex serializes
// every call: each is a few file operations, and serializing them keeps
// the state file and the volume directories in step without per-volume
// locks.
type controller struct {
	csipb.UnimplementedControllerServer
	cfg        Config
	log        hclog.Logger
	volumesDir string
	statePath  string
	lock       *os.File

	mu sync.Mutex
	st controllerState
}

var _ csipb.ControllerServer = (*controller)(nil)

func openController(cfg Config) (*controller, error) {
	lock, err := lockFile(filepath.Join(cfg.DataDir, controllerLockName), "controller")
	if err != nil {
		return nil, err
	}
	c := &controller{
		cfg:        cfg,
		log:        cfg.Logger.Named("controller"),
		volumesDir: filepath.Join(cfg.DataDir, volumesDirName),
		statePath:  filepath.Join(cfg.DataDir, controllerStateName),
		lock:       lock,
	}
	if err := readJSON(c.statePath, &c.st); err != nil {
		_ = lock.Close()
		return nil, err
	}
	if c.st.Version == 0 {
		c.st.Version = stateVersion
	}
	if c.st.Version != stateVersion {
		_ = lock.Close()
		return nil, fmt.Errorf("state file %s has version %d, this plugin reads version %d", c.statePath, c.st.Version, stateVersion)
	}
	if c.st.Volumes == nil {
		c.st.Volumes = map[string]*volumeRecord{}
	}
	for id, v := range c.st.Volumes {
		if !validVolumeID(id) || v == nil || v.ID != id {
			_ = lock.Close()
			return nil, fmt.Errorf("state file %s holds a malformed volume entry %q; restore the file from a backup or remove the entry", c.statePath, id)
		}
		if v.Published == nil {
			v.Published = map[string]*publishRecord{}
		}
	}
	return c, nil
}

func (c *controller) close() { _ = c.lock.Close() }

// save writes the state; on failure it runs undo, which restores the
// in-memory state, and returns Internal.
func (c *controller) save(undo func()) error {
	if err := writeJSON(c.statePath, &c.st); err != nil {
		undo()
		return internal("%v", err)
	}
	return nil
}

// volume returns the record of id, or nil. A malformed ID has no record.
func (c *controller) volume(id string) *volumeRecord {
	if !validVolumeID(id) {
		return nil
	}
	return c.st.Volumes[id]
}

func (c *controller) volumeDir(id string) string {
	return filepath.Join(c.volumesDir, id) // id is checked by validVolumeID
}

func notFound(id string) error {
	return status.Errorf(codes.NotFound, "volume %q does not exist", id)
}

// requireVolumeID refuses a request without a volume ID.
func requireVolumeID(id string) error {
	if id == "" {
		return status.Error(codes.InvalidArgument, "volume_id is required")
	}
	return nil
}

func (c *controller) ControllerGetCapabilities(context.Context, *csipb.ControllerGetCapabilitiesRequest) (*csipb.ControllerGetCapabilitiesResponse, error) {
	types := []csipb.ControllerServiceCapability_RPC_Type{
		csipb.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csipb.ControllerServiceCapability_RPC_LIST_VOLUMES,
		csipb.ControllerServiceCapability_RPC_GET_VOLUME,
		csipb.ControllerServiceCapability_RPC_EXPAND_VOLUME,
		csipb.ControllerServiceCapability_RPC_MODIFY_VOLUME,
		csipb.ControllerServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
	}
	if c.cfg.Capacity > 0 {
		types = append(types, csipb.ControllerServiceCapability_RPC_GET_CAPACITY)
	}
	if c.cfg.ControllerPublish {
		types = append(types,
			csipb.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME,
			csipb.ControllerServiceCapability_RPC_PUBLISH_READONLY,
			csipb.ControllerServiceCapability_RPC_LIST_VOLUMES_PUBLISHED_NODES,
		)
	}
	resp := &csipb.ControllerGetCapabilitiesResponse{}
	for _, t := range types {
		resp.Capabilities = append(resp.Capabilities, &csipb.ControllerServiceCapability{
			Type: &csipb.ControllerServiceCapability_Rpc{Rpc: &csipb.ControllerServiceCapability_RPC{Type: t}},
		})
	}
	return resp, nil
}
