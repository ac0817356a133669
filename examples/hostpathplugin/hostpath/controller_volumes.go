package hostpath

import (
	"context"
	"os"
	"strings"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

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
		return &csipb.ControllerExpandVolumeResponse{CapacityBytes: v.CapacityBytes, NodeExpansionRequired: true}, nil
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
	// The capacity is a quota the nodes record too (NodeExpandVolume).
	return &csipb.ControllerExpandVolumeResponse{CapacityBytes: want, NodeExpansionRequired: true}, nil
}
