package plugintest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/mounter"
)

// mountAll mounts the volume for every claimed allocation through the
// node's mounter: the first mount stages (when the plugin stages) and
// publishes, the second publishes from the same stage.
func (l *run) mountAll(ctx context.Context) {
	for i, a := range l.allocs {
		l.mount(ctx, a)
		if i == 0 {
			if l.cfg.Faults && len(l.allocs) > 1 {
				l.restartNode(ctx, "after the first mount")
			}
			l.restartPlugin(ctx)
		}
	}
	if l.cfg.Faults {
		l.cancelRetry(ctx)
	}
}

// mount mounts the volume for a; false when it failed.
func (l *run) mount(ctx context.Context, a *alloc) bool {
	step := fmt.Sprintf("mount (allocation %d)", a.n)
	if !l.begin(ctx, step) {
		return false
	}
	ctx, cancel := l.stepCtx(ctx)
	defer cancel()
	req, err := mounter.NewMountRequest(a.vol, a.claim)
	if err != nil {
		l.fail(ctx, Failure{Step: step, Expect: "a valid mount request from the claim", Detail: err.Error(), Fatal: true})
		return false
	}
	// A failed or interrupted mount may still have published: the undo
	// asks the mounter.
	l.cleanups.push(l.undoMount(a))
	from := l.calls.len()
	info, err := l.st.mnt.MountVolume(ctx, req)
	if err != nil {
		var rerr *csi.RPCError
		if a.n > 1 && errors.As(err, &rerr) && rerr.Method == methodNodePublish && rerr.Code == csi.CodeFailedPrecondition && !multiTarget(l.cfg.Capability.AccessMode) {
			// The spec's table lets a plugin refuse a second target of a
			// volume in a single-node mode.
			a.refused = true
			l.rep.Skip(step, fmt.Sprintf("the plugin refused a second target_path for a %s volume with FailedPrecondition, which the spec's NodePublishVolume table allows; csikit publishes each allocation at its own target, so only one allocation per node can use such a volume with this plugin (plugin message: %q)",
				l.cfg.Capability.AccessMode, rerr.Message))
			return true
		}
		f := l.failure(ctx, step, err, l.expectOK(callOf(err), csi.CodeOf(err)))
		f.Fatal = true
		l.fail(ctx, f)
		return false
	}
	a.path, a.mounted = info.Path, true
	if _, err := os.Lstat(info.Path); err != nil {
		l.fail(ctx, Failure{Step: step, Call: methodNodePublish, Code: csi.CodeOK, Got: "but target_path does not exist", Expect: expectTargetMade, Detail: err.Error()})
	}
	if a.n == 1 {
		l.nodeChecks(ctx, from)
	}
	return true
}

// multiTarget reports whether the spec lets one node publish a volume of
// mode m at several target paths with different arguments.
func multiTarget(m csi.AccessMode) bool {
	switch m {
	case csi.AccessModeMultiNodeReaderOnly, csi.AccessModeMultiNodeSingleWriter,
		csi.AccessModeMultiNodeMultiWriter, csi.AccessModeSingleNodeMultiWriter:
		return true
	}
	return false
}

// callOf returns the CSI method in err's chain, or "".
func callOf(err error) string {
	var rerr *csi.RPCError
	if errors.As(err, &rerr) {
		return rerr.Method
	}
	return ""
}

// nodeChecks repeats the first mount's NodeStageVolume and
// NodePublishVolume, and sends the node requests the plugin must refuse.
func (l *run) nodeChecks(ctx context.Context, from int) {
	stage, staged := l.calls.last(from, methodNodeStage, nil)
	pub, published := l.calls.last(from, methodNodePublish, nil)
	if !l.cfg.SkipIdempotency {
		if step := "stage (idempotent repeat)"; staged && l.begin(ctx, step) {
			if err := l.node.NodeStageVolume(ctx, stage.Req.(*plugin.NodeStageRequest)); err != nil {
				l.fail(ctx, l.failure(ctx, step, err, expectStageRepeat))
			}
		}
		if step := "publish (idempotent repeat)"; published && l.begin(ctx, step) {
			if err := l.node.NodePublishVolume(ctx, pub.Req.(*plugin.NodePublishRequest)); err != nil {
				l.fail(ctx, l.failure(ctx, step, err, expectPubRepeat))
			}
		}
	}
	if l.cfg.SkipNegative || !published {
		return
	}
	req := pub.Req.(*plugin.NodePublishRequest)
	if step := "publish of an unknown volume"; l.begin(ctx, step) {
		l.publishUnknown(ctx, step, req)
	}
	if step := "publish without a target path"; l.begin(ctx, step) {
		if nc, ok := l.rawNode(ctx, step); ok {
			_, err := nc.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{
				VolumeId:          req.ExternalID,
				PublishContext:    req.PublishContext,
				StagingTargetPath: req.StagingPath,
				VolumeCapability:  plugin.CapabilityToPB(req.Capability, req.MountOptions),
				Readonly:          req.ReadOnly,
				VolumeContext:     req.VolumeContext,
			})
			l.expectCode(ctx, step, methodNodePublish, err, csi.CodeInvalidArgument, expectMissingField+" (NodePublishVolumeRequest.target_path)")
		}
	}
	if step := "stage without a staging path"; staged && l.begin(ctx, step) {
		sr := stage.Req.(*plugin.NodeStageRequest)
		if nc, ok := l.rawNode(ctx, step); ok {
			_, err := nc.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{
				VolumeId:         sr.ExternalID,
				PublishContext:   sr.PublishContext,
				VolumeCapability: plugin.CapabilityToPB(sr.Capability, sr.MountOptions),
				VolumeContext:    sr.VolumeContext,
			})
			l.expectCode(ctx, step, methodNodeStage, err, csi.CodeInvalidArgument, expectMissingField+" (NodeStageVolumeRequest.staging_target_path)")
		}
	}
}

