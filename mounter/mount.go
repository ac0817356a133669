package mounter

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
)

// MountVolume implements VolumeMounter.
//
// A request that fails validation (bad IDs: csi.ErrInvalidID; bad modes
// or options: csi.ErrInvalidRequest) is refused before any file is
// written or any plugin called. A missing node plugin returns the
// Retryable csi.ErrPluginNotFound from Config.Plugins, wrapped. A failed
// plugin call returns its *csi.RPCError, wrapped; after an Uncertain one
// the volume counts as mounted for the allocation, so an UnmountVolume
// (which the host owes every allocation it mounted for, failed or not)
// cleans it up.
func (m *Mounter) MountVolume(ctx context.Context, req *MountRequest) (*MountInfo, error) {
	if err := req.Validate(); err != nil {
		return nil, fmt.Errorf("mount volume: %w", err)
	}
	what := fmt.Sprintf("mount volume %s/%s for allocation %s", req.Namespace, req.VolumeID, req.AllocationID)
	usage := req.Usage()
	stagingPath, err := m.stagingPath(req.Namespace, req.VolumeID, usage)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	targetPath, err := m.targetPath(req.AllocationID, req.VolumeID, usage)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	client, info, err := m.nodePlugin(req.PluginID)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}

	k := volKey{req.Namespace, req.VolumeID}
	v, err := m.acquire(ctx, k)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer m.release(k, v)
	done, err := m.slot(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer done()

	stage, err := m.stages(ctx, req.PluginID, client, info)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	mi, err := m.mount(ctx, v, client, req, usage, stage, stagingPath, targetPath)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return mi, nil
}

// mount runs with the volume locked.
func (m *Mounter) mount(ctx context.Context, v *volume, client plugin.NodeClient, req *MountRequest, usage Usage, stage bool, stagingPath, targetPath string) (*MountInfo, error) {
	rec := v.rec
	if rec != nil && (rec.ExternalID != req.ExternalID || rec.PluginID != req.PluginID) {
		return nil, fmt.Errorf("%w: the volume is tracked on this node as external ID %q of plugin %s, not %q of plugin %s; unmount its allocations first",
			csi.ErrInvalidRequest, rec.ExternalID, rec.PluginID, req.ExternalID, req.PluginID)
	}
	if rec == nil {
		rec = &volumeRecord{
			Version:    formatVersion,
			Namespace:  req.Namespace,
			VolumeID:   req.VolumeID,
			ExternalID: req.ExternalID,
			PluginID:   req.PluginID,
			Usages:     map[Usage]*usageRecord{},
		}
	}
	u := rec.Usages[usage]
	var prior *allocRecord
	if u != nil {
		// An existing usage keeps the staging decision it was made with,
		// so its allocations all publish from the same staging path.
		stage = u.Stage != stageNone
		if p := u.Allocations[req.AllocationID]; p != nil {
			c := *p
			prior = &c
			targetPath = p.TargetPath
		}
		if prior != nil && prior.State == publishPublished && (u.Stage == stageNone || u.Stage == stageStaged) {
			return mountInfo(targetPath, usage), nil
		}
		m.completeUnpublishes(ctx, client, rec, u, req.AllocationID)
	}

	// Directories first: creating one twice is harmless, and they are
	// removed again by the unmount.
	if stage {
		if u != nil && u.StagingPath != "" {
			stagingPath = u.StagingPath
		}
		if err := m.makeStagingDir(stagingPath); err != nil {
			return nil, fmt.Errorf("create staging directory: %w", err)
		}
	}
	if err := m.makeTargetParent(targetPath); err != nil {
		return nil, fmt.Errorf("create the target's parent directory: %w", err)
	}

	orig := u.clone() // to undo this call's changes to the usage
	if u == nil {
		u = &usageRecord{}
		rec.Usages[usage] = u
	}
	if u.Allocations == nil {
		u.Allocations = map[string]*allocRecord{}
	}
	v.rec = rec

	if stage && u.Stage != stageStaged {
		// Intent, then NodeStageVolume, then its result made durable
		// together with the publish intent: a volume staged before a
		// restart is not staged again.
		u.Stage, u.StagingPath = stageStaging, stagingPath
		if err := m.store.save(rec); err != nil {
			m.restoreUsage(v, usage, orig)
			m.settle(v)
			return nil, err
		}
		m.calls.Add(1)
		err := client.NodeStageVolume(ctx, &plugin.NodeStageRequest{
			ExternalID:     req.ExternalID,
			PublishContext: req.PublishContext,
			StagingPath:    u.StagingPath,
			Capability:     req.Capability,
			MountOptions:   req.MountOptions,
			Secrets:        req.Secrets,
			VolumeContext:  req.VolumeContext,
		})
		if err != nil {
			// After an uncertain outcome the volume may be staged, as
			// the file already says; otherwise nothing happened.
			if csi.Classify(err) != csi.ClassUncertain {
				m.restoreUsage(v, usage, orig)
				m.settle(v)
			}
			return nil, fmt.Errorf("NodeStageVolume: %w", err)
		}
		u.Stage = stageStaged
	}

	u.Allocations[req.AllocationID] = &allocRecord{State: publishPublishing, TargetPath: targetPath}
	if err := m.store.save(rec); err != nil {
		restoreAlloc(u, req.AllocationID, prior)
		m.settle(v)
		return nil, err
	}

	pub := &plugin.NodePublishRequest{
		ExternalID:     req.ExternalID,
		TargetPath:     targetPath,
		Capability:     req.Capability,
		MountOptions:   req.MountOptions,
		ReadOnly:       usage.ReadOnly(),
		Secrets:        req.Secrets,
		PublishContext: req.PublishContext,
		VolumeContext:  req.VolumeContext,
	}
	if stage {
		pub.StagingPath = u.StagingPath
	}
	m.calls.Add(1)
	if err := client.NodePublishVolume(ctx, pub); err != nil {
		if csi.Classify(err) != csi.ClassUncertain {
			// The plugin did not publish. An earlier attempt whose
			// outcome was unknown still may have.
			restoreAlloc(u, req.AllocationID, prior)
			m.settle(v)
		}
		return nil, fmt.Errorf("NodePublishVolume: %w", err)
	}
	u.Allocations[req.AllocationID].State = publishPublished
	m.logger.Debug("volume mounted", "namespace", req.Namespace, "volume", req.VolumeID,
		"allocation", req.AllocationID, "usage", usage.String(), "staged", stage, "target", targetPath)
	return mountInfo(targetPath, usage), nil
}

