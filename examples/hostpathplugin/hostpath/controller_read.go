package hostpath

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

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
