package state

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"time"

	"github.com/csikit/csikit/csi"
)

// Command is one write to a Store. Every write is a command so that a
// replicated host can append it to its log and apply the same command at
// the same index on every replica.
//
// Commands are plain values: pass them by value, encode them with
// EncodeCommand and decode them with DecodeCommand. They are
// deterministic: everything a command needs, including timestamps,
// travels inside it, and applying it reads nothing but the store.
// Timestamps are stored in UTC and empty maps and slices as nil, so the
// state is the same whether a command was applied as built or after an
// encode and decode.
// The set of commands is closed (the interface has an unexported
// method); a Store implemented outside this package switches on the
// concrete types.
type Command interface {
	// Kind is the command's tag in its encoded envelope.
	Kind() Kind
	apply(w *writer) error
}

// Kind tags a command in its encoded form.
type Kind string

// The kinds of commands.
const (
	KindRegisterVolume    Kind = "register-volume"
	KindDeregisterVolume  Kind = "deregister-volume"
	KindClaimVolume       Kind = "claim-volume"
	KindSetPublishContext Kind = "set-publish-context"
	KindRemoveClaim       Kind = "remove-claim"
	KindReleaseClaims     Kind = "release-claims"
	KindCheckpointClaim   Kind = "checkpoint-claim"
	KindRecordClaimError  Kind = "record-claim-error"
	KindFreeClaim         Kind = "free-claim"
	KindUpsertNodePlugins Kind = "upsert-node-plugins"
	KindDeleteNode        Kind = "delete-node"
	KindUpsertAllocations Kind = "upsert-allocations"
	KindDeleteAllocations Kind = "delete-allocations"
	KindBatch             Kind = "batch"
)

// RegisterVolume creates a volume or updates an existing one.
//
// A new volume's plugin must exist (csi.ErrPluginNotFound otherwise); its
// Provider, when empty, is taken from the plugin. An update may change
// the name, capabilities, mount options, secrets, parameters, context,
// topologies and capacities, but not ExternalID, PluginID or a non-empty
// Provider (csi.ErrVolumeExists), and may not drop a capability a live
// claim uses (csi.ErrVolumeInUse). The volume's claims, denormalized
// fields and indexes in the command are ignored: claims change only
// through the claim commands.
type RegisterVolume struct {
	Volume csi.Volume
}

// DeregisterVolume removes a volume. A volume with any claim, live or
// past, is refused with csi.ErrVolumeInUse unless Force is set; forcing
// drops the claims without any plugin call, so use it only when the
// attachments are known to be gone.
type DeregisterVolume struct {
	Namespace string
	VolumeID  string
	Force     bool
}

// ClaimVolume adds an allocation's claim on a volume, checking every rule
// in the same transaction: the claim rules of csi.CheckClaim, the
// allocation known (csi.ErrAllocationNotFound), not terminal
// (csi.ErrAllocationTerminal), on Claim.NodeID, and in the volume's
// namespace (csi.ErrNamespaceMismatch); the plugin known
// (csi.ErrPluginNotFound) and schedulable with a healthy node instance on
// the claim's node (csi.ErrPluginUnhealthy); the node under that
// instance's MaxVolumes (csi.ErrMaxVolumes).
//
// The claim is stored in state Taken. ExternalNodeID, when empty, is
// taken from the node instance's NodeInfo.ID. Repeating a live claim
// with the same node and modes succeeds without a change
// (Result.Changed false); Result.Claim is the stored claim either way.
type ClaimVolume struct {
	Namespace string
	VolumeID  string
	Claim     csi.Claim
}

// SetPublishContext stores what ControllerPublishVolume returned on an
// allocation's claim (live or past); an empty map clears it.
// csi.ErrClaimNotFound if the allocation holds no claim on the volume.
type SetPublishContext struct {
	Namespace      string
	VolumeID       string
	AllocationID   string
	PublishContext map[string]string
}

// RemoveClaim deletes an allocation's claim (live or past) outright, with
// no release steps: the claim flow uses it when ControllerPublishVolume
// failed with a final error, so nothing was attached.
// csi.ErrClaimNotFound if there is no such claim.
type RemoveClaim struct {
	Namespace    string
	VolumeID     string
	AllocationID string
}

// ReleaseClaims turns every live claim of an allocation into a past claim
// in state Unpublishing, with ReleasedAt (required). Past claims are left
// as they are; an allocation without claims is not an error.
// UpsertAllocations does this by itself for allocations that become
// terminal.
type ReleaseClaims struct {
	AllocationID string
	ReleasedAt   time.Time
}

