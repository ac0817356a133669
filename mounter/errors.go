package mounter

import (
	"errors"
	"fmt"

	"github.com/csikit/csikit/csi"
)

// ErrCorruptState is matched (errors.Is) by a *StateError: a file in the
// state directory cannot be read as mounter state. It is Final: New
// refuses to start rather than forget what may be mounted. An operator
// must repair or move the file aside and clean up that volume's mounts
// by hand.
var ErrCorruptState = errors.New("corrupt mounter state")

// StateError reports a state file that cannot be used.
type StateError struct {
	// Path is the offending file.
	Path string
	// Reason says what is wrong with it.
	Reason string
	// Err is the underlying error (JSON syntax, I/O), if any.
	Err error
}

func (e *StateError) Error() string {
	msg := fmt.Sprintf("%s: state file %s: %s", ErrCorruptState, e.Path, e.Reason)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg + "; repair it or move it aside (then unmount that volume's staging and target paths by hand) and restart"
}

// Is reports whether target is ErrCorruptState.
func (e *StateError) Is(target error) bool { return target == ErrCorruptState }

// Unwrap returns the underlying error.
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
