package plugin_test

import (
	"errors"
	"testing"

	"google.golang.org/grpc/codes"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/csitest"
)

const gib int64 = 1 << 30

func zone(z string) *csi.Topology { return &csi.Topology{Segments: map[string]string{"zone": z}} }

// zonalPlugin serves a controller with 10 GiB in zone a (volumes of at
// most 4 GiB), a fast class of 2 GiB in zone a (at least 1 GiB a
// volume), and nothing in zone b.
func zonalPlugin(t *testing.T) *csitest.Plugin {
	t.Helper()
	return csitest.Start(t, csitest.Config{
		Controller:         csi.ControllerCapabilities{CreateDeleteVolume: true, GetCapacity: true, GetVolume: true},
		RequiresTopologies: true, Topology: zone("a"),
		Pools: []csitest.Pool{
			{Topology: zone("a"), Capacity: 10 * gib, MaxVolumeSize: new(4 * gib)},
			{Topology: zone("a"), Parameters: map[string]string{"tier": "fast"}, Capacity: 2 * gib, MinVolumeSize: new(gib)},
			{Topology: zone("b")},
		},
	})
}

// TestClient_GetCapacity asks a zonal plugin for its capacity by
// topology and class over the socket: each answer is the plugin's, and
// a bound the plugin does not report stays nil rather than 0.
func TestClient_GetCapacity(t *testing.T) {
	p := zonalPlugin(t)
	c := newClient(t, p.Addr(), nil)
	tests := []struct {
		name     string
		req      *plugin.GetCapacityRequest
		want     int64
		max, min *int64
	}{
		{"nil request: everything", nil, 10 * gib, new(4 * gib), nil},
		{"zone a", &plugin.GetCapacityRequest{Topology: zone("a")}, 10 * gib, new(4 * gib), nil},
		{"zone a, fast", &plugin.GetCapacityRequest{Topology: zone("a"), Parameters: map[string]string{"tier": "fast"}},
			12 * gib, new(4 * gib), new(int64(0))},
		{"zone b has none", &plugin.GetCapacityRequest{Topology: zone("b")}, 0, nil, nil},
		{"zone c is unknown", &plugin.GetCapacityRequest{Topology: zone("c")}, 0, nil, nil},
		{"with capabilities", &plugin.GetCapacityRequest{Capabilities: []csi.Capability{fsCap, blockCap},
			MountOptions: &csi.MountOptions{FSType: "xfs"}, Topology: zone("a")}, 10 * gib, new(4 * gib), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := c.GetCapacity(t.Context(), tt.req)
			noErr(t, err, "GetCapacity")
			eq(t, &plugin.GetCapacityResponse{Available: tt.want, MaximumVolumeSize: tt.max, MinimumVolumeSize: tt.min}, got, "GetCapacity")

			// The plugin got the request as it was meant.
			calls := p.CallsTo(csitest.MethodGetCapacity)
			sent := calls[len(calls)-1].Request.(*csipb.GetCapacityRequest)
			var r plugin.GetCapacityRequest
			if tt.req != nil {
				r = *tt.req
			}
			if r.Topology == nil {
				eq(t, (*csipb.Topology)(nil), sent.GetAccessibleTopology(), "accessible_topology sent")
			} else {
				eq(t, r.Topology.Segments, sent.GetAccessibleTopology().GetSegments(), "accessible_topology sent")
			}
			if len(r.Parameters)+len(sent.GetParameters()) > 0 {
				eq(t, r.Parameters, sent.GetParameters(), "parameters sent")
			}
			eq(t, len(r.Capabilities), len(sent.GetVolumeCapabilities()), "capabilities sent")
			if len(r.Capabilities) > 0 {
				eq(t, "xfs", sent.GetVolumeCapabilities()[0].GetMount().GetFsType(), "fs type sent")
				if sent.GetVolumeCapabilities()[1].GetBlock() == nil {
					t.Errorf("the block capability went out as %v", sent.GetVolumeCapabilities()[1])
				}
			}
		})
	}
}

// TestClient_GetCapacity_DrawnByCreate: what CreateVolume takes from a
// zone GetCapacity no longer reports, and a zone without room refuses
// a volume with ResourceExhausted (Retryable: another zone may do), a
// size above the zone's maximum with OutOfRange (Final).
func TestClient_GetCapacity_DrawnByCreate(t *testing.T) {
	p := zonalPlugin(t)
	c := newClient(t, p.Addr(), func(cfg *plugin.Config) { cfg.MaxRetries = -1 })
	ctx := t.Context()
	vol, err := c.CreateVolume(ctx, &plugin.CreateVolumeRequest{Name: "a1", CapacityMin: 3 * gib, Capabilities: []csi.Capability{fsCap},
		Topology: &csi.TopologyRequest{Required: []*csi.Topology{zone("b"), zone("a")}, Preferred: []*csi.Topology{zone("b")}}})
	noErr(t, err, "CreateVolume in zone a")
	eq(t, []*csi.Topology{zone("a")}, vol.Topologies, "the volume's topology")
	got, err := c.GetCapacity(ctx, &plugin.GetCapacityRequest{Topology: zone("a")})
	noErr(t, err, "GetCapacity")
	eq(t, 7*gib, got.Available, "zone a after a 3 GiB volume")

	_, err = c.CreateVolume(ctx, &plugin.CreateVolumeRequest{Name: "b1", CapacityMin: gib, Capabilities: []csi.Capability{fsCap},
		Topology: &csi.TopologyRequest{Required: []*csi.Topology{zone("b")}}})
	rpcErr(t, err, "CreateVolume", codes.ResourceExhausted, csi.ClassRetryable)
	_, err = c.CreateVolume(ctx, &plugin.CreateVolumeRequest{Name: "big", CapacityMin: 5 * gib, Capabilities: []csi.Capability{fsCap},
		Topology: &csi.TopologyRequest{Required: []*csi.Topology{zone("a")}}})
	rpcErr(t, err, "CreateVolume", codes.OutOfRange, csi.ClassFinal)
}