// CheckpointClaim moves a past claim forward to State (NodeDetached,
// ControllerDetached or ReadyToFree) and clears its LastError. Moving to
// the state it is in is a no-op; moving backwards, or checkpointing a
// live claim, is refused with csi.ErrInvalidRequest.
type CheckpointClaim struct {
	Namespace    string
	VolumeID     string
	AllocationID string
	State        csi.ClaimState
}

// RecordClaimError sets a claim's LastError (for operators; the caller
// makes sure it holds no secret). Messages longer than MaxClaimError
// bytes are cut.
type RecordClaimError struct {
	Namespace    string
	VolumeID     string
	AllocationID string
	Error        string
}

// MaxClaimError is the longest LastError a claim keeps, in bytes.
const MaxClaimError = 1024

// FreeClaim removes a past claim once its release is done. A live claim
// is refused with csi.ErrInvalidRequest; a claim already gone with
// csi.ErrClaimNotFound, which a release worker resuming after a crash
// treats as done.
type FreeClaim struct {
	Namespace    string
	VolumeID     string
	AllocationID string
}

// UpsertNodePlugins records the full set of plugin instances a node runs
// (its fingerprints). Instances of the node absent from Plugins are
// removed. A plugin is created by a healthy instance and updated by any;
// a plugin left without instances is deleted. Instances whose
// AllocationID names a terminal allocation are ignored. A set naming the
// same plugin twice for one role is refused with csi.ErrInvalidRequest.
type UpsertNodePlugins struct {
	NodeID  string
	Plugins []csi.PluginInfo
}

// DeleteNode forgets a node and its plugin instances. Claims on the node
// stay: releasing them is the claim release worker's job. Deleting an
// unknown node is a no-op.
type DeleteNode struct {
	NodeID string
}

// UpsertAllocations creates or updates allocations. An allocation that is
// terminal releases its claims (as ReleaseClaims, with ReleasedAt, which
// is then required) and drops the plugin instances it ran, in the same
// transaction. A terminal allocation cannot become running again, and an
// allocation cannot move to another node or namespace
// (csi.ErrAllocationTerminal, csi.ErrInvalidRequest).
type UpsertAllocations struct {
	Allocations []csi.Allocation
	ReleasedAt  time.Time `json:",omitzero"`
}

// DeleteAllocations forgets terminal allocations (garbage collection).
// A running allocation is refused with csi.ErrInvalidRequest; unknown IDs
// are skipped. Past claims of the allocations stay until freed.
type DeleteAllocations struct {
	AllocationIDs []string
}

// Batch applies several commands in order, in one transaction at one
// index: all of them or none. Each command sees the effects of the ones
// before it, exactly as if they were applied one by one. A host uses it
// to write a group of changes atomically, or to load many objects (a
// bulk registration) without paying for one transaction each. Batches
// do not nest. Result.Claim is not set for a batch: apply a ClaimVolume
// on its own to learn the stored claim. A refused command fails the
// whole batch with its error.
type Batch struct {
	Commands []Command
}

// Kind implements Command.
func (Batch) Kind() Kind { return KindBatch }

type batchJSON struct {
	Commands []json.RawMessage
}

// MarshalJSON encodes each command in its own envelope.
func (b Batch) MarshalJSON() ([]byte, error) {
	out := batchJSON{Commands: make([]json.RawMessage, len(b.Commands))}
	for i, c := range b.Commands {
		e, err := EncodeCommand(c)
		if err != nil {
			return nil, fmt.Errorf("batch command %d: %w", i, err)
		}
		out.Commands[i] = e
	}
	return json.Marshal(out)
}

// UnmarshalJSON decodes what MarshalJSON wrote.
func (b *Batch) UnmarshalJSON(data []byte) error {
	var in batchJSON
	if err := json.Unmarshal(data, &in); err != nil {
		return err
	}
	b.Commands = make([]Command, len(in.Commands))
	for i, raw := range in.Commands {
		c, err := DecodeCommand(raw)
		if err != nil {
			return fmt.Errorf("batch command %d: %w", i, err)
		}
		b.Commands[i] = c
	}
	return nil
}

// Kind implements Command.
func (RegisterVolume) Kind() Kind { return KindRegisterVolume }

// Kind implements Command.
func (DeregisterVolume) Kind() Kind { return KindDeregisterVolume }

// Kind implements Command.
func (ClaimVolume) Kind() Kind { return KindClaimVolume }

