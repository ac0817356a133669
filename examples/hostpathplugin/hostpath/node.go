package hostpath

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// nodeState is the content of a node's state file: what this node plugin
// staged and published, so that a restarted plugin still answers repeated
// calls by the spec (OK for the same arguments, AlreadyExists for others)
// and still undoes exactly what it did.
type nodeState struct {
	Version   int                      `json:"version"`
	NodeID    string                   `json:"node_id"`
	Staged    map[string]*stageRecord  `json:"staged"`    // by staging path
	Published map[string]*targetRecord `json:"published"` // by target path
	// Expanded is the size NodeExpandVolume gave each volume here, by
	// volume ID (expand.go).
	Expanded map[string]int64 `json:"expanded,omitempty"`
}

type stageRecord struct {
	VolumeID   string      `json:"volume_id"`
	Capability capRecord   `json:"capability"`
	Method     MountMethod `json:"method"`
}

type targetRecord struct {
	VolumeID    string      `json:"volume_id"`
	StagingPath string      `json:"staging_path,omitempty"`
	Readonly    bool        `json:"readonly"`
	Capability  capRecord   `json:"capability"`
	Method      MountMethod `json:"method"`
}

// nodeService serves the CSI Node service. Like the controller, one
// mutex serializes every call.
type nodeService struct {
	csipb.UnimplementedNodeServer
	cfg        Config
	method     MountMethod
	log        hclog.Logger
	volumesDir string
	statePath  string
	lock       *os.File

	mu sync.Mutex
	st nodeState
}

var _ csipb.NodeServer = (*nodeService)(nil)

func openNode(cfg Config, method MountMethod) (*nodeService, error) {
	stem := nodeFileStem(cfg.NodeID)
	lock, err := lockFile(filepath.Join(cfg.DataDir, stem+".lock"), fmt.Sprintf("node %q", cfg.NodeID))
	if err != nil {
		return nil, err
	}
	n := &nodeService{
		cfg:        cfg,
		method:     method,
		log:        cfg.Logger.Named("node"),
		volumesDir: filepath.Join(cfg.DataDir, volumesDirName),
		statePath:  nodeStatePath(cfg.DataDir, cfg.NodeID),
		lock:       lock,
	}
	fail := func(err error) (*nodeService, error) {
		_ = lock.Close()
		return nil, err
	}
	if err := readJSON(n.statePath, &n.st); err != nil {
		return fail(err)
	}
	switch {
	case n.st.Version == 0:
		// A new node writes its state file at once: the file is how the
		// controller learns that the node exists (see nodeRegistered).
		n.st = nodeState{Version: stateVersion, NodeID: cfg.NodeID}
		if err := writeJSON(n.statePath, &n.st); err != nil {
			return fail(fmt.Errorf("register node %q in the data dir: %w", cfg.NodeID, err))
		}
	case n.st.Version != stateVersion:
		return fail(fmt.Errorf("state file %s has version %d, this plugin reads version %d", n.statePath, n.st.Version, stateVersion))
	case n.st.NodeID != cfg.NodeID:
		return fail(fmt.Errorf("state file %s belongs to node %q, not %q", n.statePath, n.st.NodeID, cfg.NodeID))
	}
	if n.st.Staged == nil {
		n.st.Staged = map[string]*stageRecord{}
	}
	if n.st.Published == nil {
		n.st.Published = map[string]*targetRecord{}
	}
	return n, nil
}

func (n *nodeService) close() { _ = n.lock.Close() }

func (n *nodeService) save() error {
	if err := writeJSON(n.statePath, &n.st); err != nil {
		return internal("%v", err)
	}
	return nil
}

// remember records r under key in m, one of the node state's maps, and
// saves the state; if saving fails it drops the record again, so that
// memory still matches the file, and returns save's error.
func remember[R any](m map[string]R, key string, r R, save func() error) error {
	m[key] = r
	if err := save(); err != nil {
		delete(m, key)
		return err
	}
	return nil
}

