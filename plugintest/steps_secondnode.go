package plugintest

import (
	"cmp"
	"context"
	"fmt"
	"path/filepath"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/fingerprint"
	"github.com/csikit/csikit/mounter"
	"github.com/csikit/csikit/rpcshim"
	"github.com/csikit/csikit/state"
)

const stepSecondNode = "second node (hand-over)"

// secondNode hands the volume over to a second node once the lifecycle
// released it from the first (Config.SecondNodeEndpoint), through the
// csikit stack as a host does: the second node's agent registers the
// plugin's node service there; an allocation on that node claims the
// volume through the server (ControllerPublishVolume to the node), and
// its mounter stages, publishes and unmounts the volume; the allocation
// stops and the claim release worker detaches it. Meanwhile a
// single-node volume must be refused on the first node. Every call
// must succeed but the refusal.
func (l *run) secondNode(ctx context.Context) {
	const step = stepSecondNode
	if l.cfg.SecondNodeEndpoint == "" || !l.begin(ctx, step) {
		return
	}
	ctx, cancel := l.stepCtx(ctx)
	defer cancel()
	l.handoverFrom = l.calls.len()
	defer func() { l.handoverTo = l.calls.len() }()
	ag, ok := l.startSecond(ctx, step)
	if !ok {
		return
	}
	a := &alloc{n: len(l.allocs) + 1, id: "alloc-node-2", node: secondNode, mode: csi.ClaimWrite}
	if l.cfg.Capability.AccessMode.ReadOnly() {
		a.mode = csi.ClaimRead
	}
	l.handover = a
	l.cleanups.push(l.undoSecond(ag, a))
	if !l.claimSecond(ctx, step, a) {
		return
	}
	if l.publishes() && !multiNode(l.cfg.Capability.AccessMode) {
		l.refuseFirst(ctx, step)
	}
	mounted := l.mountSecond(ctx, step, ag, a)
	released := l.releaseSecond(ctx, step, ag, a)
	l.handoverDone = mounted && released
}

// secondDirs are the second node's directories, beneath the first's, so
// that the checks of what is left behind cover them too.
func (l *run) secondDirs() agentDirs {
	sub := func(d string) string {
		if d == "" {
			return ""
		}
		return filepath.Join(d, secondNode)
	}
	return agentDirs{root: sub(l.cfg.MountRoot), staging: sub(l.cfg.StagingDir), target: sub(l.cfg.TargetDir), state: sub(l.cfg.StateDir)}
}

// startSecond starts the second node's agent, fingerprints the plugin's
// node service there as the agent's registry does, requires a node_id
// of its own, and waits until the store has the plugin healthy on the
// node.
func (l *run) startSecond(ctx context.Context, step string) (*agent, bool) {
	dirs := l.secondDirs()
	for _, d := range []string{dirs.root, dirs.staging, dirs.target} {
		if d == "" {
			continue
		}
		if err := l.made.make(ctx, d); err != nil {
			l.fail(ctx, Failure{Step: step, Expect: "directories for the second node where the plugin sees them", Detail: err.Error()})
			return nil, false
		}
	}
	ag, err := l.st.startSecond(l.cfg, dirs, l.cfg.SecondNodeEndpoint, l.calls, l.made)
	if err != nil {
		l.fail(ctx, Failure{Step: step, Expect: "the second node's agent (registry, mounter, node endpoint) to start", Detail: err.Error()})
		return nil, false
	}
	in := instance{allocID: "plugin-node-2", typ: csi.PluginTypeNode, socket: l.cfg.SecondNodeEndpoint}
	nc, _, err := ag.mgr.NodePlugin(pluginID)
	fc, ok := nc.(fingerprint.Client)
	if err != nil || !ok {
		l.fail(ctx, Failure{Step: step, Expect: "the second node's registry to hand out a client of Config.SecondNodeEndpoint", Detail: fmt.Sprint(err)})
		return nil, false
	}
	info, ok := l.fingerprintOne(ctx, step, fc, in, false)
	if !ok {
		return nil, false
	}
	var node2 string
	if info.NodeInfo != nil {
		node2 = info.NodeInfo.ID
		l.secondStages = info.NodeInfo.Capabilities.StageUnstageVolume
	}
	if node2 == "" || node2 == l.csiNode {
		l.wrong(ctx, step, methodNodeGetInfo, fmt.Sprintf("with node_id %q at Config.SecondNodeEndpoint", node2),
			fmt.Sprintf("the second node must report a node_id of its own, not empty and not the first node's %q", l.csiNode))
		return nil, false
	}
	l.secondCSINode = node2
	l.st.runSecond(ctx)
	if err := l.st.waitHealthy(ctx, secondNode, false, true, ag.lastReport); err != nil {
		l.fail(ctx, Failure{Step: step, Expect: "the second node's registry must find the plugin healthy, as the harness did",
			Detail: err.Error()})
		return nil, false
	}
	return ag, true
}

