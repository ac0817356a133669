package mounter

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/metrics"
	"github.com/csikit/csikit/csi/plugin"
)

// UnmountVolume implements VolumeMounter. It also finishes interrupted
// teardowns of the selected stages. A missing plugin
// (csi.ErrPluginNotFound, Retryable) or a symbolic link on a path
// (ErrUnsafePath, Final) fails it before the plugin call that needs it;
// any failure leaves the teardown recorded for a retry.
func (m *Mounter) UnmountVolume(ctx context.Context, req *UnmountRequest) error {
	if err := req.Validate(); err != nil {
		return fmt.Errorf("unmount volume: %w", err)
	}
	v, err := m.acquire(ctx, volKey{req.Namespace, req.VolumeID})
	if err == nil {
		err = m.unmount(ctx, v, req)
		m.release(v)
	}
	if err != nil {
		return fmt.Errorf("unmount volume %s/%s for allocation %s: %w", req.Namespace, req.VolumeID, req.AllocationID, err)
	}
	return nil
}

type teardown struct {
	stage     StageUsage
	unpublish []pubRef
	unstage   bool
}

// unmount runs with the volume locked.
func (m *Mounter) unmount(ctx context.Context, v *volume, req *UnmountRequest) error {
	if v.rec == nil {
		return nil
	}
	plan := planTeardown(v.rec, req)
	if len(plan) == 0 {
		if len(v.rec.Stages) == 0 {
			// Left empty by a mount that finished old teardowns and then
			// failed: the record goes.
			m.settle(v, false)
		}
		return nil
	}
	client, _, err := m.nodePlugin(v.rec.PluginID)
	if err != nil {
		return err
	}
	done, err := m.slot(ctx)
	if err != nil {
		return err
	}
	defer done()
	if err := m.saveTeardown(v, plan); err != nil {
		return err
	}
	err = m.carryOut(ctx, client, v.rec, plan)
	m.settle(v, false) // what was torn down, or the record's removal
	if err != nil {
		return err
	}
	m.logger.Debug("volume unmounted", "namespace", req.Namespace, "volume", req.VolumeID, "allocation", req.AllocationID)
	return nil
}

// planTeardown returns the teardowns of an unmount, in the selected
// stages (every stage, or req.Usage's): the allocation's publications,
// interrupted unpublishes, and the unstage of a stage left empty.
func planTeardown(rec *volumeRecord, req *UnmountRequest) []teardown {
	stages := rec.sortedStages()
	if !req.Usage.IsZero() {
		stages = []StageUsage{req.Usage.StageUsage()}
	}
	var plan []teardown
	for _, sk := range stages {
		s := rec.Stages[sk]
		if s == nil {
			continue
		}
		t := teardown{stage: sk}
		for _, p := range s.publications() {
			mine := p.alloc == req.AllocationID && (req.Usage.IsZero() || p.mode == req.Usage.ClaimMode)
			if mine || p.rec.State == publishUnpublishing {
				t.unpublish = append(t.unpublish, p)
			}
		}
		t.unstage = len(t.unpublish) == s.users() && s.Stage != stageNone
		if len(t.unpublish) > 0 || t.unstage {
			plan = append(plan, t)
		}
	}
	return plan
}

// saveTeardown saves the intents of the plan's calls in one durable
// write. If it fails, the record stays as it was.
func (m *Mounter) saveTeardown(v *volume, plan []teardown) error {
	next := v.rec.clone()
	for _, t := range plan {
		s := next.Stages[t.stage]
		for _, p := range t.unpublish {
			s.pub(p.mode, p.alloc).State = publishUnpublishing
		}
		if t.unstage {
			s.Stage = stageUnstaging
		}
	}
	if err := m.store.save(v.key, next); err != nil {
		return err
	}
	v.rec = next
	return nil
}

