package rpcshim

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/clock"
	"github.com/csikit/csikit/csi/metrics"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/state"
)

// ServerConfig configures a Server.
type ServerConfig struct {
	// Store is read for volumes, plugins and claims. Required.
	Store state.Reader
	// Applier takes every write (RegisterVolume, ClaimVolume,
	// AttachVolume, …). Required. The Server never writes to a
	// store directly.
	Applier state.Applier
	// Router makes the controller calls. Required.
	Router *Router
	// Clock stamps the ReleasedAt of claims released by Unpublish; nil
	// means the wall clock.
	Clock clock.Clock
	// Logger gets a line per claim whose ControllerPublishVolume failed.
	// Nil means no logging. Requests are never logged.
	Logger hclog.Logger
	// Capacity, if set, is told after each volume the Server creates or
	// deletes, so the plugin's capacity is read again (a
	// *capacity.Refresher).
	Capacity CapacityRefresher
	// MetricSink counts claims taken and refused by reason
	// (metrics.ClaimsTaken, metrics.ClaimsRefused); nil emits nothing.
	MetricSink metrics.Sink

	// Authorizer is asked before every endpoint runs; see Authorizer
	// for which permission each asks. Nil allows every call.
	Authorizer Authorizer
}

// Server is csikit's server endpoints: the volume, plugin and claim
// operations a host exposes through its own API. It reads from the
// store, writes through the applier, and reaches plugins only through
// the Router.
//
// Operations on one volume (register, deregister, create, delete, claim,
// unpublish) run one at a time in this Server, in arrival order, so a
// claim cannot slip in between the in-use check and the plugin call of a
// delete, and the "new attachment" decision of a claim sees every claim
// written before it. Operations on different volumes run in parallel. A
// host with several servers sends a volume's operations to the leader.
//
// Reads return copies the caller owns, with volume secrets removed: they
// are meant for status outputs. All methods are safe for concurrent use.
type Server struct {
	store   state.Reader
	applier state.Applier
	router  *Router
	clock   clock.Clock
	logger  hclog.Logger
	// capacity, if set, hears of each create and delete.
	capacity CapacityRefresher
	metrics  metrics.Sink
	auth     Authorizer

	vols keyedLocks[volKey]
	// snaps serializes the operations of one snapshot; taken before
	// vols when both are (server_snapshot.go).
	snaps keyedLocks[volKey]
}

type volKey struct{ namespace, id string }

