package hostpath

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

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
	if err := checkMutable("mutable_parameters", req.GetMutableParameters()); err != nil {
		return nil, 0, err
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
		ID:                newVolumeID(),
		Name:              name,
		CapacityBytes:     capacity,
		Capabilities:      caps,
		Parameters:        maps.Clone(req.GetParameters()),
		MutableParameters: maps.Clone(req.GetMutableParameters()),
		Topology:          maps.Clone(c.cfg.Topology),
		Published:         map[string]*publishRecord{},
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
