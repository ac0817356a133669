package plugintest

import (
	"context"
	"fmt"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/csikit/csikit/csi"
)

// The rows of expansion and modification.

const (
	methodControllerExpand = "ControllerExpandVolume"
	methodControllerModify = "ControllerModifyVolume"
	methodNodeExpand       = "NodeExpandVolume"
)

var (
	needExpand = needController(func(c csi.ControllerCapabilities) bool { return c.ExpandVolume }, "EXPAND_VOLUME")
	needModify = needController(func(c csi.ControllerCapabilities) bool { return c.ModifyVolume }, "MODIFY_VOLUME")
)

// expandStep is how much "controller expand volume" grows its volume.
const expandStep int64 = 1 << 20

var expansionChecks = []coverageCheck{
	{name: "ControllerExpandVolume", needs: needBoth(needCreate, needExpand), run: (*run).checkExpand},
	{name: "ControllerExpandVolume (errors)", needs: needExpand, run: func(l *run, ctx context.Context, step string) {
		cc, ok := l.ctrlRaw(ctx, step)
		if !ok {
			return
		}
		expand := func(id string, r *csipb.CapacityRange) func(context.Context) (*csipb.ControllerExpandVolumeResponse, error) {
			return func(ctx context.Context) (*csipb.ControllerExpandVolumeResponse, error) {
				return cc.ControllerExpandVolume(ctx, &csipb.ControllerExpandVolumeRequest{VolumeId: id, CapacityRange: r, Secrets: l.cfg.Secrets})
			}
		}
		bad := unknownID(l.externalID)
		grow := &csipb.CapacityRange{RequiredBytes: expandStep}
		expectRPC(ctx, l, step, methodControllerExpand, csi.CodeNotFound, fmt.Sprintf("%s (volume_id %q)", expectUnknownVol, bad), expand(bad, grow))
		expectRPC(ctx, l, step, methodControllerExpand, csi.CodeInvalidArgument, expectMissingField+" (ControllerExpandVolumeRequest.volume_id)", expand("", grow))
		expectRPC(ctx, l, step, methodControllerExpand, csi.CodeInvalidArgument, expectMissingField+" (ControllerExpandVolumeRequest.capacity_range)", expand(l.externalID, nil))
	}},
	{name: "ControllerModifyVolume (errors)", needs: needModify, run: func(l *run, ctx context.Context, step string) {
		cc, ok := l.ctrlRaw(ctx, step)
		if !ok {
			return
		}
		expectRPC(ctx, l, step, methodControllerModify, csi.CodeInvalidArgument, expectMissingField+" (ControllerModifyVolumeRequest.volume_id)",
			func(ctx context.Context) (*csipb.ControllerModifyVolumeResponse, error) {
				return cc.ControllerModifyVolume(ctx, &csipb.ControllerModifyVolumeRequest{MutableParameters: map[string]string{"plugintest": "x"}, Secrets: l.cfg.Secrets})
			})
	}},
}

// checkExpand grows a volume of its own and requires at least the size
// asked for, twice (the repeat is idempotent).
func (l *run) checkExpand(ctx context.Context, step string) {
	v, err := l.scratch(ctx, step, "expand", nil)
	if err != nil {
		l.expectCode(ctx, step, methodCreateVolume, err, csi.CodeOK, "the spec requires OK from CreateVolume with the run's parameters")
		return
	}
	defer l.dropScratch(ctx, step, v.GetVolumeId())
	cc, ok := l.ctrlRaw(ctx, step)
	if !ok {
		return
	}
	want := max(v.GetCapacityBytes(), l.cfg.CapacityBytes) + expandStep
	for _, what := range []string{"", " (repeated)"} {
		resp, ok := callOK(ctx, l, step, methodControllerExpand, fmt.Sprintf("the spec requires OK from ControllerExpandVolume%s of volume %q to %d bytes", what, v.GetVolumeId(), want),
			func(ctx context.Context) (*csipb.ControllerExpandVolumeResponse, error) {
				return cc.ControllerExpandVolume(ctx, &csipb.ControllerExpandVolumeRequest{
					VolumeId: v.GetVolumeId(), CapacityRange: &csipb.CapacityRange{RequiredBytes: want}, VolumeCapability: l.capPB(), Secrets: l.cfg.Secrets,
				})
			})
		if !ok {
			return
		}
		if resp.GetCapacityBytes() < want {
			l.wrong(ctx, step, methodControllerExpand, fmt.Sprintf("with capacity_bytes %d", resp.GetCapacityBytes()),
				fmt.Sprintf("the spec requires the new capacity to be at least required_bytes (%d)", want))
		}
	}
}
