package hostpath_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/csikit/csikit/examples/hostpathplugin/hostpath"
)

// fixture is a plugin with one SINGLE_NODE_WRITER volume that is
// controller-published to node-1, staged and published: the state most
// error and idempotency cases start from.
type fixture struct {
	h       *harness
	vol     string
	pubCtx  map[string]string
	staging string
	target  string
	base    string // a directory for further paths
}

func newFixture(t *testing.T, cfg hostpath.Config) *fixture {
	t.Helper()
	ctx := context.Background()
	f := &fixture{h: start(t, cfg), base: pathDir(t)}
	f.staging, f.target = filepath.Join(f.base, "staging"), filepath.Join(f.base, "target")
	must.NoError(t, os.Mkdir(f.staging, 0o750))
	cv, err := f.h.ctrl.CreateVolume(ctx, f.createReq())
	must.NoError(t, err)
	f.vol = cv.GetVolume().GetVolumeId()
	if cfg.ControllerPublish {
		cp, err := f.h.ctrl.ControllerPublishVolume(ctx, f.ctrlPubReq("node-1"))
		must.NoError(t, err)
		f.pubCtx = cp.GetPublishContext()
	}
	if cfg.Staging {
		_, err = f.h.node.NodeStageVolume(ctx, f.stageReq())
		must.NoError(t, err)
	}
	_, err = f.h.node.NodePublishVolume(ctx, f.pubReq())
	must.NoError(t, err)
	return f
}

func (f *fixture) createReq() *csipb.CreateVolumeRequest {
	return &csipb.CreateVolumeRequest{
		Name:               "vol",
		CapacityRange:      &csipb.CapacityRange{RequiredBytes: 1 << 20, LimitBytes: 1 << 30},
		VolumeCapabilities: []*csipb.VolumeCapability{mountCap(snw)},
		Parameters:         map[string]string{"tier": "gold"},
	}
}

func (f *fixture) ctrlPubReq(node string) *csipb.ControllerPublishVolumeRequest {
	return &csipb.ControllerPublishVolumeRequest{VolumeId: f.vol, NodeId: node, VolumeCapability: mountCap(snw)}
}

func (f *fixture) stageReq() *csipb.NodeStageVolumeRequest {
	return &csipb.NodeStageVolumeRequest{VolumeId: f.vol, PublishContext: f.pubCtx, StagingTargetPath: f.staging, VolumeCapability: mountCap(snw)}
}

func (f *fixture) pubReq() *csipb.NodePublishVolumeRequest {
	sp := ""
	if f.h.cfg.Staging {
		sp = f.staging
	}
	return &csipb.NodePublishVolumeRequest{VolumeId: f.vol, PublishContext: f.pubCtx, StagingTargetPath: sp, TargetPath: f.target, VolumeCapability: mountCap(snw)}
}

// addNode serves a node plugin for nodeID on the fixture's data dir, so
// that the controller knows the node (nodes register through the data
// dir).
func (f *fixture) addNode(t *testing.T, nodeID string) *harness {
	t.Helper()
	cfg := f.h.cfg
	cfg.Mode, cfg.NodeID = hostpath.ModeNode, nodeID
	return start(t, cfg)
}

// with returns a copy of m changed by edit.
func with[M proto.Message](m M, edit func(M)) M {
	c := proto.CloneOf(m)
	edit(c)
	return c
}

// unknownVol is well formed but was never created; badVol would escape the
// volumes directory if the plugin used it in a path.
const (
	unknownVol = "vol-00000000000000000000000000000000"
	badVol     = "../../etc"
)

