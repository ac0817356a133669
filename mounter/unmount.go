package mounter

import (
	"context"
	"fmt"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
)

// UnmountVolume implements VolumeMounter.
//
// It unpublishes the volume for the allocation and unstages it when no
// allocation is left on its stage: the readers and the writers of a
// volume share one stage, and the last of them unstages it. It also
// finishes teardowns of the volume that a crash or an earlier failure
// interrupted (in the selected stage). The plugin, external ID and paths
// come from the tracker, so it works after a restart. Nothing tracked
// means nothing to do: it returns nil without asking for the plugin.
// NotFound from the plugin counts as done (csi.TeardownDone). A missing
// plugin returns the Retryable csi.ErrPluginNotFound, wrapped; a
// staging or target path through a symbolic link beneath the mount root
// fails it with ErrUnsafePath (Final: an operator must remove the link)
// before the plugin call that would use the path; any failure leaves
// the teardown recorded, and a retry resumes it.
func (m *Mounter) UnmountVolume(ctx context.Context, req *UnmountRequest) error {
	if err := req.Validate(); err != nil {
		return fmt.Errorf("unmount volume: %w", err)
	}
	what := fmt.Sprintf("unmount volume %s/%s for allocation %s", req.Namespace, req.VolumeID, req.AllocationID)
	k := volKey{req.Namespace, req.VolumeID}
	v, err := m.acquire(ctx, k)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	defer m.release(k, v)
	if err := m.unmount(ctx, v, req); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// teardown is the work planned for one stage.
type teardown struct {
	stage     StageUsage
	unpublish []pubRef
	unstage   bool
}

// unmount runs with the volume locked.
func (m *Mounter) unmount(ctx context.Context, v *volume, req *UnmountRequest) error {
	rec := v.rec
	if rec == nil {
		return nil
	}
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
	if len(plan) == 0 {
		if rec.empty() {
			// Left empty by a mount that finished old teardowns and then
			// failed: drop the record.
			m.settle(v, false)
		}
		return nil
	}

	client, _, err := m.nodePlugin(rec.PluginID)
	if err != nil {
		return err
	}
	done, err := m.slot(ctx)
	if err != nil {
		return err
	}
	defer done()

	// Record the intents of every call in one durable write.
	prev := rec.clone()
	for _, t := range plan {
		s := rec.Stages[t.stage]
		for _, p := range t.unpublish {
			p.rec.State = publishUnpublishing
		}
		if t.unstage {
			s.Stage = stageUnstaging
		}
	}
	if err := m.store.save(rec); err != nil {
		v.rec = prev
		return err
	}

	err = m.carryOut(ctx, client, rec, plan)
	// What was torn down is noted, or the file freed if nothing is left
	// (done all the same if that fails: the record left behind holds
	// only teardowns that the next call repeats harmlessly).
	m.settle(v, false)
	if err != nil {
		return err
	}
	m.logger.Debug("volume unmounted", "namespace", req.Namespace, "volume", req.VolumeID, "allocation", req.AllocationID)
	return nil
}

// carryOut makes the plugin calls of a teardown plan, dropping from rec
// what is done. It stops at the first failure, which the record keeps.
func (m *Mounter) carryOut(ctx context.Context, client plugin.NodeClient, rec *volumeRecord, plan []teardown) error {
	for _, t := range plan {
		s := rec.Stages[t.stage]
		// Each target's parents go once it is unpublished, except the
		// last one's when an unstage follows: those go while the plugin
		// unstages.
		keep := -1
		if t.unstage {
			keep = len(t.unpublish) - 1
		}
		for i, p := range t.unpublish {
			if err := m.nodeUnpublish(ctx, client, rec, p.alloc, p.rec.TargetPath); err != nil {
				return err
			}
			s.setPub(p.mode, p.alloc, nil)
			if i != keep {
				m.removeTargetParent(p.rec.TargetPath)
			}
		}
		if !t.unstage {
			continue
		}
		unstage := func() error { return m.unstage(ctx, client, rec, s) }
		var err error
		if keep >= 0 {
			last := t.unpublish[keep].rec.TargetPath
			_, err = alongside(func() error { m.removeTargetParent(last); return nil }, unstage)
		} else {
			err = unstage()
		}
		if err != nil {
			return err
		}
		s.Stage, s.StagingPath = stageNone, ""
	}
	return nil
}

// unstage calls NodeUnstageVolume and removes the staging directory (the
// mounter created it) and its empty parents. NotFound counts as done. A
// staging path below a link is not sent (refuseLinks): the plugin
// would unmount what the link points at.
func (m *Mounter) unstage(ctx context.Context, client plugin.NodeClient, rec *volumeRecord, s *stageRecord) error {
	if err := m.refuseLinks(s.StagingPath, false); err != nil {
		return fmt.Errorf("NodeUnstageVolume not sent: %w", err)
	}
	m.calls.Add(1)
	err := client.NodeUnstageVolume(ctx, &plugin.NodeUnstageRequest{ExternalID: rec.ExternalID, StagingPath: s.StagingPath})
	if !csi.TeardownDone(err) {
		return fmt.Errorf("NodeUnstageVolume: %w", err)
	}
	m.removeEmpty(s.StagingPath, stagingDir)
	return nil
}
