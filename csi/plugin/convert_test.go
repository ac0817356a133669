package plugin

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/csikit/csikit/csi"
)

// eq fails t unless got deep-equals want.
func eq(t *testing.T, want, got any, what ...any) {
	t.Helper()
	if !reflect.DeepEqual(want, got) {
		t.Errorf("%s\n got: %#v\nwant: %#v", fmt.Sprint(what...), got, want)
	}
}

// must stops t when ok is false.
func must(t *testing.T, ok bool, format string, args ...any) {
	t.Helper()
	if !ok {
		t.Fatalf(format, args...)
	}
}

var allAccessModes = []csi.AccessMode{
	csi.AccessModeSingleNodeWriter,
	csi.AccessModeSingleNodeReaderOnly,
	csi.AccessModeMultiNodeReaderOnly,
	csi.AccessModeMultiNodeSingleWriter,
	csi.AccessModeMultiNodeMultiWriter,
	csi.AccessModeSingleNodeSingleWriter,
	csi.AccessModeSingleNodeMultiWriter,
}

func TestConvert_AccessMode_MatchesSpec(t *testing.T) {
	want := map[csi.AccessMode]csipb.VolumeCapability_AccessMode_Mode{
		csi.AccessModeUnknown:                csipb.VolumeCapability_AccessMode_UNKNOWN,
		csi.AccessModeSingleNodeWriter:       csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER,
		csi.AccessModeSingleNodeReaderOnly:   csipb.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY,
		csi.AccessModeMultiNodeReaderOnly:    csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY,
		csi.AccessModeMultiNodeSingleWriter:  csipb.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER,
		csi.AccessModeMultiNodeMultiWriter:   csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER,
		csi.AccessModeSingleNodeSingleWriter: csipb.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER,
		csi.AccessModeSingleNodeMultiWriter:  csipb.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER,
	}
	// Every mode the spec defines has a csi counterpart.
	must(t, len(want) == len(csipb.VolumeCapability_AccessMode_Mode_name), "the spec defines %d access modes, the table %d", len(csipb.VolumeCapability_AccessMode_Mode_name), len(want))
	for m, pb := range want {
		t.Run(m.String(), func(t *testing.T) {
			got := CapabilityToPB(csi.Capability{AccessMode: m, AttachmentMode: csi.AttachmentModeFileSystem}, nil)
			eq(t, pb, got.GetAccessMode().GetMode())
		})
	}
}

func TestConvert_Capability_RoundTrip(t *testing.T) {
	opts := &csi.MountOptions{FSType: "ext4", MountFlags: []string{"noatime", "ro"}, VolumeMountGroup: "1000"}
	type tc struct {
		name string
		c    csi.Capability
		mo   *csi.MountOptions
		// wantMO is what comes back: block drops mount options, empty
		// options come back nil.
		wantMO *csi.MountOptions
		block  bool
	}
	var cases []tc
	for _, m := range allAccessModes {
		cases = append(cases,
			tc{name: m.String() + "/block", c: csi.Capability{AccessMode: m, AttachmentMode: csi.AttachmentModeBlockDevice}, block: true},
			tc{name: m.String() + "/mount", c: csi.Capability{AccessMode: m, AttachmentMode: csi.AttachmentModeFileSystem}},
			tc{name: m.String() + "/mount-options", c: csi.Capability{AccessMode: m, AttachmentMode: csi.AttachmentModeFileSystem}, mo: opts, wantMO: opts},
		)
	}
	cases = append(cases,
		tc{name: "block ignores mount options", c: csi.Capability{AccessMode: csi.AccessModeSingleNodeWriter, AttachmentMode: csi.AttachmentModeBlockDevice}, mo: opts, block: true},
		tc{name: "empty mount options", c: csi.Capability{AccessMode: csi.AccessModeSingleNodeWriter, AttachmentMode: csi.AttachmentModeFileSystem}, mo: &csi.MountOptions{}},
	)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pb := CapabilityToPB(c.c, c.mo)
			if c.block {
				must(t, pb.GetBlock() != nil && pb.GetMount() == nil, "block capability must use the block access type: %v", pb)
			} else {
				must(t, pb.GetMount() != nil && pb.GetBlock() == nil, "file-system capability must use the mount access type: %v", pb)
				if c.mo != nil {
					eq(t, c.mo.FSType, pb.GetMount().GetFsType())
					eq(t, c.mo.MountFlags, pb.GetMount().GetMountFlags())
				}
			}
			back, mo, err := capabilityFromPB(pb)
			must(t, err == nil, "unexpected error: %v", err)
			eq(t, c.c, back)
			eq(t, c.wantMO, mo)
		})
	}
}

