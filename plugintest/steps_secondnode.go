package plugintest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/csikit/csikit/csi"
)

// secondNode hands the volume over to a second node once the lifecycle
// released it from the first (Config.SecondNodeEndpoint): it attaches
// the volume to the second node, requires a single-node volume refused
// on the first meanwhile, stages and publishes it there, and undoes it
// all. Every call must succeed but the refusal.
func (l *run) secondNode(ctx context.Context) {
	const step = "second node (hand-over)"
	if l.cfg.SecondNodeEndpoint == "" || !l.begin(ctx, step) {
		return
	}
	ctx, cancel := l.stepCtx(ctx)
	defer cancel()
	conn, err := l.raw.conn(l.cfg.SecondNodeEndpoint)
	if err != nil {
		l.fail(ctx, Failure{Step: step, Expect: "a gRPC client of Config.SecondNodeEndpoint", Detail: err.Error()})
		return
	}
	nc := csipb.NewNodeClient(conn)
	info, ok := callOK(ctx, l, step, methodNodeGetInfo, "the spec requires every node plugin to answer NodeGetInfo",
		func(ctx context.Context) (*csipb.NodeGetInfoResponse, error) {
			return nc.NodeGetInfo(ctx, &csipb.NodeGetInfoRequest{})
		})
	if !ok {
		return
	}
	node2 := info.GetNodeId()
	if node2 == "" || node2 == l.csiNode {
		l.wrong(ctx, step, methodNodeGetInfo, fmt.Sprintf("with node_id %q at Config.SecondNodeEndpoint", node2),
			fmt.Sprintf("the second node must report a node_id of its own, not empty and not the first node's %q", l.csiNode))
		return
	}
	pc, ok := l.attachSecond(ctx, step, node2)
	if !ok {
		return
	}
	caps, ok := callOK(ctx, l, step, methodNodeGetCaps, "the spec requires every node plugin to answer NodeGetCapabilities",
		func(ctx context.Context) (*csipb.NodeGetCapabilitiesResponse, error) {
			return nc.NodeGetCapabilities(ctx, &csipb.NodeGetCapabilitiesRequest{})
		})
	if !ok {
		return
	}
	l.mountSecond(ctx, step, nc, pc, stagesPB(caps))
}

func stagesPB(caps *csipb.NodeGetCapabilitiesResponse) bool {
	for _, c := range caps.GetCapabilities() {
		if c.GetRpc().GetType() == csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME {
			return true
		}
	}
	return false
}

// attachSecond publishes the volume to node2 (when the plugin publishes)
// and, for a single-node mode, requires a publish to the first node
// refused meanwhile. The detach is pushed as a cleanup and also done at
// the end of mountSecond.
func (l *run) attachSecond(ctx context.Context, step, node2 string) (map[string]string, bool) {
	if !l.publishes() {
		return nil, true
	}
	cc, ok := l.ctrlRaw(ctx, step)
	if !ok {
		return nil, false
	}
	publish := func(node string) func(context.Context) (*csipb.ControllerPublishVolumeResponse, error) {
		return func(ctx context.Context) (*csipb.ControllerPublishVolumeResponse, error) {
			return cc.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{VolumeId: l.externalID, NodeId: node, VolumeCapability: l.capPB(), Secrets: l.cfg.Secrets, VolumeContext: l.volumeContext()})
		}
	}
	resp, ok := callOK(ctx, l, step, methodControllerPublish, fmt.Sprintf("the spec requires OK from ControllerPublishVolume to node %q: the volume was unpublished from node %q", node2, l.csiNode), publish(node2))
	if !ok {
		return nil, false
	}
	l.secondAttached = node2
	l.cleanups.push(l.undoSecondAttach)
	if !multiNode(l.cfg.Capability.AccessMode) {
		_, err := retry(ctx, publish(l.csiNode))
		if err == nil {
			l.cleanups.push(func(ctx context.Context) {
				ctx, cancel := l.cleanupCtx(ctx)
				defer cancel()
				_, _ = cc.ControllerUnpublishVolume(ctx, &csipb.ControllerUnpublishVolumeRequest{VolumeId: l.externalID, NodeId: l.csiNode, Secrets: l.cfg.Secrets})
			})
		}
		l.expectCode(ctx, step, methodControllerPublish, err, csi.CodeFailedPrecondition,
			fmt.Sprintf("the spec requires FailedPrecondition when a %s volume published to node %q is published to another node (%q)", l.cfg.Capability.AccessMode, node2, l.csiNode))
	}
	return resp.GetPublishContext(), true
}

