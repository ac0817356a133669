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
	KindAttachVolume      Kind = "attach-volume"
	KindDetachVolume      Kind = "detach-volume"
	KindRemoveAttachment  Kind = "remove-attachment"
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
// Provider, when empty, is taken from the plugin. Its backing volume
// (PluginID, ExternalID) must not be registered as another volume, in
// any namespace (*ExternalIDTakenError, matching csi.ErrVolumeExists):
// each backing volume has one record, so that deleting a record never
// deletes a volume another record stands for. Capacity,
// RequestedCapacityMin and RequestedCapacityMax are not negative, and
// the minimum is not above a set maximum (csi.ErrInvalidRequest). An
// update may change
// the name, capabilities, mount options, secrets, parameters, context,
// topologies and capacities, but not ExternalID, PluginID or a non-empty
// Provider (csi.ErrVolumeExists), and may not drop a capability a live
// claim uses (csi.ErrVolumeInUse). The volume's claims, denormalized
// fields and indexes in the command are ignored: claims change only
// through the claim commands.
type RegisterVolume struct {
	Volume csi.Volume
}

// ExternalIDTakenError refuses a RegisterVolume whose backing volume,
// ExternalID of plugin PluginID, is already registered as the volume
// Holder. It matches csi.ErrVolumeExists (errors.Is); errors.As finds it.
//
// Error names the holder only when it is in Volume's namespace, so the
// error can go back to the caller as it is. Whether the caller may see
// another namespace is decided above the store (by the host, or an
// Authorizer): a layer that knows the caller may (an operator) reads
// Holder to say which volume to deregister. The refusal itself tells any
// caller that the backing volume is registered somewhere; a host that
// must hide that too replaces the error.
type ExternalIDTakenError struct {
	Volume     VolumeKey // the refused registration
	PluginID   string
	ExternalID string
	Holder     VolumeKey // the volume that holds the backing volume
}

func (e *ExternalIDTakenError) Error() string {
	holder, next := "a volume of another namespace", "use that volume, or have it deregistered first"
	if e.Holder.Namespace == e.Volume.Namespace {
		holder, next = "volume "+volName(e.Holder.Namespace, e.Holder.ID), "use that volume, or deregister it first"
	}
	return fmt.Sprintf("%s: cannot register volume %s: external volume %q of plugin %s is registered as %s; %s",
		csi.ErrVolumeExists, volName(e.Volume.Namespace, e.Volume.ID), e.ExternalID, e.PluginID, holder, next)
}

// Unwrap returns csi.ErrVolumeExists.
func (e *ExternalIDTakenError) Unwrap() error { return csi.ErrVolumeExists }

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

// SetPublishContext marks the attachment of the volume to the node of an
// allocation's claim (live or past) attached, with PublishContext.
// csi.ErrClaimNotFound if the allocation holds no claim on the volume.
//
// Deprecated: use AttachVolume, which names the node. SetPublishContext
// is kept so that logs written before attachments were records of their
// own replay; it applies as AttachVolume on the claim's node.
type SetPublishContext struct {
	Namespace      string
	VolumeID       string
	AllocationID   string
	PublishContext map[string]string
}

// AttachVolume records that ControllerPublishVolume succeeded for the
// volume on NodeID (or that none is needed): the attachment there goes
// from Attaching to Attached with PublishContext, which may be empty.
// Repeating it on an Attached attachment replaces the context (a plugin
// answers a repeated publish with the same one). An attachment that is
// Detaching or gone is refused with csi.ErrVolumeInUse or
// csi.ErrAttachmentNotFound: the claims that needed it were released
// meanwhile, and the caller's claim must be made again.
type AttachVolume struct {
	Namespace      string
	VolumeID       string
	NodeID         string
	PublishContext map[string]string
}

// DetachVolume starts the detach of the volume from NodeID: the
// attachment there goes to Detaching, after which a new claim on the
// node is refused (csi.ErrVolumeInUse, Retryable) until RemoveAttachment.
// It is refused with csi.ErrVolumeInUse, naming the holders, while a
// live claim or a past claim whose node step is not done is on the
// node: the release worker then frees its own claim and leaves the
// attachment to them. Write it, and wait for it, before calling
// ControllerUnpublishVolume. An attachment already Detaching is a no-op;
// none at all is csi.ErrAttachmentNotFound (already detached).
type DetachVolume struct {
	Namespace string
	VolumeID  string
	NodeID    string
}