func TestConvert_CapabilityFromPB_Invalid(t *testing.T) {
	mount := &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}}
	cases := []struct {
		name string
		pb   *csipb.VolumeCapability
	}{
		{"nil", nil},
		{"no access mode", &csipb.VolumeCapability{AccessType: mount}},
		{"unknown access mode", &csipb.VolumeCapability{AccessType: mount, AccessMode: &csipb.VolumeCapability_AccessMode{}}},
		{"undefined access mode", &csipb.VolumeCapability{AccessType: mount, AccessMode: &csipb.VolumeCapability_AccessMode{Mode: 42}}},
		{"no access type", &csipb.VolumeCapability{AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := capabilityFromPB(c.pb)
			if err == nil {
				t.Error("capabilityFromPB accepted an invalid capability")
			}
		})
	}
}

// eachFlag calls fn with a copy of the zero value of T with exactly one
// bool field set, for every bool field of T.
func eachFlag[T any](t *testing.T, fn func(t *testing.T, v T)) {
	var zero T
	rt := reflect.TypeOf(zero)
	for i := 0; i < rt.NumField(); i++ {
		f := rt.Field(i)
		if f.Type.Kind() != reflect.Bool {
			continue
		}
		t.Run(f.Name, func(t *testing.T) {
			var v T
			reflect.ValueOf(&v).Elem().Field(i).SetBool(true)
			fn(t, v)
		})
	}
}

func allFlags[T any]() T {
	var v T
	rv := reflect.ValueOf(&v).Elem()
	for i := 0; i < rv.NumField(); i++ {
		if rv.Field(i).Kind() == reflect.Bool {
			rv.Field(i).SetBool(true)
		}
	}
	return v
}

func TestConvert_ControllerCapabilities_BothWays(t *testing.T) {
	seen := map[csipb.ControllerServiceCapability_RPC_Type]bool{}
	eachFlag(t, func(t *testing.T, c csi.ControllerCapabilities) {
		pb := ControllerCapabilitiesToPB(c)
		must(t, len(pb) == 1, "each capability is one spec value, got %v", pb)
		typ := pb[0].GetRpc().GetType()
		must(t, typ != csipb.ControllerServiceCapability_RPC_UNKNOWN, "field maps to UNKNOWN")
		must(t, !seen[typ], "spec value %s used by two fields", typ)
		seen[typ] = true
		eq(t, c, controllerCapsFromPB(pb))
	})
	t.Run("all", func(t *testing.T) {
		all := allFlags[csi.ControllerCapabilities]()
		eq(t, all, controllerCapsFromPB(ControllerCapabilitiesToPB(all)))
	})
	t.Run("none", func(t *testing.T) {
		eq(t, 0, len(ControllerCapabilitiesToPB(csi.ControllerCapabilities{})))
		eq(t, csi.ControllerCapabilities{}, controllerCapsFromPB(nil))
	})
	rpc := func(t csipb.ControllerServiceCapability_RPC_Type) *csipb.ControllerServiceCapability {
		return &csipb.ControllerServiceCapability{Type: &csipb.ControllerServiceCapability_Rpc{Rpc: &csipb.ControllerServiceCapability_RPC{Type: t}}}
	}
	from := []struct {
		name string
		in   []*csipb.ControllerServiceCapability
		want csi.ControllerCapabilities
	}{
		{"legacy VOLUME_CONDITION", []*csipb.ControllerServiceCapability{rpc(11)}, csi.ControllerCapabilities{GetVolumeHealth: true}},
		{"unknown values ignored", []*csipb.ControllerServiceCapability{rpc(99), rpc(csipb.ControllerServiceCapability_RPC_UNKNOWN), {}, nil}, csi.ControllerCapabilities{}},
		{"health list without get", []*csipb.ControllerServiceCapability{rpc(csipb.ControllerServiceCapability_RPC_LIST_VOLUME_HEALTH)}, csi.ControllerCapabilities{ListVolumeHealth: true}},
		{"repeated", []*csipb.ControllerServiceCapability{
			rpc(csipb.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME), rpc(csipb.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME),
		}, csi.ControllerCapabilities{PublishUnpublishVolume: true}},
	}
	for _, c := range from {
		t.Run(c.name, func(t *testing.T) {
			eq(t, c.want, controllerCapsFromPB(c.in))
		})
	}
}

