package plugintest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/mounter"
	"github.com/csikit/csikit/rpcshim"
	"github.com/csikit/csikit/state"
)

// cleanups is the run's stack of undo functions. Each is pushed when the
// lifecycle takes a step that may leave something behind, and run in
// reverse order at the end, whether the lifecycle finished or stopped.
// An undo first looks whether there is anything left to undo (after a
// full lifecycle there is not) and reports a step only when there is.
type cleanups struct {
	mu   sync.Mutex
	list []func(ctx context.Context)
}

func (c *cleanups) push(fn func(ctx context.Context)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.list = append(c.list, fn)
}

// run pops and runs every undo, last pushed first, with the run's ctx.
// It may be called any number of times.
func (c *cleanups) run(ctx context.Context) {
	for {
		c.mu.Lock()
		n := len(c.list)
		if n == 0 {
			c.mu.Unlock()
			return
		}
		fn := c.list[n-1]
		c.list = c.list[:n-1]
		c.mu.Unlock()
		fn(ctx)
	}
}

// cleanupCtx bounds one undo by Config.Timeout. It does not end with the
// caller's ctx: cleanups run even after the steps were cancelled.
func (l *run) cleanupCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(context.WithoutCancel(ctx), l.cfg.Timeout, errStepTimeout)
}

// undoMount unmounts a's volume if the mounter may still have it
// published for a (a failed or interrupted mount counts).
func (l *run) undoMount(a *alloc) func(context.Context) {
	return func(ctx context.Context) {
		ctx, cancel := l.cleanupCtx(ctx)
		defer cancel()
		has, err := l.st.mnt.HasMount(ctx, namespace, l.volID, a.id)
		if err == nil && !has {
			return
		}
		step := fmt.Sprintf("cleanup: unmount (allocation %d)", a.n)
		l.rep.Step(step)
		if err == nil {
			err = l.st.mnt.UnmountVolume(ctx, mounter.NewUnmountRequest(namespace, l.volID, a.claim))
		}
		if err != nil {
			f := l.failure(ctx, step, err, "the spec requires OK from NodeUnpublishVolume and NodeUnstageVolume on a published volume")
			l.rep.Fail(f)
			return
		}
		a.mounted = false
	}
}

// unpublishDirect detaches the volume from the node with CSI node ID
// csiNode straight through the controller, when the plugin publishes:
// a cleanup's last resort once the worker could not release a claim.
func (l *run) unpublishDirect(ctx context.Context, step, csiNode string) {
	if !l.publishes() || l.externalID == "" || csiNode == "" {
		return
	}
	err := l.ctrl.ControllerUnpublishVolume(ctx, &plugin.ControllerUnpublishRequest{
		ExternalID: l.externalID, ExternalNodeID: csiNode, Secrets: l.cfg.Secrets,
	})
	if !csi.TeardownDone(err) {
		l.rep.Fail(l.failure(ctx, step, err, "the spec requires OK from ControllerUnpublishVolume"))
	}
}

// undoClaims releases the run's claims through the claim release
// worker; when that cannot finish, it detaches the volume directly and
// drops the claims from the store.
func (l *run) undoClaims(ctx context.Context) {
	ctx, cancel := l.cleanupCtx(ctx)
	defer cancel()
	v, err := l.st.store.Volume(namespace, l.volID)
	if err != nil || !v.InUse() {
		return
	}
	const step = "cleanup: release claims"
	l.rep.Step(step)
	from := l.calls.len()
	if err := l.stopAllocs(ctx); err != nil {
		l.rep.Fail(Failure{Step: step, Expect: "the store to take the stopped allocations", Detail: err.Error()})
	}
	if err := l.waitFreed(ctx); err == nil {
		return
	} else {
		f := l.releaseFailure(ctx, step, from, err)
		l.rep.Fail(f)
	}
	// The worker could not release the claims: detach the volume
	// ourselves, then forget the claims.
	l.unpublishDirect(ctx, step, l.csiNode)
	if _, err := l.st.applier.Apply(ctx, state.DeregisterVolume{Namespace: namespace, VolumeID: l.volID, Force: true}); err != nil &&
		!errors.Is(err, csi.ErrVolumeNotFound) {
		l.rep.Fail(Failure{Step: step, Expect: "the store to drop the volume's claims", Detail: err.Error()})
		return
	}
	l.registered = false
}