// RemoveAttachment deletes the attachment of the volume to NodeID once it
// is detached: after ControllerUnpublishVolume succeeded, or at once when
// the plugin needs none. The same claims as for DetachVolume must be
// gone (csi.ErrVolumeInUse otherwise). Removing an attachment that is
// not there is a no-op, so a release resumed after a crash may repeat it.
type RemoveAttachment struct {
	Namespace string
	VolumeID  string
	NodeID    string
}

// RemoveClaim deletes an allocation's claim (live or past) outright, with
// no release steps: the claim flow uses it when ControllerPublishVolume
// failed with a final error, so nothing was attached. When no other
// claim is left on the node, an Attaching attachment there goes with it;
// an Attached one refuses the removal (csi.ErrVolumeInUse): release the
// claim instead, so that the volume is detached.
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
// treats as done. The last claim on a node to which the volume is still
// attached is refused with csi.ErrVolumeInUse: remove the attachment
// first (RemoveAttachment, in the same Batch), so that no attachment is
// ever left without a claim that detaches it.
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
	// SecretHash is the node's HashNodeSecret. A node registered with
	// a secret (RegisterNode) refuses a report without the same hash
	// (*NodeIdentityError); a node that never registered ignores it.
	SecretHash string `json:",omitempty"`
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

// MarshalJSON encodes each command in its own envelope. A batch in the
// batch is refused with csi.ErrInvalidRequest, as DecodeCommand would
// refuse it.
func (b Batch) MarshalJSON() ([]byte, error) {
	out := batchJSON{Commands: make([]json.RawMessage, len(b.Commands))}
	for i, c := range b.Commands {
		if isBatch(c) {
			return nil, fmt.Errorf("batch command %d: %w", i, errNestedBatch)
		}
		e, err := EncodeCommand(c)
		if err != nil {
			return nil, fmt.Errorf("batch command %d: %w", i, err)
		}
		out.Commands[i] = e
	}
	return json.Marshal(out)
}

// UnmarshalJSON decodes what MarshalJSON wrote. A batch in the batch is
// refused with csi.ErrInvalidRequest by its envelope's kind, before its
// body is decoded: decoding batches nested level by level would cost the
// square of the input's size.
func (b *Batch) UnmarshalJSON(data []byte) error {
	var in batchJSON
	if err := json.Unmarshal(data, &in); err != nil {
		return err
	}
	b.Commands = make([]Command, len(in.Commands))
	for i, raw := range in.Commands {
		env, err := decodeEnvelope(raw)
		if err == nil && env.Kind == KindBatch {
			err = errNestedBatch
		}
		if err != nil {
			return fmt.Errorf("batch command %d: %w", i, err)
		}
		c, err := decodeEnvelopeBody(env)
		if err != nil {
			return fmt.Errorf("batch command %d: %w", i, err)
		}
		b.Commands[i] = c
	}
	return nil
}

func isBatch(c Command) bool {
	switch c.(type) {
	case Batch, *Batch:
		return true
	}
	return false
}

var errNestedBatch = fmt.Errorf("%w: the command is a batch; batches do not nest: put its commands in the outer batch",
	csi.ErrInvalidRequest)

// Kind implements Command.
func (RegisterVolume) Kind() Kind { return KindRegisterVolume }

// Kind implements Command.
func (DeregisterVolume) Kind() Kind { return KindDeregisterVolume }

// Kind implements Command.
func (ClaimVolume) Kind() Kind { return KindClaimVolume }

// Kind implements Command.
func (SetPublishContext) Kind() Kind { return KindSetPublishContext }

// Kind implements Command.
func (AttachVolume) Kind() Kind { return KindAttachVolume }

// Kind implements Command.
func (DetachVolume) Kind() Kind { return KindDetachVolume }

// Kind implements Command.
func (RemoveAttachment) Kind() Kind { return KindRemoveAttachment }

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

// MaxCommandSize is the largest encoded command, in bytes, that
// EncodeCommand writes and DecodeCommand reads; a batch counts as one
// command. It bounds what one log entry makes a replica decode and hold.
//
// 4 MiB holds what one atomic write needs: a batch of 256 checkpoints
// encodes to about 40 KiB, an UpsertAllocations stopping 10,000
// allocations to about 1.7 MiB, and a bulk registration of 1,000
// volumes of a usual size (a few parameters, context entries and a
// topology, about 0.6 KiB each) to about 0.6 MiB. CSI bounds each map of
// a volume (parameters, context, secrets) to 4 KiB, and a batch of 250
// volumes filling all three still fits (about 3.1 MiB). A larger load is
// split into several batches: each is atomic, the whole load is not,
// which a bulk registration does not need. Raft hosts also want entries
// well below this size (etcd refuses requests over 1.5 MiB by default).
const MaxCommandSize = 4 << 20