func TestConvert_NodeCapabilities_BothWays(t *testing.T) {
	seen := map[csipb.NodeServiceCapability_RPC_Type]bool{}
	eachFlag(t, func(t *testing.T, c csi.NodeCapabilities) {
		pb := NodeCapabilitiesToPB(c)
		must(t, len(pb) == 1, "each capability is one spec value, got %v", pb)
		typ := pb[0].GetRpc().GetType()
		must(t, typ != csipb.NodeServiceCapability_RPC_UNKNOWN, "field maps to UNKNOWN")
		must(t, !seen[typ], "spec value %s used by two fields", typ)
		seen[typ] = true
		eq(t, c, nodeCapsFromPB(pb))
	})
	t.Run("all", func(t *testing.T) {
		all := allFlags[csi.NodeCapabilities]()
		eq(t, all, nodeCapsFromPB(NodeCapabilitiesToPB(all)))
	})
	rpc := func(t csipb.NodeServiceCapability_RPC_Type) *csipb.NodeServiceCapability {
		return &csipb.NodeServiceCapability{Type: &csipb.NodeServiceCapability_Rpc{Rpc: &csipb.NodeServiceCapability_RPC{Type: t}}}
	}
	from := []struct {
		name string
		in   []*csipb.NodeServiceCapability
		want csi.NodeCapabilities
	}{
		{"stage", []*csipb.NodeServiceCapability{rpc(csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME)}, csi.NodeCapabilities{StageUnstageVolume: true}},
		{"legacy VOLUME_CONDITION", []*csipb.NodeServiceCapability{rpc(4)}, csi.NodeCapabilities{GetVolumeHealth: true}},
		{"unknown values ignored", []*csipb.NodeServiceCapability{rpc(99), nil}, csi.NodeCapabilities{}},
		{"storage health", []*csipb.NodeServiceCapability{rpc(csipb.NodeServiceCapability_RPC_GET_STORAGE_HEALTH)}, csi.NodeCapabilities{GetStorageHealth: true}},
	}
	for _, c := range from {
		t.Run(c.name, func(t *testing.T) {
			eq(t, c.want, nodeCapsFromPB(c.in))
		})
	}
}

func TestConvert_PluginCapabilities_BothWays(t *testing.T) {
	eachFlag(t, func(t *testing.T, c Capabilities) {
		pb := pluginCapsToPB(c)
		must(t, len(pb) == 1, "each capability is one spec value, got %v", pb)
		eq(t, c, pluginCapsFromPB(pb))
	})
	t.Run("all", func(t *testing.T) {
		all := allFlags[Capabilities]()
		eq(t, all, pluginCapsFromPB(pluginCapsToPB(all)))
	})
	t.Run("unknown ignored", func(t *testing.T) {
		in := []*csipb.PluginCapability{
			{Type: &csipb.PluginCapability_Service_{Service: &csipb.PluginCapability_Service{Type: 77}}},
			{Type: &csipb.PluginCapability_VolumeExpansion_{VolumeExpansion: &csipb.PluginCapability_VolumeExpansion{}}},
			nil,
		}
		eq(t, Capabilities{}, pluginCapsFromPB(in))
	})
}