// claimSecond claims the volume for a on the second node through the
// server, which attaches it there (ControllerPublishVolume).
func (l *run) claimSecond(ctx context.Context, step string, a *alloc) bool {
	if _, err := l.st.applier.Apply(ctx, state.UpsertAllocations{Allocations: []csi.Allocation{a.allocation(false)}}); err != nil {
		l.fail(ctx, Failure{Step: step, Expect: "the store to take the second node's allocation", Detail: err.Error()})
		return false
	}
	resp, err := l.st.server.Claim(ctx, &rpcshim.VolumeClaimRequest{Namespace: namespace, VolumeID: l.volID, Claim: csi.Claim{
		AllocationID:   a.id,
		NodeID:         secondNode,
		Mode:           a.mode,
		AccessMode:     l.cfg.Capability.AccessMode,
		AttachmentMode: l.cfg.Capability.AttachmentMode,
	}})
	if err != nil {
		expect := l.expectOK(callOf(err), csi.CodeOf(err))
		if callOf(err) == methodControllerPublish {
			expect = fmt.Sprintf("the spec requires OK from ControllerPublishVolume to node %q: the volume was unpublished from node %q", l.secondCSINode, l.csiNode)
		}
		l.fail(ctx, l.failure(ctx, step, err, expect))
		return false
	}
	a.claim, a.vol, a.claimed = resp.Claim, resp.Volume, true
	return true
}

// refuseFirst requires the plugin to refuse publishing a single-node
// volume to the first node while the second holds it. The call is the
// harness's own: the csikit server would refuse the claim before the
// plugin saw it.
func (l *run) refuseFirst(ctx context.Context, step string) {
	cc, ok := l.ctrlRaw(ctx, step)
	if !ok {
		return
	}
	_, err := retry(ctx, func(ctx context.Context) (*csipb.ControllerPublishVolumeResponse, error) {
		return cc.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{VolumeId: l.externalID, NodeId: l.csiNode, VolumeCapability: l.capPB(), Secrets: l.cfg.Secrets, VolumeContext: l.volumeContext()})
	})
	if err == nil {
		l.cleanups.push(func(ctx context.Context) {
			ctx, cancel := l.cleanupCtx(ctx)
			defer cancel()
			_, _ = cc.ControllerUnpublishVolume(ctx, &csipb.ControllerUnpublishVolumeRequest{VolumeId: l.externalID, NodeId: l.csiNode, Secrets: l.cfg.Secrets})
		})
	}
	l.expectCode(ctx, step, methodControllerPublish, err, csi.CodeFailedPrecondition,
		fmt.Sprintf("the spec requires FailedPrecondition when a %s volume published to node %q is published to another node (%q)", l.cfg.Capability.AccessMode, l.secondCSINode, l.csiNode))
}

// multiNode reports whether mode lets several nodes publish a volume.
func multiNode(m csi.AccessMode) bool {
	switch m {
	case csi.AccessModeMultiNodeReaderOnly, csi.AccessModeMultiNodeSingleWriter, csi.AccessModeMultiNodeMultiWriter:
		return true
	}
	return false
}