// carryOut makes the plugin calls of a teardown plan, dropping from rec
// what is done. It stops at the first failure, which the record keeps.
func (m *Mounter) carryOut(ctx context.Context, client plugin.NodeClient, rec *volumeRecord, plan []teardown) error {
	for _, t := range plan {
		s := rec.Stages[t.stage]
		for _, p := range t.unpublish {
			if err := m.unpublish(ctx, client, rec, p.alloc, p.rec.TargetPath); err != nil {
				return err
			}
			s.setPub(p.mode, p.alloc, nil)
		}
		if t.unstage {
			if err := m.unstage(ctx, client, rec, s); err != nil {
				return err
			}
			s.Stage, s.StagingPath = stageNone, ""
		}
	}
	return nil
}

// finishStages tears down, as an unmount does, the volume's stages
// other than keep that no allocation uses any more.
func (m *Mounter) finishStages(ctx context.Context, client plugin.NodeClient, v *volume, keep StageUsage) error {
	for _, sk := range v.rec.sortedStages() {
		s := v.rec.Stages[sk]
		if sk == keep || s.Stage == stageNone || len(s.liveUsers(sk)) > 0 {
			continue
		}
		plan := []teardown{{stage: sk, unpublish: s.publications(), unstage: true}}
		err := m.saveTeardown(v, plan)
		if err == nil {
			err = m.carryOut(ctx, client, v.rec, plan)
		}
		if err != nil {
			return fmt.Errorf("finish the teardown of the volume's stage %s: %w", sk, err)
		}
		delete(v.rec.Stages, sk)
		m.logger.Debug("finished the teardown of an unused stage", "namespace", v.key.namespace, "volume", v.key.volumeID, "stage", sk.String())
	}
	return nil
}

// completeUnpublishes finishes the interrupted unpublishes of other
// allocations of the stage; a failure is logged for the next call.
func (m *Mounter) completeUnpublishes(ctx context.Context, client plugin.NodeClient, rec *volumeRecord, s *stageRecord, mode csi.ClaimMode, except string) {
	for _, p := range s.publications() {
		if p.mode == mode && p.alloc == except || p.rec.State != publishUnpublishing {
			continue
		}
		if err := m.unpublish(ctx, client, rec, p.alloc, p.rec.TargetPath); err != nil {
			m.logger.Warn("cannot complete an interrupted unmount", "namespace", rec.Namespace, "volume", rec.VolumeID,
				"allocation", p.alloc, "error", err)
			continue
		}
		s.setPub(p.mode, p.alloc, nil)
	}
}

// unpublish calls NodeUnpublishVolume (NotFound is done) and removes
// the target's empty parents. A target below a link is not sent.
func (m *Mounter) unpublish(ctx context.Context, client plugin.NodeClient, rec *volumeRecord, allocID, target string) error {
	if err := m.refuseLinks(target, false); err != nil {
		return fmt.Errorf("NodeUnpublishVolume for allocation %s not sent: %w", allocID, err)
	}
	m.calls.Add(1)
	err := client.NodeUnpublishVolume(ctx, &plugin.NodeUnpublishRequest{ExternalID: rec.ExternalID, TargetPath: target})
	if !csi.TeardownDone(err) {
		return fmt.Errorf("NodeUnpublishVolume for allocation %s: %w", allocID, err)
	}
	m.count(metrics.MountsUnpublished, rec.PluginID)
	m.removeEmpty(filepath.Dir(target), perAllocDir)
	return nil
}

// unstage calls NodeUnstageVolume (NotFound is done) and removes the
// staging directory and its empty parents, as unpublish does.
func (m *Mounter) unstage(ctx context.Context, client plugin.NodeClient, rec *volumeRecord, s *stageRecord) error {
	if err := m.refuseLinks(s.StagingPath, false); err != nil {
		return fmt.Errorf("NodeUnstageVolume not sent: %w", err)
	}
	m.calls.Add(1)
	err := client.NodeUnstageVolume(ctx, &plugin.NodeUnstageRequest{ExternalID: rec.ExternalID, StagingPath: s.StagingPath})
	if !csi.TeardownDone(err) {
		return fmt.Errorf("NodeUnstageVolume: %w", err)
	}
	m.count(metrics.MountsUnstaged, rec.PluginID)
	m.removeEmpty(s.StagingPath, stagingDir)
	return nil
}