func TestConvert_Topology_BothWays(t *testing.T) {
	zoneA := &csi.Topology{Segments: map[string]string{"zone": "a", "rack": "1"}}
	zoneB := &csi.Topology{Segments: map[string]string{"zone": "b"}}
	cases := []struct {
		name string
		in   *csi.Topology
	}{
		{"nil", nil},
		{"empty", &csi.Topology{}},
		{"segments", zoneA},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pb := topologyToPB(c.in)
			eq(t, c.in == nil, pb == nil, "nil maps to nil")
			if c.in != nil {
				eq(t, c.in.Segments, pb.GetSegments())
			}
			must(t, c.in.Equal(topologyFromPB(pb)), "round trip changed %v", c.in)
		})
	}

	reqs := []struct {
		name   string
		in     *csi.TopologyRequest
		wantPB *csipb.TopologyRequirement
		back   *csi.TopologyRequest
	}{
		{"nil", nil, nil, nil},
		{"empty is no requirement", &csi.TopologyRequest{}, nil, nil},
		{"required and preferred",
			&csi.TopologyRequest{Required: []*csi.Topology{zoneA, zoneB}, Preferred: []*csi.Topology{zoneB}},
			&csipb.TopologyRequirement{
				Requisite: []*csipb.Topology{{Segments: zoneA.Segments}, {Segments: zoneB.Segments}},
				Preferred: []*csipb.Topology{{Segments: zoneB.Segments}},
			},
			&csi.TopologyRequest{Required: []*csi.Topology{zoneA, zoneB}, Preferred: []*csi.Topology{zoneB}},
		},
		{"preferred only",
			&csi.TopologyRequest{Preferred: []*csi.Topology{zoneA}},
			&csipb.TopologyRequirement{Preferred: []*csipb.Topology{{Segments: zoneA.Segments}}},
			&csi.TopologyRequest{Preferred: []*csi.Topology{zoneA}},
		},
	}
	for _, c := range reqs {
		t.Run("request/"+c.name, func(t *testing.T) {
			pb := topologyRequestToPB(c.in)
			must(t, proto.Equal(c.wantPB, pb), "got %v", pb)
			eq(t, c.back, topologyRequestFromPB(pb))
		})
	}

	t.Run("list skips nil entries", func(t *testing.T) {
		got := topologiesFromPB([]*csipb.Topology{nil, {Segments: zoneB.Segments}})
		eq(t, []*csi.Topology{zoneB}, got)
		must(t, topologiesFromPB(nil) == nil, "nil list must stay nil")
	})
}

func TestConvert_ContentSource_BothWays(t *testing.T) {
	cases := []struct {
		name string
		in   *ContentSource
	}{
		{"nil", nil},
		{"snapshot", &ContentSource{SnapshotID: "snap-1"}},
		{"volume", &ContentSource{VolumeID: "vol-1"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			eq(t, c.in, contentSourceFromPB(contentSourceToPB(c.in)))
		})
	}
}

