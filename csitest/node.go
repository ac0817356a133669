package csitest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
)

type nodeServer struct {
	csipb.UnimplementedNodeServer
	p *Plugin
}

var _ csipb.NodeServer = nodeServer{}

// nodeVolumeLocked finds the volume a node call names, admitting it when
// Config.AdmitUnknownVolumes is set; p.mu is held.
func (p *Plugin) nodeVolumeLocked(method, id string, volumeContext map[string]string) (*volume, error) {
	if v := p.volumes[id]; v != nil {
		return v, nil
	}
	if !p.admitUnknown {
		return nil, errorf(codes.NotFound, method, "volume %q does not exist; create it, or AddVolume it to the fake first", id)
	}
	v := newVolume(id)
	v.pool = p.defaultPool()
	v.context = maps.Clone(volumeContext)
	p.volumes[id] = v
	return v, nil
}

// nodeVolumeAtLocked does what NodeStageVolume and NodePublishVolume do
// first: it refuses a relative path (paths alternates field names and
// values; an empty value is an optional path not given) and then finds or
// admits the volume; p.mu is held.
func (p *Plugin) nodeVolumeAtLocked(method, id string, volumeContext map[string]string, paths ...string) (*volume, error) {
	for i := 0; i+1 < len(paths); i += 2 {
		if paths[i+1] == "" {
			continue
		}
		if err := p.checkAbsLocked(method, id, paths[i], paths[i+1]); err != nil {
			return nil, err
		}
	}
	return p.nodeVolumeLocked(method, id, volumeContext)
}

// checkAbsLocked records a violation and refuses a path that is not
// absolute; the spec requires absolute paths and a relative one would
// land in the test's working directory.
func (p *Plugin) checkAbsLocked(method, id, field, path string) error {
	if filepath.IsAbs(path) {
		return nil
	}
	p.violateLocked(method, id, RuleRelativePath, "%s %q is not an absolute path", field, path)
	return errorf(codes.InvalidArgument, method, "%s %q must be an absolute path", field, path)
}

// checkControllerPublishLocked checks, on a monolith that needs
// ControllerPublishVolume, that the volume was published to this node
// and that the node call passed its publish context through.
func (p *Plugin) checkControllerPublishLocked(method string, v *volume, publishContext map[string]string) {
	if p.typ != csi.PluginTypeMonolith || !p.ctrlCaps.PublishUnpublishVolume {
		return
	}
	a := v.attachments[p.nodeID]
	if a == nil {
		p.violateLocked(method, v.id, RuleMissingControllerPublish, "volume is not ControllerPublished to node %q", p.nodeID)
		return
	}
	if !maps.Equal(a.publishContext, publishContext) {
		p.violateLocked(method, v.id, RulePublishContextMismatch, "publish_context is %v; ControllerPublishVolume returned %v", publishContext, a.publishContext)
	}
}

func writeMarker(dir, id string) error {
	return os.WriteFile(filepath.Join(dir, MarkerFile), []byte(id), 0o640)
}

func (s nodeServer) NodeStageVolume(_ context.Context, req *csipb.NodeStageVolumeRequest) (*csipb.NodeStageVolumeResponse, error) {
	const m = MethodNodeStageVolume
	id, path, vc := req.GetVolumeId(), req.GetStagingTargetPath(), req.GetVolumeCapability()
	if err := requireFieldsAndCapability(m, vc, "volume_id", id, "staging_target_path", path); err != nil {
		return nil, err
	}
	p := s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	v, err := p.nodeVolumeAtLocked(m, id, req.GetVolumeContext(), "staging_target_path", path)
	if err != nil {
		return nil, err
	}
	p.checkControllerPublishLocked(m, v, req.GetPublishContext())
	if st := v.staged[path]; st != nil && !proto.Equal(st.capability, vc) {
		return nil, errorf(codes.AlreadyExists, m, "volume %q is already staged at %q with another capability; unstage it first", id, path)
	}
	// The CO owns the staging directory; create it when missing so that
	// a test need not, and put the stand-in file system in it.
	if err := os.MkdirAll(path, 0o750); err != nil {
		return nil, errorf(codes.Internal, m, "create staging directory %q: %v", path, err)
	}
	if err := writeMarker(path, id); err != nil {
		return nil, errorf(codes.Internal, m, "stage volume %q at %q: %v", id, path, err)
	}
	if v.staged[path] == nil {
		v.staged[path] = &staging{
			capability:     cloneCapability(vc),
			publishContext: maps.Clone(req.GetPublishContext()),
			volumeContext:  maps.Clone(req.GetVolumeContext()),
		}
	}
	return &csipb.NodeStageVolumeResponse{}, nil
}

