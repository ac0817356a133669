package plugintest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"time"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/mounter"
	"github.com/csikit/csikit/rpcshim"
	"github.com/csikit/csikit/state"
)

// sourced is a volume a volume operations step created from a snapshot
// or a volume, with its own allocation on the harness's node.
type sourced struct {
	volID   string
	allocID string
	claim   *csi.Claim
	created bool
}

// opsFromSource creates a volume from src through the server, claims and
// mounts it for an allocation of its own, reads f back through its
// target (with DataShared; otherwise it lists the target), then
// unmounts, releases and deletes it. A cleanup does what a failure left.
func (l *run) opsFromSource(ctx context.Context, step, suffix string, src *rpcshim.VolumeSource, f opsFile) {
	ctx, cancel := l.stepCtx(ctx)
	defer cancel()
	s := &sourced{volID: l.volID + "-" + suffix, allocID: "alloc-" + suffix}
	l.cleanups.push(l.undoSourced(s))
	_, err := l.st.server.CreateVolume(ctx, &rpcshim.VolumeCreateRequest{Volume: csi.Volume{
		ID: s.volID, Namespace: namespace, Name: l.name + "-" + suffix, PluginID: pluginID,
		Capabilities: []csi.Capability{l.cfg.Capability}, MountOptions: l.cfg.MountOptions.Copy(),
		Secrets: l.cfg.Secrets.Copy(), Parameters: maps.Clone(l.cfg.Parameters), RequestedCapacityMin: l.cfg.CapacityBytes,
	}, From: src})
	if err != nil {
		l.fail(ctx, l.failure(ctx, step, err, l.expectOK(callOf(err), csi.CodeOf(err))))
		return
	}
	s.created = true
	if _, err := l.st.applier.Apply(ctx, state.UpsertAllocations{Allocations: []csi.Allocation{s.allocation(false)}}); err != nil {
		l.fail(ctx, Failure{Step: step, Expect: "the store to take the allocation", Detail: err.Error()})
		return
	}
	resp, err := l.st.server.Claim(ctx, &rpcshim.VolumeClaimRequest{Namespace: namespace, VolumeID: s.volID, Claim: csi.Claim{
		AllocationID: s.allocID, NodeID: hostNode, Mode: csi.ClaimRead,
		AccessMode: l.cfg.Capability.AccessMode, AttachmentMode: l.cfg.Capability.AttachmentMode,
	}})
	if err != nil {
		l.fail(ctx, l.failure(ctx, step, err, l.expectOK(callOf(err), csi.CodeOf(err))))
		return
	}
	s.claim = resp.Claim
	req, err := mounter.NewMountRequest(resp.Volume, resp.Claim)
	if err != nil {
		l.fail(ctx, Failure{Step: step, Expect: "a valid mount request from the claim", Detail: err.Error()})
		return
	}
	info, err := l.st.mnt.MountVolume(ctx, req)
	if err != nil {
		l.fail(ctx, l.failure(ctx, step, err, l.expectOK(callOf(err), csi.CodeOf(err))))
		return
	}
	where := fmt.Sprintf("through the target of the volume made by %s", suffix)
	switch {
	case l.cfg.Capability.AttachmentMode != csi.AttachmentModeFileSystem:
	case f.writer != nil && l.cfg.DataCheck == DataShared:
		l.readBack(ctx, step, info.Path, where, f)
	default:
		if _, err := os.ReadDir(info.Path); err != nil {
			l.fail(ctx, Failure{Step: step, Got: "listing " + where + " failed", Expect: "a published file-system volume must be a readable directory at target_path", Detail: err.Error()})
		}
	}
	if err := l.teardownSourced(ctx, s); err != nil {
		l.fail(ctx, l.failure(ctx, step, err, l.expectOK(callOf(err), csi.CodeOf(err))))
	}
}

func (s *sourced) allocation(terminal bool) csi.Allocation {
	return csi.Allocation{ID: s.allocID, Namespace: namespace, NodeID: hostNode, JobID: "plugintest", Terminal: terminal}
}

// teardownSourced unmounts s, stops its allocation, waits for the claim
// release worker to free its claim and deletes the volume. Each part is
// skipped when already done, so a cleanup may repeat it.
func (l *run) teardownSourced(ctx context.Context, s *sourced) error {
	if !s.created {
		return nil
	}
	if s.claim != nil {
		has, err := l.st.mnt.HasMount(ctx, namespace, s.volID, s.allocID)
		if err == nil && has {
			err = l.st.mnt.UnmountVolume(ctx, mounter.NewUnmountRequest(namespace, s.volID, s.claim))
		}
		if err != nil {
			return err
		}
		stop := state.Batch{Commands: []state.Command{
			state.UpsertAllocations{Allocations: []csi.Allocation{s.allocation(true)}, ReleasedAt: time.Now()},
			state.CheckpointClaim{Namespace: namespace, VolumeID: s.volID, AllocationID: s.allocID, State: csi.ClaimNodeDetached},
		}}
		if _, err := l.st.applier.Apply(ctx, stop); err != nil && csi.Classify(err) != csi.ClassFinal {
			return err
		}
		if err := l.waitVolumeFree(ctx, s.volID); err != nil {
			return err
		}
		s.claim = nil
	}
	_, err := l.st.server.DeleteVolume(ctx, &rpcshim.VolumeDeleteRequest{Namespace: namespace, VolumeID: s.volID})
	if err != nil && !errors.Is(err, csi.ErrVolumeNotFound) {
		return err
	}
	s.created = false
	return nil
}

// waitVolumeFree blocks until volume id has no claims or ctx ends.
func (l *run) waitVolumeFree(ctx context.Context, id string) error {
	for {
		idx, err := l.st.store.Index(state.TableVolumes)
		if err != nil {
			return err
		}
		v, err := l.st.store.Volume(namespace, id)
		if err != nil {
			return err
		}
		if !v.InUse() {
			return nil
		}
		if _, err := l.st.store.Wait(ctx, state.TableVolumes, idx); err != nil {
			return fmt.Errorf("the claims of volume %s were not freed within %s: %w", id, l.cfg.Timeout, err)
		}
	}
}

// undoSourced tears down what opsFromSource left.
func (l *run) undoSourced(s *sourced) func(context.Context) {
	return func(ctx context.Context) {
		if !s.created {
			return
		}
		ctx, cancel := l.cleanupCtx(ctx)
		defer cancel()
		step := "cleanup: volume " + s.volID
		l.rep.Step(step)
		if err := l.teardownSourced(ctx, s); err != nil {
			l.rep.Fail(l.failure(ctx, step, err, "the spec requires OK from the unmount, unpublish and delete of a volume nothing uses"))
		}
	}
}