// NewServer validates cfg and returns a Server. It starts no goroutine.
func NewServer(cfg ServerConfig) (*Server, error) {
	missing := func(field, what string) error {
		return fmt.Errorf("%w: rpcshim: ServerConfig.%s is nil; pass %s", csi.ErrInvalidRequest, field, what)
	}
	switch {
	case cfg.Store == nil:
		return nil, missing("Store", "the server's state.Reader (a *state.MemStore)")
	case cfg.Applier == nil:
		return nil, missing("Applier", "the host's state.Applier (state.NewLocalApplier for a single process)")
	case cfg.Router == nil:
		return nil, missing("Router", "the Router built with NewRouter")
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	return &Server{
		store:    cfg.Store,
		applier:  cfg.Applier,
		router:   cfg.Router,
		clock:    clock.Or(cfg.Clock),
		logger:   cfg.Logger,
		capacity: cfg.Capacity,
		metrics:  metrics.Or(cfg.MetricSink),
		auth:     cfg.Authorizer,
	}, nil
}

// VolumeRegisterRequest registers an existing volume (or updates a
// registered one).
type VolumeRegisterRequest struct {
	Volume csi.Volume
}

// VolumeCreateRequest creates a volume through the plugin's controller
// and registers it. Volume gives the csikit side (ID, Namespace, Name,
// PluginID, Capabilities, MountOptions, Secrets, Parameters,
// RequestedTopologies, RequestedCapacityMin/Max); the plugin fills the
// external ID, capacity, context and topologies.
//
// Nodes is the host's placement intent: the nodes (host node IDs) the
// volume should be usable from; empty means every node running the
// plugin's node instance. When Volume.RequestedTopologies is nil and
// the plugin advertises VOLUME_ACCESSIBILITY_CONSTRAINTS
// (csi.PluginInfo.RequiresTopologies on any of its instances), the
// Server builds the CSI accessibility_requirements from them, like a
// provisioner that knows the cluster:
//
//   - requisite: the distinct accessible topologies (whole node
//     topologies, every segment) of the healthy node instances on the
//     candidate nodes, sorted by their String form;
//   - preferred: the same topologies rotated by a hash of the volume's
//     CSI name, so it is a permutation of requisite (the spec wants
//     preferred ⊆ requisite), a retry asks for the same first choice,
//     and different volumes spread over the topologies.
//
// No candidate with a topology (or a plugin without the capability)
// means no requirements: the plugin places the volume itself. The
// built requirements are stored in the volume's RequestedTopologies
// with the creation intent, so a resumed create asks the same.
type VolumeCreateRequest struct {
	Volume            csi.Volume
	Nodes             []string              `json:",omitempty"`
	MutableParameters map[string]string     `json:",omitempty"`
	Source            *plugin.ContentSource `json:",omitempty"`
	// From, if set, fills the new volume from a csikit snapshot
	// (restore) or volume (clone) of the same namespace and plugin; it
	// replaces Source, which names the plugin's own IDs. See
	// VolumeSource.
	From *VolumeSource `json:",omitempty"`
}

// VolumeResponse is a volume after a write, with its secrets removed,
// and the log index of the write.
type VolumeResponse struct {
	Volume *csi.Volume
	Index  uint64
	// ControllerNodeID is the host node whose controller instance served
	// the write's controller call: CreateVolume for CreateVolume,
	// ValidateVolumeCapabilities for RegisterVolume. It is empty when no
	// controller call was made (a plugin without a controller).
	ControllerNodeID string `json:",omitempty"`
}

// VolumeDeregisterRequest removes a volume from csikit without any
// plugin call. Force drops its claims too; see state.DeregisterVolume.
type VolumeDeregisterRequest struct {
	Namespace string
	VolumeID  string
	Force     bool `json:",omitempty"`
}

// VolumeDeleteRequest deletes a volume in the plugin and deregisters it.
type VolumeDeleteRequest struct {
	Namespace string
	VolumeID  string
}

// WriteResponse is the log index of a write (0 when nothing changed).
type WriteResponse struct {
	Index uint64
	// ControllerNodeID is the host node whose controller instance served
	// the write's controller call (DeleteVolume's DeleteVolume). It is
	// empty when no controller call was made (DeregisterVolume), and when
	// the plugin answered NotFound, which DeleteVolume counts as deleted:
	// the Router returns that answer as an error, without the node.
	ControllerNodeID string `json:",omitempty"`
}

// VolumeClaimRequest claims a volume for an allocation.
type VolumeClaimRequest struct {
	Namespace string
	VolumeID  string
	// Claim names the allocation, its node, the claim mode and the
	// access and attachment modes; the store fills ExternalNodeID.
	Claim csi.Claim
}

// VolumeClaimResponse is what the claim's node needs to mount the volume
// (mounter.NewMountRequest(Volume, Claim)).
type VolumeClaimResponse struct {
	// Claim is the stored claim.
	Claim *csi.Claim
	// Attachment is the volume's attachment to the claim's node, as
	// this claim left it: Attached, with the publish context (possibly
	// empty) that node calls pass on. It is also in Volume.Attachments.
	Attachment *csi.Attachment
	// Volume is the claimed volume, secrets included: the node passes
	// them to NodeStageVolume and NodePublishVolume. Send it to the
	// claim's node only, never to a status output.
	Volume *csi.Volume
	// Index is the log index of the last write the claim made.
	Index uint64
	// ControllerNodeID is the host node whose controller instance
	// attached the volume for this claim (ControllerPublishVolume). It is
	// empty when this call published nothing: the plugin needs no
	// ControllerPublishVolume, or the claim joined an attachment that
	// was already Attached (its own, repeated, or another claim's on
	// the node).
	ControllerNodeID string `json:",omitempty"`
}

// VolumeUnpublishRequest is a node's report that it has unmounted a
// volume for an allocation that stopped.
type VolumeUnpublishRequest struct {
	Namespace    string
	VolumeID     string
	AllocationID string
	// NodeID is the reporting node; it must be the claim's node.
	NodeID string
	// NodeDetached says the node step is done (NodeUnpublishVolume, and
	// NodeUnstageVolume for the last user, as mounter.UnmountVolume
	// does), so the release worker goes straight to the controller step.
	NodeDetached bool `json:",omitempty"`
}

// VolumeUnpublishResponse is the claim after the report, nil when it was
// already freed.
type VolumeUnpublishResponse struct {
	Claim *csi.Claim
	Index uint64
}

// lockVolume serializes the operations of one volume in this Server.
func (s *Server) lockVolume(ctx context.Context, op, namespace, id string) (func(), error) {
	if err := csi.ValidateNamespace(namespace); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if err := csi.ValidateVolumeID(id); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	unlock, err := s.vols.lock(ctx, volKey{namespace, id})
	if err != nil {
		return nil, fmt.Errorf("%s: gave up waiting for another operation on volume %s/%s: %w", op, namespace, id, err)
	}
	return unlock, nil
}

// RegisterVolume registers an existing volume. When its plugin has a
// controller, the capabilities are first confirmed with
// ValidateVolumeCapabilities; a plugin that does not confirm them is
// csi.ErrAccessModeNotAllowed and nothing is written. The store's rules
// then apply (see state.RegisterVolume).
func (s *Server) RegisterVolume(ctx context.Context, req *VolumeRegisterRequest) (*VolumeResponse, error) {
	if req == nil {
		return nil, fmt.Errorf("%w: register volume: nil request", csi.ErrInvalidRequest)
	}
	v := req.Volume.Copy()
	op := fmt.Sprintf("register volume %s/%s", v.Namespace, v.ID)
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
	hasController, err := s.hasController(v.PluginID)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	var ctrlNode string
	if hasController {
		if ctrlNode, err = s.validateCapabilities(ctx, op, v); err != nil {
			return nil, err
		}
	}
	res, err := s.applier.Apply(ctx, state.RegisterVolume{Volume: *v})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	return s.volumeResponse(op, v.Namespace, v.ID, res.Index, ctrlNode)
}

// hasController reports whether the plugin has a controller: a healthy
// controller instance (the router's view of the index), or failing that
// the plugin's own record, read whole only then.
func (s *Server) hasController(pluginID string) (bool, error) {
	ctrls, err := s.router.healthyControllers(pluginID)
	if err != nil {
		return false, err
	}
	if len(ctrls) > 0 {
		return true, nil
	}
	p, err := s.store.Plugin(pluginID)
	if err != nil {
		return false, err
	}
	return p.ControllerRequired, nil
}

// validateCapabilities confirms v's capabilities with a controller of
// its plugin and returns the node whose controller answered.
func (s *Server) validateCapabilities(ctx context.Context, op string, v *csi.Volume) (string, error) {
	r, err := s.router.ValidateVolumeCapabilities(ctx, &ValidateCapabilitiesRequest{
		CSIControllerQuery: CSIControllerQuery{PluginID: v.PluginID},
		ValidateCapabilitiesRequest: plugin.ValidateCapabilitiesRequest{
			ExternalID:    v.ExternalID,
			Capabilities:  v.Capabilities,
			MountOptions:  v.MountOptions,
			VolumeContext: v.Context,
			Parameters:    v.Parameters,
			Secrets:       v.Secrets,
		},
	})
	if err != nil {
		return "", fmt.Errorf("%s: validate its capabilities with the controller: %w", op, err)
	}
	if !r.Confirmed {
		why := r.Message
		if why == "" {
			why = "no reason given"
		}
		return "", fmt.Errorf("%w: %s: plugin %s does not confirm the capabilities %s for external volume %q (%s); register the volume with capabilities the plugin supports",
			csi.ErrAccessModeNotAllowed, op, v.PluginID, capsList(v.Capabilities), v.ExternalID, why)
	}
	return r.ControllerNodeID, nil
}

// DeregisterVolume removes a volume without any plugin call. A volume
// with claims is refused with csi.ErrVolumeInUse unless Force is set.
func (s *Server) DeregisterVolume(ctx context.Context, req *VolumeDeregisterRequest) (*WriteResponse, error) {
	if req == nil {
		return nil, fmt.Errorf("%w: deregister volume: nil request", csi.ErrInvalidRequest)
	}
	op := fmt.Sprintf("deregister volume %s/%s", req.Namespace, req.VolumeID)
	if err := s.authorize(ctx, op, req.Namespace, csi.PermVolumeWrite); err != nil {
		return nil, err
	}
	unlock, err := s.lockVolume(ctx, op, req.Namespace, req.VolumeID)
	if err != nil {
		return nil, err
	}
	defer unlock()
	res, err := s.applier.Apply(ctx, state.DeregisterVolume{Namespace: req.Namespace, VolumeID: req.VolumeID, Force: req.Force})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	return &WriteResponse{Index: res.Index}, nil
}

// capacityChanged tells the capacity refresher, if any, that a create
// or delete of pluginID changed what it can still provision.
func (s *Server) capacityChanged(pluginID string) {
	if s.capacity != nil {
		s.capacity.Refresh(pluginID)
	}
}

// DeleteVolume deletes a volume in its plugin (DeleteVolume through a
// controller; NotFound counts as deleted) and then deregisters it. A
// volume with any claim, live or past, is csi.ErrVolumeInUse (Retryable
// once the claims are released) and the plugin is not called.
//
// The intent is written first (csi.Volume.Deleting), so that from the
// plugin call on no claim is taken on the volume, on this server or
// another; a delete interrupted after the plugin call is completed by
// repeating it or by a leader's ResumeVolumeChanges. When the plugin
// answers that it did not delete the volume (a Final error, or a
// Retryable one to the call that wrote the intent), the intent is
// withdrawn and the volume can be claimed again. An intent an earlier
// call left stays on a Retryable error: that call may have deleted it.
func (s *Server) DeleteVolume(ctx context.Context, req *VolumeDeleteRequest) (*WriteResponse, error) {
	if req == nil {
		return nil, fmt.Errorf("%w: delete volume: nil request", csi.ErrInvalidRequest)
	}
	op := fmt.Sprintf("delete volume %s/%s", req.Namespace, req.VolumeID)
	if err := s.authorize(ctx, op, req.Namespace, csi.PermVolumeWrite); err != nil {
		return nil, err
	}
	return s.deleteVolume(ctx, op, req.Namespace, req.VolumeID)
}

func (s *Server) deleteVolume(ctx context.Context, op, ns, id string) (*WriteResponse, error) {
	unlock, err := s.lockVolume(ctx, op, ns, id)
	if err != nil {
		return nil, err
	}
	defer unlock()
	v, err := s.store.Volume(ns, id)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if v.Creating {
		return nil, fmt.Errorf("%w: %s: the volume is being created and its external ID is not known yet; retry the create to complete it before deleting it, or deregister it with Force if the plugin never made it",
			csi.ErrVolumeInUse, op)
	}
	if v.InUse() {
		return nil, fmt.Errorf("%w: %s: allocations %s still claim it; delete it once their claims are released",
			csi.ErrVolumeInUse, op, claimHolders(v))
	}
	earlier := v.Deleting // left by a call that may have reached the plugin
	if err := s.markDeleting(ctx, v, true); err != nil {
		return nil, fmt.Errorf("%s: write the delete intent: %w", op, err)
	}
	dr, err := s.router.DeleteVolume(ctx, &DeleteVolumeRequest{
		CSIControllerQuery:  CSIControllerQuery{PluginID: v.PluginID},
		DeleteVolumeRequest: plugin.DeleteVolumeRequest{ExternalID: v.ExternalID, Secrets: v.Secrets},
	})
	if !csi.TeardownDone(err) {
		if class := csi.Classify(err); class == csi.ClassFinal || class == csi.ClassRetryable && !earlier {
			// The plugin did not delete it: the volume may be used again.
			// Should this write fail, the intent stays and a retry of
			// the delete decides.
			_ = s.markDeleting(context.WithoutCancel(ctx), v, false)
		}
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	var ctrlNode string
	if dr != nil { // nil when the plugin no longer had the volume
		ctrlNode = dr.ControllerNodeID
	}
	s.capacityChanged(v.PluginID)
	res, err := s.applier.Apply(ctx, state.DeregisterVolume{Namespace: ns, VolumeID: id})
	if err != nil {
		return nil, fmt.Errorf("%s: deleted in the plugin but not deregistered (the delete intent stays; repeat the delete to complete it): %w", op, err)
	}
	return &WriteResponse{Index: res.Index, ControllerNodeID: ctrlNode}, nil
}

// markDeleting writes or withdraws v's delete intent, unless v already
// has it so. v is the store's copy, which it changes.
func (s *Server) markDeleting(ctx context.Context, v *csi.Volume, deleting bool) error {
	if v.Deleting == deleting {
		return nil
	}
	v.Deleting = deleting
	_, err := s.applier.Apply(ctx, state.RegisterVolume{Volume: *v})
	return err
}

func (s *Server) volumeResponse(op, namespace, id string, index uint64, ctrlNode string) (*VolumeResponse, error) {
	v, err := s.store.Volume(namespace, id)
	if err != nil {
		return nil, fmt.Errorf("%s: written at index %d, but reading it back failed: %w", op, index, err)
	}
	return &VolumeResponse{Volume: withoutSecrets(v), Index: index, ControllerNodeID: ctrlNode}, nil
}

func capsList(cs []csi.Capability) string {
	s := make([]string, len(cs))
	for i, c := range cs {
		s[i] = c.String()
	}
	return strings.Join(s, ", ")
}

func claimHolders(v *csi.Volume) string {
	var ids []string
	for _, m := range []map[string]*csi.Claim{v.WriteClaims, v.ReadClaims, v.PastClaims} {
		for id := range m {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return strings.Join(ids, ", ")
}