// undoVolume deletes the volume the run created, or deregisters the one
// it registered.
func (l *run) undoVolume(ctx context.Context) {
	ctx, cancel := l.cleanupCtx(ctx)
	defer cancel()
	if l.created {
		const step = "cleanup: delete volume"
		l.rep.Step(step)
		_, err := l.st.server.DeleteVolume(ctx, &rpcshim.VolumeDeleteRequest{Namespace: namespace, VolumeID: l.volID})
		if err != nil && l.hasController {
			// Not registered any more, or still claimed: ask the plugin
			// directly.
			err = l.ctrl.DeleteVolume(ctx, &plugin.DeleteVolumeRequest{ExternalID: l.externalID, Secrets: l.cfg.Secrets})
			if csi.TeardownDone(err) {
				err = nil
			}
		}
		if err != nil {
			l.rep.Fail(l.failure(ctx, step, err, fmt.Sprintf("the spec requires OK from DeleteVolume of volume %q once nothing uses it", l.externalID)))
			return
		}
		l.created, l.registered = false, false
	}
	if l.registered {
		const step = "cleanup: deregister volume"
		l.rep.Step(step)
		_, err := l.st.server.DeregisterVolume(ctx, &rpcshim.VolumeDeregisterRequest{Namespace: namespace, VolumeID: l.volID, Force: true})
		if err != nil && !errors.Is(err, csi.ErrVolumeNotFound) {
			l.rep.Fail(Failure{Step: step, Expect: "the store to drop the volume", Detail: err.Error()})
			return
		}
		l.registered = false
	}
}

// undoNodePublish unpublishes a target a probe published by mistake.
func (l *run) undoNodePublish(r *plugin.NodePublishRequest) func(context.Context) {
	return func(ctx context.Context) {
		ctx, cancel := l.cleanupCtx(ctx)
		defer cancel()
		step := "cleanup: unpublish " + r.TargetPath
		l.rep.Step(step)
		err := l.node.NodeUnpublishVolume(ctx, &plugin.NodeUnpublishRequest{ExternalID: r.ExternalID, TargetPath: r.TargetPath})
		if !csi.TeardownDone(err) {
			l.rep.Fail(l.failure(ctx, step, err, "the spec requires OK from NodeUnpublishVolume"))
		}
		if _, err := os.Lstat(r.TargetPath); err == nil {
			_ = os.Remove(r.TargetPath)
		}
	}
}

// undoControllerPublish detaches a volume a probe attached by mistake.
func (l *run) undoControllerPublish(r *plugin.ControllerPublishRequest) func(context.Context) {
	return func(ctx context.Context) {
		ctx, cancel := l.cleanupCtx(ctx)
		defer cancel()
		step := fmt.Sprintf("cleanup: controller unpublish %q", r.ExternalID)
		l.rep.Step(step)
		err := l.ctrl.ControllerUnpublishVolume(ctx, &plugin.ControllerUnpublishRequest{
			ExternalID: r.ExternalID, ExternalNodeID: r.ExternalNodeID, Secrets: r.Secrets,
		})
		if !csi.TeardownDone(err) {
			l.rep.Fail(l.failure(ctx, step, err, "the spec requires OK from ControllerUnpublishVolume"))
		}
	}
}

// undoCreate deletes a volume the plugin created when it should not
// have (a repeated CreateVolume that made a second volume, a request
// without a name).
func (l *run) undoCreate(externalID string) func(context.Context) {
	return func(ctx context.Context) {
		ctx, cancel := l.cleanupCtx(ctx)
		defer cancel()
		step := fmt.Sprintf("cleanup: delete volume %q", externalID)
		l.rep.Step(step)
		err := l.ctrl.DeleteVolume(ctx, &plugin.DeleteVolumeRequest{ExternalID: externalID, Secrets: l.cfg.Secrets})
		if !csi.TeardownDone(err) {
			l.rep.Fail(l.failure(ctx, step, err, "the spec requires OK from DeleteVolume"))
		}
	}
}
