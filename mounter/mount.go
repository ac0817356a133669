package mounter

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
)

// MountVolume implements VolumeMounter.
//
// A request that fails validation (bad IDs: csi.ErrInvalidID; bad modes
// or options: csi.ErrInvalidRequest) is refused before any file is
// written or any plugin called. A missing node plugin returns the
// Retryable csi.ErrPluginNotFound from Config.Plugins, wrapped. A
// symbolic link beneath the mount root on the way to the staging or
// target path fails it with ErrUnsafePath (Final) before any of its
// writes or plugin calls.
//
// A volume has one staging path per node: a mount whose StageUsage
// differs from the one the volume is staged under for other allocations
// is refused with csi.ErrVolumeInUse, wrapped (Retryable: it can succeed
// once those allocations have unmounted), before any plugin call or
// write. A stage under another StageUsage that no allocation uses any
// more (left by a failed mount or an interrupted unmount) is torn down
// first instead.
//
// A failed plugin call returns its *csi.RPCError, wrapped. Only a Final
// error (InvalidArgument, FailedPrecondition, Internal, …: the plugin
// refused) is taken to mean the call did nothing. After any other error,
// Uncertain (DeadlineExceeded, Canceled) or Retryable (Unavailable,
// which gRPC also reports for a connection lost while the plugin was
// acting), the volume counts as possibly staged, and possibly published
// for the allocation, so an UnmountVolume (which the host owes every
// allocation it mounted for, failed or not) cleans it up; the teardown
// calls are idempotent and NotFound counts as done.
func (m *Mounter) MountVolume(ctx context.Context, req *MountRequest) (*MountInfo, error) {
	if err := req.Validate(); err != nil {
		return nil, fmt.Errorf("mount volume: %w", err)
	}
	what := fmt.Sprintf("mount volume %s/%s for allocation %s", req.Namespace, req.VolumeID, req.AllocationID)
	usage := req.Usage()
	stagingPath, err := m.stagingPath(req.Namespace, req.VolumeID, usage.StageUsage())
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

	mi, err := m.mount(ctx, v, client, info, req, usage, stagingPath, targetPath)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return mi, nil
}

