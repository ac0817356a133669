package hostpath

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
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

// CreateVolume checks the request, then either completes an existing
// volume of the same name or provisions a new one.
func (c *controller) CreateVolume(ctx context.Context, req *csipb.CreateVolumeRequest) (*csipb.CreateVolumeResponse, error) {
	caps, capacity, err := checkCreateRequest(ctx, req)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if v := c.volumeNamed(req.GetName()); v != nil {
		return c.createExisting(v, req)
	}
	if err := c.checkProvisionable(req, capacity); err != nil {
		return nil, err
	}
	return c.provision(req, caps, capacity)
}

// checkCreateRequest validates a CreateVolume request and returns the
// capabilities and the capacity to record.
func checkCreateRequest(ctx context.Context, req *csipb.CreateVolumeRequest) ([]capRecord, int64, error) {
	if req.GetName() == "" {
		return nil, 0, status.Error(codes.InvalidArgument, "name is required")
	}
	caps, err := checkCapabilities("volume_capabilities", req.GetVolumeCapabilities())
	if err != nil {
		return nil, 0, err
	}
	if req.GetVolumeContentSource() != nil {
		return nil, 0, status.Error(codes.InvalidArgument, "volume_content_source: the hostpath plugin cannot create a volume from a snapshot or another volume; leave it unset")
	}
	if len(req.GetMutableParameters()) > 0 {
		return nil, 0, status.Error(codes.InvalidArgument, "mutable_parameters: the hostpath plugin has no MODIFY_VOLUME capability; leave them unset")
	}
	capacity, err := capacityFor("capacity_range", req.GetCapacityRange(), DefaultCapacity)
	if err != nil {
		return nil, 0, err
	}
	if err := ctx.Err(); err != nil {
		return nil, 0, status.FromContextError(err).Err()
	}
	return caps, capacity, nil
}

// volumeNamed returns the record of the volume named name, or nil; c.mu
// is held.
func (c *controller) volumeNamed(name string) *volumeRecord {
	for _, v := range c.st.Volumes {
		if v.Name == name {
			return v
		}
	}
	return nil
}

// createExisting answers a CreateVolume for a name that already has a
// volume: the same volume when the request is compatible with it,
// AlreadyExists otherwise; c.mu is held.
func (c *controller) createExisting(v *volumeRecord, req *csipb.CreateVolumeRequest) (*csipb.CreateVolumeResponse, error) {
	name := req.GetName()
	if !capacityFits(v.CapacityBytes, req.GetCapacityRange()) {
		return nil, status.Errorf(codes.AlreadyExists,
			"volume %s named %q already exists with %d bytes, outside the requested range (required %d, limit %d); use another name or a compatible range",
			v.ID, name, v.CapacityBytes, req.GetCapacityRange().GetRequiredBytes(), req.GetCapacityRange().GetLimitBytes())
	}
	if !maps.Equal(v.Parameters, req.GetParameters()) {
		return nil, status.Errorf(codes.AlreadyExists,
			"volume %s named %q already exists with other parameters; use another name or the same parameters", v.ID, name)
	}
	if !meetsRequisite(v.Topology, req.GetAccessibilityRequirements()) {
		return nil, status.Errorf(codes.AlreadyExists,
			"volume %s named %q already exists, accessible from %s, which none of the requisite topologies %s reaches; use another name or the same requirements",
			v.ID, name, formatTopology(v.Topology), requisiteString(req.GetAccessibilityRequirements()))
	}
	// A crash between saving the record and creating the directory
	// leaves a record without a directory: this retry completes it.
	if err := makeVolumeDir(c.volumeDir(v.ID)); err != nil {
		return nil, internal("volume %s: %v", v.ID, err)
	}
	return &csipb.CreateVolumeResponse{Volume: v.toProto()}, nil
}