func TestPlugin_Errors(t *testing.T) {
	type call func(ctx context.Context, t *testing.T, f *fixture) error
	for _, tc := range []struct {
		name string
		cfg  func(*hostpath.Config) // changes the fixture's config
		call call
		want codes.Code
	}{
		// CreateVolume
		{"CreateVolume_NoName", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.ctrl.CreateVolume(ctx, with(f.createReq(), func(r *csipb.CreateVolumeRequest) { r.Name = "" }))
			return err
		}, codes.InvalidArgument},
		{"CreateVolume_NoCapabilities", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.ctrl.CreateVolume(ctx, with(f.createReq(), func(r *csipb.CreateVolumeRequest) { r.VolumeCapabilities = nil }))
			return err
		}, codes.InvalidArgument},
		{"CreateVolume_Block", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "blk", VolumeCapabilities: []*csipb.VolumeCapability{blockCap(snw)}})
			return err
		}, codes.InvalidArgument},
		{"CreateVolume_NoAccessMode", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			c := mountCap(snw)
			c.AccessMode = nil
			_, err := f.h.ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "x", VolumeCapabilities: []*csipb.VolumeCapability{c}})
			return err
		}, codes.InvalidArgument},
		{"CreateVolume_NoAccessType", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			c := mountCap(snw)
			c.AccessType = nil
			_, err := f.h.ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "x", VolumeCapabilities: []*csipb.VolumeCapability{c}})
			return err
		}, codes.InvalidArgument},
		{"CreateVolume_NegativeCapacity", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "x", CapacityRange: &csipb.CapacityRange{RequiredBytes: -1},
				VolumeCapabilities: []*csipb.VolumeCapability{mountCap(snw)}})
			return err
		}, codes.InvalidArgument},
		{"CreateVolume_LimitBelowRequired", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "x", CapacityRange: &csipb.CapacityRange{RequiredBytes: 10, LimitBytes: 5},
				VolumeCapabilities: []*csipb.VolumeCapability{mountCap(snw)}})
			return err
		}, codes.InvalidArgument},
		{"CreateVolume_ContentSourceMissing", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.ctrl.CreateVolume(ctx, with(f.createReq(), func(r *csipb.CreateVolumeRequest) {
				r.Name = "clone"
				r.VolumeContentSource = &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Volume{
					Volume: &csipb.VolumeContentSource_VolumeSource{VolumeId: "vol-00000000000000000000000000000000"}}}
			}))
			return err
		}, codes.NotFound},
		{"CreateVolume_Repeat_OtherSource", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.ctrl.CreateVolume(ctx, with(f.createReq(), func(r *csipb.CreateVolumeRequest) {
				r.VolumeContentSource = &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Volume{
					Volume: &csipb.VolumeContentSource_VolumeSource{VolumeId: f.vol}}}
			}))
			return err
		}, codes.AlreadyExists},
		{"CreateVolume_Repeat_SameVolume", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			cv, err := f.h.ctrl.CreateVolume(ctx, f.createReq())
			if err == nil {
				must.Equal(t, f.vol, cv.GetVolume().GetVolumeId(), "a repeated CreateVolume returns the same volume")
				must.Equal(t, int64(1<<20), cv.GetVolume().GetCapacityBytes())
			}
			return err
		}, codes.OK},
		{"CreateVolume_Repeat_CompatibleRange", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			cv, err := f.h.ctrl.CreateVolume(ctx, with(f.createReq(), func(r *csipb.CreateVolumeRequest) {
				r.CapacityRange = &csipb.CapacityRange{RequiredBytes: 1 << 10}
			}))
			if err == nil {
				must.Equal(t, f.vol, cv.GetVolume().GetVolumeId())
			}
			return err
		}, codes.OK},
		{"CreateVolume_Repeat_LargerCapacity", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.ctrl.CreateVolume(ctx, with(f.createReq(), func(r *csipb.CreateVolumeRequest) {
				r.CapacityRange = &csipb.CapacityRange{RequiredBytes: 1 << 21}
			}))
			return err
		}, codes.AlreadyExists},
		{"CreateVolume_Repeat_OtherParameters", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.ctrl.CreateVolume(ctx, with(f.createReq(), func(r *csipb.CreateVolumeRequest) { r.Parameters = map[string]string{"tier": "lead"} }))
			return err
		}, codes.AlreadyExists},
		{"CreateVolume_NameWithSlash", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			cv, err := f.h.ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "../../escape", VolumeCapabilities: []*csipb.VolumeCapability{mountCap(snw)}})
			if err == nil {
				must.Regexp(t, `^vol-[0-9a-f]{32}$`, cv.GetVolume().GetVolumeId(), "the ID never derives from the name")
				must.NoDirExists(t, filepath.Join(f.h.cfg.DataDir, "..", "escape"))
			}
			return err
		}, codes.OK},

		// DeleteVolume
		{"DeleteVolume_NoID", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.ctrl.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{})
			return err
		}, codes.InvalidArgument},
		{"DeleteVolume_Unknown", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.ctrl.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: unknownVol})
			return err
		}, codes.OK},
		{"DeleteVolume_Malformed", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.ctrl.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: badVol})
			return err
		}, codes.OK},
		{"DeleteVolume_StillPublished", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.ctrl.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: f.vol})
			return err
		}, codes.FailedPrecondition},
		{"DeleteVolume_Twice", func(c *hostpath.Config) { c.ControllerPublish = false }, func(ctx context.Context, t *testing.T, f *fixture) error {
			for range 2 {
				if _, err := f.h.ctrl.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: f.vol}); err != nil {
					return err
				}
			}
			return nil
		}, codes.OK},

		// ControllerPublishVolume
		{"ControllerPublish_NoVolumeID", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.ctrl.ControllerPublishVolume(ctx, with(f.ctrlPubReq("node-1"), func(r *csipb.ControllerPublishVolumeRequest) { r.VolumeId = "" }))
			return err
		}, codes.InvalidArgument},
		{"ControllerPublish_NoNodeID", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.ctrl.ControllerPublishVolume(ctx, f.ctrlPubReq(""))
			return err
		}, codes.InvalidArgument},
		{"ControllerPublish_NoCapability", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.ctrl.ControllerPublishVolume(ctx, with(f.ctrlPubReq("node-1"), func(r *csipb.ControllerPublishVolumeRequest) { r.VolumeCapability = nil }))
			return err
		}, codes.InvalidArgument},
		{"ControllerPublish_UnknownVolume", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.ctrl.ControllerPublishVolume(ctx, with(f.ctrlPubReq("node-1"), func(r *csipb.ControllerPublishVolumeRequest) { r.VolumeId = unknownVol }))
			return err
		}, codes.NotFound},
		{"ControllerPublish_MalformedVolume", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.ctrl.ControllerPublishVolume(ctx, with(f.ctrlPubReq("node-1"), func(r *csipb.ControllerPublishVolumeRequest) { r.VolumeId = badVol }))
			return err
		}, codes.NotFound},
		{"ControllerPublish_Repeat_SameContext", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			cp, err := f.h.ctrl.ControllerPublishVolume(ctx, f.ctrlPubReq("node-1"))
			if err == nil {
				must.Equal(t, f.pubCtx, cp.GetPublishContext(), "a repeated ControllerPublish returns the same publish context")
			}
			return err
		}, codes.OK},
		{"ControllerPublish_Repeat_OtherReadonly", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.ctrl.ControllerPublishVolume(ctx, with(f.ctrlPubReq("node-1"), func(r *csipb.ControllerPublishVolumeRequest) { r.Readonly = true }))
			return err
		}, codes.AlreadyExists},
		{"ControllerPublish_Repeat_OtherCapability", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.ctrl.ControllerPublishVolume(ctx, with(f.ctrlPubReq("node-1"), func(r *csipb.ControllerPublishVolumeRequest) { r.VolumeCapability = mountCap(snro) }))
			return err
		}, codes.AlreadyExists},
		{"ControllerPublish_UnknownNode", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.ctrl.ControllerPublishVolume(ctx, f.ctrlPubReq("node-9"))
			return err
		}, codes.NotFound},
		{"ControllerPublish_SingleNodeToSecondNode", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			f.addNode(t, "node-2")
			_, err := f.h.ctrl.ControllerPublishVolume(ctx, f.ctrlPubReq("node-2"))
			return err
		}, codes.FailedPrecondition},
		{"ControllerPublish_MultiNodeToSecondNode", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			f.addNode(t, "node-2")
			cv, err := f.h.ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "multi", VolumeCapabilities: []*csipb.VolumeCapability{mountCap(mnmw)}})
			must.NoError(t, err)
			for _, n := range []string{"node-1", "node-2"} {
				if _, err := f.h.ctrl.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{
					VolumeId: cv.GetVolume().GetVolumeId(), NodeId: n, VolumeCapability: mountCap(mnmw)}); err != nil {
					return err
				}
			}
			return nil
		}, codes.OK},
		{"ControllerPublish_MaxVolumes", func(c *hostpath.Config) { c.MaxVolumes = 1 }, func(ctx context.Context, t *testing.T, f *fixture) error {
			cv, err := f.h.ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "second", VolumeCapabilities: []*csipb.VolumeCapability{mountCap(snw)}})
			must.NoError(t, err)
			_, err = f.h.ctrl.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{
				VolumeId: cv.GetVolume().GetVolumeId(), NodeId: "node-1", VolumeCapability: mountCap(snw)})
			return err
		}, codes.ResourceExhausted},
		{"ControllerPublish_Disabled", func(c *hostpath.Config) { c.ControllerPublish = false }, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.ctrl.ControllerPublishVolume(ctx, f.ctrlPubReq("node-1"))
			return err
		}, codes.Unimplemented},

		// ControllerUnpublishVolume
		{"ControllerUnpublish_NoVolumeID", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.ctrl.ControllerUnpublishVolume(ctx, &csipb.ControllerUnpublishVolumeRequest{NodeId: "node-1"})
			return err
		}, codes.InvalidArgument},
		{"ControllerUnpublish_UnknownVolume", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.ctrl.ControllerUnpublishVolume(ctx, &csipb.ControllerUnpublishVolumeRequest{VolumeId: unknownVol, NodeId: "node-1"})
			return err
		}, codes.OK},
		{"ControllerUnpublish_OtherNode", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.ctrl.ControllerUnpublishVolume(ctx, &csipb.ControllerUnpublishVolumeRequest{VolumeId: f.vol, NodeId: "node-9"})
			return err
		}, codes.OK},
		{"ControllerUnpublish_AllNodesThenSecondNode", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			f.addNode(t, "node-2")
			if _, err := f.h.ctrl.ControllerUnpublishVolume(ctx, &csipb.ControllerUnpublishVolumeRequest{VolumeId: f.vol}); err != nil {
				return err
			}
			_, err := f.h.ctrl.ControllerPublishVolume(ctx, f.ctrlPubReq("node-2"))
			return err
		}, codes.OK},

		// ValidateVolumeCapabilities
		{"Validate_Confirmed", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			r, err := f.h.ctrl.ValidateVolumeCapabilities(ctx, &csipb.ValidateVolumeCapabilitiesRequest{
				VolumeId: f.vol, VolumeCapabilities: []*csipb.VolumeCapability{mountCap(snw), mountCap(mnro)}})
			if err == nil {
				must.Len(t, r.GetConfirmed().GetVolumeCapabilities(), 2)
			}
			return err
		}, codes.OK},
		{"Validate_OtherParameters_NotConfirmed", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			r, err := f.h.ctrl.ValidateVolumeCapabilities(ctx, &csipb.ValidateVolumeCapabilitiesRequest{
				VolumeId: f.vol, VolumeCapabilities: []*csipb.VolumeCapability{mountCap(snw)}, Parameters: map[string]string{"tier": "lead"}})
			if err == nil {
				must.True(t, r.GetConfirmed() == nil, "not confirmed")
				must.NotEmpty(t, r.GetMessage())
			}
			return err
		}, codes.OK},
		{"Validate_Block", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.ctrl.ValidateVolumeCapabilities(ctx, &csipb.ValidateVolumeCapabilitiesRequest{
				VolumeId: f.vol, VolumeCapabilities: []*csipb.VolumeCapability{blockCap(snw)}})
			return err
		}, codes.InvalidArgument},
		{"Validate_NoCapabilities", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.ctrl.ValidateVolumeCapabilities(ctx, &csipb.ValidateVolumeCapabilitiesRequest{VolumeId: f.vol})
			return err
		}, codes.InvalidArgument},
		{"Validate_UnknownVolume", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.ctrl.ValidateVolumeCapabilities(ctx, &csipb.ValidateVolumeCapabilitiesRequest{
				VolumeId: unknownVol, VolumeCapabilities: []*csipb.VolumeCapability{mountCap(snw)}})
			return err
		}, codes.NotFound},

		// ListVolumes, ControllerGetVolume, ControllerExpandVolume
		{"ListVolumes_BadToken", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.ctrl.ListVolumes(ctx, &csipb.ListVolumesRequest{StartingToken: "page-2"})
			return err
		}, codes.Aborted},
		{"ListVolumes_NegativeMaxEntries", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.ctrl.ListVolumes(ctx, &csipb.ListVolumesRequest{MaxEntries: -1})
			return err
		}, codes.InvalidArgument},
		{"ControllerGetVolume_Unknown", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.ctrl.ControllerGetVolume(ctx, &csipb.ControllerGetVolumeRequest{VolumeId: unknownVol})
			return err
		}, codes.NotFound},
		{"Expand_Unknown", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.ctrl.ControllerExpandVolume(ctx, &csipb.ControllerExpandVolumeRequest{VolumeId: unknownVol, CapacityRange: &csipb.CapacityRange{RequiredBytes: 1}})
			return err
		}, codes.NotFound},
		{"Expand_NoRange", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.ctrl.ControllerExpandVolume(ctx, &csipb.ControllerExpandVolumeRequest{VolumeId: f.vol})
			return err
		}, codes.InvalidArgument},
		{"Expand_LimitBelowCapacity", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.ctrl.ControllerExpandVolume(ctx, &csipb.ControllerExpandVolumeRequest{VolumeId: f.vol, CapacityRange: &csipb.CapacityRange{LimitBytes: 1 << 10}})
			return err
		}, codes.OutOfRange},
		{"Expand_GrowsThenRepeats", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			for _, want := range []int64{1 << 25, 1 << 25} {
				r, err := f.h.ctrl.ControllerExpandVolume(ctx, &csipb.ControllerExpandVolumeRequest{VolumeId: f.vol, CapacityRange: &csipb.CapacityRange{RequiredBytes: 1 << 25}})
				if err != nil {
					return err
				}
				must.Equal(t, want, r.GetCapacityBytes())
			}
			r, err := f.h.ctrl.ControllerExpandVolume(ctx, &csipb.ControllerExpandVolumeRequest{VolumeId: f.vol, CapacityRange: &csipb.CapacityRange{RequiredBytes: 1 << 10}})
			if err == nil {
				must.Equal(t, int64(1<<25), r.GetCapacityBytes(), "a smaller request leaves the capacity")
			}
			g, gerr := f.h.ctrl.ControllerGetVolume(ctx, &csipb.ControllerGetVolumeRequest{VolumeId: f.vol})
			must.NoError(t, gerr)
			must.Equal(t, int64(1<<25), g.GetVolume().GetCapacityBytes())
			return err
		}, codes.OK},

		// NodeStageVolume
		{"NodeStage_NoVolumeID", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.node.NodeStageVolume(ctx, with(f.stageReq(), func(r *csipb.NodeStageVolumeRequest) { r.VolumeId = "" }))
			return err
		}, codes.InvalidArgument},
		{"NodeStage_NoStagingPath", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.node.NodeStageVolume(ctx, with(f.stageReq(), func(r *csipb.NodeStageVolumeRequest) { r.StagingTargetPath = "" }))
			return err
		}, codes.InvalidArgument},
		{"NodeStage_RelativeStagingPath", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.node.NodeStageVolume(ctx, with(f.stageReq(), func(r *csipb.NodeStageVolumeRequest) { r.StagingTargetPath = "staging" }))
			return err
		}, codes.InvalidArgument},
		{"NodeStage_PathInsideVolumes", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.node.NodeStageVolume(ctx, with(f.stageReq(), func(r *csipb.NodeStageVolumeRequest) {
				r.StagingTargetPath = filepath.Join(f.h.cfg.DataDir, "volumes", f.vol, "loop")
			}))
			return err
		}, codes.InvalidArgument},
		{"NodeStage_NoCapability", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.node.NodeStageVolume(ctx, with(f.stageReq(), func(r *csipb.NodeStageVolumeRequest) { r.VolumeCapability = nil }))
			return err
		}, codes.InvalidArgument},
		{"NodeStage_Block", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.node.NodeStageVolume(ctx, with(f.stageReq(), func(r *csipb.NodeStageVolumeRequest) { r.VolumeCapability = blockCap(snw) }))
			return err
		}, codes.InvalidArgument},
		{"NodeStage_UnknownVolume", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.node.NodeStageVolume(ctx, with(f.stageReq(), func(r *csipb.NodeStageVolumeRequest) { r.VolumeId = unknownVol }))
			return err
		}, codes.NotFound},
		{"NodeStage_MalformedVolume", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.node.NodeStageVolume(ctx, with(f.stageReq(), func(r *csipb.NodeStageVolumeRequest) { r.VolumeId = badVol }))
			return err
		}, codes.NotFound},
		{"NodeStage_NoPublishContext", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.node.NodeStageVolume(ctx, with(f.stageReq(), func(r *csipb.NodeStageVolumeRequest) { r.PublishContext = nil }))
			return err
		}, codes.FailedPrecondition},
		{"NodeStage_Repeat", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.node.NodeStageVolume(ctx, f.stageReq())
			return err
		}, codes.OK},
		{"NodeStage_Repeat_OtherCapability", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.node.NodeStageVolume(ctx, with(f.stageReq(), func(r *csipb.NodeStageVolumeRequest) { r.VolumeCapability = mountCap(snro) }))
			return err
		}, codes.AlreadyExists},
		{"NodeStage_SecondStagingPath", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.node.NodeStageVolume(ctx, with(f.stageReq(), func(r *csipb.NodeStageVolumeRequest) { r.StagingTargetPath = filepath.Join(f.base, "s2") }))
			return err
		}, codes.FailedPrecondition},
		{"NodeStage_NonEmptyStagingPath", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			cv, err := f.h.ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "other", VolumeCapabilities: []*csipb.VolumeCapability{mountCap(mnmw)}})
			must.NoError(t, err)
			cp, err := f.h.ctrl.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{VolumeId: cv.GetVolume().GetVolumeId(), NodeId: "node-1", VolumeCapability: mountCap(mnmw)})
			must.NoError(t, err)
			sp := filepath.Join(f.base, "full")
			must.NoError(t, os.MkdirAll(filepath.Join(sp, "precious"), 0o750))
			_, err = f.h.node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{
				VolumeId: cv.GetVolume().GetVolumeId(), PublishContext: cp.GetPublishContext(), StagingTargetPath: sp, VolumeCapability: mountCap(mnmw)})
			must.DirExists(t, filepath.Join(sp, "precious"), "a directory with files is never replaced")
			return err
		}, codes.FailedPrecondition},
		{"NodeStage_Disabled", func(c *hostpath.Config) { c.Staging = false }, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.node.NodeStageVolume(ctx, f.stageReq())
			return err
		}, codes.Unimplemented},

		// NodeUnstageVolume
		{"NodeUnstage_NoStagingPath", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: f.vol})
			return err
		}, codes.InvalidArgument},
		{"NodeUnstage_UnknownPath", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: f.vol, StagingTargetPath: filepath.Join(f.base, "nowhere")})
			return err
		}, codes.OK},
		{"NodeUnstage_UnknownVolume", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: badVol, StagingTargetPath: filepath.Join(f.base, "nowhere")})
			return err
		}, codes.OK},
		{"NodeUnstage_StillPublished", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: f.vol, StagingTargetPath: f.staging})
			return err
		}, codes.FailedPrecondition},

		// NodePublishVolume
		{"NodePublish_NoTarget", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.node.NodePublishVolume(ctx, with(f.pubReq(), func(r *csipb.NodePublishVolumeRequest) { r.TargetPath = "" }))
			return err
		}, codes.InvalidArgument},
		{"NodePublish_NoCapability", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.node.NodePublishVolume(ctx, with(f.pubReq(), func(r *csipb.NodePublishVolumeRequest) { r.VolumeCapability = nil }))
			return err
		}, codes.InvalidArgument},
		{"NodePublish_NoStagingPath", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.node.NodePublishVolume(ctx, with(f.pubReq(), func(r *csipb.NodePublishVolumeRequest) { r.StagingTargetPath = "" }))
			return err
		}, codes.FailedPrecondition},
		{"NodePublish_NotStaged", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.node.NodePublishVolume(ctx, with(f.pubReq(), func(r *csipb.NodePublishVolumeRequest) {
				r.StagingTargetPath = filepath.Join(f.base, "unstaged")
				r.TargetPath = filepath.Join(f.base, "t2")
			}))
			return err
		}, codes.FailedPrecondition},
		{"NodePublish_UnknownVolume", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.node.NodePublishVolume(ctx, with(f.pubReq(), func(r *csipb.NodePublishVolumeRequest) { r.VolumeId = unknownVol }))
			return err
		}, codes.NotFound},
		{"NodePublish_ContextOfOtherNode", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.node.NodePublishVolume(ctx, with(f.pubReq(), func(r *csipb.NodePublishVolumeRequest) {
				r.PublishContext = map[string]string{"hostpath.csikit.io/node": "node-2"}
				r.TargetPath = filepath.Join(f.base, "t2")
			}))
			return err
		}, codes.FailedPrecondition},
		{"NodePublish_Repeat", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.node.NodePublishVolume(ctx, f.pubReq())
			return err
		}, codes.OK},
		{"NodePublish_Repeat_OtherReadonly", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.node.NodePublishVolume(ctx, with(f.pubReq(), func(r *csipb.NodePublishVolumeRequest) { r.Readonly = true }))
			return err
		}, codes.AlreadyExists},
		{"NodePublish_Repeat_OtherCapability", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.node.NodePublishVolume(ctx, with(f.pubReq(), func(r *csipb.NodePublishVolumeRequest) { r.VolumeCapability = mountCap(snro) }))
			return err
		}, codes.AlreadyExists},
		{"NodePublish_SecondTarget_SingleNodeWriter", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			// A second reader on the same node gets its own target.
			_, err := f.h.node.NodePublishVolume(ctx, with(f.pubReq(), func(r *csipb.NodePublishVolumeRequest) {
				r.TargetPath = filepath.Join(f.base, "reader")
				r.Readonly = true
			}))
			return err
		}, codes.OK},
		{"NodePublish_SecondTarget_SingleNodeSingleWriter", func(c *hostpath.Config) { c.ControllerPublish, c.Staging = false, false }, func(ctx context.Context, t *testing.T, f *fixture) error {
			cv, err := f.h.ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "one", VolumeCapabilities: []*csipb.VolumeCapability{mountCap(snsw)}})
			must.NoError(t, err)
			for _, target := range []string{"a", "b"} {
				if _, err := f.h.node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{
					VolumeId: cv.GetVolume().GetVolumeId(), TargetPath: filepath.Join(f.base, target), VolumeCapability: mountCap(snsw)}); err != nil {
					return err
				}
			}
			return nil
		}, codes.FailedPrecondition},
		{"NodePublish_TargetHoldsOtherVolume", func(c *hostpath.Config) { c.ControllerPublish, c.Staging = false, false }, func(ctx context.Context, t *testing.T, f *fixture) error {
			cv, err := f.h.ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "other", VolumeCapabilities: []*csipb.VolumeCapability{mountCap(snw)}})
			must.NoError(t, err)
			_, err = f.h.node.NodePublishVolume(ctx, with(f.pubReq(), func(r *csipb.NodePublishVolumeRequest) { r.VolumeId = cv.GetVolume().GetVolumeId() }))
			return err
		}, codes.AlreadyExists},
		{"NodePublish_WithoutStaging", func(c *hostpath.Config) { c.Staging = false }, func(ctx context.Context, t *testing.T, f *fixture) error {
			must.NoError(t, os.WriteFile(filepath.Join(f.target, "f"), []byte("x"), 0o600), "the target shows the volume")
			return nil
		}, codes.OK},

		// NodeUnpublishVolume
		{"NodeUnpublish_NoTarget", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: f.vol})
			return err
		}, codes.InvalidArgument},
		{"NodeUnpublish_NoVolumeID", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{TargetPath: f.target})
			return err
		}, codes.InvalidArgument},
		{"NodeUnpublish_UnknownTarget", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: f.vol, TargetPath: filepath.Join(f.base, "nowhere")})
			return err
		}, codes.OK},
		{"NodeUnpublish_MalformedVolume", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: badVol, TargetPath: filepath.Join(f.base, "nowhere")})
			return err
		}, codes.OK},
		{"NodeUnpublish_Twice", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			for range 2 {
				if _, err := f.h.node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: f.vol, TargetPath: f.target}); err != nil {
					return err
				}
			}
			return nil
		}, codes.OK},
		{"NodeUnpublish_LeavesForeignDirectory", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			dir := filepath.Join(f.base, "foreign")
			must.NoError(t, os.MkdirAll(filepath.Join(dir, "keep"), 0o750))
			_, err := f.h.node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: f.vol, TargetPath: dir})
			must.DirExists(t, filepath.Join(dir, "keep"), "what the plugin did not publish is left alone")
			return err
		}, codes.OK},

		// NodeGetVolumeStats
		{"Stats_NoPath", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.node.NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: f.vol})
			return err
		}, codes.InvalidArgument},
		{"Stats_UnknownVolume", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.node.NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: unknownVol, VolumePath: f.target})
			return err
		}, codes.NotFound},
		{"Stats_UnknownVolume_RelativePath", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			// The volume is checked before the path's form: an unknown
			// volume is NotFound whatever path comes with it.
			_, err := f.h.node.NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: unknownVol, VolumePath: "some/path"})
			return err
		}, codes.NotFound},
		{"Stats_MalformedVolume_PathInsideVolumes", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.node.NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: badVol, VolumePath: filepath.Join(f.h.cfg.DataDir, "volumes")})
			return err
		}, codes.NotFound},
		{"Stats_RelativePath", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			// Not where the volume is: the spec's NotFound, not a
			// complaint about the path's form.
			_, err := f.h.node.NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: f.vol, VolumePath: "some/path"})
			return err
		}, codes.NotFound},
		{"Stats_UncleanTargetPath", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.node.NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: f.vol, VolumePath: f.target + "/."})
			return err
		}, codes.OK},
		{"Stats_NoVolumeID", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.node.NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumePath: "some/path"})
			return err
		}, codes.InvalidArgument},
		{"Stats_NotPublishedThere", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.node.NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: f.vol, VolumePath: f.base})
			return err
		}, codes.NotFound},
		{"Stats_StagingPath", nil, func(ctx context.Context, t *testing.T, f *fixture) error {
			_, err := f.h.node.NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: f.vol, VolumePath: f.staging})
			return err
		}, codes.OK},
	} {
		for _, m := range mountMethods() {
			t.Run(tc.name+"/"+string(m), func(t *testing.T) {
				t.Parallel()
				cfg := fullConfig(m)
				if tc.cfg != nil {
					tc.cfg(&cfg)
				}
				f := newFixture(t, cfg)
				requireCode(t, tc.want, tc.call(context.Background(), t, f))
			})
		}
	}
}

// mountMethods lists the mount methods that work here: symlink always,
// bind when this process can bind-mount (as root).
func mountMethods() []hostpath.MountMethod {
	if os.Geteuid() == 0 && hostpath.CanBindMount() == nil {
		return []hostpath.MountMethod{hostpath.MountSymlink, hostpath.MountBind}
	}
	return []hostpath.MountMethod{hostpath.MountSymlink}
}