// mount runs with the volume locked.
func (m *Mounter) mount(ctx context.Context, v *volume, client plugin.NodeClient, info *csi.PluginInfo, req *MountRequest, usage Usage, stagingPath, targetPath string) (*MountInfo, error) {
	rec := v.rec
	if rec != nil && (rec.ExternalID != req.ExternalID || rec.PluginID != req.PluginID) {
		return nil, fmt.Errorf("%w: the volume is tracked on this node as external ID %q of plugin %s, not %q of plugin %s; unmount its allocations first",
			csi.ErrInvalidRequest, rec.ExternalID, rec.PluginID, req.ExternalID, req.PluginID)
	}
	sk := usage.StageUsage()
	if rec != nil {
		if err := stageConflict(rec, usage); err != nil {
			return nil, err
		}
		if err := m.finishStages(ctx, client, rec, sk); err != nil {
			return nil, err
		}
	} else {
		rec = &volumeRecord{
			Version:    formatVersion,
			Namespace:  req.Namespace,
			VolumeID:   req.VolumeID,
			ExternalID: req.ExternalID,
			PluginID:   req.PluginID,
			Stages:     map[StageUsage]*stageRecord{},
		}
	}
	s := rec.Stages[sk]
	var prior *allocRecord
	var stage bool
	if s == nil {
		var err error
		if stage, err = m.stages(ctx, req.PluginID, client, info); err != nil {
			return nil, err
		}
	} else {
		// An existing stage keeps the staging decision it was made with,
		// so its allocations all publish from the same staging path.
		stage = s.Stage != stageNone
		if p := s.pub(usage.ClaimMode, req.AllocationID); p != nil {
			c := *p
			prior = &c
			targetPath = p.TargetPath
		}
		if prior != nil && prior.State == publishPublished && (s.Stage == stageNone || s.Stage == stageStaged) {
			// The host hands the path to the workload: not through a link.
			if err := m.refuseLinks(targetPath, false); err != nil {
				return nil, fmt.Errorf("check the target path: %w", err)
			}
			return mountInfo(targetPath, usage), nil
		}
		m.completeUnpublishes(ctx, client, rec, s, usage.ClaimMode, req.AllocationID)
	}

	// No path the plugin gets may pass through a link beneath the root,
	// and the check comes before this mount's writes and plugin calls:
	// the target here (its parent may be made while the plugin stages,
	// and that mkdir would find a link only after NodeStageVolume), the
	// staging directory as it is made. The target itself is held to it
	// until a publish was sent for it, the staging directory until a
	// stage may have been made there (see makeStagingDir).
	if err := m.refuseLinks(targetPath, prior == nil); err != nil {
		return nil, fmt.Errorf("check the target path: %w", err)
	}

	// Directories first: creating one twice is harmless, and they are
	// removed again by the unmount. When the volume must be staged, the
	// target's parent is made while the plugin stages (alongside).
	needStage := stage && (s == nil || s.Stage != stageStaged)
	if stage {
		if s != nil && s.StagingPath != "" {
			stagingPath = s.StagingPath
		}
		if err := m.makeStagingDir(stagingPath, s == nil || s.Stage == stageNone); err != nil {
			return nil, fmt.Errorf("create staging directory: %w", err)
		}
	}
	if !needStage {
		if err := m.makeTargetParent(targetPath); err != nil {
			return nil, fmt.Errorf("create the target's parent directory: %w", err)
		}
	}

	if s == nil {
		s = &stageRecord{}
		rec.Stages[sk] = s
	}
	v.rec = rec

	// One synced write before the first plugin call: the publish intent,
	// and the stage intent too when the volume is not known to be
	// staged, since the publish follows the stage at once.
	prevStage, prevPath := s.Stage, s.StagingPath
	if needStage {
		s.Stage, s.StagingPath = stageStaging, stagingPath
	}
	s.setPub(usage.ClaimMode, req.AllocationID, &allocRecord{State: publishPublishing, TargetPath: targetPath})
	if err := m.store.save(rec); err != nil {
		s.Stage, s.StagingPath = prevStage, prevPath
		s.setPub(usage.ClaimMode, req.AllocationID, prior)
		m.settle(v, false)
		return nil, err
	}

	if needStage {
		m.calls.Add(1)
		parentErr, err := alongside(func() error { return m.makeTargetParent(targetPath) }, func() error {
			return client.NodeStageVolume(ctx, &plugin.NodeStageRequest{
				ExternalID:     req.ExternalID,
				PublishContext: req.PublishContext,
				StagingPath:    s.StagingPath,
				Capability:     req.Capability,
				MountOptions:   req.MountOptions,
				Secrets:        req.Secrets,
				VolumeContext:  req.VolumeContext,
			})
		})
		if err != nil {
			// NodePublishVolume never ran: its intent goes. Only a refusal
			// proves nothing was staged; after any other error the volume
			// may be staged, as the file already says.
			// The withdrawal is synced: the host's UnmountVolume finds no
			// publication to tear down and writes nothing, so an OS crash
			// must not bring the intent back as a live user.
			s.setPub(usage.ClaimMode, req.AllocationID, prior)
			if csi.Classify(err) == csi.ClassFinal {
				s.Stage, s.StagingPath = prevStage, prevPath
			}
			m.settle(v, prior == nil)
			return nil, fmt.Errorf("NodeStageVolume: %w", err)
		}
		// Noted, so that a restarted agent does not stage again; an OS
		// crash may lose it, and then the next mount stages again
		// (idempotently).
		s.Stage = stageStaged
		if parentErr != nil {
			// NodePublishVolume cannot run: its intent goes, synced, as
			// when the plugin refuses the publish. The stage stays, with
			// no user, for the host's UnmountVolume to tear down.
			s.setPub(usage.ClaimMode, req.AllocationID, prior)
			m.settle(v, prior == nil)
			return nil, fmt.Errorf("create the target's parent directory: %w", parentErr)
		}
		m.note(v)
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
		pub.StagingPath = s.StagingPath
	}
	m.calls.Add(1)
	if err := client.NodePublishVolume(ctx, pub); err != nil {
		if csi.Classify(err) == csi.ClassFinal {
			// The plugin refused: it did not publish. An earlier attempt
			// whose outcome was unknown still may have. A withdrawn intent
			// is synced, as after a failed stage.
			s.setPub(usage.ClaimMode, req.AllocationID, prior)
			m.settle(v, prior == nil)
		}
		return nil, fmt.Errorf("NodePublishVolume: %w", err)
	}
	s.pub(usage.ClaimMode, req.AllocationID).State = publishPublished
	m.note(v)
	m.logger.Debug("volume mounted", "namespace", req.Namespace, "volume", req.VolumeID,
		"allocation", req.AllocationID, "usage", usage.String(), "staged", stage, "target", targetPath)
	return mountInfo(targetPath, usage), nil
}

