package mounter

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/metrics"
	"github.com/csikit/csikit/csi/plugin"
)

// MountVolume implements VolumeMounter. A request that fails
// validation (csi.ErrInvalidID, csi.ErrInvalidRequest), a missing node
// plugin (csi.ErrPluginNotFound, Retryable), a symbolic link on the way
// to the staging or target path (ErrUnsafePath, Final) and a second
// stage usage in use (csi.ErrVolumeInUse, Retryable) fail it before any
// write or plugin call. A failed plugin call returns its *csi.RPCError,
// wrapped.
func (m *Mounter) MountVolume(ctx context.Context, req *MountRequest) (*MountInfo, error) {
	if err := req.Validate(); err != nil {
		return nil, fmt.Errorf("mount volume: %w", err)
	}
	mi, err := m.mountVolume(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("mount volume %s/%s for allocation %s: %w", req.Namespace, req.VolumeID, req.AllocationID, err)
	}
	return mi, nil
}

// mountOp is one mount, as prepare works it out.
type mountOp struct {
	req    *MountRequest
	usage  Usage
	sk     StageUsage
	client plugin.NodeClient
	info   *csi.PluginInfo

	rec       *volumeRecord // the volume's record, or a new one
	staging   string        // the staging path; "" when the volume is not staged
	target    string        // the allocation's target path
	needStage bool          // NodeStageVolume must be called
	prior     *allocRecord  // a copy of the allocation's publication before
	// The stage before the intent, restored if the plugin refuses to
	// stage.
	prevStage   stageState
	prevStaging string
}

