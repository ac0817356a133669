package csi

import (
	"context"
	"errors"
	"fmt"
)

// Class says whether an operation that failed may be tried again. Every
// retry loop in csikit asks Classify and nothing else.
type Class int

const (
	// ClassFinal means trying again with the same input fails the same
	// way. A Final error is reported, not retried.
	ClassFinal Class = iota
	// ClassRetryable means the operation did not happen and may succeed
	// later (plugin unavailable, overloaded, aborted, not registered yet).
	ClassRetryable
	// ClassUncertain means the operation may or may not have happened
	// (deadline exceeded, canceled). CSI calls are idempotent, so it may
	// be retried, but whoever tracks state must assume it took effect.
	ClassUncertain
)

func (c Class) String() string {
	switch c {
	case ClassFinal:
		return "final"
	case ClassRetryable:
		return "retryable"
	case ClassUncertain:
		return "uncertain"
	}
	return fmt.Sprintf("Class(%d)", int(c))
}

// MarshalText implements encoding.TextMarshaler; transports carry the
// class by name so the numbering may change without breaking the wire.
func (c Class) MarshalText() ([]byte, error) {
	switch c {
	case ClassFinal, ClassRetryable, ClassUncertain:
		return []byte(c.String()), nil
	}
	return nil, fmt.Errorf("%w: unknown error class %d", ErrInvalidRequest, int(c))
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (c *Class) UnmarshalText(b []byte) error {
	for _, v := range []Class{ClassFinal, ClassRetryable, ClassUncertain} {
		if v.String() == string(b) {
			*c = v
			return nil
		}
	}
	return fmt.Errorf("%w: unknown error class %q", ErrInvalidRequest, b)
}

// Classed is implemented by errors that know their class. Classify finds
// it anywhere in an error chain, so wrapping keeps the class.
type Classed interface {
	error
	ErrorClass() Class
}

// Classify returns the class of err: the class of the first Classed error
// in its chain; Uncertain for context.DeadlineExceeded and
// context.Canceled; Final for anything else. Classify(nil) is Final, but
// callers should not ask.
func Classify(err error) Class {
	var c Classed
	if errors.As(err, &c) {
		return c.ErrorClass()
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return ClassUncertain
	}
	return ClassFinal
}

// IsRetryable reports whether err may be retried: its class is Retryable
// or Uncertain.
func IsRetryable(err error) bool {
	if err == nil {
		return false
	}
	c := Classify(err)
	return c == ClassRetryable || c == ClassUncertain
}

// Sentinel is the type of csikit's sentinel errors. Each has a stable Code
// that transports use to carry its identity across the wire
// (SentinelByCode turns it back), and a Class.
type Sentinel struct {
	code  string
	msg   string
	class Class
}

func newSentinel(code, msg string, class Class) *Sentinel {
	return &Sentinel{code: code, msg: msg, class: class}
}

func (e *Sentinel) Error() string { return e.msg }

// Code is the stable, wire-safe name of the sentinel.
func (e *Sentinel) Code() string { return e.code }

// ErrorClass implements Classed.
func (e *Sentinel) ErrorClass() Class { return e.class }

// Sentinel errors. The doc of each says what it means and whether a retry
// is safe; wrap them with %w and test with errors.Is.
var (
	// ErrVolumeNotFound: no such volume. Final.
	ErrVolumeNotFound = newSentinel("volume_not_found", "volume not found", ClassFinal)
	// ErrVolumeExists: a volume with this ID exists and the request may
	// not change it (external ID, plugin or provider differ). Final.
	ErrVolumeExists = newSentinel("volume_exists", "volume already exists", ClassFinal)
	// ErrVolumeInUse: the volume still has claims (deregister, delete).
	// Retryable once the claims are released.
	ErrVolumeInUse = newSentinel("volume_in_use", "volume in use", ClassRetryable)
	// ErrPluginNotFound: the plugin is not registered (on the server) or
	// not running (on a node). Retryable: plugins come and go, and a
	// claim release waits for the node plugin to come back.
	ErrPluginNotFound = newSentinel("plugin_not_found", "plugin not found", ClassRetryable)
	// ErrPluginUnhealthy: the plugin exists but is not healthy or has no
	// instance that can serve the request. Retryable.
	ErrPluginUnhealthy = newSentinel("plugin_unhealthy", "plugin unhealthy", ClassRetryable)
	// ErrNoController: no node can serve a controller call for the
	// plugin right now. Retryable.
	ErrNoController = newSentinel("no_controller", "no controller available", ClassRetryable)
	// ErrNodeNotFound: the node is unknown. Final.
	ErrNodeNotFound = newSentinel("node_not_found", "node not found", ClassFinal)
	// ErrNodeNotReady: the node is known but down or disconnected.
	// Retryable.
	ErrNodeNotReady = newSentinel("node_not_ready", "node not ready", ClassRetryable)
	// ErrAllocationNotFound: the allocation is unknown. Final.
	ErrAllocationNotFound = newSentinel("allocation_not_found", "allocation not found", ClassFinal)
	// ErrAllocationTerminal: the allocation has stopped and may not take
	// new claims. Final.
	ErrAllocationTerminal = newSentinel("allocation_terminal", "allocation is terminal", ClassFinal)
	// ErrClaimNotFound: the allocation holds no claim on the volume. Final.
	ErrClaimNotFound = newSentinel("claim_not_found", "claim not found", ClassFinal)
	// ErrAttachmentNotFound: the volume has no attachment to the node
	// (never attached there, or already detached). For a detach it
	// means done. Final.
	ErrAttachmentNotFound = newSentinel("attachment_not_found", "volume is not attached to the node", ClassFinal)
	// ErrMaxClaims: the volume's access mode allows no further claim of
	// this kind. Retryable once another claim is released.
	ErrMaxClaims = newSentinel("max_claims", "volume has no free claims", ClassRetryable)
	// ErrAttachedElsewhere: a single-node volume is claimed or still
	// attached on another node. Retryable once it is released there.
	ErrAttachedElsewhere = newSentinel("attached_elsewhere", "volume is attached to another node", ClassRetryable)
	// ErrAccessModeNotAllowed: the requested access or attachment mode is
	// not one the volume allows, or a write claim asks a read-only mode.
	// Final.
	ErrAccessModeNotAllowed = newSentinel("access_mode_not_allowed", "access mode not allowed", ClassFinal)
	// ErrNamespaceMismatch: the claiming allocation is in another
	// namespace than the volume. Final.
	ErrNamespaceMismatch = newSentinel("namespace_mismatch", "namespace mismatch", ClassFinal)
	// ErrMaxVolumes: the node's plugin reports it can attach no more
	// volumes. Retryable once a volume is detached there.
	ErrMaxVolumes = newSentinel("max_volumes", "node has reached its plugin's max volumes", ClassRetryable)
	// ErrTopologyMismatch: the volume is not accessible from the node's
	// topology (see Reachable). Final for that node: place the claim on
	// a node in one of the volume's topologies.
	ErrTopologyMismatch = newSentinel("topology_mismatch", "volume not accessible from node", ClassFinal)
	// ErrInvalidRequest: a request is malformed (missing field, bad
	// capability). It was not sent. Final.
	ErrInvalidRequest = newSentinel("invalid_request", "invalid request", ClassFinal)
	// ErrNotSupported: the plugin lacks the capability the call needs.
	// Final.
	ErrNotSupported = newSentinel("not_supported", "not supported by plugin", ClassFinal)
	// ErrUnavailable: a component (transport, node, plugin connection) is
	// unreachable right now. Retryable.
	ErrUnavailable = newSentinel("unavailable", "unavailable", ClassRetryable)
	// ErrSnapshotNotFound: no such snapshot. Final.
	ErrSnapshotNotFound = newSentinel("snapshot_not_found", "snapshot not found", ClassFinal)
	// ErrSnapshotExists: a snapshot with this ID exists and the request
	// may not change it (another source volume, plugin or external ID).
	// Final.
	ErrSnapshotExists = newSentinel("snapshot_exists", "snapshot already exists", ClassFinal)
	// ErrSnapshotNotReady: the snapshot is not ready to use yet (being
	// cut, uploaded, or deleted). Retryable once the plugin reports it
	// ready.
	ErrSnapshotNotReady = newSentinel("snapshot_not_ready", "snapshot not ready", ClassRetryable)
	// ErrPermissionDenied: the caller is not allowed the operation (no
	// principal, or one without the permission in the namespace).
	// Nothing was read or written. Final: retry with other credentials.
	ErrPermissionDenied = newSentinel("permission_denied", "permission denied", ClassFinal)
)

var sentinels = []*Sentinel{
	ErrInvalidID, ErrVolumeNotFound, ErrVolumeExists, ErrVolumeInUse,
	ErrPluginNotFound, ErrPluginUnhealthy, ErrNoController, ErrNodeNotFound,
	ErrNodeNotReady, ErrAllocationNotFound, ErrAllocationTerminal,
	ErrClaimNotFound, ErrAttachmentNotFound, ErrMaxClaims, ErrAttachedElsewhere,
	ErrAccessModeNotAllowed, ErrNamespaceMismatch, ErrMaxVolumes, ErrTopologyMismatch,
	ErrInvalidRequest, ErrNotSupported, ErrUnavailable,
	ErrShrinkRefused, ErrExpansionOffline, ErrExpansionUnsupported,
	ErrSnapshotNotFound, ErrSnapshotExists, ErrSnapshotNotReady,
	ErrPermissionDenied,
}

// SentinelByCode returns the sentinel whose Code is code, or nil. A
// transport uses it to rebuild an error's identity on the receiving side.
func SentinelByCode(code string) *Sentinel {
	for _, s := range sentinels {
		if s.code == code {
			return s
		}
	}
	return nil
}

// SentinelOf returns the first csikit sentinel in err's chain, or nil.
func SentinelOf(err error) *Sentinel {
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return s
		}
	}
	return nil
}

