package plugintest

import (
	"context"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/mounter"
	"github.com/csikit/csikit/rpcshim"
	"github.com/csikit/csikit/state"
)

// release stops the allocations, as a host reports stopped workloads,
// and waits for the claim release worker to free their claims:
// ControllerUnpublish (when the plugin needs it), then free. The node
// step is already done for the allocations the unmounts tore down (see
// stopAllocs); the worker runs it for any other.
func (l *run) release(ctx context.Context) {
	const step = "release"
	if !l.hasUnreleased() || !l.begin(ctx, step) {
		return
	}
	ctx, cancel := l.stepCtx(ctx)
	defer cancel()
	from := l.calls.len()
	if err := l.stopAllocs(ctx); err != nil {
		l.fail(ctx, Failure{Step: step, Expect: "the store to take the stopped allocations", Detail: err.Error(), Fatal: true})
		return
	}
	if err := l.waitFreed(ctx); err != nil {
		f := l.releaseFailure(ctx, step, from, err)
		f.Fatal = true
		l.fail(ctx, f)
		return
	}
	c, ok := l.calls.last(from, methodControllerUnpublish, nil)
	if l.publishes() && !ok {
		l.fail(ctx, Failure{Step: step, Expect: "the claim release worker to call ControllerUnpublishVolume; it freed the claims without it"})
		return
	}
	if step := "controller unpublish (idempotent repeat)"; ok && !l.cfg.SkipIdempotency && l.begin(ctx, step) {
		err := l.ctrl.ControllerUnpublishVolume(ctx, c.Req.(*plugin.ControllerUnpublishRequest))
		if !csi.TeardownDone(err) {
			l.fail(ctx, l.failure(ctx, step, err, expectTeardown+"; ControllerUnpublishVolume of a volume not attached to the node must reply OK"))
		}
	}
}

// hasUnreleased reports whether a claimed allocation is not released
// yet.
func (l *run) hasUnreleased() bool {
	return slices.ContainsFunc(l.allocs, func(a *alloc) bool { return a.claimed && !a.released })
}

// stopAllocs reports the claimed allocations that are not released yet
// as stopped (terminal), as a host does for stopped workloads, and once
// the store took them marks them released. The claim release worker
// then frees their claims.
//
// A node agent that has torn down an allocation's mounts before it
// reports the allocation stopped knows that the release's node step
// has nothing left to do, and says so in the same write: for each
// allocation the mounter no longer has the volume mounted for
// (HasMount), the claim is checkpointed NodeDetached in the batch that
// makes it a past claim, and the worker goes straight to the controller
// step. An allocation that may still have a mount (a failed unmount, an
// uncertain publish) keeps its claim at Unpublishing: the worker's node
// step unmounts it.
func (l *run) stopAllocs(ctx context.Context) error {
	return l.stopAllocsOn(ctx, l.allocs, l.st.mnt)
}

// stopAllocsOn is stopAllocs for allocs, whose node's mounter is mnt.
func (l *run) stopAllocsOn(ctx context.Context, allocs []*alloc, mnt *mounter.Mounter) error {
	var stop []*alloc
	var stopped []csi.Allocation
	var detached []state.Command
	for _, a := range allocs {
		if !a.claimed || a.released {
			continue
		}
		stop = append(stop, a)
		stopped = append(stopped, a.allocation(true))
		if has, err := mnt.HasMount(ctx, namespace, l.volID, a.id); err == nil && !has {
			detached = append(detached, state.CheckpointClaim{
				Namespace: namespace, VolumeID: l.volID, AllocationID: a.id, State: csi.ClaimNodeDetached,
			})
		}
	}
	if len(stop) == 0 {
		return nil
	}
	stops := state.UpsertAllocations{Allocations: stopped, ReleasedAt: time.Now()}
	var cmd state.Command = stops
	if len(detached) > 0 {
		cmd = state.Batch{Commands: append([]state.Command{stops}, detached...)}
	}
	_, err := l.st.applier.Apply(ctx, cmd)
	if err != nil && len(detached) > 0 && csi.Classify(err) == csi.ClassFinal {
		// A checkpoint the store refused (a claim removed meanwhile)
		// refuses the whole batch: report the stops alone, and let the
		// worker take every claim from its node step.
		_, err = l.st.applier.Apply(ctx, stops)
	}
	if err != nil {
		return err
	}
	for _, a := range stop {
		a.released = true
	}
	return nil
}

// errClaimStuck is waitFreed's error when the worker recorded a failed
// step on a claim.
type errClaimStuck struct{ alloc, lastError string }

func (e *errClaimStuck) Error() string {
	return fmt.Sprintf("the claim of allocation %s is stuck: %s", e.alloc, e.lastError)
}

