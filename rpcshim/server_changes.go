package rpcshim

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/state"
)

// ModifyVolume changes a volume's CSI mutable parameters through
// ControllerModifyVolume, when a controller of its plugin advertises
// MODIFY_VOLUME (csi.ErrNotSupported otherwise). The intent is written
// first (state.RequestModify); on success the parameters are merged
// into the volume's MutableParameters, on a Final refusal dropped. A
// Retryable failure that outlasts the attempts leaves the modify
// pending for ResumeVolumeChanges or a repeated call.
func (s *Server) ModifyVolume(ctx context.Context, req *VolumeModifyRequest) (*VolumeChangeResponse, error) {
	const op = "modify volume"
	if req == nil {
		return nil, fmt.Errorf("%w: %s: nil request", csi.ErrInvalidRequest, op)
	}
	v, p, unlock, err := s.beginChange(ctx, op, req.Namespace, req.VolumeID)
	if err != nil {
		return nil, err
	}
	defer unlock()
	name := req.Namespace + "/" + req.VolumeID
	if !p.ModifiesVolumes() {
		return nil, fmt.Errorf("%w: %s %s: no controller of plugin %s advertises MODIFY_VOLUME", csi.ErrNotSupported, op, name, v.PluginID)
	}
	if _, err := s.applier.Apply(ctx, state.RequestModify{Namespace: req.Namespace, VolumeID: req.VolumeID, Parameters: req.MutableParameters}); err != nil {
		return nil, fmt.Errorf("%s %s: %w", op, name, err)
	}
	return s.driveModify(ctx, req.Namespace, req.VolumeID)
}

// beginChange is the start of ExpandVolume and ModifyVolume: it asks
// the Authorizer for volume-write, locks the volume and reads it and its
// plugin. The caller runs unlock when done.
func (s *Server) beginChange(ctx context.Context, op, ns, id string) (*csi.Volume, *csi.Plugin, func(), error) {
	name := ns + "/" + id
	if err := s.authorize(ctx, op+" "+name, ns, csi.PermVolumeWrite); err != nil {
		return nil, nil, nil, err
	}
	unlock, err := s.lockVolume(ctx, op, ns, id)
	if err != nil {
		return nil, nil, nil, err
	}
	v, err := s.store.Volume(ns, id)
	if err != nil {
		unlock()
		return nil, nil, nil, fmt.Errorf("%s %s: %w", op, name, err)
	}
	p, err := s.store.Plugin(v.PluginID)
	if err != nil {
		unlock()
		return nil, nil, nil, fmt.Errorf("%s %s: %w", op, name, err)
	}
	return v, p, unlock, nil
}

// driveModify sends a volume's pending modify, with the volume locked.
func (s *Server) driveModify(ctx context.Context, ns, id string) (*VolumeChangeResponse, error) {
	name := ns + "/" + id
	v, err := s.store.Volume(ns, id)
	if err != nil {
		return nil, fmt.Errorf("modify volume %s: %w", name, err)
	}
	resp := &VolumeChangeResponse{}
	if v.ModifyingParameters != nil {
		req := &ModifyVolumeRequest{
			CSIControllerQuery: CSIControllerQuery{PluginID: v.PluginID},
			ControllerModifyRequest: plugin.ControllerModifyRequest{
				ExternalID: v.ExternalID, MutableParameters: maps.Clone(v.ModifyingParameters), Secrets: v.Secrets,
			},
		}
		var r *ModifyVolumeResponse
		err := s.retry(ctx, func() (err error) {
			r, err = s.router.ModifyVolume(ctx, req)
			return err
		})
		if err != nil {
			if csi.Classify(err) == csi.ClassFinal {
				if _, aerr := s.applier.Apply(ctx, state.RecordModify{Namespace: ns, VolumeID: id, Failed: true}); aerr != nil {
					s.logger.Warn("cannot record a refused modify", "namespace", ns, "volume_id", id, "error", aerr)
				}
			}
			return nil, fmt.Errorf("modify volume %s: %w", name, err)
		}
		if _, err := s.applier.Apply(ctx, state.RecordModify{Namespace: ns, VolumeID: id}); err != nil {
			return nil, fmt.Errorf("modify volume %s: ControllerModifyVolume succeeded but recording it failed (a retry repeats it): %w", name, err)
		}
		resp.ControllerNodeID = r.ControllerNodeID
		if v, err = s.store.Volume(ns, id); err != nil {
			return nil, fmt.Errorf("modify volume %s: %w", name, err)
		}
	}
	resp.Volume = withoutSecrets(v)
	return resp, nil
}

