// server_create.go holds the Server's create path: CreateVolume, its
// creation intent and the plugin call.

package rpcshim

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/state"
)

// CreateVolume creates a volume through a controller of its plugin
// (CreateVolume, named Volume.Name, or "<namespace>/<ID>" when Name is
// empty, so a retry finds the same plugin volume) and registers it with
// the plugin's external ID, capacity, context and topologies. In order:
//
//  1. The intent is written: the volume registered with Creating set and
//     no external ID (csi.Volume.Creating). If that write is refused (no
//     leader, lost quorum, a volume already registered under the ID:
//     csi.ErrVolumeExists), the plugin is not called.
//  2. The plugin's CreateVolume is called. A Final refusal removes the
//     intent again; any other error keeps it, and a retry of the same
//     create resumes at this step with the same name.
//  3. The record is completed with the plugin's answer. If that write
//     fails, the intent stays and a retry completes it: a crash or a
//     refused write never leaves a backing volume the store does not
//     know about.
func (s *Server) CreateVolume(ctx context.Context, req *VolumeCreateRequest) (*VolumeResponse, error) {
	if req == nil {
		return nil, fmt.Errorf("%w: create volume: nil request", csi.ErrInvalidRequest)
	}
	v := req.Volume.Copy()
	op := fmt.Sprintf("create volume %s/%s", v.Namespace, v.ID)
	if err := s.authorize(ctx, op, v.Namespace, csi.PermVolumeWrite); err != nil {
		return nil, err
	}
	unlock, err := s.lockVolume(ctx, op, v.Namespace, v.ID)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := csi.ValidatePluginID(v.PluginID); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	src, err := s.resolveSource(op, v, req)
	if err != nil {
		return nil, err
	}
	v.ExternalID, v.Capacity, v.Context, v.Topologies = "", 0, nil, nil
	v.Source = src
	if req.MutableParameters != nil {
		v.MutableParameters = maps.Clone(req.MutableParameters)
	}
	if err := s.writeCreateIntent(ctx, op, v, req.Nodes); err != nil {
		return nil, err
	}
	return s.completeCreate(ctx, op, v)
}

// createName is the CSI name of v's CreateVolume: its Name, or
// "<namespace>/<ID>", so every attempt asks the plugin for the same
// volume.
func createName(v *csi.Volume) string {
	if v.Name != "" {
		return v.Name
	}
	return v.Namespace + "/" + v.ID
}

// completeCreate is CreateVolume's steps 2 and 3 for the intent v: the
// plugin call with what the intent records, then the completed record.
func (s *Server) completeCreate(ctx context.Context, op string, v *csi.Volume) (*VolumeResponse, error) {
	cr, err := s.createInPlugin(ctx, op, v)
	if err != nil {
		return nil, err
	}
	v.Creating = false
	v.ExternalID = cr.Volume.ExternalID
	v.Capacity = cr.Volume.Capacity
	v.Context = cr.Volume.Context
	v.Topologies = cr.Volume.Topologies
	res, err := s.applier.Apply(ctx, state.RegisterVolume{Volume: *v})
	if err != nil {
		// The intent stays: a retry of the create gets the same
		// external volume back and completes the record, and nothing
		// is orphaned meanwhile.
		return nil, fmt.Errorf("%s: plugin %s created external volume %q but recording it failed; the intent is kept, so retry the create to complete it: %w",
			op, v.PluginID, v.ExternalID, err)
	}
	s.capacityChanged(v.PluginID)
	return s.volumeResponse(op, v.Namespace, v.ID, res.Index, cr.ControllerNodeID)
}

// resumeCreate completes the creation intent of ns/id that an earlier
// call (perhaps on a previous leader) left, with what the intent
// records. A volume no longer being created is left alone.
func (s *Server) resumeCreate(ctx context.Context, ns, id string) error {
	op := fmt.Sprintf("resume the create of volume %s/%s", ns, id)
	unlock, err := s.lockVolume(ctx, op, ns, id)
	if err != nil {
		return err
	}
	defer unlock()
	v, err := s.store.Volume(ns, id)
	switch {
	case errors.Is(err, csi.ErrVolumeNotFound):
		return nil
	case err != nil:
		return fmt.Errorf("%s: %w", op, err)
	case !v.Creating:
		return nil
	}
	_, err = s.completeCreate(ctx, op, v)
	return err
}

// writeCreateIntent is CreateVolume's step 1: it writes v as Creating,
// with the accessibility requirements built from the candidate nodes,
// or finds the intent an earlier call left (whose requirements it asks
// again). A volume registered under the ID is csi.ErrVolumeExists.
func (s *Server) writeCreateIntent(ctx context.Context, op string, v *csi.Volume, nodes []string) error {
	switch old, err := s.store.Volume(v.Namespace, v.ID); {
	case err == nil && !old.Creating:
		return fmt.Errorf("%w: %s: a volume with this ID is registered; delete or deregister it first, or update it with RegisterVolume",
			csi.ErrVolumeExists, op)
	case err == nil:
		// An intent left by an earlier call that did not complete: the
		// same CSI name makes the plugin return the volume it made then,
		// if it made one; the requirements built then are asked again.
		if v.RequestedTopologies == nil {
			v.RequestedTopologies = old.RequestedTopologies
		}
		return nil
	case !errors.Is(err, csi.ErrVolumeNotFound):
		return fmt.Errorf("%s: %w", op, err)
	}
	if v.RequestedTopologies == nil {
		p, err := s.store.Plugin(v.PluginID)
		if err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
		v.RequestedTopologies = accessibilityRequirements(p, nodes, createName(v))
	}
	v.Creating = true
	if _, err := s.applier.Apply(ctx, state.RegisterVolume{Volume: *v}); err != nil {
		return fmt.Errorf("%s: writing the creation intent failed, so the plugin was not called: %w", op, err)
	}
	return nil
}

// createInPlugin is CreateVolume's step 2: the plugin's CreateVolume
// under the CSI name, with the intent's parameters and content source.
// A Final refusal removes the intent; any other error keeps it for a
// retry.
func (s *Server) createInPlugin(ctx context.Context, op string, v *csi.Volume) (*CreateVolumeResponse, error) {
	name := createName(v)
	cr, err := s.router.CreateVolume(ctx, &CreateVolumeRequest{
		CSIControllerQuery: CSIControllerQuery{PluginID: v.PluginID},
		CreateVolumeRequest: plugin.CreateVolumeRequest{
			Name:              name,
			CapacityMin:       v.RequestedCapacityMin,
			CapacityMax:       v.RequestedCapacityMax,
			Capabilities:      v.Capabilities,
			MountOptions:      v.MountOptions,
			Parameters:        v.Parameters,
			MutableParameters: v.MutableParameters,
			Secrets:           v.Secrets,
			Source:            v.Source,
			Topology:          v.RequestedTopologies,
		},
	})
	if err == nil {
		return cr, nil
	}
	if csi.Classify(err) != csi.ClassFinal {
		return nil, fmt.Errorf("%s: the plugin's CreateVolume did not complete; the intent is kept, so retry the create (the plugin sees the same name %q): %w",
			op, name, err)
	}
	_, derr := s.applier.Apply(ctx, state.DeregisterVolume{Namespace: v.Namespace, VolumeID: v.ID})
	if derr != nil && !errors.Is(derr, csi.ErrVolumeNotFound) {
		return nil, fmt.Errorf("%s: %w; removing the creation intent failed too (%v), so deregister volume %s/%s",
			op, err, derr, v.Namespace, v.ID)
	}
	return nil, fmt.Errorf("%s: %w", op, err)
}