func (m *Mounter) mountVolume(ctx context.Context, req *MountRequest) (*MountInfo, error) {
	op := &mountOp{req: req, usage: req.Usage()}
	op.sk = op.usage.StageUsage()
	var err error
	if op.staging, err = m.stagingPath(req.Namespace, req.VolumeID, op.sk); err != nil {
		return nil, err
	}
	if op.target, err = m.targetPath(req.AllocationID, req.VolumeID, op.usage); err != nil {
		return nil, err
	}
	if op.client, op.info, err = m.nodePlugin(req.PluginID); err != nil {
		return nil, err
	}
	v, err := m.acquire(ctx, volKey{req.Namespace, req.VolumeID})
	if err != nil {
		return nil, err
	}
	defer m.release(v)
	done, err := m.slot(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	if mi, err := m.prepare(ctx, v, op); mi != nil || err != nil {
		return mi, err
	}
	if err := m.makeDirs(op); err != nil {
		return nil, err
	}
	if err := m.saveIntent(v, op); err != nil {
		m.settle(v, false)
		return nil, err
	}
	if op.needStage {
		if err := m.stage(ctx, v, op); err != nil {
			return nil, err
		}
	}
	mi, err := m.publish(ctx, v, op)
	if err == nil && op.needStage {
		mi.NodeExpandedBytes = m.expandAtStage(ctx, op)
	}
	return mi, err
}

// prepare checks the mount against the volume's record (same external
// ID and plugin, no other stage usage in use), finishes the teardowns
// left over on the volume, and decides whether the mount stages, and
// where. It returns the MountInfo of a mount already made.
func (m *Mounter) prepare(ctx context.Context, v *volume, op *mountOp) (*MountInfo, error) {
	req := op.req
	if rec := v.rec; rec != nil {
		if rec.ExternalID != req.ExternalID || rec.PluginID != req.PluginID {
			return nil, fmt.Errorf("%w: the volume is tracked on this node as external ID %q of plugin %s, not %q of plugin %s; unmount its allocations first",
				csi.ErrInvalidRequest, rec.ExternalID, rec.PluginID, req.ExternalID, req.PluginID)
		}
		if err := stageConflict(rec, op.usage); err != nil {
			return nil, err
		}
		if err := m.finishStages(ctx, op.client, v, op.sk); err != nil {
			return nil, err
		}
	}
	op.rec = v.rec
	if op.rec == nil {
		op.rec = &volumeRecord{Namespace: req.Namespace, VolumeID: req.VolumeID, ExternalID: req.ExternalID,
			PluginID: req.PluginID, Stages: map[StageUsage]*stageRecord{}}
	}
	s := op.rec.Stages[op.sk]
	if s == nil {
		var err error
		if op.needStage, err = m.stages(ctx, req.PluginID, op.client, op.info); !op.needStage {
			op.staging = ""
		}
		return nil, err
	}
	// An existing stage keeps the staging decision and path it was made
	// with (none without a stage state), so that its allocations all
	// publish from it.
	op.needStage = s.Stage != stageNone && s.Stage != stageStaged
	op.prevStage, op.prevStaging = s.Stage, s.StagingPath
	op.staging = s.StagingPath
	if p := s.pub(op.usage.ClaimMode, req.AllocationID); p != nil {
		prior := *p
		op.prior, op.target = &prior, p.TargetPath
		if p.State == publishPublished && !op.needStage {
			// The host hands the path to the workload: not through a link.
			if err := m.refuseLinks(op.target, false); err != nil {
				return nil, fmt.Errorf("check the target path: %w", err)
			}
			return mountInfo(op.target, op.usage), nil
		}
	}
	m.completeUnpublishes(ctx, op.client, op.rec, s, op.usage.ClaimMode, req.AllocationID)
	return nil, nil
}

// makeDirs checks the target for links and makes, before the intent is
// written, the staging directory and (unless the volume must be staged
// first) the target's parent. The target and the staging directory are
// refused as links only while no publish (stage) may have made them the
// plugin's.
func (m *Mounter) makeDirs(op *mountOp) error {
	if err := m.refuseLinks(op.target, op.prior == nil); err != nil {
		return fmt.Errorf("check the target path: %w", err)
	}
	if op.staging != "" {
		if err := m.tree.mkdirAll(op.staging, op.prevStage != stageNone); err != nil {
			return fmt.Errorf("create staging directory: %w", err)
		}
	}
	if op.needStage {
		return nil
	}
	return m.makeTargetParent(op)
}

func (m *Mounter) makeTargetParent(op *mountOp) error {
	if err := m.tree.mkdirAll(filepath.Dir(op.target), false); err != nil {
		return fmt.Errorf("create the target's parent directory: %w", err)
	}
	return nil
}

// saveIntent saves the publication for the allocation, and the stage
// when the volume is not known to be staged, in one durable write. If
// it fails, the record stays.
func (m *Mounter) saveIntent(v *volume, op *mountOp) error {
	next := op.rec.clone()
	s := next.Stages[op.sk]
	if s == nil {
		s = &stageRecord{}
		next.Stages[op.sk] = s
	}
	if op.needStage {
		s.Stage, s.StagingPath = stageStaging, op.staging
	}
	s.setPub(op.usage.ClaimMode, op.req.AllocationID, &allocRecord{State: publishPublishing, TargetPath: op.target})
	if err := m.store.save(v.key, next); err != nil {
		return err
	}
	v.rec = next
	return nil
}

// stage calls NodeStageVolume, makes the target's parent and notes the
// stage, so that a restarted agent does not stage again. A failure
// withdraws the publish intent, and the stage's too on a refusal (a
// Final error): after any other, the volume may be staged.
func (m *Mounter) stage(ctx context.Context, v *volume, op *mountOp) error {
	req := op.req
	m.calls.Add(1)
	err := op.client.NodeStageVolume(ctx, &plugin.NodeStageRequest{ExternalID: req.ExternalID, PublishContext: req.PublishContext,
		StagingPath: op.staging, Capability: req.Capability, MountOptions: req.MountOptions, Secrets: req.Secrets, VolumeContext: req.VolumeContext})
	if err != nil {
		m.withdraw(v, op, csi.Classify(err) == csi.ClassFinal)
		return fmt.Errorf("NodeStageVolume: %w", err)
	}
	v.rec.Stages[op.sk].Stage = stageStaged
	m.count(metrics.MountsStaged, req.PluginID)
	if err := m.makeTargetParent(op); err != nil {
		// The publish cannot run. The stage stays, with no user, for the
		// host's UnmountVolume to tear down.
		m.withdraw(v, op, false)
		return err
	}
	m.settle(v, false)
	return nil
}

// publish calls NodePublishVolume and notes its success. A refusal (a
// Final error) withdraws the intent: the plugin did not publish, though
// an earlier attempt of unknown outcome may have (op.prior stays).
func (m *Mounter) publish(ctx context.Context, v *volume, op *mountOp) (*MountInfo, error) {
	req := op.req
	pub := &plugin.NodePublishRequest{ExternalID: req.ExternalID, StagingPath: op.staging, TargetPath: op.target,
		Capability: req.Capability, MountOptions: req.MountOptions, ReadOnly: op.usage.ReadOnly(), Secrets: req.Secrets,
		PublishContext: req.PublishContext, VolumeContext: req.VolumeContext}
	m.calls.Add(1)
	if err := op.client.NodePublishVolume(ctx, pub); err != nil {
		if csi.Classify(err) == csi.ClassFinal {
			m.withdraw(v, op, false)
		}
		return nil, fmt.Errorf("NodePublishVolume: %w", err)
	}
	v.rec.Stages[op.sk].pub(op.usage.ClaimMode, req.AllocationID).State = publishPublished
	m.count(metrics.MountsPublished, req.PluginID)
	m.settle(v, false)
	m.logger.Debug("volume mounted", "namespace", req.Namespace, "volume", req.VolumeID,
		"allocation", req.AllocationID, "usage", op.usage.String(), "staged", op.staging != "", "target", op.target)
	return mountInfo(op.target, op.usage), nil
}

// withdraw undoes the publish intent after a call that did not publish,
// and the stage intent if unstaged. It is saved when the allocation had
// no publication before: the host's UnmountVolume then finds nothing to
// do and writes nothing, so an OS crash must not bring the intent back.
func (m *Mounter) withdraw(v *volume, op *mountOp, unstaged bool) {
	s := v.rec.Stages[op.sk]
	s.setPub(op.usage.ClaimMode, op.req.AllocationID, op.prior)
	if unstaged {
		s.Stage, s.StagingPath = op.prevStage, op.prevStaging
	}
	m.settle(v, op.prior == nil)
}

// settle writes the volume's record (nil once it tracks nothing) after
// a change that narrowed it: noted, or saved when durable. A failure is
// logged: the state keeps the intent, and the next call repeats an
// idempotent plugin call.
func (m *Mounter) settle(v *volume, durable bool) {
	if v.rec == nil {
		return
	}
	v.rec = v.rec.prune()
	write := m.store.note
	if durable {
		write = m.store.save
	}
	if err := write(v.key, v.rec); err != nil {
		m.logger.Warn("cannot write mount state", "namespace", v.key.namespace, "volume", v.key.volumeID, "error", err)
	}
}

// stageConflict refuses a mount under another stage usage than one the
// volume may be staged under for allocations that use it: it would need
// a second staging path. Retryable: the stage goes with its last user.
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

// listUsers lists allocations for an error message, at most five.
func listUsers(users []string) string {
	word, more := "allocation ", ""
	if len(users) > 1 {
		word = "allocations "
	}
	if len(users) > 5 {
		users, more = users[:5], fmt.Sprintf(" and %d more", len(users)-5)
	}
	return word + strings.Join(users, ", ") + more
}

func mountInfo(target string, u Usage) *MountInfo {
	return &MountInfo{Path: target, Block: u.AttachmentMode == csi.AttachmentModeBlockDevice, Usage: u}
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