func TestClient_GetCapacity_NotAdvertised(t *testing.T) {
	p := csitest.Start(t, csitest.Config{Controller: csi.ControllerCapabilities{CreateDeleteVolume: true}})
	c := newClient(t, p.Addr(), nil)
	_, err := c.GetCapacity(t.Context(), nil)
	rpcErr(t, err, "GetCapacity", codes.Unimplemented, csi.ClassFinal)
}

// TestClient_ControllerGetVolume reads a volume back in each status
// shape a plugin may send: none, published nodes only (CSI 1.13), and
// with the condition of a plugin of CSI 1.12 or earlier.
func TestClient_ControllerGetVolume(t *testing.T) {
	tests := []struct {
		reply    csitest.StatusReply
		abnormal bool
		want     *plugin.VolumeStatus
	}{
		{csitest.StatusAbsent, false, nil},
		{csitest.StatusPublishedNodes, false, &plugin.VolumeStatus{PublishedNodeIDs: []string{"node-1"}}},
		{csitest.StatusWithCondition, false, &plugin.VolumeStatus{PublishedNodeIDs: []string{"node-1"}, Condition: &plugin.VolumeCondition{}}},
		{csitest.StatusWithCondition, true, &plugin.VolumeStatus{PublishedNodeIDs: []string{"node-1"},
			Condition: &plugin.VolumeCondition{Abnormal: true, Message: "disk /dev/sdq is read-only"}}},
	}
	for _, tt := range tests {
		name := tt.reply.String()
		if tt.abnormal {
			name += "/abnormal"
		}
		t.Run(name, func(t *testing.T) {
			p := csitest.Start(t, csitest.Config{
				Controller:         csi.ControllerCapabilities{CreateDeleteVolume: true, PublishUnpublishVolume: true, GetVolume: true},
				RequiresTopologies: true, Topology: zone("a"), VolumeStatus: tt.reply,
			})
			c := newClient(t, p.Addr(), nil)
			ctx := t.Context()
			vol, err := c.CreateVolume(ctx, &plugin.CreateVolumeRequest{Name: "v", CapacityMin: gib, Capabilities: []csi.Capability{fsCap}})
			noErr(t, err, "CreateVolume")
			_, err = c.ControllerPublishVolume(ctx, &plugin.ControllerPublishRequest{ExternalID: vol.ExternalID, ExternalNodeID: "node-1", Capability: fsCap})
			noErr(t, err, "ControllerPublishVolume")
			if tt.abnormal {
				p.SetVolumeCondition(vol.ExternalID, true, "disk /dev/sdq is read-only")
			}
			got, err := c.ControllerGetVolume(ctx, &plugin.ControllerGetVolumeRequest{ExternalID: vol.ExternalID})
			noErr(t, err, "ControllerGetVolume")
			eq(t, &plugin.ControllerGetVolumeResponse{Volume: *vol, Status: tt.want}, got, "ControllerGetVolume")
			eq(t, []*csi.Topology{zone("a")}, got.Volume.Topologies, "topologies")
		})
	}
}

func TestClient_ControllerGetVolume_Errors(t *testing.T) {
	p := csitest.Start(t, csitest.Config{Controller: csi.ControllerCapabilities{GetVolume: true}})
	c := newClient(t, p.Addr(), nil)
	_, err := c.ControllerGetVolume(t.Context(), &plugin.ControllerGetVolumeRequest{ExternalID: "gone"})
	rpcErr(t, err, "ControllerGetVolume", codes.NotFound, csi.ClassFinal)

	p.SetCapabilities(csi.ControllerCapabilities{}, csi.NodeCapabilities{})
	p.AddVolume("v", gib, nil)
	_, err = c.ControllerGetVolume(t.Context(), &plugin.ControllerGetVolumeRequest{ExternalID: "v"})
	rpcErr(t, err, "ControllerGetVolume", codes.Unimplemented, csi.ClassFinal)

	_, err = c.ControllerGetVolume(t.Context(), &plugin.ControllerGetVolumeRequest{})
	var re *plugin.RequestError
	if !errors.As(err, &re) || re.Field != "ExternalID" {
		t.Errorf("ControllerGetVolume without an ID = %v, want a RequestError for ExternalID", err)
	}
}