func TestConvert_Responses(t *testing.T) {
	t.Run("probe ready", func(t *testing.T) {
		eq(t, true, readyFromPB(&csipb.ProbeResponse{}), "absent ready means ready")
		eq(t, true, readyFromPB(&csipb.ProbeResponse{Ready: wrapperspb.Bool(true)}))
		eq(t, false, readyFromPB(&csipb.ProbeResponse{Ready: wrapperspb.Bool(false)}))
	})
	t.Run("node info", func(t *testing.T) {
		got := nodeInfoFromPB(&csipb.NodeGetInfoResponse{NodeId: "n1", MaxVolumesPerNode: 7,
			AccessibleTopology: &csipb.Topology{Segments: map[string]string{"zone": "a"}}})
		eq(t, &csi.NodeInfo{ID: "n1", MaxVolumes: 7,
			AccessibleTopology: &csi.Topology{Segments: map[string]string{"zone": "a"}}}, got)
	})
	t.Run("volume stats", func(t *testing.T) {
		stats := func(r *csipb.NodeGetVolumeStatsResponse) *VolumeStats {
			got, err := volumeStatsFromPB(r)
			must(t, err == nil, "unexpected error: %v", err)
			return got
		}
		got := stats(&csipb.NodeGetVolumeStatsResponse{Usage: []*csipb.VolumeUsage{
			{Unit: csipb.VolumeUsage_BYTES, Available: 1, Total: 3, Used: 2},
			{Unit: csipb.VolumeUsage_INODES, Available: 10, Total: 30, Used: 20},
			{Unit: csipb.VolumeUsage_UNKNOWN, Total: 99},
		}})
		eq(t, &VolumeStats{Bytes: &Usage{1, 3, 2}, Inodes: &Usage{10, 30, 20}}, got)
		eq(t, &VolumeStats{}, stats(&csipb.NodeGetVolumeStatsResponse{}))
	})
	t.Run("snapshot", func(t *testing.T) {
		at := time.Date(2025, 3, 4, 5, 6, 7, 8, time.UTC)
		got, err := createSnapshotResponseFromPB(&csipb.CreateSnapshotResponse{Snapshot: &csipb.Snapshot{
			SnapshotId: "s1", SourceVolumeId: "v1", SizeBytes: 5, CreationTime: timestamppb.New(at), ReadyToUse: true,
		}})
		must(t, err == nil, "unexpected error: %v", err)
		eq(t, &Snapshot{ID: "s1", SourceID: "v1", Size: 5, CreateTime: at, ReadyToUse: true}, got)
		_, err = createSnapshotResponseFromPB(&csipb.CreateSnapshotResponse{})
		if re := (*ResponseError)(nil); !errors.As(err, &re) {
			t.Errorf("want a *ResponseError, got %v", err)
		}
	})
	t.Run("created volume", func(t *testing.T) {
		got, err := createVolumeResponseFromPB(&csipb.CreateVolumeResponse{Volume: &csipb.Volume{
			VolumeId: "v1", CapacityBytes: 9, VolumeContext: map[string]string{"k": "v"},
			ContentSource:      contentSourceToPB(&ContentSource{SnapshotID: "s1"}),
			AccessibleTopology: []*csipb.Topology{{Segments: map[string]string{"zone": "a"}}},
		}})
		must(t, err == nil, "unexpected error: %v", err)
		eq(t, &Volume{ExternalID: "v1", Capacity: 9, Context: map[string]string{"k": "v"},
			Source: &ContentSource{SnapshotID: "s1"}, Topologies: []*csi.Topology{{Segments: map[string]string{"zone": "a"}}}}, got)
		_, err = createVolumeResponseFromPB(&csipb.CreateVolumeResponse{})
		if re := (*ResponseError)(nil); !errors.As(err, &re) {
			t.Errorf("want a *ResponseError, got %v", err)
		}
	})
	t.Run("validate", func(t *testing.T) {
		ok := CapabilityToPB(csi.Capability{AccessMode: csi.AccessModeMultiNodeReaderOnly, AttachmentMode: csi.AttachmentModeBlockDevice}, nil)
		got, err := validateResponseFromPB(&csipb.ValidateVolumeCapabilitiesResponse{
			Confirmed: &csipb.ValidateVolumeCapabilitiesResponse_Confirmed{VolumeCapabilities: []*csipb.VolumeCapability{ok}}})
		must(t, err == nil, "unexpected error: %v", err)
		eq(t, &ValidateCapabilitiesResponse{Confirmed: true,
			Capabilities: []csi.Capability{{AccessMode: csi.AccessModeMultiNodeReaderOnly, AttachmentMode: csi.AttachmentModeBlockDevice}}}, got)

		got, err = validateResponseFromPB(&csipb.ValidateVolumeCapabilitiesResponse{Message: "no"})
		must(t, err == nil, "unexpected error: %v", err)
		eq(t, &ValidateCapabilitiesResponse{Message: "no"}, got)

		_, err = validateResponseFromPB(&csipb.ValidateVolumeCapabilitiesResponse{
			Confirmed: &csipb.ValidateVolumeCapabilitiesResponse_Confirmed{VolumeCapabilities: []*csipb.VolumeCapability{{}}}})
		if re := (*ResponseError)(nil); !errors.As(err, &re) {
			t.Errorf("want a *ResponseError, got %v", err)
		}
	})
}

