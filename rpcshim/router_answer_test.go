package rpcshim_test

import (
	"context"
	"errors"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/rpcshim"
)

// TestRouter_ControllerCall_LastAnswer is the table of what a controller
// call returns when every controller fails with a non-Final error, per
// gRPC code and call. Only a controller that is not there (the plugin
// answering Unavailable, an unreachable node) makes the call fail with
// csi.ErrNoController; a controller that took the call and timed out or
// said "not now" is reported with its own code and class, so a timed-out
// ControllerPublish is Uncertain (the attach may yet happen) and never
// reads as "no controller is running".
func TestRouter_ControllerCall_LastAnswer(t *testing.T) {
	calls := []struct {
		method string
		call   func(ctx context.Context, c *rtCluster) error
	}{
		{rpcshim.MethodControllerPublish, func(ctx context.Context, c *rtCluster) error {
			_, err := c.publish(ctx, "")
			return err
		}},
		{rpcshim.MethodControllerUnpublish, func(ctx context.Context, c *rtCluster) error {
			r := &rpcshim.ControllerUnpublishRequest{}
			r.PluginID = rtPlugin
			r.ExternalID = "vol-1"
			r.ExternalNodeID = "csi-n9"
			_, err := c.router.ControllerUnpublish(ctx, r)
			return err
		}},
	}
	codes := []struct {
		code         csi.Code
		class        csi.Class
		noController bool
	}{
		{csi.CodeUnavailable, csi.ClassRetryable, true},
		{csi.CodeDeadlineExceeded, csi.ClassUncertain, false},
		{csi.CodeCanceled, csi.ClassUncertain, false},
		{csi.CodeAborted, csi.ClassRetryable, false},
		{csi.CodeResourceExhausted, csi.ClassRetryable, false},
	}
	for _, call := range calls {
		for _, tc := range codes {
			t.Run(call.method+"/"+tc.code.String(), func(t *testing.T) {
				c := newRTCluster(t)
				rpcErr := &csi.RPCError{Method: call.method, Code: tc.code, Message: "the backend says so"}
				c.controller("n1", true, "").failNext(rpcErr)
				err := call.call(context.Background(), c)
				mustErr(t, err)
				expectClass(t, err, tc.class)
				if got := errors.Is(err, csi.ErrNoController); got != tc.noController {
					t.Fatalf("errors.Is(err, ErrNoController) = %v, want %v: %v", got, tc.noController, err)
				}
				if !tc.noController {
					expectEqual(t, csi.CodeOf(err), tc.code)
					expectContains(t, err.Error(), "on node n1 did not complete")
				}
				expectEqual(t, c.called(), []string{"n1 " + call.method})
			})
		}
	}
}

// TestRouter_ControllerCall_AnswerAmongAbsent checks that the answer of
// the one controller that took the call is what the caller gets, with
// the reasons the other candidates were passed over.
func TestRouter_ControllerCall_AnswerAmongAbsent(t *testing.T) {
	c := newRTCluster(t)
	c.controller("n1", true, "").failNext(rtDeadline)
	c.controller("n2", true, "").failNext(rtUnavailable)
	c.controller("n3", true, "")
	c.tr.SetDown("n3", true)
	_, err := c.publish(context.Background(), "")
	mustErr(t, err)
	expectClass(t, err, csi.ClassUncertain)
	expectEqual(t, csi.CodeOf(err), csi.CodeDeadlineExceeded)
	if errors.Is(err, csi.ErrNoController) {
		t.Fatalf("a timed-out publish reads as no controller: %v", err)
	}
	expectContains(t, err.Error(), "ControllerPublishVolume by the controller of plugin p1 on node n1 did not complete (no other controller served it; node n2: ControllerPublishVolume: Unavailable: backend busy; node n3: ")
	expectContains(t, err.Error(), "attach timed out")
}

// TestRouter_ControllerCall_UncertainAnswerWins: when one controller
// timed out and another then answered "not now", the caller gets the
// timeout, Uncertain: the first attach may yet happen.
func TestRouter_ControllerCall_UncertainAnswerWins(t *testing.T) {
	c := newRTCluster(t)
	c.controller("n1", true, "").failNext(rtDeadline)
	c.controller("n2", true, "").failNext(&csi.RPCError{Method: "ControllerPublishVolume", Code: csi.CodeAborted, Message: "busy with another call"})
	_, err := c.publish(context.Background(), "")
	mustErr(t, err)
	expectEqual(t, c.called(), []string{"n1 " + rpcshim.MethodControllerPublish, "n2 " + rpcshim.MethodControllerPublish})
	expectClass(t, err, csi.ClassUncertain)
	expectEqual(t, csi.CodeOf(err), csi.CodeDeadlineExceeded)
	expectContains(t, err.Error(), "on node n1 did not complete")
}
