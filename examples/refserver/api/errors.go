package api

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/rpcshim"
)

// StatusOf is the HTTP status the server answers for err: 404 for
// anything not found, 400 for a malformed request, 409 for a conflict
// with the current state (in use, claimed elsewhere, no free claim), 503
// when a node, plugin or controller is not available right now (or
// another retryable error: nothing was done, try again), 504
// when the request's deadline passed, 403 when the caller may not do it,
// and 500 otherwise.
func StatusOf(err error) int {
	switch {
	case errors.Is(err, csi.ErrVolumeNotFound), errors.Is(err, csi.ErrPluginNotFound),
		errors.Is(err, csi.ErrNodeNotFound), errors.Is(err, csi.ErrAllocationNotFound),
		errors.Is(err, csi.ErrClaimNotFound), errors.Is(err, csi.ErrSnapshotNotFound):
		return http.StatusNotFound
	case errors.Is(err, csi.ErrInvalidID), errors.Is(err, csi.ErrInvalidRequest),
		errors.Is(err, csi.ErrAccessModeNotAllowed), errors.Is(err, csi.ErrNamespaceMismatch),
		errors.Is(err, csi.ErrNotSupported):
		return http.StatusBadRequest
	case errors.Is(err, csi.ErrVolumeExists), errors.Is(err, csi.ErrVolumeInUse),
		errors.Is(err, csi.ErrMaxClaims), errors.Is(err, csi.ErrAttachedElsewhere),
		errors.Is(err, csi.ErrAllocationTerminal), errors.Is(err, csi.ErrMaxVolumes),
		errors.Is(err, csi.ErrSnapshotExists):
		return http.StatusConflict
	case errors.Is(err, csi.ErrNoController), errors.Is(err, csi.ErrNodeNotReady),
		errors.Is(err, csi.ErrPluginUnhealthy), errors.Is(err, csi.ErrUnavailable),
		errors.Is(err, csi.ErrSnapshotNotReady):
		return http.StatusServiceUnavailable
	case errors.Is(err, csi.ErrPermissionDenied):
		return http.StatusForbidden
	case csi.Classify(err) == csi.ClassUncertain:
		return http.StatusGatewayTimeout
	case csi.Classify(err) == csi.ClassRetryable:
		// Nothing was done and a retry may succeed, as with a server
		// that is not the raft leader and knows none yet.
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// Error is a failed API request as the Client returns it. It unwraps to
// the server's error rebuilt from its WireError (a *rpcshim.RemoteError),
// so errors.Is matches the csi sentinel the server's error matched and
// csi.Classify returns the class it had there.
type Error struct {
	// Method and Path are the request's.
	Method, Path string
	// StatusCode is the HTTP status.
	StatusCode int
	// Err is the server's error.
	Err error
}

func (e *Error) Error() string { return e.Err.Error() }

// Unwrap returns the server's error.
func (e *Error) Unwrap() error { return e.Err }

// decodeError rebuilds the error of a failed response; a body that is
// not an ErrorResponse gives a Final error naming the status.
func decodeError(method, path string, status int, body ErrorResponse, decodeErr error) error {
	var err error
	if decodeErr == nil && body.Error != nil {
		err = body.Error.Err()
	} else {
		err = fmt.Errorf("%w: %s %s answered %d %s without an error body; is this a refserver server?",
			csi.ErrInvalidRequest, method, path, status, http.StatusText(status))
	}
	return &Error{Method: method, Path: path, StatusCode: status, Err: err}
}

// ErrorBody is the body the server writes for err.
func ErrorBody(err error) ErrorResponse {
	return ErrorResponse{Error: rpcshim.EncodeError(err)}
}