func TestConvert_Requests(t *testing.T) {
	fs := csi.Capability{AccessMode: csi.AccessModeSingleNodeWriter, AttachmentMode: csi.AttachmentModeFileSystem}
	mo := &csi.MountOptions{FSType: "xfs", MountFlags: []string{"noatime"}}
	cases := []struct {
		name string
		got  proto.Message
		want proto.Message
	}{
		{"NodePublish",
			(&NodePublishRequest{ExternalID: "v", StagingPath: "/s", TargetPath: "/t", Capability: fs, MountOptions: mo,
				ReadOnly: true, Secrets: csi.Secrets{"k": "s"}, PublishContext: map[string]string{"p": "1"}, VolumeContext: map[string]string{"c": "2"}}).toPB(),
			&csipb.NodePublishVolumeRequest{VolumeId: "v", StagingTargetPath: "/s", TargetPath: "/t",
				VolumeCapability: &csipb.VolumeCapability{
					AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{FsType: "xfs", MountFlags: []string{"noatime"}}},
					AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}},
				Readonly: true, Secrets: map[string]string{"k": "s"}, PublishContext: map[string]string{"p": "1"}, VolumeContext: map[string]string{"c": "2"}},
		},
		{"CreateVolume",
			(&CreateVolumeRequest{Name: "n", CapacityMin: 1, CapacityMax: 2, Capabilities: []csi.Capability{fs},
				Source: &ContentSource{VolumeID: "src"}, Parameters: map[string]string{"a": "b"}}).toPB(),
			&csipb.CreateVolumeRequest{Name: "n", CapacityRange: &csipb.CapacityRange{RequiredBytes: 1, LimitBytes: 2},
				VolumeCapabilities:  []*csipb.VolumeCapability{CapabilityToPB(fs, nil)},
				VolumeContentSource: &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Volume{Volume: &csipb.VolumeContentSource_VolumeSource{VolumeId: "src"}}},
				Parameters:          map[string]string{"a": "b"}},
		},
		{"ControllerExpand without capability",
			(&ControllerExpandRequest{ExternalID: "v", CapacityMin: 10}).toPB(),
			&csipb.ControllerExpandVolumeRequest{VolumeId: "v", CapacityRange: &csipb.CapacityRange{RequiredBytes: 10}},
		},
		{"NodeExpand no capacity",
			(&NodeExpandRequest{ExternalID: "v", VolumePath: "/p", Capability: &fs}).toPB(),
			&csipb.NodeExpandVolumeRequest{VolumeId: "v", VolumePath: "/p", VolumeCapability: CapabilityToPB(fs, nil)},
		},
		{"ListVolumes nil", (*ListVolumesRequest)(nil).toPB(), &csipb.ListVolumesRequest{}},
		{"GetCapacity nil", (*GetCapacityRequest)(nil).toPB(), &csipb.GetCapacityRequest{}},
		{"GetCapacity",
			(&GetCapacityRequest{Capabilities: []csi.Capability{fs}, MountOptions: mo, Parameters: map[string]string{"tier": "fast"},
				Topology: &csi.Topology{Segments: map[string]string{"zone": "a"}}}).toPB(),
			&csipb.GetCapacityRequest{VolumeCapabilities: []*csipb.VolumeCapability{CapabilityToPB(fs, mo)},
				Parameters: map[string]string{"tier": "fast"}, AccessibleTopology: &csipb.Topology{Segments: map[string]string{"zone": "a"}}},
		},
		{"ControllerGetVolume", (&ControllerGetVolumeRequest{ExternalID: "v"}).toPB(), &csipb.ControllerGetVolumeRequest{VolumeId: "v"}},
		{"ListSnapshots nil", (*ListSnapshotsRequest)(nil).toPB(), &csipb.ListSnapshotsRequest{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			must(t, proto.Equal(c.want, c.got), "got %v\nwant %v", c.got, c.want)
		})
	}
}

