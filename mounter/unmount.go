package mounter

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
)

// UnmountVolume implements VolumeMounter.
//
// It unpublishes the volume for the allocation and unstages it when no
// allocation is left under that usage. It also finishes teardowns of the
// volume that a crash or an earlier failure interrupted (in the selected
// usages). The plugin, external ID and paths come from the tracker, so
// it works after a restart. Nothing tracked means nothing to do: it
// returns nil without asking for the plugin. NotFound from the plugin
// counts as done (csi.TeardownDone). A missing plugin returns the
// Retryable csi.ErrPluginNotFound, wrapped; any failure leaves the
// teardown recorded, and a retry resumes it.
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

// teardown is the work planned for one usage.
type teardown struct {
	usage     Usage
	unpublish []string // allocation IDs
	unstage   bool
}

// unmount runs with the volume locked.
func (m *Mounter) unmount(ctx context.Context, v *volume, req *UnmountRequest) error {
	rec := v.rec
	if rec == nil {
		return nil
	}
	usages := rec.sortedUsages()
	if !req.Usage.IsZero() {
		usages = []Usage{req.Usage}
	}
	var plan []teardown
	for _, usage := range usages {
		u := rec.Usages[usage]
		if u == nil {
			continue
		}
		t := teardown{usage: usage}
		for _, id := range sortedAllocs(u) {
			if id == req.AllocationID || u.Allocations[id].State == publishUnpublishing {
				t.unpublish = append(t.unpublish, id)
			}
		}
		t.unstage = len(t.unpublish) == len(u.Allocations) && u.Stage != stageNone
		if len(t.unpublish) > 0 || t.unstage {
			plan = append(plan, t)
		}
	}
	if len(plan) == 0 {
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
		u := rec.Usages[t.usage]
		for _, id := range t.unpublish {
			u.Allocations[id].State = publishUnpublishing
		}
		if t.unstage {
			u.Stage = stageUnstaging
		}
	}
	if err := m.store.save(rec); err != nil {
		v.rec = prev
		return err
	}

	for _, t := range plan {
		u := rec.Usages[t.usage]
		for _, id := range t.unpublish {
			if err := m.unpublish(ctx, client, rec, id, u.Allocations[id].TargetPath); err != nil {
				return err
			}
			delete(u.Allocations, id)
		}
		if t.unstage {
			if err := m.unstage(ctx, client, rec, u); err != nil {
				return err
			}
			u.Stage, u.StagingPath = stageNone, ""
		}
	}
	rec.prune()
	if rec.empty() {
		v.rec = nil
		if err := m.store.remove(rec.Namespace, rec.VolumeID); err != nil {
			// Done all the same: the file left behind holds only
			// teardowns that the next call repeats harmlessly.
			m.logger.Warn("cannot remove mount state", "namespace", rec.Namespace, "volume", rec.VolumeID, "error", err)
		}
	}
	m.logger.Debug("volume unmounted", "namespace", req.Namespace, "volume", req.VolumeID, "allocation", req.AllocationID)
	return nil
}

// unstage calls NodeUnstageVolume and removes the staging directory (the
// mounter created it) and its empty parents. NotFound counts as done.
func (m *Mounter) unstage(ctx context.Context, client plugin.NodeClient, rec *volumeRecord, u *usageRecord) error {
	m.calls.Add(1)
	err := client.NodeUnstageVolume(ctx, &plugin.NodeUnstageRequest{ExternalID: rec.ExternalID, StagingPath: u.StagingPath})
	if !csi.TeardownDone(err) {
		return fmt.Errorf("NodeUnstageVolume: %w", err)
	}
	m.removeEmpty(u.StagingPath, filepath.Join(m.root, stagingDir))
	return nil
}