func mountInfo(target string, u Usage) *MountInfo {
	return &MountInfo{Path: target, Block: u.AttachmentMode == csi.AttachmentModeBlockDevice, Usage: u}
}

// completeUnpublishes finishes the teardowns of other allocations of the
// usage that a crash or a failure interrupted. A failure is logged: it
// does not stop the mount, and the next call tries again.
func (m *Mounter) completeUnpublishes(ctx context.Context, client plugin.NodeClient, rec *volumeRecord, u *usageRecord, except string) {
	for _, id := range sortedAllocs(u) {
		a := u.Allocations[id]
		if id == except || a.State != publishUnpublishing {
			continue
		}
		if err := m.unpublish(ctx, client, rec, id, a.TargetPath); err != nil {
			m.logger.Warn("cannot complete an interrupted unmount", "namespace", rec.Namespace, "volume", rec.VolumeID,
				"allocation", id, "error", err)
			continue
		}
		delete(u.Allocations, id)
	}
}

// unpublish calls NodeUnpublishVolume and removes the target's empty
// parents. NotFound counts as done.
func (m *Mounter) unpublish(ctx context.Context, client plugin.NodeClient, rec *volumeRecord, allocID, target string) error {
	m.calls.Add(1)
	err := client.NodeUnpublishVolume(ctx, &plugin.NodeUnpublishRequest{ExternalID: rec.ExternalID, TargetPath: target})
	if !csi.TeardownDone(err) {
		return fmt.Errorf("NodeUnpublishVolume for allocation %s: %w", allocID, err)
	}
	m.removeEmpty(filepath.Dir(target), filepath.Join(m.root, perAllocDir))
	return nil
}

// restoreUsage puts back a usage as it was before this call (orig nil:
// it did not exist), in memory; settle then persists it.
func (m *Mounter) restoreUsage(v *volume, usage Usage, orig *usageRecord) {
	if orig == nil {
		delete(v.rec.Usages, usage)
	} else {
		v.rec.Usages[usage] = orig
	}
}

// restoreAlloc puts back an allocation's record as it was before this
// call (prior nil: it did not exist).
func restoreAlloc(u *usageRecord, allocID string, prior *allocRecord) {
	if prior == nil {
		delete(u.Allocations, allocID)
	} else {
		u.Allocations[allocID] = prior
	}
}

// settle writes the volume's record after a failed call undid an intent,
// or removes the file when nothing is tracked any more. It is best
// effort: if it fails, the file keeps the intent, which only makes the
// next call repeat an idempotent plugin call.
func (m *Mounter) settle(v *volume) {
	rec := v.rec
	if rec == nil {
		return
	}
	rec.prune()
	if rec.empty() {
		v.rec = nil
		if err := m.store.remove(rec.Namespace, rec.VolumeID); err != nil {
			m.logger.Warn("cannot remove mount state", "namespace", rec.Namespace, "volume", rec.VolumeID, "error", err)
		}
		return
	}
	if err := m.store.save(rec); err != nil {
		m.logger.Warn("cannot write mount state", "namespace", rec.Namespace, "volume", rec.VolumeID, "error", err)
	}
}

// nodePlugin asks the registry for a plugin's node client.
func (m *Mounter) nodePlugin(pluginID string) (plugin.NodeClient, *csi.PluginInfo, error) {
	c, info, err := m.plugins.NodePlugin(pluginID)
	if err != nil {
		return nil, nil, fmt.Errorf("node plugin %s: %w", pluginID, err)
	}
	if c == nil {
		return nil, nil, fmt.Errorf("node plugin %s: %w: the registry returned no client", pluginID, csi.ErrPluginNotFound)
	}
	return c, info, nil
}

func ensureDir(p string) error { return os.MkdirAll(p, 0o750) }