func (s nodeServer) NodeUnstageVolume(_ context.Context, req *csipb.NodeUnstageVolumeRequest) (*csipb.NodeUnstageVolumeResponse, error) {
	const m = MethodNodeUnstageVolume
	id, path := req.GetVolumeId(), req.GetStagingTargetPath()
	if err := requireFields(m, "volume_id", id, "staging_target_path", path); err != nil {
		return nil, err
	}
	p := s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	v := p.volumes[id]
	if v == nil || v.staged[path] == nil {
		return &csipb.NodeUnstageVolumeResponse{}, nil
	}
	if len(v.published) > 0 {
		p.violateLocked(m, id, RuleUnstageWhilePublished, "volume is still published at %d target(s)", len(v.published))
	}
	if err := os.Remove(filepath.Join(path, MarkerFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, errorf(codes.Internal, m, "unstage volume %q from %q: %v", id, path, err)
	}
	delete(v.staged, path)
	return &csipb.NodeUnstageVolumeResponse{}, nil
}

func (s nodeServer) NodePublishVolume(_ context.Context, req *csipb.NodePublishVolumeRequest) (*csipb.NodePublishVolumeResponse, error) {
	const m = MethodNodePublishVolume
	id, target, staging, vc := req.GetVolumeId(), req.GetTargetPath(), req.GetStagingTargetPath(), req.GetVolumeCapability()
	if err := requireFieldsAndCapability(m, vc, "volume_id", id, "target_path", target); err != nil {
		return nil, err
	}
	p := s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	v, err := p.nodeVolumeAtLocked(m, id, req.GetVolumeContext(), "target_path", target, "staging_target_path", staging)
	if err != nil {
		return nil, err
	}
	if p.nodeCaps.StageUnstageVolume {
		switch {
		case len(v.staged) == 0:
			p.violateLocked(m, id, RulePublishBeforeStage, "volume is not staged and the plugin advertises STAGE_UNSTAGE_VOLUME")
			return nil, errorf(codes.FailedPrecondition, m, "volume %q is not staged; call NodeStageVolume first", id)
		case v.staged[staging] == nil:
			p.violateLocked(m, id, RuleWrongStagingPath, "staging_target_path %q is not where the volume is staged", staging)
			return nil, errorf(codes.FailedPrecondition, m, "volume %q is not staged at %q", id, staging)
		}
	}
	p.checkControllerPublishLocked(m, v, req.GetPublishContext())

	if pub := v.published[target]; pub != nil {
		if pub.readonly != req.GetReadonly() || !proto.Equal(pub.capability, vc) || pub.stagingPath != staging {
			return nil, errorf(codes.AlreadyExists, m, "volume %q is already published at %q with another capability, readonly flag or staging path", id, target)
		}
		return &csipb.NodePublishVolumeResponse{}, nil
	}
	for other, pub := range v.published {
		if csi.AccessMode(vc.GetAccessMode().GetMode()) == csi.AccessModeSingleNodeSingleWriter ||
			csi.AccessMode(pub.capability.GetAccessMode().GetMode()) == csi.AccessModeSingleNodeSingleWriter {
			p.violateLocked(m, id, RuleIncompatiblePublish, "single-writer volume is published at %q and was asked for %q", other, target)
			return nil, errorf(codes.FailedPrecondition, m, "volume %q is published at %q and its access mode allows one workload; unpublish it there first", id, other)
		}
	}

	if fi, err := os.Stat(filepath.Dir(target)); err != nil || !fi.IsDir() {
		p.violateLocked(m, id, RuleMissingTargetParent, "parent directory of target_path %q does not exist", target)
		return nil, errorf(codes.FailedPrecondition, m, "the parent directory of target path %q does not exist; the CO must create it", target)
	}
	if vc.GetBlock() != nil {
		err = makeBlockTarget(target)
	} else {
		err = makeMountTarget(target, id)
	}
	if err != nil {
		return nil, errorf(codes.FailedPrecondition, m, "publish volume %q at %q: %v", id, target, err)
	}
	v.published[target] = &publication{
		stagingPath:    staging,
		readonly:       req.GetReadonly(),
		capability:     cloneCapability(vc),
		publishContext: maps.Clone(req.GetPublishContext()),
		volumeContext:  maps.Clone(req.GetVolumeContext()),
	}
	return &csipb.NodePublishVolumeResponse{}, nil
}

// makeMountTarget creates the target directory, which must be missing or
// empty (a republish finds only the marker), and the stand-in file system.
// Refusing a non-empty directory keeps NodeUnpublishVolume's removal
// from deleting anything the fake did not create.
func makeMountTarget(target, id string) error {
	fi, err := os.Lstat(target)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.Mkdir(target, 0o750); err != nil {
			return err
		}
	case err != nil:
		return err
	case !fi.IsDir():
		return errors.New("the target exists and is not a directory")
	default:
		entries, err := os.ReadDir(target)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if e.Name() != MarkerFile {
				return fmt.Errorf("the target directory is not empty (it holds %q)", e.Name())
			}
		}
	}
	return writeMarker(target, id)
}