// checkProvisionable refuses a new volume that this plugin's topology
// or free capacity cannot hold; c.mu is held.
func (c *controller) checkProvisionable(req *csipb.CreateVolumeRequest, capacity int64) error {
	name := req.GetName()
	if !meetsRequisite(c.cfg.Topology, req.GetAccessibilityRequirements()) {
		return status.Errorf(codes.ResourceExhausted,
			"volume %q cannot be provisioned where the requisite topologies %s reach: this plugin's storage is in %s",
			name, requisiteString(req.GetAccessibilityRequirements()), c.cfg.topologyString())
	}
	if free := c.free(); c.cfg.Capacity > 0 && capacity > free {
		return status.Errorf(codes.ResourceExhausted,
			"volume %q needs %d bytes and %d of the plugin's %d are free; delete a volume or ask for less", name, capacity, free, c.cfg.Capacity)
	}
	return nil
}

// provision records a new volume, then creates its directory; c.mu is
// held.
func (c *controller) provision(req *csipb.CreateVolumeRequest, caps []capRecord, capacity int64) (*csipb.CreateVolumeResponse, error) {
	name := req.GetName()
	v := &volumeRecord{
		ID:            newVolumeID(),
		Name:          name,
		CapacityBytes: capacity,
		Capabilities:  caps,
		Parameters:    maps.Clone(req.GetParameters()),
		Topology:      maps.Clone(c.cfg.Topology),
		Published:     map[string]*publishRecord{},
	}
	c.st.Volumes[v.ID] = v
	undo := func() { delete(c.st.Volumes, v.ID) }
	// The record is saved before the directory exists, so a crash in
	// between never leaks an untracked directory (see createExisting).
	if err := c.save(undo); err != nil {
		return nil, err
	}
	if err := makeVolumeDir(c.volumeDir(v.ID)); err != nil {
		undo()
		if serr := writeJSON(c.statePath, &c.st); serr != nil {
			c.log.Error("could not drop the record of a volume whose directory failed", "volume_id", v.ID, "error", serr)
		}
		return nil, internal("volume %s: %v", v.ID, err)
	}
	c.log.Info("volume created", "volume_id", v.ID, "name", name, "capacity_bytes", capacity)
	return &csipb.CreateVolumeResponse{Volume: v.toProto()}, nil
}

// makeVolumeDir creates a volume directory, world-writable like other
// hostpath drivers' so that workloads running as any user can use it.
func makeVolumeDir(dir string) error {
	if err := os.Mkdir(dir, 0o777); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil
		}
		return fmt.Errorf("create volume directory: %w", err)
	}
	if err := os.Chmod(dir, 0o777); err != nil { // undo the umask
		return fmt.Errorf("set volume directory mode: %w", err)
	}
	return nil
}

// capacityFor picks the capacity to record for a request range: the
// required bytes, else def capped at the limit.
func capacityFor(field string, r *csipb.CapacityRange, def int64) (int64, error) {
	req, lim := r.GetRequiredBytes(), r.GetLimitBytes()
	switch {
	case req < 0 || lim < 0:
		return 0, status.Errorf(codes.InvalidArgument, "%s: required_bytes (%d) and limit_bytes (%d) must not be negative", field, req, lim)
	case lim > 0 && req > lim:
		return 0, status.Errorf(codes.InvalidArgument, "%s: required_bytes (%d) is more than limit_bytes (%d)", field, req, lim)
	case req > 0:
		return req, nil
	case lim > 0:
		return min(def, lim), nil
	default:
		return def, nil
	}
}

func capacityFits(capacity int64, r *csipb.CapacityRange) bool {
	req, lim := r.GetRequiredBytes(), r.GetLimitBytes()
	return capacity >= req && (lim == 0 || capacity <= lim)
}

func (c *controller) DeleteVolume(ctx context.Context, req *csipb.DeleteVolumeRequest) (*csipb.DeleteVolumeResponse, error) {
	id := req.GetVolumeId()
	if err := requireVolumeID(id); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	v := c.volume(id)
	if v == nil {
		return &csipb.DeleteVolumeResponse{}, nil // already gone: DeleteVolume is idempotent
	}
	if len(v.Published) > 0 {
		return nil, status.Errorf(codes.FailedPrecondition,
			"volume %s is still published to node(s) %s; call ControllerUnpublishVolume first", id, strings.Join(v.nodes(), ", "))
	}
	// The directory goes first: a crash before the record is dropped
	// leaves a record whose retry finishes the job.
	if err := os.RemoveAll(c.volumeDir(id)); err != nil {
		return nil, internal("remove the directory of volume %s: %v", id, err)
	}
	delete(c.st.Volumes, id)
	if err := c.save(func() { c.st.Volumes[id] = v }); err != nil {
		return nil, err
	}
	c.log.Info("volume deleted", "volume_id", id, "name", v.Name)
	return &csipb.DeleteVolumeResponse{}, nil
}

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