// waitFreed blocks until the volume has no claims, a claim records a
// failed release step, or ctx ends.
func (l *run) waitFreed(ctx context.Context) error {
	for {
		idx, err := l.st.store.Index(state.TableVolumes)
		if err != nil {
			return err
		}
		v, err := l.st.store.Volume(namespace, l.volID)
		if err != nil {
			return err
		}
		if !v.InUse() {
			return nil
		}
		for _, id := range slices.Sorted(maps.Keys(v.PastClaims)) {
			if c := v.PastClaims[id]; c.LastError != "" {
				return &errClaimStuck{alloc: id, lastError: c.LastError}
			}
		}
		if _, err := l.st.store.Wait(ctx, state.TableVolumes, idx); err != nil {
			return fmt.Errorf("the claims were not freed within %s: %w", l.cfg.Timeout, err)
		}
	}
}

// releaseFailure names the plugin call that made a release fail, when
// the worker's calls show one.
func (l *run) releaseFailure(ctx context.Context, step string, from int, err error) Failure {
	if c, ok := l.calls.lastFailed(from); ok {
		f := l.failure(ctx, step, c.Err, l.expectOK(c.Method, csi.CodeOf(c.Err)))
		f.Detail = strings.TrimPrefix(f.Detail+"; ", "; ") + "claim release worker: " + err.Error()
		return f
	}
	return Failure{Step: step, Expect: "the claim release worker to free the claims", Detail: err.Error()}
}

// deleteVolume deletes the created volume through the csikit server, or
// deregisters the pre-provisioned one.
func (l *run) deleteVolume(ctx context.Context) {
	if !l.created {
		if l.registered && l.begin(ctx, "deregister volume") {
			ctx, cancel := l.stepCtx(ctx)
			defer cancel()
			if _, err := l.st.server.DeregisterVolume(ctx, &rpcshim.VolumeDeregisterRequest{Namespace: namespace, VolumeID: l.volID}); err != nil {
				l.fail(ctx, Failure{Step: "deregister volume", Expect: "the store to drop the released volume", Detail: err.Error(), Fatal: true})
				return
			}
			l.registered = false
		}
		return
	}
	const step = "delete volume"
	if !l.begin(ctx, step) {
		return
	}
	ctx, cancel := l.stepCtx(ctx)
	defer cancel()
	from := l.calls.len()
	if _, err := l.st.server.DeleteVolume(ctx, &rpcshim.VolumeDeleteRequest{Namespace: namespace, VolumeID: l.volID}); err != nil {
		f := l.failure(ctx, step, err, l.expectOK(methodDeleteVolume, csi.CodeOf(err)))
		f.Fatal = true
		l.fail(ctx, f)
		return
	}
	l.created, l.registered = false, false
	c, ok := l.calls.last(from, methodDeleteVolume, nil)
	if step := "delete volume (idempotent repeat)"; ok && !l.cfg.SkipIdempotency && l.begin(ctx, step) {
		err := l.ctrl.DeleteVolume(ctx, c.Req.(*plugin.DeleteVolumeRequest))
		if !csi.TeardownDone(err) {
			l.fail(ctx, l.failure(ctx, step, err, expectTeardown+"; DeleteVolume of a volume that does not exist must reply OK"))
		}
	}
}

// checkOrder checks that the calls the csikit stack made reached the
// plugin in the spec's order, each once: a guard on the harness itself,
// so that every other verdict rests on a correct lifecycle.
func (l *run) checkOrder(ctx context.Context) {
	const step = "order of calls"
	if !l.begin(ctx, step) {
		return
	}
	var want []string
	if l.cfg.VolumeID == "" {
		want = append(want, methodCreateVolume)
	}
	if l.publishes() {
		want = append(want, methodControllerPublish)
	}
	if l.stages() {
		want = append(want, methodNodeStage)
	}
	var published int
	for _, a := range l.allocs {
		if a.claimed && !a.refused {
			published++
		}
	}
	for range published {
		want = append(want, methodNodePublish)
	}
	for range published {
		want = append(want, methodNodeUnpublish)
	}
	if l.stages() {
		want = append(want, methodNodeUnstage)
	}
	if l.publishes() {
		want = append(want, methodControllerUnpublish)
	}
	want = append(want, l.handoverOrder()...)
	if l.cfg.VolumeID == "" {
		want = append(want, methodDeleteVolume)
	}
	var got []string
	for i, c := range l.calls.all() {
		// A hand-over that failed has its own failures; its calls are
		// not held to the order.
		failedHandover := !l.handoverDone && i >= l.handoverFrom && i < l.handoverTo
		if c.Err == nil && c.Method != methodValidate && !failedHandover {
			got = append(got, c.Method)
		}
	}
	if !slices.Equal(got, want) {
		l.fail(ctx, Failure{Step: step, Got: "the csikit stack called " + strings.Join(got, " → "),
			Expect: "the spec's order for this plugin is " + strings.Join(want, " → ") + " (a bug in the harness or csikit, not in the plugin)"})
	}
}