// stageConflict refuses a mount under a stage usage other than the one
// the volume may be staged under for allocations that still use it. The
// CSI spec (csi.proto, NodeStageVolumeRequest.staging_target_path): "The
// CO SHALL ensure that there is only one `staging_target_path` per
// volume." A second stage usage would need a second staging path; the
// error is Retryable, as the first stage goes with its last user.
func stageConflict(rec *volumeRecord, want Usage) error {
	for _, sk := range rec.sortedStages() {
		s := rec.Stages[sk]
		if sk == want.StageUsage() || s.Stage == stageNone {
			continue
		}
		if users := s.liveUsers(sk); len(users) > 0 {
			return fmt.Errorf("%w: the volume is staged on this node as %s for %s, and a volume has one staging path per node, so it cannot also be mounted as %s; retry once they have unmounted",
				csi.ErrVolumeInUse, sk, listUsers(users), want)
		}
	}
	return nil
}

// listUsers lists allocations for an error message, at most a few.
func listUsers(users []string) string {
	const most = 5
	word := "allocation "
	if len(users) > 1 {
		word = "allocations "
	}
	if len(users) > most {
		return word + strings.Join(users[:most], ", ") + fmt.Sprintf(" and %d more", len(users)-most)
	}
	if len(users) > 1 {
		return word + strings.Join(users[:len(users)-1], ", ") + " and " + users[len(users)-1]
	}
	return word + users[0]
}

// finishStages tears down the volume's stages other than keep that no
// allocation uses any more (stageConflict refuses the mount while one
// does): the unpublishes that a crash or a failure interrupted, then the
// unstage. Stages without a stage state (a plugin that does not stage)
// are left alone.
func (m *Mounter) finishStages(ctx context.Context, client plugin.NodeClient, rec *volumeRecord, keep StageUsage) error {
	for _, sk := range rec.sortedStages() {
		s := rec.Stages[sk]
		if sk == keep || s.Stage == stageNone || len(s.liveUsers(sk)) > 0 {
			continue
		}
		if s.Stage == stageStaged {
			// Once NodeUnstageVolume may have run, a restart must not take
			// the volume for staged.
			s.Stage = stageUnstaging
			if err := m.store.save(rec); err != nil {
				s.Stage = stageStaged
				return err
			}
		}
		for _, p := range s.publications() {
			if err := m.unpublish(ctx, client, rec, p.alloc, p.rec.TargetPath); err != nil {
				return fmt.Errorf("finish the teardown of the volume's stage %s: %w", sk, err)
			}
			s.setPub(p.mode, p.alloc, nil)
		}
		if err := m.unstage(ctx, client, rec, s); err != nil {
			return fmt.Errorf("finish the teardown of the volume's stage %s: %w", sk, err)
		}
		delete(rec.Stages, sk)
		m.logger.Debug("finished the teardown of an unused stage", "namespace", rec.Namespace, "volume", rec.VolumeID, "stage", sk.String())
	}
	return nil
}