// CompleteNodeExpansions runs the node step of every expansion that
// node still needs: those left pending there (the node was down or
// failing) and those of volumes claimed there that the node has not
// expanded (it staged the volume after the expansion). The host calls
// it when the node registers or comes back (its fingerprints arrive
// with a ready status), and after the node reports a new mount. Each
// volume is locked in turn; the first error that is not Retryable is
// returned after the others were tried.
func (s *Server) CompleteNodeExpansions(ctx context.Context, nodeID string) error {
	if err := s.authorize(ctx, "complete node expansions on node "+nodeID, "", csi.PermNodeRegister); err != nil {
		return err
	}
	if err := csi.ValidateNodeID(nodeID); err != nil {
		return fmt.Errorf("complete node expansions: %w", err)
	}
	vols, err := s.store.Volumes("", "")
	if err != nil {
		return fmt.Errorf("complete node expansions on node %s: %w", nodeID, err)
	}
	var errs []error
	for _, v := range vols {
		if !needsNodeStep(v, nodeID) {
			continue
		}
		if err := s.completeOn(ctx, v.Namespace, v.ID, nodeID); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// needsNodeStep reports whether node must run v's node step now.
func needsNodeStep(v *csi.Volume, node string) bool {
	e := v.Expansion
	if !e.NeedsNode(node) {
		return false
	}
	return slices.Contains(e.PendingNodes, node) || slices.Contains(v.ExpansionNodes(), node)
}

// completeOn runs one volume's node step on node, locked.
func (s *Server) completeOn(ctx context.Context, ns, id, node string) error {
	unlock, err := s.lockVolume(ctx, "complete node expansion", ns, id)
	if err != nil {
		return err
	}
	defer unlock()
	v, err := s.store.Volume(ns, id)
	if err != nil {
		if errors.Is(err, csi.ErrVolumeNotFound) {
			return nil
		}
		return err
	}
	if !needsNodeStep(v, node) {
		return nil
	}
	return s.nodeExpand(ctx, v, node)
}

// ResumeVolumeChanges resumes every create, delete, expansion and
// modify a previous leader left pending: a new leader calls it once it
// leads, before it serves volume operations (or beside them: each
// volume is locked). A create is completed from its intent
// (csi.Volume.Creating), which records the CSI name, parameters and
// content source, so the plugin returns the volume it made, or makes
// it, and no backing volume is left that the store does not know. A
// delete (csi.Volume.Deleting) is repeated: NotFound from the plugin
// counts as deleted, and the volume is deregistered. Controller steps repeat with
// the same range or parameters, which the plugin answers idempotently,
// so nothing is done twice. The errors of every volume are joined.
func (s *Server) ResumeVolumeChanges(ctx context.Context) error {
	if err := s.authorize(ctx, "resume volume changes", "", csi.PermOperator); err != nil {
		return err
	}
	vols, err := s.store.Volumes("", "")
	if err != nil {
		return fmt.Errorf("resume volume changes: %w", err)
	}
	var errs []error
	for _, v := range vols {
		switch {
		case v.Creating:
			err = s.resumeCreate(ctx, v.Namespace, v.ID)
		case v.Deleting:
			_, err = s.deleteVolume(ctx, fmt.Sprintf("resume delete volume %s/%s", v.Namespace, v.ID), v.Namespace, v.ID)
		case v.Expansion.Pending() || v.ModifyingParameters != nil:
			err = s.resume(ctx, v.Namespace, v.ID)
		default:
			continue
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (s *Server) resume(ctx context.Context, ns, id string) error {
	unlock, err := s.lockVolume(ctx, "resume volume changes", ns, id)
	if err != nil {
		return err
	}
	defer unlock()
	if _, err := s.driveExpansion(ctx, ns, id); err != nil {
		return err
	}
	_, err = s.driveModify(ctx, ns, id)
	return err
}