// handoverOrder is the spec's order of the hand-over's calls, when it
// succeeded: attach to the second node, stage there if its node service
// stages, publish, and undo it all.
func (l *run) handoverOrder() []string {
	if !l.handoverDone {
		return nil
	}
	var want []string
	if l.publishes() {
		want = append(want, methodControllerPublish)
	}
	if l.secondStages {
		want = append(want, methodNodeStage)
	}
	want = append(want, methodNodePublish, methodNodeUnpublish)
	if l.secondStages {
		want = append(want, methodNodeUnstage)
	}
	if l.publishes() {
		want = append(want, methodControllerUnpublish)
	}
	return want
}

// checkLeftovers checks that the mount root holds nothing but the
// mounter's own top directories once the lifecycle is over.
func (l *run) checkLeftovers(ctx context.Context) {
	const step = "nothing left behind"
	if !l.begin(ctx, step) {
		return
	}
	ctx, cancel := l.stepCtx(ctx)
	defer cancel()
	for _, a := range l.allocs {
		if has, err := l.st.mnt.HasMount(ctx, namespace, l.volID, a.id); err != nil || has {
			l.fail(ctx, Failure{Step: step, Got: fmt.Sprintf("the mounter still has the volume mounted for allocation %d", a.n),
				Expect: "every publish undone after the unmounts", Detail: fmt.Sprint(err)})
		}
	}
	if l.probeDir != "" {
		// Empty unless a probe's publish succeeded; its undo runs later.
		_ = os.Remove(l.probeDir)
	}
	if left := l.pathsLeft(ctx); len(left) > 0 {
		l.fail(ctx, Failure{Step: step, Got: l.cfg.rename(fmt.Sprintf("%d path(s) remain where the plugin sees them: %s", len(left), strings.Join(left, ", "))),
			Expect: "unpublish and unstage must remove what the plugin made at target_path and staging_target_path"})
	}
	if left := l.leftovers(true); len(left) > 0 {
		l.fail(ctx, Failure{Step: step, Got: fmt.Sprintf("%d path(s) remain under the mount root: %s", len(left), strings.Join(left, ", ")),
			Expect: "unpublish and unstage must remove what the plugin made at target_path and staging_target_path"})
	}
}

// leftovers lists what remains under the mount root: every file, link
// or device, and every empty directory at a path the plugin was given
// (a target_path or staging_target_path, where an empty directory may
// be a mount point). Empty directories elsewhere are the mounter's own
// parents and harmless. With skipProbe, the probes' directory is left
// out: its undo runs with the cleanups.
func (l *run) leftovers(skipProbe bool) []string {
	given := l.givenPaths()
	var out []string
	for _, root := range l.roots() {
		out = append(out, l.leftoversUnder(root, given, skipProbe)...)
	}
	return out
}

// givenPaths are the target_path and staging_target_path of every call
// the stack sent.
func (l *run) givenPaths() map[string]bool {
	given := map[string]bool{}
	for _, c := range l.calls.all() {
		switch r := c.Req.(type) {
		case *plugin.NodePublishRequest:
			given[r.TargetPath] = true
		case *plugin.NodeStageRequest:
			given[r.StagingPath] = true
		}
	}
	return given
}

// leftoversUnder is leftovers beneath one root.
func (l *run) leftoversUnder(root string, given map[string]bool, skipProbe bool) []string {
	var out []string
	// A walk in name order, as filepath.WalkDir's, that reads each
	// directory once.
	var walk func(dir string, entries []fs.DirEntry)
	walk = func(dir string, entries []fs.DirEntry) {
		for _, e := range entries {
			p := filepath.Join(dir, e.Name())
			rel, _ := filepath.Rel(root, p)
			if l.probeDir != "" && (p == l.probeDir || strings.HasPrefix(p, l.probeDir+string(filepath.Separator))) {
				if skipProbe {
					continue
				}
				given[p] = true
			}
			if !e.IsDir() {
				out = append(out, rel)
				continue
			}
			sub, err := os.ReadDir(p)
			if err != nil {
				continue
			}
			if len(sub) == 0 && given[p] {
				out = append(out, rel+string(filepath.Separator))
			}
			walk(p, sub)
		}
	}
	if entries, err := os.ReadDir(root); err == nil {
		walk(root, entries)
	}
	return out
}