// publishUnknown publishes a volume ID the plugin does not know, at a
// target of its own under the mount root, with the first publish's
// other arguments.
func (l *run) publishUnknown(ctx context.Context, step string, req *plugin.NodePublishRequest) {
	dir, err := l.probeParent(ctx)
	if err != nil {
		l.fail(ctx, Failure{Step: step, Expect: "a directory for the probe's target under the mount root", Detail: err.Error()})
		return
	}
	r := *req
	r.ExternalID = unknownID(l.externalID)
	r.TargetPath = filepath.Join(dir, "unknown-volume")
	err = l.node.NodePublishVolume(ctx, &r)
	if err == nil {
		l.cleanups.push(l.undoNodePublish(&r))
	}
	l.expectCode(ctx, step, methodNodePublish, err, csi.CodeNotFound, fmt.Sprintf("%s (volume_id %q)", expectUnknownVol, r.ExternalID))
}

// probeParent makes the parent directory of the probes' targets.
func (l *run) probeParent(ctx context.Context) (string, error) {
	if l.probeDir == "" {
		l.probeDir = filepath.Join(l.cfg.MountRoot, "plugintest-probe-"+randomHex(4))
	}
	if err := os.MkdirAll(l.probeDir, 0o750); err != nil {
		return "", err
	}
	return l.probeDir, l.made.make(ctx, l.probeDir)
}

func (l *run) rawNode(ctx context.Context, step string) (csipb.NodeClient, bool) {
	nc, err := l.raw.node(l.nodeSocket)
	if err != nil {
		l.fail(ctx, Failure{Step: step, Expect: "a gRPC client of the node plugin", Detail: err.Error()})
		return nil, false
	}
	return nc, true
}

// checkData writes a file through the writer's target and reads it back
// through the targets Config.DataCheck names. A volume claimed in a
// read-only mode is only listed.
func (l *run) checkData(ctx context.Context) {
	const step = "data"
	if len(l.allocs) == 0 || !l.allocs[0].mounted {
		if l.stopped != "" {
			l.rep.Skip(step, l.stopped)
		}
		return
	}
	if !l.begin(ctx, step) {
		return
	}
	switch {
	case l.cfg.Capability.AttachmentMode != csi.AttachmentModeFileSystem:
		l.rep.Skip(step, "the volume is a block device; the harness writes only to file systems")
		return
	case l.cfg.DataCheck == DataOff:
		l.rep.Skip(step, "Config.DataCheck is DataOff")
		return
	}
	w := l.allocs[0]
	if w.mode != csi.ClaimWrite {
		if _, err := os.ReadDir(w.path); err != nil {
			l.fail(ctx, Failure{Step: step, Got: "listing the published volume failed", Expect: "a published file-system volume must be a readable directory at target_path", Detail: err.Error()})
		}
		return
	}
	name := "plugintest-" + randomHex(4)
	data := []byte("written by csikit plugintest through " + w.id + "\n")
	file := filepath.Join(w.path, name)
	if err := os.WriteFile(file, data, 0o644); err != nil {
		l.fail(ctx, Failure{Step: step, Got: "writing a file through allocation 1's target failed",
			Expect: "a file-system volume published read/write must be writable at target_path", Detail: err.Error()})
		return
	}
	defer func() { _ = os.Remove(file) }()
	readers := []*alloc{w}
	if l.cfg.DataCheck == DataShared {
		for _, a := range l.allocs[1:] {
			if a.mounted {
				readers = append(readers, a)
			}
		}
	}
	for _, a := range readers {
		got, err := os.ReadFile(filepath.Join(a.path, name))
		switch {
		case errors.Is(err, fs.ErrNotExist) && a != w:
			l.fail(ctx, Failure{Step: step, Got: fmt.Sprintf("the file written through allocation 1's target is missing at allocation %d's", a.n),
				Expect: "one volume published at two targets must show the same files (set Config.DataCheck to DataWriterOnly for a plugin without real storage)"})
		case err != nil:
			l.fail(ctx, Failure{Step: step, Got: fmt.Sprintf("reading the file back through allocation %d's target failed", a.n),
				Expect: "a published file-system volume must be readable at target_path", Detail: err.Error()})
		case !bytes.Equal(got, data):
			l.fail(ctx, Failure{Step: step, Got: fmt.Sprintf("the file read through allocation %d's target differs from what was written", a.n),
				Expect: "a published file-system volume must keep what is written to it"})
		}
	}
}