// Code is a gRPC status code. Its values are the canonical codes of
// google.rpc.Code (and of google.golang.org/grpc/codes), so a conversion
// is a plain type conversion; csi declares them itself to stay free of
// dependencies.
type Code uint32

// The canonical status codes.
const (
	CodeOK                 Code = 0
	CodeCanceled           Code = 1
	CodeUnknown            Code = 2
	CodeInvalidArgument    Code = 3
	CodeDeadlineExceeded   Code = 4
	CodeNotFound           Code = 5
	CodeAlreadyExists      Code = 6
	CodePermissionDenied   Code = 7
	CodeResourceExhausted  Code = 8
	CodeFailedPrecondition Code = 9
	CodeAborted            Code = 10
	CodeOutOfRange         Code = 11
	CodeUnimplemented      Code = 12
	CodeInternal           Code = 13
	CodeUnavailable        Code = 14
	CodeDataLoss           Code = 15
	CodeUnauthenticated    Code = 16
)

var codeNames = [...]string{
	"OK", "Canceled", "Unknown", "InvalidArgument", "DeadlineExceeded",
	"NotFound", "AlreadyExists", "PermissionDenied", "ResourceExhausted",
	"FailedPrecondition", "Aborted", "OutOfRange", "Unimplemented",
	"Internal", "Unavailable", "DataLoss", "Unauthenticated",
}