// mountSecond mounts the volume for a through the second node's
// mounter (stage when its node service stages, publish), then unmounts
// it.
func (l *run) mountSecond(ctx context.Context, step string, ag *agent, a *alloc) bool {
	onSecond := func(err error) string {
		return fmt.Sprintf("the spec requires OK from %s on the second node (node_id %q) once the volume is attached to it and released from the first",
			cmp.Or(callOf(err), "the node calls"), l.secondCSINode)
	}
	req, err := mounter.NewMountRequest(a.vol, a.claim)
	if err != nil {
		l.fail(ctx, Failure{Step: step, Expect: "a valid mount request from the second node's claim", Detail: err.Error()})
		return false
	}
	info, err := ag.mnt.MountVolume(ctx, req)
	if err != nil {
		l.fail(ctx, l.failure(ctx, step, err, onSecond(err)))
		return false
	}
	a.path, a.mounted = info.Path, true
	if err := ag.mnt.UnmountVolume(ctx, mounter.NewUnmountRequest(namespace, l.volID, a.claim)); err != nil {
		l.fail(ctx, l.failure(ctx, step, err, onSecond(err)))
		return false
	}
	a.mounted = false
	return true
}

// releaseSecond stops a, and waits for the claim release worker to free
// its claim: its node step (when the unmount failed) and the detach
// from the second node.
func (l *run) releaseSecond(ctx context.Context, step string, ag *agent, a *alloc) bool {
	from := l.calls.len()
	if err := l.stopAllocsOn(ctx, []*alloc{a}, ag.mnt); err != nil {
		l.fail(ctx, Failure{Step: step, Expect: "the store to take the second node's stopped allocation", Detail: err.Error()})
		return false
	}
	if err := l.waitFreed(ctx); err != nil {
		f := l.releaseFailure(ctx, step, from, err)
		if f.Call == methodControllerUnpublish {
			f.Expect = fmt.Sprintf("the spec requires OK from ControllerUnpublishVolume of volume %q from node %q once it is unpublished there", l.externalID, l.secondCSINode)
		}
		l.fail(ctx, f)
		return false
	}
	if _, ok := l.calls.last(from, methodControllerUnpublish, func(req any) bool {
		return req.(*plugin.ControllerUnpublishRequest).ExternalNodeID == l.secondCSINode
	}); l.publishes() && !ok {
		l.fail(ctx, Failure{Step: step, Expect: "the claim release worker to call ControllerUnpublishVolume for the second node; it freed the claim without it"})
		return false
	}
	return true
}

// undoSecond releases the second node's claim if the hand-over left it
// held: it unmounts, stops the allocation and waits for the worker,
// and when that cannot finish detaches the volume from the second node
// directly (undoClaims, later, drops the claims from the store).
func (l *run) undoSecond(ag *agent, a *alloc) func(context.Context) {
	return func(ctx context.Context) {
		ctx, cancel := l.cleanupCtx(ctx)
		defer cancel()
		v, err := l.st.store.Volume(namespace, l.volID)
		if err != nil || !v.InUse() {
			return
		}
		const step = "cleanup: release the second node's claim"
		l.rep.Step(step)
		if has, err := ag.mnt.HasMount(ctx, namespace, l.volID, a.id); (err != nil || has) && a.claim != nil {
			if err := ag.mnt.UnmountVolume(ctx, mounter.NewUnmountRequest(namespace, l.volID, a.claim)); err != nil {
				l.rep.Fail(l.failure(ctx, step, err, "the spec requires OK from NodeUnpublishVolume and NodeUnstageVolume on a published volume"))
			}
		}
		a.claimed = true // the claim may be written though Claim failed
		from := l.calls.len()
		err = l.stopAllocsOn(ctx, []*alloc{a}, ag.mnt)
		if err == nil {
			err = l.waitFreed(ctx)
		}
		if err == nil {
			return
		}
		l.rep.Fail(l.releaseFailure(ctx, step, from, err))
		l.unpublishDirect(ctx, step, l.secondCSINode)
	}
}