// Kind implements Command.
func (SetPublishContext) Kind() Kind { return KindSetPublishContext }

// Kind implements Command.
func (RemoveClaim) Kind() Kind { return KindRemoveClaim }

// Kind implements Command.
func (ReleaseClaims) Kind() Kind { return KindReleaseClaims }

// Kind implements Command.
func (CheckpointClaim) Kind() Kind { return KindCheckpointClaim }

// Kind implements Command.
func (RecordClaimError) Kind() Kind { return KindRecordClaimError }

// Kind implements Command.
func (FreeClaim) Kind() Kind { return KindFreeClaim }

// Kind implements Command.
func (UpsertNodePlugins) Kind() Kind { return KindUpsertNodePlugins }

// Kind implements Command.
func (DeleteNode) Kind() Kind { return KindDeleteNode }

// Kind implements Command.
func (UpsertAllocations) Kind() Kind { return KindUpsertAllocations }

// Kind implements Command.
func (DeleteAllocations) Kind() Kind { return KindDeleteAllocations }

// isNil reports whether cmd is nil or a nil pointer to a command, whose
// methods would panic.
func isNil(cmd Command) bool {
	if cmd == nil {
		return true
	}
	v := reflect.ValueOf(cmd)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

type envelope struct {
	Kind Kind            `json:"kind"`
	Body json.RawMessage `json:"body"`
}

// EncodeCommand encodes cmd as the JSON envelope
// {"kind": "...", "body": {...}}. The body holds volume secrets in clear.
func EncodeCommand(cmd Command) ([]byte, error) {
	if isNil(cmd) {
		return nil, fmt.Errorf("%w: encode a nil command", csi.ErrInvalidRequest)
	}
	body, err := json.Marshal(cmd)
	if err != nil {
		return nil, fmt.Errorf("encode %s command: %w", cmd.Kind(), err)
	}
	return json.Marshal(envelope{Kind: cmd.Kind(), Body: body})
}

// DecodeCommand decodes an envelope written by EncodeCommand. The result
// is a command value (RegisterVolume, not *RegisterVolume). An unknown
// kind or a malformed body is an error matching csi.ErrInvalidRequest.
func DecodeCommand(b []byte) (Command, error) {
	var env envelope
	if err := json.Unmarshal(b, &env); err != nil {
		return nil, fmt.Errorf("%w: decode command envelope: %v", csi.ErrInvalidRequest, err)
	}
	body := bytes.TrimSpace(env.Body)
	if len(body) == 0 || bytes.Equal(body, []byte("null")) {
		return nil, fmt.Errorf("%w: command %q has no body", csi.ErrInvalidRequest, env.Kind)
	}
	switch env.Kind {
	case KindRegisterVolume:
		return decodeBody[RegisterVolume](env.Kind, body)
	case KindDeregisterVolume:
		return decodeBody[DeregisterVolume](env.Kind, body)
	case KindClaimVolume:
		return decodeBody[ClaimVolume](env.Kind, body)
	case KindSetPublishContext:
		return decodeBody[SetPublishContext](env.Kind, body)
	case KindRemoveClaim:
		return decodeBody[RemoveClaim](env.Kind, body)
	case KindReleaseClaims:
		return decodeBody[ReleaseClaims](env.Kind, body)
	case KindCheckpointClaim:
		return decodeBody[CheckpointClaim](env.Kind, body)
	case KindRecordClaimError:
		return decodeBody[RecordClaimError](env.Kind, body)
	case KindFreeClaim:
		return decodeBody[FreeClaim](env.Kind, body)
	case KindUpsertNodePlugins:
		return decodeBody[UpsertNodePlugins](env.Kind, body)
	case KindDeleteNode:
		return decodeBody[DeleteNode](env.Kind, body)
	case KindUpsertAllocations:
		return decodeBody[UpsertAllocations](env.Kind, body)
	case KindDeleteAllocations:
		return decodeBody[DeleteAllocations](env.Kind, body)
	case KindBatch:
		return decodeBody[Batch](env.Kind, body)
	}
	return nil, fmt.Errorf("%w: unknown command kind %q; is this replica older than the one that wrote the log?", csi.ErrInvalidRequest, env.Kind)
}

func decodeBody[T Command](kind Kind, body []byte) (Command, error) {
	var c T
	if err := json.Unmarshal(body, &c); err != nil {
		return nil, fmt.Errorf("%w: decode %s command: %v", csi.ErrInvalidRequest, kind, err)
	}
	return c, nil
}