func TestConvert_CapacityResponse(t *testing.T) {
	w := wrapperspb.Int64
	cases := []struct {
		name   string
		in     *csipb.GetCapacityResponse
		want   *GetCapacityResponse
		reason string // for a *ResponseError
	}{
		{"nothing reported", &csipb.GetCapacityResponse{}, &GetCapacityResponse{}, ""},
		{"bounds not reported", &csipb.GetCapacityResponse{AvailableCapacity: 9}, &GetCapacityResponse{Available: 9}, ""},
		{"bounds of 0 reported", &csipb.GetCapacityResponse{AvailableCapacity: 9, MaximumVolumeSize: w(0), MinimumVolumeSize: w(0)},
			&GetCapacityResponse{Available: 9, MaximumVolumeSize: new(int64(0)), MinimumVolumeSize: new(int64(0))}, ""},
		{"both bounds", &csipb.GetCapacityResponse{AvailableCapacity: 9, MaximumVolumeSize: w(8), MinimumVolumeSize: w(2)},
			&GetCapacityResponse{Available: 9, MaximumVolumeSize: new(int64(8)), MinimumVolumeSize: new(int64(2))}, ""},
		{"maximum above available", &csipb.GetCapacityResponse{AvailableCapacity: 1, MaximumVolumeSize: w(8)},
			&GetCapacityResponse{Available: 1, MaximumVolumeSize: new(int64(8))}, ""},
		{"negative available", &csipb.GetCapacityResponse{AvailableCapacity: -1}, nil, "available_capacity is -1 bytes"},
		{"negative maximum", &csipb.GetCapacityResponse{MaximumVolumeSize: w(-2)}, nil, "maximum_volume_size is -2 bytes"},
		{"negative minimum", &csipb.GetCapacityResponse{MinimumVolumeSize: w(-3)}, nil, "minimum_volume_size is -3 bytes"},
		{"minimum above maximum", &csipb.GetCapacityResponse{MaximumVolumeSize: w(2), MinimumVolumeSize: w(3)}, nil,
			"minimum_volume_size (3) exceeds maximum_volume_size (2)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := capacityResponseFromPB(c.in)
			if c.reason == "" {
				must(t, err == nil, "unexpected error: %v", err)
				eq(t, c.want, got)
				return
			}
			var re *ResponseError
			must(t, errors.As(err, &re), "want a *ResponseError, got %v", err)
			eq(t, ResponseError{Method: "GetCapacity", Reason: c.reason}, *re)
			eq(t, csi.ClassFinal, csi.Classify(err))
		})
	}
}

// legacyStatus returns a CSI 1.13 status carrying fields as a CSI 1.12
// plugin sends them, built field by field from the 1.12 schema:
// VolumeStatus{published_node_ids = 1; VolumeCondition volume_condition
// = 2}, VolumeCondition{bool abnormal = 1; string message = 2}.
func legacyStatus(t *testing.T, fields ...[]byte) *csipb.ControllerGetVolumeResponse_VolumeStatus {
	t.Helper()
	st := &csipb.ControllerGetVolumeResponse_VolumeStatus{PublishedNodeIds: []string{"n1"}}
	var raw []byte
	for _, f := range fields {
		raw = append(raw, f...)
	}
	// Through the wire format, as a reply arrives.
	b, err := proto.Marshal(st)
	must(t, err == nil, "marshal: %v", err)
	b = append(b, raw...)
	out := &csipb.ControllerGetVolumeResponse_VolumeStatus{}
	must(t, proto.Unmarshal(b, out) == nil, "unmarshal")
	return out
}

func condField(inner ...[]byte) []byte {
	var cond []byte
	for _, f := range inner {
		cond = append(cond, f...)
	}
	b := protowire.AppendTag(nil, 2, protowire.BytesType)
	return protowire.AppendBytes(b, cond)
}

func abnormalField(v bool) []byte {
	b := protowire.AppendTag(nil, 1, protowire.VarintType)
	return protowire.AppendVarint(b, protowire.EncodeBool(v))
}