func mountInfo(target string, u Usage) *MountInfo {
	return &MountInfo{Path: target, Block: u.AttachmentMode == csi.AttachmentModeBlockDevice, Usage: u}
}

// completeUnpublishes finishes the teardowns of other allocations of the
// stage that a crash or a failure interrupted. A failure is logged: it
// does not stop the mount, and the next call tries again.
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

// unpublish calls NodeUnpublishVolume and removes the target's empty
// parents. NotFound counts as done.
func (m *Mounter) unpublish(ctx context.Context, client plugin.NodeClient, rec *volumeRecord, allocID, target string) error {
	if err := m.nodeUnpublish(ctx, client, rec, allocID, target); err != nil {
		return err
	}
	m.removeTargetParent(target)
	return nil
}

// nodeUnpublish calls NodeUnpublishVolume; NotFound counts as done. The
// caller removes the target's parents (removeTargetParent). A target
// below a link is not sent (refuseLinks): the plugin would unmount and
// delete what the link points at.
func (m *Mounter) nodeUnpublish(ctx context.Context, client plugin.NodeClient, rec *volumeRecord, allocID, target string) error {
	if err := m.refuseLinks(target, false); err != nil {
		return fmt.Errorf("NodeUnpublishVolume for allocation %s not sent: %w", allocID, err)
	}
	m.calls.Add(1)
	err := client.NodeUnpublishVolume(ctx, &plugin.NodeUnpublishRequest{ExternalID: rec.ExternalID, TargetPath: target})
	if !csi.TeardownDone(err) {
		return fmt.Errorf("NodeUnpublishVolume for allocation %s: %w", allocID, err)
	}
	return nil
}

// removeTargetParent removes the empty parents the mounter made for a
// target (makeTargetParent).
func (m *Mounter) removeTargetParent(target string) {
	m.removeEmpty(filepath.Dir(target), perAllocDir)
}

// settle writes the volume's record after a change that narrowed it
// (an intent undone, a teardown done), or removes the volume's record
// when nothing is tracked any more. It is best effort: if the write
// fails, the database keeps the intent, which makes the next call
// repeat an idempotent plugin call.
//
// durable says the write must not be lost: a publish intent withdrawn
// without a teardown (the mount failed before or at NodePublishVolume),
// for which the host's UnmountVolume later finds nothing to do and
// writes nothing. Every commit of the database is synced (unless
// Config.NoSync), so today both kinds are written the same way; the
// flag keeps the distinction where the store could honour it.
func (m *Mounter) settle(v *volume, durable bool) {
	rec := v.rec
	if rec == nil {
		return
	}
	rec.prune()
	if rec.empty() {
		v.rec = nil
		if err := m.store.drop(rec.Namespace, rec.VolumeID, durable); err != nil {
			m.logger.Warn("cannot release mount state", "namespace", rec.Namespace, "volume", rec.VolumeID, "error", err)
		}
		return
	}
	if !durable {
		m.note(v)
		return
	}
	if err := m.store.save(rec); err != nil {
		m.logger.Warn("cannot write mount state", "namespace", rec.Namespace, "volume", rec.VolumeID, "error", err)
	}
}

// note writes the volume's record, which narrows the last saved one
// (store.note); a failure is only logged, since losing it is safe.
func (m *Mounter) note(v *volume) {
	if err := m.store.note(v.rec); err != nil {
		m.logger.Warn("cannot write mount state", "namespace", v.rec.Namespace, "volume", v.rec.VolumeID, "error", err)
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