// probeUnstage, with Config.StrictUnstage, calls NodeUnstageVolume while
// the volume is still published and requires FailedPrecondition. A
// plugin that unstages anyway gets its stage back with the same
// NodeStageVolume, so the lifecycle goes on.
func (l *run) probeUnstage(ctx context.Context) {
	const step = "unstage while published (probe)"
	if !l.cfg.StrictUnstage || !l.stages() {
		return
	}
	if !l.begin(ctx, step) {
		return
	}
	stage, ok := l.calls.last(0, methodNodeStage, nil)
	if !ok || len(l.allocs) == 0 || !l.allocs[0].mounted {
		l.rep.Skip(step, "the volume was not staged and published")
		return
	}
	ctx, cancel := l.stepCtx(ctx)
	defer cancel()
	sr := stage.Req.(*plugin.NodeStageRequest)
	targets := 0
	for _, a := range l.allocs {
		if a.mounted {
			targets++
		}
	}
	err := l.node.NodeUnstageVolume(ctx, &plugin.NodeUnstageRequest{ExternalID: sr.ExternalID, StagingPath: sr.StagingPath})
	if csi.CodeOf(err) == csi.CodeFailedPrecondition {
		return
	}
	expect := fmt.Sprintf("with Config.StrictUnstage the harness requires FailedPrecondition while the volume is still published at %d target(s): an unstage that succeeds pulls the staged volume out from under live publications", targets)
	if err != nil {
		l.fail(ctx, l.failure(ctx, step, err, expect))
		return
	}
	l.fail(ctx, Failure{Step: step, Call: methodNodeUnstage, Code: csi.CodeOK, Expect: expect})
	if err := l.node.NodeStageVolume(ctx, sr); err != nil {
		f := l.failure(ctx, step, err, "the spec requires OK from NodeStageVolume of an unstaged volume (the harness stages it again after the probe)")
		f.Fatal = true
		l.fail(ctx, f)
	}
}

// unmountAll unmounts in the reverse order of the mounts: the last
// allocation's unmount also unstages.
func (l *run) unmountAll(ctx context.Context) {
	for i := len(l.allocs) - 1; i >= 0; i-- {
		switch a := l.allocs[i]; {
		case a.refused:
		case i == 0 && l.cfg.Faults:
			l.unmountAcrossRestart(ctx, a)
		default:
			l.unmount(ctx, a)
		}
		if i > 0 && l.cfg.Faults {
			l.restartNode(ctx, "between the unmounts")
		}
	}
	if l.cfg.Faults {
		l.restartNode(ctx, "before the release")
	}
}

func (l *run) unmount(ctx context.Context, a *alloc) bool {
	step := fmt.Sprintf("unmount (allocation %d)", a.n)
	if !l.begin(ctx, step) {
		return false
	}
	ctx, cancel := l.stepCtx(ctx)
	defer cancel()
	from := l.calls.len()
	if err := l.st.mnt.UnmountVolume(ctx, mounter.NewUnmountRequest(namespace, l.volID, a.claim)); err != nil {
		f := l.failure(ctx, step, err, l.expectOK(callOf(err), csi.CodeOf(err)))
		f.Fatal = true
		l.fail(ctx, f)
		return false
	}
	a.mounted = false
	if _, err := os.Lstat(a.path); err == nil {
		l.fail(ctx, Failure{Step: step, Call: methodNodeUnpublish, Code: csi.CodeOK, Got: "but left " + a.path + " in place", Expect: expectTargetGone})
	}
	if l.cfg.SkipIdempotency {
		return true
	}
	label := ""
	if a.n != 1 {
		label = fmt.Sprintf(", allocation %d", a.n)
	}
	if c, ok := l.calls.last(from, methodNodeUnpublish, nil); ok {
		if step := "unpublish (idempotent repeat" + label + ")"; l.begin(ctx, step) {
			err := l.node.NodeUnpublishVolume(ctx, c.Req.(*plugin.NodeUnpublishRequest))
			if !csi.TeardownDone(err) {
				l.fail(ctx, l.failure(ctx, step, err, expectTeardown))
			}
		}
	}
	if c, ok := l.calls.last(from, methodNodeUnstage, nil); ok {
		if step := "unstage (idempotent repeat)"; l.begin(ctx, step) {
			err := l.node.NodeUnstageVolume(ctx, c.Req.(*plugin.NodeUnstageRequest))
			if !csi.TeardownDone(err) {
				l.fail(ctx, l.failure(ctx, step, err, expectTeardown))
			}
		}
	}
	return true
}