// forget drops key's record from m, one of the node state's maps, and
// saves the state; if saving fails it puts the record back, so that
// memory still matches the file, and returns save's error.
func forget[R any](m map[string]R, key string, save func() error) error {
	r, ok := m[key]
	delete(m, key)
	if err := save(); err != nil {
		if ok {
			m[key] = r
		}
		return err
	}
	return nil
}

// volumeDir returns the directory of volume id after checking that the
// ID has the plugin's format and the directory exists; otherwise
// NotFound.
func (n *nodeService) volumeDir(id string) (string, error) {
	if !validVolumeID(id) {
		return "", notFound(id)
	}
	dir := filepath.Join(n.volumesDir, id)
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", notFound(id)
	case err != nil:
		return "", internal("inspect volume %s: %v", id, err)
	case !fi.IsDir():
		return "", internal("volume %s: %s is not a directory", id, dir)
	}
	return dir, nil
}

// checkPath validates a path the CO sends: required, absolute, and not
// inside the volumes directory (a volume mounted into itself or into
// another volume would be a loop the CO never means).
func (n *nodeService) checkPath(field, p string) (string, error) {
	if p == "" {
		return "", status.Errorf(codes.InvalidArgument, "%s is required", field)
	}
	if !filepath.IsAbs(p) {
		return "", status.Errorf(codes.InvalidArgument, "%s %q must be an absolute path", field, p)
	}
	if strings.ContainsRune(p, 0) {
		return "", status.Errorf(codes.InvalidArgument, "%s contains a NUL byte", field)
	}
	p = filepath.Clean(p)
	if p == n.volumesDir || strings.HasPrefix(p, n.volumesDir+string(filepath.Separator)) {
		return "", status.Errorf(codes.InvalidArgument, "%s %q is inside the plugin's volume directory %s; use a path outside it", field, p, n.volumesDir)
	}
	return p, nil
}

// checkVolumePath checks what the node calls that name a volume and a
// path share: the volume ID is required and the path passes checkPath.
// It returns the cleaned path.
func (n *nodeService) checkVolumePath(id, field, p string) (string, error) {
	if err := requireVolumeID(id); err != nil {
		return "", err
	}
	return n.checkPath(field, p)
}

// checkPublishContext makes sure, when the controller publishes volumes,
// that the CO passes the publish context ControllerPublishVolume returned
// for this node.
func (n *nodeService) checkPublishContext(id string, pc map[string]string) error {
	if !n.cfg.ControllerPublish {
		return nil
	}
	switch node := pc[publishContextNode]; {
	case node == "":
		return status.Errorf(codes.FailedPrecondition,
			"volume %s: publish_context lacks %q, so the volume was not ControllerPublished to this node: call ControllerPublishVolume with node ID %q and pass the publish_context it returns",
			id, publishContextNode, n.cfg.NodeID)
	case node != n.cfg.NodeID:
		return status.Errorf(codes.FailedPrecondition,
			"volume %s was ControllerPublished to node %q, but this is node %q: publish it to this node first", id, node, n.cfg.NodeID)
	}
	return nil
}

func (n *nodeService) requireStaging(method string) error {
	if n.cfg.Staging {
		return nil
	}
	return status.Errorf(codes.Unimplemented, "%s: this plugin runs without the STAGE_UNSTAGE_VOLUME capability (start it with -staging)", method)
}

