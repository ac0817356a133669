package mounter

import (
	"errors"
	"fmt"

	"github.com/csikit/csikit/csi"
)

// ErrCorruptState is matched (errors.Is) by a *StateError: a file in the
// state directory cannot be read as mounter state. It is Final: New
// refuses to start rather than forget what may be mounted.
var ErrCorruptState = errors.New("corrupt mounter state")

// StateError reports a state file that cannot be used, why, and the
// underlying error, if any.
type StateError struct {
	Path, Reason string
	Err          error
}

func (e *StateError) Error() string {
	msg := fmt.Sprintf("%s: state file %s: %s", ErrCorruptState, e.Path, e.Reason)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg + "; repair it or move it aside (then unmount that volume's staging and target paths by hand) and restart"
}

func (e *StateError) Is(target error) bool { return target == ErrCorruptState }

func (e *StateError) Unwrap() error { return e.Err }

// ErrorClass implements csi.Classed: a corrupt file stays corrupt.
func (e *StateError) ErrorClass() csi.Class { return csi.ClassFinal }

// persistError is a failure to write the state (a full disk, an I/O
// error). The operation it guarded did not reach the plugin, so it is
// Retryable.
type persistError struct {
	path string
	err  error
}

func (e *persistError) Error() string {
	return fmt.Sprintf("write mounter state %s: %v; no plugin call was made, retry once the state directory is writable", e.path, e.err)
}

func (e *persistError) Unwrap() error { return e.err }

func (e *persistError) ErrorClass() csi.Class { return csi.ClassRetryable }

// ErrUnsafePath is matched (errors.Is) by an *UnsafePathError: a path
// that the mounter would create, hand to the plugin or remove has a
// symbolic link beneath the mount root, or lies outside the root, and
// the operation was refused before the plugin call. It is Final: a
// retry fails the same way until an operator has removed the link. An
// *UnsafePathError also matches csi.ErrInvalidRequest, the sentinel of
// requests that were not sent, so that a transport carries its class
// and meaning across the wire.
var ErrUnsafePath = errors.New("unsafe path beneath the mount root")

// UnsafePathError reports the element of a path that the mounter will
// not follow (for example <root>/per-alloc/<allocation>), why, and what
// to do.
type UnsafePathError struct{ Path, Reason string }

func (e *UnsafePathError) Error() string {
	return fmt.Sprintf("%s: %s %s", ErrUnsafePath, e.Path, e.Reason)
}

// Is reports whether target is ErrUnsafePath or csi.ErrInvalidRequest.
func (e *UnsafePathError) Is(target error) bool {
	return target == ErrUnsafePath || target == csi.ErrInvalidRequest
}

// ErrorClass implements csi.Classed: the link stays until someone
// removes it.
func (e *UnsafePathError) ErrorClass() csi.Class { return csi.ClassFinal }
