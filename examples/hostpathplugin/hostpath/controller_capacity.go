package hostpath

import (
	"context"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

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