func (c *controller) ValidateVolumeCapabilities(ctx context.Context, req *csipb.ValidateVolumeCapabilitiesRequest) (*csipb.ValidateVolumeCapabilitiesResponse, error) {
	id := req.GetVolumeId()
	if err := requireVolumeID(id); err != nil {
		return nil, err
	}
	if _, err := checkCapabilities("volume_capabilities", req.GetVolumeCapabilities()); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	v := c.volume(id)
	if v == nil {
		return nil, notFound(id)
	}
	if len(req.GetParameters()) > 0 && !maps.Equal(req.GetParameters(), v.Parameters) {
		return &csipb.ValidateVolumeCapabilitiesResponse{Message: fmt.Sprintf("volume %s was created with other parameters", id)}, nil
	}
	if len(req.GetMutableParameters()) > 0 {
		return &csipb.ValidateVolumeCapabilitiesResponse{Message: "the hostpath plugin has no mutable parameters"}, nil
	}
	// A directory carries every file-system access mode, so every mount
	// capability that passed checkCapabilities is confirmed.
	return &csipb.ValidateVolumeCapabilitiesResponse{Confirmed: &csipb.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext:      req.GetVolumeContext(),
		VolumeCapabilities: req.GetVolumeCapabilities(),
		Parameters:         req.GetParameters(),
	}}, nil
}