// multiNode reports whether mode lets several nodes publish a volume.
func multiNode(m csi.AccessMode) bool {
	switch m {
	case csi.AccessModeMultiNodeReaderOnly, csi.AccessModeMultiNodeSingleWriter, csi.AccessModeMultiNodeMultiWriter:
		return true
	}
	return false
}

// mountSecond stages and publishes on the second node, then undoes it,
// and detaches the volume from it.
func (l *run) mountSecond(ctx context.Context, step string, nc csipb.NodeClient, pc map[string]string, stages bool) {
	root := filepath.Join(l.cfg.MountRoot, "second-node-"+randomHex(4))
	staging, target := filepath.Join(root, "staging"), filepath.Join(root, "target", "mount")
	for _, d := range []string{staging, filepath.Dir(target)} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			l.fail(ctx, Failure{Step: step, Expect: "directories for the second node under the mount root", Detail: err.Error()})
			return
		}
	}
	defer func() { _ = os.RemoveAll(root) }()
	vc := l.volumeContext()
	if stages {
		if _, ok := callOK(ctx, l, step, methodNodeStage, "the spec requires OK from NodeStageVolume on the second node once the volume is attached to it",
			func(ctx context.Context) (*csipb.NodeStageVolumeResponse, error) {
				return nc.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: l.externalID, PublishContext: pc, StagingTargetPath: staging, VolumeCapability: l.capPB(), Secrets: l.cfg.Secrets, VolumeContext: vc})
			}); !ok {
			return
		}
	} else {
		staging = ""
	}
	if _, ok := callOK(ctx, l, step, methodNodePublish, "the spec requires OK from NodePublishVolume on the second node",
		func(ctx context.Context) (*csipb.NodePublishVolumeResponse, error) {
			return nc.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: l.externalID, PublishContext: pc, StagingTargetPath: staging, TargetPath: target, VolumeCapability: l.capPB(), Secrets: l.cfg.Secrets, VolumeContext: vc})
		}); !ok {
		return
	}
	callOK(ctx, l, step, methodNodeUnpublish, "the spec requires OK from NodeUnpublishVolume on the second node",
		func(ctx context.Context) (*csipb.NodeUnpublishVolumeResponse, error) {
			return nc.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: l.externalID, TargetPath: target})
		})
	if stages {
		callOK(ctx, l, step, methodNodeUnstage, "the spec requires OK from NodeUnstageVolume on the second node",
			func(ctx context.Context) (*csipb.NodeUnstageVolumeResponse, error) {
				return nc.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: l.externalID, StagingTargetPath: staging})
			})
	}
	l.undoSecondAttach(ctx)
}

// undoSecondAttach detaches the volume from the second node, once.
func (l *run) undoSecondAttach(ctx context.Context) {
	node2 := l.secondAttached
	if node2 == "" {
		return
	}
	l.secondAttached = ""
	cc, err := l.raw.controller(l.ctrlSocket)
	if err != nil {
		return
	}
	ctx, cancel := l.cleanupCtx(ctx)
	defer cancel()
	_, err = retry(ctx, func(ctx context.Context) (*csipb.ControllerUnpublishVolumeResponse, error) {
		return cc.ControllerUnpublishVolume(ctx, &csipb.ControllerUnpublishVolumeRequest{VolumeId: l.externalID, NodeId: node2, Secrets: l.cfg.Secrets})
	})
	if err != nil && status.Code(err) != codes.NotFound {
		l.rep.Fail(Failure{Step: "second node (hand-over)", Call: methodControllerUnpublish, Code: csi.Code(status.Code(err)),
			Expect: fmt.Sprintf("the spec requires OK from ControllerUnpublishVolume of volume %q from node %q", l.externalID, node2)})
	}
}