// EncodeCommand encodes cmd as the JSON envelope
// {"kind": "...", "body": {...}}. The body holds volume secrets in clear.
// A command DecodeCommand would refuse, a batch holding a batch or an
// encoding over MaxCommandSize, is refused with csi.ErrInvalidRequest,
// so that a host never appends to its log what a replica cannot decode.
func EncodeCommand(cmd Command) ([]byte, error) {
	if isNil(cmd) {
		return nil, fmt.Errorf("%w: encode a nil command", csi.ErrInvalidRequest)
	}
	// MarshalJSON refuses a nested batch too; refused here, the error
	// does not come wrapped in json's.
	var cmds []Command
	switch b := cmd.(type) {
	case Batch:
		cmds = b.Commands
	case *Batch:
		cmds = b.Commands
	}
	for i, c := range cmds {
		if isBatch(c) {
			return nil, fmt.Errorf("encode batch command %d: %w", i, errNestedBatch)
		}
	}
	body, err := json.Marshal(cmd)
	if err != nil {
		return nil, fmt.Errorf("encode %s command: %w", cmd.Kind(), err)
	}
	b, err := json.Marshal(envelope{Kind: cmd.Kind(), Body: body})
	if err != nil {
		return nil, fmt.Errorf("encode %s command: %w", cmd.Kind(), err)
	}
	if len(b) > MaxCommandSize {
		return nil, commandTooLarge("encode", cmd.Kind(), len(b))
	}
	return b, nil
}

// DecodeCommand decodes an envelope written by EncodeCommand. The result
// is a command value (RegisterVolume, not *RegisterVolume). An unknown
// kind, a malformed body, a batch holding a batch, or more than
// MaxCommandSize bytes is an error matching csi.ErrInvalidRequest.
func DecodeCommand(b []byte) (Command, error) {
	if len(b) > MaxCommandSize {
		return nil, commandTooLarge("decode", "", len(b))
	}
	env, err := decodeEnvelope(b)
	if err != nil {
		return nil, err
	}
	return decodeEnvelopeBody(env)
}

func commandTooLarge(op string, kind Kind, n int) error {
	what := "command"
	if kind != "" {
		what = string(kind) + " command"
	}
	return fmt.Errorf("%w: %s a %s of %d bytes; the limit is MaxCommandSize, %d bytes: split the write into several commands or batches",
		csi.ErrInvalidRequest, op, what, n, MaxCommandSize)
}

// decodeEnvelope decodes an envelope, leaving its body encoded.
func decodeEnvelope(b []byte) (envelope, error) {
	var env envelope
	if err := json.Unmarshal(b, &env); err != nil {
		return envelope{}, fmt.Errorf("%w: decode command envelope: %v", csi.ErrInvalidRequest, err)
	}
	return env, nil
}

// decodeEnvelopeBody decodes the body of an envelope by its kind.
func decodeEnvelopeBody(env envelope) (Command, error) {
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
	case KindAttachVolume:
		return decodeBody[AttachVolume](env.Kind, body)
	case KindDetachVolume:
		return decodeBody[DetachVolume](env.Kind, body)
	case KindRemoveAttachment:
		return decodeBody[RemoveAttachment](env.Kind, body)
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
	case KindSetCapacity:
		return decodeBody[SetCapacity](env.Kind, body)
	case KindRegisterSnapshot:
		return decodeBody[RegisterSnapshot](env.Kind, body)
	case KindDeleteSnapshot:
		return decodeBody[DeleteSnapshot](env.Kind, body)
	case KindSetVolumeHealth:
		return decodeBody[SetVolumeHealth](env.Kind, body)
	case KindFlagAttachmentVanished:
		return decodeBody[FlagAttachmentVanished](env.Kind, body)
	case KindAdoptAttachment:
		return decodeBody[AdoptAttachment](env.Kind, body)
	case KindRegisterNode:
		return decodeBody[RegisterNode](env.Kind, body)
	case KindUpsertACLToken:
		return decodeBody[UpsertACLToken](env.Kind, body)
	case KindDeleteACLToken:
		return decodeBody[DeleteACLToken](env.Kind, body)
	case KindBatch:
		return decodeBody[Batch](env.Kind, body)
	case KindRequestExpansion, KindRecordControllerExpansion, KindRecordNodeExpansion,
		KindRecordExpansionError, KindRequestModify, KindRecordModify:
		return decodeVolumeChange(env.Kind, body)
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