func (c Code) String() string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return fmt.Sprintf("Code(%d)", uint32(c))
}

// ClassOfCode is the one place that decides how a gRPC code from a plugin
// is retried. Unavailable, ResourceExhausted and Aborted are Retryable:
// the call may be tried again at once. DeadlineExceeded and Canceled are
// Uncertain: the caller gave up while the plugin may still have acted.
// Everything else (InvalidArgument, NotFound, AlreadyExists,
// FailedPrecondition, OutOfRange, Unimplemented, Internal, …) is Final.
//
// Retryable is not proof that nothing happened: gRPC reports a connection
// lost mid-call as Unavailable. CSI calls are idempotent, so retrying is
// safe, but whoever tracks what a mutating call did (the mounter, the
// claim flow) must keep what it may have done until a teardown succeeds.
func ClassOfCode(c Code) Class {
	switch c {
	case CodeUnavailable, CodeResourceExhausted, CodeAborted:
		return ClassRetryable
	case CodeDeadlineExceeded, CodeCanceled:
		return ClassUncertain
	}
	return ClassFinal
}

// RPCError is a failed call to a CSI plugin. It keeps the gRPC code so
// callers can branch on it (errors.As), and classifies itself with
// ClassOfCode.
type RPCError struct {
	Method  string // the CSI method, for example "NodePublishVolume"
	Code    Code
	Message string // the plugin's status message
	// Err, if set, is the underlying error (a context error, a
	// transport error); Unwrap returns it.
	Err error
}

func (e *RPCError) Error() string {
	return fmt.Sprintf("%s: %s: %s", e.Method, e.Code, e.Message)
}

// Unwrap returns the underlying error, if any.
func (e *RPCError) Unwrap() error { return e.Err }

// ErrorClass implements Classed.
func (e *RPCError) ErrorClass() Class { return ClassOfCode(e.Code) }

// CodeOf returns the gRPC code carried by err: the Code of an *RPCError in
// its chain, CodeOK for nil and CodeUnknown otherwise.
func CodeOf(err error) Code {
	if err == nil {
		return CodeOK
	}
	var r *RPCError
	if errors.As(err, &r) {
		return r.Code
	}
	return CodeUnknown
}

// TeardownDone reports whether a teardown call (NodeUnpublish,
// NodeUnstage, ControllerUnpublish, DeleteVolume, DeleteSnapshot) has
// nothing left to do: it succeeded, or the plugin answered NotFound. The
// spec makes NotFound during teardown mean "already gone".
func TeardownDone(err error) bool {
	return err == nil || CodeOf(err) == CodeNotFound
}