func (n *nodeService) NodeStageVolume(ctx context.Context, req *csipb.NodeStageVolumeRequest) (*csipb.NodeStageVolumeResponse, error) {
	if err := n.requireStaging("NodeStageVolume"); err != nil {
		return nil, err
	}
	id := req.GetVolumeId()
	sp, err := n.checkVolumePath(id, "staging_target_path", req.GetStagingTargetPath())
	if err != nil {
		return nil, err
	}
	capab, err := checkCapability("volume_capability", req.GetVolumeCapability())
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	dir, err := n.volumeDir(id)
	if err != nil {
		return nil, err
	}
	if err := n.checkPublishContext(id, req.GetPublishContext()); err != nil {
		return nil, err
	}
	if r := n.st.Staged[sp]; r != nil {
		if r.VolumeID != id {
			return nil, status.Errorf(codes.AlreadyExists, "staging path %s already holds volume %s; unstage it first or use another path", sp, r.VolumeID)
		}
		if !r.Capability.equal(capab) {
			return nil, status.Errorf(codes.AlreadyExists,
				"volume %s is already staged at %s with access mode %s; unstage it before staging it with access mode %s", id, sp, r.Capability.AccessMode, capab.AccessMode)
		}
		// Repeated call: make sure the work is still in place.
		if err := attach(r.Method, dir, sp, false); err != nil {
			return nil, err
		}
		return &csipb.NodeStageVolumeResponse{}, nil
	}
	for other, r := range n.st.Staged {
		if r.VolumeID == id {
			return nil, status.Errorf(codes.FailedPrecondition,
				"volume %s is already staged at %s on this node; a volume has one staging path per node, unstage it there first", id, other)
		}
	}
	if err := attach(n.method, dir, sp, false); err != nil {
		return nil, err
	}
	if err := remember(n.st.Staged, sp, &stageRecord{VolumeID: id, Capability: capab, Method: n.method}, n.save); err != nil {
		_ = detach(sp, true, nil, false, true)
		return nil, err
	}
	n.log.Info("volume staged", "volume_id", id, "staging_path", sp, "method", n.method)
	return &csipb.NodeStageVolumeResponse{}, nil
}

func (n *nodeService) NodeUnstageVolume(ctx context.Context, req *csipb.NodeUnstageVolumeRequest) (*csipb.NodeUnstageVolumeResponse, error) {
	if err := n.requireStaging("NodeUnstageVolume"); err != nil {
		return nil, err
	}
	id := req.GetVolumeId()
	sp, err := n.checkVolumePath(id, "staging_target_path", req.GetStagingTargetPath())
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	r := n.st.Staged[sp]
	if r != nil && r.VolumeID != id {
		return nil, status.Errorf(codes.FailedPrecondition, "staging path %s holds volume %s, not %s; check the volume ID", sp, r.VolumeID, id)
	}
	for _, t := range n.sortedTargets() {
		if p := n.st.Published[t]; p.VolumeID == id && p.StagingPath == sp {
			return nil, status.Errorf(codes.FailedPrecondition,
				"volume %s is still published at %s from staging path %s; call NodeUnpublishVolume for every target first", id, t, sp)
		}
	}
	if r == nil && !validVolumeID(id) {
		return &csipb.NodeUnstageVolumeResponse{}, nil // never staged by this plugin
	}
	// Without a record (a crash between staging and saving) only a link
	// to, or a mount of, this volume's directory is undone.
	sources := []string{filepath.Join(n.volumesDir, id)} // id checked above or by its record
	if err := detach(sp, r != nil, sources, false, true); err != nil {
		return nil, err
	}
	if r == nil {
		return &csipb.NodeUnstageVolumeResponse{}, nil
	}
	if err := forget(n.st.Staged, sp, n.save); err != nil {
		return nil, err
	}
	n.log.Info("volume unstaged", "volume_id", id, "staging_path", sp)
	return &csipb.NodeUnstageVolumeResponse{}, nil
}

