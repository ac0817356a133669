package rpcshim

import (
	"errors"

	"github.com/csikit/csikit/csi"
)

// WireError is an error as it crosses a transport: what a caller needs to
// act on it (identity, class, plugin code) in a form any encoding can
// carry. EncodeError builds it on the node; Err turns it back into an
// error on the server. Host transports other than the ones in this
// package carry it the same way (as JSON with the tags below, for
// example).
type WireError struct {
	// Sentinel is the Code of the csi sentinel the error matched
	// (csi.SentinelOf), or "" if it matched none.
	Sentinel string `json:"sentinel,omitempty"`
	// Class is the error's class on the node (csi.Classify).
	Class csi.Class `json:"class"`
	// Code is the gRPC code of a plugin's *csi.RPCError in the chain, or
	// 0 (csi.CodeOK) if there was none.
	Code csi.Code `json:"code,omitempty"`
	// Method is the CSI method of that *csi.RPCError.
	Method string `json:"method,omitempty"`
	// RPCMessage is that *csi.RPCError's own Message (the plugin's status
	// message), so the rebuilt RPCError reads as it did on the node.
	RPCMessage string `json:"rpc_message,omitempty"`
	// Message is the whole error's text, err.Error() on the node.
	Message string `json:"message"`
}

// EncodeError describes err for the wire; nil gives nil. Only one
// sentinel is kept: if err matches several, the first one in csi's own
// list wins.
func EncodeError(err error) *WireError {
	if err == nil {
		return nil
	}
	w := &WireError{Class: csi.Classify(err), Message: err.Error()}
	if s := csi.SentinelOf(err); s != nil {
		w.Sentinel = s.Code()
	}
	var r *csi.RPCError
	if errors.As(err, &r) && r.Code != csi.CodeOK {
		w.Code, w.Method, w.RPCMessage = r.Code, r.Method, r.Message
	}
	return w
}

// Err rebuilds the error on the receiving side as a *RemoteError; a nil
// WireError gives nil. A sentinel code this version of csi does not know
// (a newer node) is dropped, and the class still holds.
func (w *WireError) Err() error {
	if w == nil {
		return nil
	}
	e := &RemoteError{Message: w.Message, Class: w.Class}
	if w.Sentinel != "" {
		e.Sentinel = csi.SentinelByCode(w.Sentinel)
	}
	if w.Code != csi.CodeOK {
		e.RPC = &csi.RPCError{Method: w.Method, Code: w.Code, Message: w.RPCMessage}
	}
	return e
}

// RemoteError is an error returned by a node's handler, rebuilt on the
// server from its WireError. Its text is the node's message; errors.Is
// matches the csi sentinel the node's error wrapped; csi.Classify returns
// the class it had on the node; errors.As finds the plugin's
// *csi.RPCError, so csi.CodeOf and csi.TeardownDone work as on the node.
type RemoteError struct {
	Message  string
	Class    csi.Class
	Sentinel *csi.Sentinel // nil if the node's error matched none
	RPC      *csi.RPCError // nil if the node's error held none
}

var _ csi.Classed = (*RemoteError)(nil)

func (e *RemoteError) Error() string { return e.Message }

// ErrorClass implements csi.Classed: the class the error had on the node.
func (e *RemoteError) ErrorClass() csi.Class { return e.Class }

// Is reports whether target is the sentinel the node's error matched.
func (e *RemoteError) Is(target error) bool {
	return e.Sentinel != nil && target == error(e.Sentinel)
}

// Unwrap returns the plugin's *csi.RPCError, or nil.
func (e *RemoteError) Unwrap() error {
	if e.RPC == nil {
		return nil
	}
	return e.RPC
}