func (c *controller) ListVolumes(ctx context.Context, req *csipb.ListVolumesRequest) (*csipb.ListVolumesResponse, error) {
	if req.GetMaxEntries() < 0 {
		return nil, status.Errorf(codes.InvalidArgument, "max_entries is %d; it must not be negative", req.GetMaxEntries())
	}
	tok := req.GetStartingToken()
	if tok != "" && !validVolumeID(tok) {
		return nil, status.Errorf(codes.Aborted, "starting_token %q was not issued by this plugin; start again with an empty token", tok)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	ids := slices.Sorted(maps.Keys(c.st.Volumes))
	// The token is the ID of the first volume of the page: IDs sort, so a
	// page starts at the right place even if that volume was deleted.
	start := sort.SearchStrings(ids, tok)
	end := len(ids)
	if n := int(req.GetMaxEntries()); n > 0 && start+n < end {
		end = start + n
	}
	resp := &csipb.ListVolumesResponse{}
	for _, id := range ids[start:end] {
		resp.Entries = append(resp.Entries, &csipb.ListVolumesResponse_Entry{
			Volume: c.st.Volumes[id].toProto(),
			Status: c.volumeStatus(c.st.Volumes[id]),
		})
	}
	if end < len(ids) {
		resp.NextToken = ids[end]
	}
	return resp, nil
}

func (c *controller) volumeStatus(v *volumeRecord) *csipb.ListVolumesResponse_VolumeStatus {
	if !c.cfg.ControllerPublish {
		return nil
	}
	return &csipb.ListVolumesResponse_VolumeStatus{PublishedNodeIds: v.nodes()}
}

func (c *controller) ControllerGetVolume(ctx context.Context, req *csipb.ControllerGetVolumeRequest) (*csipb.ControllerGetVolumeResponse, error) {
	id := req.GetVolumeId()
	if err := requireVolumeID(id); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	v := c.volume(id)
	if v == nil {
		return nil, notFound(id)
	}
	resp := &csipb.ControllerGetVolumeResponse{Volume: v.toProto(), Status: &csipb.ControllerGetVolumeResponse_VolumeStatus{}}
	if c.cfg.ControllerPublish {
		resp.Status.PublishedNodeIds = v.nodes()
	}
	return resp, nil
}

func (c *controller) ControllerExpandVolume(ctx context.Context, req *csipb.ControllerExpandVolumeRequest) (*csipb.ControllerExpandVolumeResponse, error) {
	id := req.GetVolumeId()
	if err := requireVolumeID(id); err != nil {
		return nil, err
	}
	r := req.GetCapacityRange()
	if r == nil || r.GetRequiredBytes() == 0 && r.GetLimitBytes() == 0 {
		return nil, status.Error(codes.InvalidArgument, "capacity_range is required: set required_bytes or limit_bytes")
	}
	want, err := capacityFor("capacity_range", r, r.GetLimitBytes())
	if err != nil {
		return nil, err
	}
	if req.GetVolumeCapability() != nil {
		if _, err := checkCapability("volume_capability", req.GetVolumeCapability()); err != nil {
			return nil, err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	v := c.volume(id)
	if v == nil {
		return nil, notFound(id)
	}
	if lim := r.GetLimitBytes(); lim > 0 && v.CapacityBytes > lim {
		return nil, status.Errorf(codes.OutOfRange,
			"volume %s already has %d bytes, more than limit_bytes %d; volumes cannot shrink", id, v.CapacityBytes, lim)
	}
	if v.CapacityBytes >= want {
		return &csipb.ControllerExpandVolumeResponse{CapacityBytes: v.CapacityBytes}, nil
	}
	if grow, free := want-v.CapacityBytes, c.free(); c.cfg.Capacity > 0 && grow > free {
		return nil, status.Errorf(codes.OutOfRange,
			"volume %s cannot grow by %d bytes: %d of the plugin's %d are free", id, grow, free, c.cfg.Capacity)
	}
	old := v.CapacityBytes
	v.CapacityBytes = want
	if err := c.save(func() { v.CapacityBytes = old }); err != nil {
		return nil, err
	}
	c.log.Info("volume expanded", "volume_id", id, "capacity_bytes", want)
	// The capacity is bookkeeping: no file system needs to grow.
	return &csipb.ControllerExpandVolumeResponse{CapacityBytes: want, NodeExpansionRequired: false}, nil
}

func (c *controller) ControllerGetCapabilities(context.Context, *csipb.ControllerGetCapabilitiesRequest) (*csipb.ControllerGetCapabilitiesResponse, error) {
	types := []csipb.ControllerServiceCapability_RPC_Type{
		csipb.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csipb.ControllerServiceCapability_RPC_LIST_VOLUMES,
		csipb.ControllerServiceCapability_RPC_GET_VOLUME,
		csipb.ControllerServiceCapability_RPC_EXPAND_VOLUME,
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

// free is the part of Config.Capacity that no volume holds; c.mu is
// held. It is 0 when volumes recorded under a larger Capacity hold more.
func (c *controller) free() int64 {
	var used int64
	for _, v := range c.st.Volumes {
		used += v.CapacityBytes
	}
	return max(c.cfg.Capacity-used, 0)
}

// GetCapacity reports the free part of Config.Capacity for volumes
// reachable from the request's topology: all of it when the plugin's
// topology is on the requested one (or either is unset), none
// otherwise, and none for a block capability, which the plugin cannot
// provision. maximum_volume_size is the same figure, the largest volume
// that fits now; there is no minimum.
func (c *controller) GetCapacity(ctx context.Context, req *csipb.GetCapacityRequest) (*csipb.GetCapacityResponse, error) {
	if c.cfg.Capacity == 0 {
		return nil, status.Error(codes.Unimplemented, "GetCapacity: this plugin runs without a capacity (start it with -capacity BYTES)")
	}
	fits := true
	for _, vc := range req.GetVolumeCapabilities() {
		if vc.GetBlock() != nil {
			fits = false
			continue
		}
		if _, err := checkCapability("volume_capabilities", vc); err != nil {
			return nil, err
		}
	}
	if t := req.GetAccessibleTopology(); t != nil && !reachableFrom(c.cfg.Topology, t) {
		fits = false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var free int64
	if fits {
		free = c.free()
	}
	return &csipb.GetCapacityResponse{AvailableCapacity: free, MaximumVolumeSize: wrapperspb.Int64(free)}, nil
}