func (n *nodeService) NodePublishVolume(ctx context.Context, req *csipb.NodePublishVolumeRequest) (*csipb.NodePublishVolumeResponse, error) {
	id := req.GetVolumeId()
	target, err := n.checkVolumePath(id, "target_path", req.GetTargetPath())
	if err != nil {
		return nil, err
	}
	capab, err := checkCapability("volume_capability", req.GetVolumeCapability())
	if err != nil {
		return nil, err
	}
	var sp string
	if n.cfg.Staging {
		if req.GetStagingTargetPath() == "" {
			return nil, status.Errorf(codes.FailedPrecondition,
				"volume %s: staging_target_path is not set, but this plugin has STAGE_UNSTAGE_VOLUME: call NodeStageVolume first and pass its staging path", id)
		}
		if sp, err = n.checkPath("staging_target_path", req.GetStagingTargetPath()); err != nil {
			return nil, err
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	source, err := n.volumeDir(id)
	if err != nil {
		return nil, err
	}
	if err := n.checkPublishContext(id, req.GetPublishContext()); err != nil {
		return nil, err
	}
	if sp != "" {
		if r := n.st.Staged[sp]; r == nil || r.VolumeID != id {
			return nil, status.Errorf(codes.FailedPrecondition, "volume %s is not staged at %s; call NodeStageVolume first", id, sp)
		}
		source = sp
	}
	ro := req.GetReadonly() || capab.readerOnly()

	if r := n.st.Published[target]; r != nil {
		if r.VolumeID != id {
			return nil, status.Errorf(codes.AlreadyExists, "target path %s already holds volume %s; unpublish it first or use another path", target, r.VolumeID)
		}
		if r.Readonly != req.GetReadonly() || !r.Capability.equal(capab) || r.StagingPath != sp {
			return nil, status.Errorf(codes.AlreadyExists,
				"volume %s is already published at %s with readonly=%t and access mode %s; unpublish it before publishing it with readonly=%t and access mode %s",
				id, target, r.Readonly, r.Capability.AccessMode, req.GetReadonly(), capab.AccessMode)
		}
		if err := attach(r.Method, source, target, ro); err != nil {
			return nil, err
		}
		return &csipb.NodePublishVolumeResponse{}, nil
	}
	if err := n.checkSecondTarget(id, capab); err != nil {
		return nil, err
	}
	if err := attach(n.method, source, target, ro); err != nil {
		return nil, err
	}
	rec := &targetRecord{VolumeID: id, StagingPath: sp, Readonly: req.GetReadonly(), Capability: capab, Method: n.method}
	if err := remember(n.st.Published, target, rec, n.save); err != nil {
		_ = detach(target, true, nil, true, false)
		return nil, err
	}
	if ro && n.method == MountSymlink {
		n.log.Warn("read-only publish is not enforced by the symlink mount method", "volume_id", id, "target", target)
	}
	n.log.Info("volume published", "volume_id", id, "target", target, "readonly", ro, "method", n.method)
	return &csipb.NodePublishVolumeResponse{}, nil
}

// checkSecondTarget refuses a new target of volume id when it or a
// target the volume already has is SINGLE_NODE_SINGLE_WRITER. The spec's
// table for a second target of one volume on one node asks
// FAILED_PRECONDITION for every non-MULTI_NODE mode; the plugin enforces
// it only for SINGLE_NODE_SINGLE_WRITER: for the other single-node modes
// a CO may rightly give each reader on the node its own target, and a
// directory serves them all. The caller holds n.mu.
func (n *nodeService) checkSecondTarget(id string, capab capRecord) error {
	for _, t := range n.sortedTargets() {
		p := n.st.Published[t]
		if p.VolumeID != id {
			continue
		}
		if capab.mode() == csipb.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER ||
			p.Capability.mode() == csipb.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER {
			return status.Errorf(codes.FailedPrecondition,
				"volume %s is already published at %s and SINGLE_NODE_SINGLE_WRITER allows one target; unpublish it there first", id, t)
		}
	}
	return nil
}

func (n *nodeService) NodeUnpublishVolume(ctx context.Context, req *csipb.NodeUnpublishVolumeRequest) (*csipb.NodeUnpublishVolumeResponse, error) {
	id := req.GetVolumeId()
	target, err := n.checkVolumePath(id, "target_path", req.GetTargetPath())
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	r := n.st.Published[target]
	if r != nil && r.VolumeID != id {
		return nil, status.Errorf(codes.FailedPrecondition, "target path %s holds volume %s, not %s; check the volume ID", target, r.VolumeID, id)
	}
	if r == nil && !validVolumeID(id) {
		return &csipb.NodeUnpublishVolumeResponse{}, nil // never published by this plugin
	}
	// Without a record (a crash between publishing and saving) only a
	// link to, or a mount of, this volume is undone.
	sources := []string{filepath.Join(n.volumesDir, id)} // id checked above or by its record
	for sp, s := range n.st.Staged {
		if s.VolumeID == id {
			sources = append(sources, sp)
		}
	}
	if err := detach(target, r != nil, sources, true, false); err != nil {
		return nil, err
	}
	if r == nil {
		return &csipb.NodeUnpublishVolumeResponse{}, nil
	}
	if err := forget(n.st.Published, target, n.save); err != nil {
		return nil, err
	}
	n.log.Info("volume unpublished", "volume_id", id, "target", target)
	return &csipb.NodeUnpublishVolumeResponse{}, nil
}

func (n *nodeService) NodeGetVolumeStats(ctx context.Context, req *csipb.NodeGetVolumeStatsRequest) (*csipb.NodeGetVolumeStatsResponse, error) {
	id := req.GetVolumeId()
	if err := requireVolumeID(id); err != nil {
		return nil, err
	}
	if req.GetVolumePath() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_path is required")
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	// The spec's order: an unknown volume is NotFound whatever path comes
	// with it; then a path where the volume is neither staged nor
	// published is NotFound too (the spec's one error for this call),
	// whatever its form. Only a recorded path, which passed checkPath
	// when it was staged or published, reaches statfs.
	if _, err := n.volumeDir(id); err != nil {
		return nil, err
	}
	vp := filepath.Clean(req.GetVolumePath())
	p, s := n.st.Published[vp], n.st.Staged[vp]
	if (p == nil || p.VolumeID != id) && (s == nil || s.VolumeID != id) {
		return nil, status.Errorf(codes.NotFound, "volume %s is not published or staged at %s on this node", id, vp)
	}
	bytes, inodes, err := volumeUsage(vp)
	if err != nil {
		return nil, internal("volume %s: %v", id, err)
	}
	return &csipb.NodeGetVolumeStatsResponse{Usage: []*csipb.VolumeUsage{
		{Unit: csipb.VolumeUsage_BYTES, Total: bytes.total, Available: bytes.available, Used: bytes.used},
		{Unit: csipb.VolumeUsage_INODES, Total: inodes.total, Available: inodes.available, Used: inodes.used},
	}}, nil
}

func (n *nodeService) NodeGetCapabilities(context.Context, *csipb.NodeGetCapabilitiesRequest) (*csipb.NodeGetCapabilitiesResponse, error) {
	types := []csipb.NodeServiceCapability_RPC_Type{
		csipb.NodeServiceCapability_RPC_GET_VOLUME_STATS,
		csipb.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
		csipb.NodeServiceCapability_RPC_EXPAND_VOLUME,
	}
	if n.cfg.Staging {
		types = append(types, csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME)
	}
	resp := &csipb.NodeGetCapabilitiesResponse{}
	for _, t := range types {
		resp.Capabilities = append(resp.Capabilities, &csipb.NodeServiceCapability{
			Type: &csipb.NodeServiceCapability_Rpc{Rpc: &csipb.NodeServiceCapability_RPC{Type: t}},
		})
	}
	return resp, nil
}

func (n *nodeService) NodeGetInfo(context.Context, *csipb.NodeGetInfoRequest) (*csipb.NodeGetInfoResponse, error) {
	resp := &csipb.NodeGetInfoResponse{NodeId: n.cfg.NodeID, MaxVolumesPerNode: n.cfg.MaxVolumes}
	if len(n.cfg.Topology) > 0 {
		resp.AccessibleTopology = &csipb.Topology{Segments: maps.Clone(n.cfg.Topology)}
	}
	return resp, nil
}

func (n *nodeService) sortedTargets() []string {
	return slices.Sorted(maps.Keys(n.st.Published))
}
