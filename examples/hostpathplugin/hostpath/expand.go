package hostpath

import (
	"context"
	"maps"
	"path/filepath"
	"slices"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Expansion and modify. A hostpath volume is a directory, so its size is
// a quota the plugin reports rather than a file system to grow:
//
//   - ControllerExpandVolume (controller_volumes.go) grows the volume's
//     recorded capacity within Config.Capacity and answers
//     node_expansion_required, as a block-backed plugin would.
//   - NodeExpandVolume records, in the node's state file, the size the
//     volume has on this node and answers it; it refuses a path where
//     the volume is neither staged nor published here.
//   - ControllerModifyVolume changes the one mutable parameter the
//     plugin knows, LabelParameter, a label kept on the volume's record
//     that changes nothing else; CreateVolume accepts it too.

// LabelParameter is the mutable parameter the plugin accepts
// (CreateVolume's mutable_parameters, ControllerModifyVolume).
const LabelParameter = "hostpath.csikit.io/label"

// checkMutable refuses mutable parameters the plugin does not know.
func checkMutable(field string, params map[string]string) error {
	for _, k := range slices.Sorted(maps.Keys(params)) {
		if k != LabelParameter {
			return status.Errorf(codes.InvalidArgument, "%s: %q is not a mutable parameter of the hostpath plugin; the only one is %q", field, k, LabelParameter)
		}
	}
	return nil
}

func (c *controller) ControllerModifyVolume(ctx context.Context, req *csipb.ControllerModifyVolumeRequest) (*csipb.ControllerModifyVolumeResponse, error) {
	id := req.GetVolumeId()
	if err := requireVolumeID(id); err != nil {
		return nil, err
	}
	params := req.GetMutableParameters()
	if len(params) == 0 {
		return nil, status.Error(codes.InvalidArgument, "mutable_parameters is required")
	}
	if err := checkMutable("mutable_parameters", params); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	v := c.volume(id)
	if v == nil {
		return nil, notFound(id)
	}
	if maps.Equal(v.MutableParameters, params) {
		return &csipb.ControllerModifyVolumeResponse{}, nil
	}
	old := v.MutableParameters
	v.MutableParameters = maps.Clone(params)
	if err := c.save(func() { v.MutableParameters = old }); err != nil {
		return nil, err
	}
	c.log.Info("volume modified", "volume_id", id, "label", params[LabelParameter])
	return &csipb.ControllerModifyVolumeResponse{}, nil
}

func (n *nodeService) NodeExpandVolume(ctx context.Context, req *csipb.NodeExpandVolumeRequest) (*csipb.NodeExpandVolumeResponse, error) {
	id := req.GetVolumeId()
	if err := requireVolumeID(id); err != nil {
		return nil, err
	}
	if req.GetVolumePath() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_path is required")
	}
	if req.GetVolumeCapability() != nil {
		if _, err := checkCapability("volume_capability", req.GetVolumeCapability()); err != nil {
			return nil, err
		}
	}
	r := req.GetCapacityRange()
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, err := n.volumeDir(id); err != nil {
		return nil, err
	}
	vp := filepath.Clean(req.GetVolumePath())
	p, s := n.st.Published[vp], n.st.Staged[vp]
	if (p == nil || p.VolumeID != id) && (s == nil || s.VolumeID != id) {
		return nil, status.Errorf(codes.NotFound, "volume %s is not published or staged at %s on this node", id, vp)
	}
	have := n.st.Expanded[id]
	if lim := r.GetLimitBytes(); lim > 0 && have > lim {
		return nil, status.Errorf(codes.OutOfRange, "volume %s has %d bytes on this node, more than limit_bytes %d; volumes cannot shrink", id, have, lim)
	}
	want := max(have, r.GetRequiredBytes())
	if want == have {
		return &csipb.NodeExpandVolumeResponse{CapacityBytes: have}, nil
	}
	if n.st.Expanded == nil {
		n.st.Expanded = map[string]int64{}
	}
	n.st.Expanded[id] = want
	if err := n.save(); err != nil {
		if have == 0 {
			delete(n.st.Expanded, id)
		} else {
			n.st.Expanded[id] = have
		}
		return nil, err
	}
	n.log.Info("volume expanded on the node", "volume_id", id, "capacity_bytes", want, "path", vp)
	return &csipb.NodeExpandVolumeResponse{CapacityBytes: want}, nil
}