func messageField(s string) []byte {
	b := protowire.AppendTag(nil, 2, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func TestConvert_GetVolumeResponse(t *testing.T) {
	vol := &csipb.Volume{VolumeId: "v1", CapacityBytes: 5, VolumeContext: map[string]string{"k": "v"},
		AccessibleTopology: []*csipb.Topology{{Segments: map[string]string{"zone": "a"}}}}
	wantVol := Volume{ExternalID: "v1", Capacity: 5, Context: map[string]string{"k": "v"}, Topologies: []*csi.Topology{{Segments: map[string]string{"zone": "a"}}}}
	otherField := protowire.AppendVarint(protowire.AppendTag(nil, 9, protowire.VarintType), 7)
	cases := []struct {
		name   string
		status *csipb.ControllerGetVolumeResponse_VolumeStatus
		vol    *csipb.Volume
		want   *VolumeStatus
		reason string
	}{
		{name: "no status", vol: vol},
		{name: "status without condition", vol: vol, status: legacyStatus(t), want: &VolumeStatus{PublishedNodeIDs: []string{"n1"}}},
		{name: "normal condition", vol: vol, status: legacyStatus(t, condField()),
			want: &VolumeStatus{PublishedNodeIDs: []string{"n1"}, Condition: &VolumeCondition{}}},
		{name: "abnormal condition", vol: vol, status: legacyStatus(t, condField(abnormalField(true), messageField("disk gone"))),
			want: &VolumeStatus{PublishedNodeIDs: []string{"n1"}, Condition: &VolumeCondition{Abnormal: true, Message: "disk gone"}}},
		{name: "repeated condition merges", vol: vol, status: legacyStatus(t, condField(abnormalField(true), messageField("first")), condField(messageField("second"))),
			want: &VolumeStatus{PublishedNodeIDs: []string{"n1"}, Condition: &VolumeCondition{Abnormal: true, Message: "second"}}},
		{name: "unknown fields skipped", vol: vol, status: legacyStatus(t, otherField, condField(otherField, abnormalField(true))),
			want: &VolumeStatus{PublishedNodeIDs: []string{"n1"}, Condition: &VolumeCondition{Abnormal: true}}},
		{name: "field 2 of another wire type is not a condition", vol: vol,
			status: legacyStatus(t, protowire.AppendVarint(protowire.AppendTag(nil, 2, protowire.VarintType), 1)),
			want:   &VolumeStatus{PublishedNodeIDs: []string{"n1"}}},
		{name: "truncated condition", vol: vol, status: legacyStatus(t, protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), []byte{0x12, 0x05, 'a'})),
			reason: "volume v1: volume_condition (field 2 of the status, CSI 1.12 and earlier): unexpected EOF"},
		{name: "message not UTF-8", vol: vol, status: legacyStatus(t, condField(messageField("\xff"))),
			reason: "volume v1: volume_condition (field 2 of the status, CSI 1.12 and earlier): message is not valid UTF-8"},
		{name: "no volume", reason: "no volume"},
		{name: "another volume", vol: &csipb.Volume{VolumeId: "v2"}, reason: `volume ID "v2", but volume "v1" was asked for`},
		{name: "no volume ID", vol: &csipb.Volume{CapacityBytes: 1}, reason: `volume ID "", but volume "v1" was asked for`},
		{name: "negative capacity", vol: &csipb.Volume{VolumeId: "v1", CapacityBytes: -1}, reason: "volume v1 has capacity_bytes -1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := getVolumeResponseFromPB("v1", &csipb.ControllerGetVolumeResponse{Volume: c.vol, Status: c.status})
			if c.reason == "" {
				must(t, err == nil, "unexpected error: %v", err)
				eq(t, &ControllerGetVolumeResponse{Volume: wantVol, Status: c.want}, got)
				return
			}
			var re *ResponseError
			must(t, errors.As(err, &re), "want a *ResponseError, got %v", err)
			eq(t, ResponseError{Method: "ControllerGetVolume", Reason: c.reason}, *re)
		})
	}
}
