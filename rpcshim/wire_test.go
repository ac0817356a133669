package rpcshim_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/rpcshim"
)

// classed is a caller-defined error that knows its class, as a node's own
// error types may.
type classed struct{ class csi.Class }

func (e classed) Error() string         { return "custom " + e.class.String() }
func (e classed) ErrorClass() csi.Class { return e.class }

func TestEncodeError_Cases(t *testing.T) {
	notFound := &csi.RPCError{Method: "NodeUnstageVolume", Code: csi.CodeNotFound, Message: "not staged"}
	tests := []struct {
		name string
		err  error
		want rpcshim.WireError
	}{
		{"plain error", errors.New("boom"),
			rpcshim.WireError{Class: csi.ClassFinal, Message: "boom"}},
		{"bare sentinel", csi.ErrMaxVolumes,
			rpcshim.WireError{Sentinel: "max_volumes", Class: csi.ClassRetryable, Message: "node has reached its plugin's max volumes"}},
		{"wrapped sentinel", fmt.Errorf("on node n1: %w", csi.ErrPluginNotFound),
			rpcshim.WireError{Sentinel: "plugin_not_found", Class: csi.ClassRetryable, Message: "on node n1: plugin not found"}},
		{"ID error", csi.ValidateNodeID(""),
			rpcshim.WireError{Sentinel: "invalid_id", Class: csi.ClassFinal, Message: `invalid node ID "": must not be empty`}},
		{"wrapped plugin error", fmt.Errorf("unstage: %w", notFound),
			rpcshim.WireError{Class: csi.ClassFinal, Code: csi.CodeNotFound, Method: "NodeUnstageVolume", RPCMessage: "not staged", Message: "unstage: NodeUnstageVolume: NotFound: not staged"}},
		{"plugin error wrapping a sentinel", &csi.RPCError{Method: "NodePublishVolume", Code: csi.CodeUnavailable, Message: "gone", Err: csi.ErrPluginUnhealthy},
			rpcshim.WireError{Sentinel: "plugin_unhealthy", Class: csi.ClassRetryable, Code: csi.CodeUnavailable, Method: "NodePublishVolume", RPCMessage: "gone", Message: "NodePublishVolume: Unavailable: gone"}},
		{"outer class wins", fmt.Errorf("%w: %w", classed{csi.ClassUncertain}, notFound),
			rpcshim.WireError{Class: csi.ClassUncertain, Code: csi.CodeNotFound, Method: "NodeUnstageVolume", RPCMessage: "not staged", Message: "custom uncertain: NodeUnstageVolume: NotFound: not staged"}},
		{"context deadline", fmt.Errorf("probe: %w", context.DeadlineExceeded),
			rpcshim.WireError{Class: csi.ClassUncertain, Message: "probe: context deadline exceeded"}},
		{"OK code is no code", &csi.RPCError{Method: "Probe", Code: csi.CodeOK, Message: "odd"},
			rpcshim.WireError{Class: csi.ClassFinal, Message: "Probe: OK: odd"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := rpcshim.EncodeError(tc.err)
			if got == nil {
				t.Fatal("EncodeError returned nil for an error")
			}
			expectEqual(t, *got, tc.want)
		})
	}
}

func TestEncodeError_Nil(t *testing.T) {
	if w := rpcshim.EncodeError(nil); w != nil {
		t.Errorf("EncodeError(nil) = %#v, want nil", w)
	}
	var w *rpcshim.WireError
	if err := w.Err(); err != nil {
		t.Errorf("(*WireError)(nil).Err() = %v, want nil", err)
	}
}

// TestWireError_Err_RoundTrip sends each error through EncodeError, JSON
// and Err, and checks that everything a caller branches on survives.
func TestWireError_Err_RoundTrip(t *testing.T) {
	errs := []error{
		errors.New("boom"),
		fmt.Errorf("on node n1: %w", csi.ErrPluginNotFound),
		fmt.Errorf("claim: %w", csi.ErrMaxClaims),
		csi.ValidateVolumeID(".."),
		fmt.Errorf("unpublish: %w", &csi.RPCError{Method: "NodeUnpublishVolume", Code: csi.CodeNotFound, Message: "gone"}),
		&csi.RPCError{Method: "ControllerPublishVolume", Code: csi.CodeResourceExhausted, Message: "too many"},
		&csi.RPCError{Method: "NodeStageVolume", Code: csi.CodeAborted, Message: "busy", Err: csi.ErrUnavailable},
		fmt.Errorf("stage: %w", context.Canceled),
		classed{csi.ClassRetryable},
	}
	for _, orig := range errs {
		t.Run(orig.Error(), func(t *testing.T) {
			b, err := json.Marshal(rpcshim.EncodeError(orig))
			must(t, err)
			var w rpcshim.WireError
			must(t, json.Unmarshal(b, &w))
			got := w.Err()

			expectEqual(t, got.Error(), orig.Error())
			expectEqual(t, csi.Classify(got), csi.Classify(orig))
			expectEqual(t, csi.IsRetryable(got), csi.IsRetryable(orig))
			expectEqual(t, csi.CodeOf(got), csi.CodeOf(orig))
			expectEqual(t, csi.TeardownDone(got), csi.TeardownDone(orig))
			expectEqual(t, csi.SentinelOf(got), csi.SentinelOf(orig))
			var origRPC, gotRPC *csi.RPCError
			if errors.As(orig, &origRPC) {
				if !errors.As(got, &gotRPC) {
					t.Fatalf("%v lost its *csi.RPCError", got)
				}
				expectEqual(t, *gotRPC, csi.RPCError{Method: origRPC.Method, Code: origRPC.Code, Message: origRPC.Message})
			}
		})
	}
}

// TestWireError_Err_TwoHops checks that an error relayed through a second
// node (encoded again from a RemoteError) is still the same error.
func TestWireError_Err_TwoHops(t *testing.T) {
	orig := fmt.Errorf("detach: %w", &csi.RPCError{Method: "ControllerUnpublishVolume", Code: csi.CodeNotFound, Message: "no attachment", Err: csi.ErrVolumeNotFound})
	once := rpcshim.EncodeError(orig).Err()
	twice := rpcshim.EncodeError(once).Err()
	expectEqual(t, *rpcshim.EncodeError(twice), *rpcshim.EncodeError(orig))
	expectIs(t, twice, csi.ErrVolumeNotFound)
	expectEqual(t, csi.TeardownDone(twice), true)
}

func TestWireError_Err_UnknownSentinel(t *testing.T) {
	// A newer node may send a sentinel this server does not know: the
	// identity is lost, the class is kept.
	w := &rpcshim.WireError{Sentinel: "from_the_future", Class: csi.ClassRetryable, Message: "new failure"}
	err := w.Err()
	expectEqual(t, csi.SentinelOf(err), (*csi.Sentinel)(nil))
	expectClass(t, err, csi.ClassRetryable)
	expectEqual(t, csi.CodeOf(err), csi.CodeUnknown)
	var re *rpcshim.RemoteError
	if !errors.As(err, &re) {
		t.Fatalf("%v is not a *RemoteError", err)
	}
	if errors.Unwrap(err) != nil {
		t.Errorf("a RemoteError without a code unwraps to %v, want nil", errors.Unwrap(err))
	}
}
