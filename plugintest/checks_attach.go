package plugintest

import (
	"context"
	"fmt"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/csikit/csikit/csi"
)

// maxAttachLimit bounds the attach limit the harness fills: a node that
// takes more volumes than this is not filled (the row is skipped).
const maxAttachLimit = 16

var needAttachLimit = needBoth(needCreate, needPublish, func(l *run) string {
	switch {
	case l.maxVolumes == 0:
		return "NodeGetInfo reports no max_volumes_per_node"
	case l.maxVolumes > maxAttachLimit:
		return fmt.Sprintf("max_volumes_per_node is %d; the harness fills at most %d", l.maxVolumes, maxAttachLimit)
	}
	return ""
})

// checkAttachLimit attaches max_volumes_per_node volumes of its own to
// the node, then one more, which the spec requires refused with
// ResourceExhausted; it detaches and deletes them after.
func (l *run) checkAttachLimit(ctx context.Context, step string) {
	cc, ok := l.ctrlRaw(ctx, step)
	if !ok {
		return
	}
	var made, attached []string
	defer func() {
		for _, id := range attached {
			_, err := retry(ctx, func(ctx context.Context) (*csipb.ControllerUnpublishVolumeResponse, error) {
				return cc.ControllerUnpublishVolume(ctx, &csipb.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: l.csiNode, Secrets: l.cfg.Secrets})
			})
			l.expectCode(ctx, step, methodControllerUnpublish, err, csi.CodeOK, fmt.Sprintf("the spec requires OK from ControllerUnpublishVolume of volume %q, published to node %q", id, l.csiNode))
		}
		for _, id := range made {
			l.dropScratch(ctx, step, id)
		}
	}()
	for i := int64(0); i <= l.maxVolumes; i++ {
		v, err := l.scratch(ctx, step, fmt.Sprintf("attach-%d", i), nil)
		if err != nil {
			l.expectCode(ctx, step, methodCreateVolume, err, csi.CodeOK, "the spec requires OK from CreateVolume with the run's parameters")
			return
		}
		made = append(made, v.GetVolumeId())
		_, err = retry(ctx, func(ctx context.Context) (*csipb.ControllerPublishVolumeResponse, error) {
			return cc.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{
				VolumeId: v.GetVolumeId(), NodeId: l.csiNode, VolumeCapability: l.capPB(), Secrets: l.cfg.Secrets, VolumeContext: v.GetVolumeContext(),
			})
		})
		if err == nil {
			attached = append(attached, v.GetVolumeId())
		}
		switch {
		case i < l.maxVolumes && err != nil:
			l.expectCode(ctx, step, methodControllerPublish, err, csi.CodeOK,
				fmt.Sprintf("the spec requires OK from ControllerPublishVolume of volume %d of the %d that NodeGetInfo's max_volumes_per_node allows on node %q", i+1, l.maxVolumes, l.csiNode))
			return
		case i == l.maxVolumes && status.Code(err) != codes.ResourceExhausted:
			l.expectCode(ctx, step, methodControllerPublish, err, csi.CodeResourceExhausted,
				fmt.Sprintf("the spec requires ResourceExhausted from ControllerPublishVolume past max_volumes_per_node (%d) on node %q", l.maxVolumes, l.csiNode))
		}
	}
}