// makeBlockTarget creates the empty file that stands in for the device.
func makeBlockTarget(target string) error {
	fi, err := os.Lstat(target)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		f, err := os.OpenFile(target, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o640)
		if err != nil {
			return err
		}
		return f.Close()
	case err != nil:
		return err
	case !fi.Mode().IsRegular() || fi.Size() != 0:
		return errors.New("the target exists and is not an empty file")
	}
	return nil
}

func (s nodeServer) NodeUnpublishVolume(_ context.Context, req *csipb.NodeUnpublishVolumeRequest) (*csipb.NodeUnpublishVolumeResponse, error) {
	const m = MethodNodeUnpublishVolume
	id, target := req.GetVolumeId(), req.GetTargetPath()
	if err := requireFields(m, "volume_id", id, "target_path", target); err != nil {
		return nil, err
	}
	p := s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	v := p.volumes[id]
	if v == nil {
		return &csipb.NodeUnpublishVolumeResponse{}, nil
	}
	pub := v.published[target]
	if pub == nil {
		return &csipb.NodeUnpublishVolumeResponse{}, nil
	}
	var err error
	if pub.capability.GetBlock() != nil {
		err = os.Remove(target)
	} else {
		// NodePublishVolume made this directory and found it empty; what
		// is in it now was written "on the volume".
		err = os.RemoveAll(target)
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, errorf(codes.Internal, m, "remove target %q of volume %q: %v", target, id, err)
	}
	delete(v.published, target)
	return &csipb.NodeUnpublishVolumeResponse{}, nil
}

func (s nodeServer) NodeGetVolumeStats(_ context.Context, req *csipb.NodeGetVolumeStatsRequest) (*csipb.NodeGetVolumeStatsResponse, error) {
	const m = MethodNodeGetVolumeStats
	id, path := req.GetVolumeId(), req.GetVolumePath()
	if err := requireFields(m, "volume_id", id, "volume_path", path); err != nil {
		return nil, err
	}
	p := s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	v, err := p.nodePathLocked(m, id, path)
	if err != nil {
		return nil, err
	}
	return p.volumeStatsLocked(v), nil
}

// nodePathLocked finds a volume staged or published at path; p.mu is
// held.
func (p *Plugin) nodePathLocked(method, id, path string) (*volume, error) {
	v, err := p.volumeLocked(method, id)
	if err != nil {
		return nil, err
	}
	if v.staged[path] == nil && v.published[path] == nil {
		return nil, errorf(codes.NotFound, method, "volume %q is neither staged nor published at %q", id, path)
	}
	return v, nil
}

func (s nodeServer) NodeExpandVolume(_ context.Context, req *csipb.NodeExpandVolumeRequest) (*csipb.NodeExpandVolumeResponse, error) {
	const m = MethodNodeExpandVolume
	id, path := req.GetVolumeId(), req.GetVolumePath()
	if err := requireFields(m, "volume_id", id, "volume_path", path); err != nil {
		return nil, err
	}
	if err := checkExpand(m, req.GetVolumeCapability(), req.GetCapacityRange()); err != nil {
		return nil, err
	}
	p := s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	v, err := p.nodePathLocked(m, id, path)
	if err != nil {
		return nil, err
	}
	p.checkNodeExpandLocked(m, v, req.GetCapacityRange())
	if err := p.growLocked(m, v, req.GetCapacityRange()); err != nil {
		return nil, err
	}
	return &csipb.NodeExpandVolumeResponse{CapacityBytes: v.capacity}, nil
}

func (s nodeServer) NodeGetCapabilities(context.Context, *csipb.NodeGetCapabilitiesRequest) (*csipb.NodeGetCapabilitiesResponse, error) {
	p := s.p
	p.mu.Lock()
	c := p.nodeCaps
	p.mu.Unlock()
	return &csipb.NodeGetCapabilitiesResponse{Capabilities: plugin.NodeCapabilitiesToPB(c)}, nil
}

func (s nodeServer) NodeGetInfo(context.Context, *csipb.NodeGetInfoRequest) (*csipb.NodeGetInfoResponse, error) {
	p := s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	resp := &csipb.NodeGetInfoResponse{NodeId: p.nodeID, MaxVolumesPerNode: p.maxVolumes}
	if p.topology != nil {
		resp.AccessibleTopology = &csipb.Topology{Segments: maps.Clone(p.topology.Segments)}
	}
	return resp, nil
}
