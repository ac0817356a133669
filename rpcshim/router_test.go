package rpcshim_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/mounter"
	"github.com/csikit/csikit/rpcshim"
	"github.com/csikit/csikit/state"
)

func TestNewRouter_Config(t *testing.T) {
	c := newRTCluster(t)
	tests := []struct {
		name  string
		cfg   rpcshim.RouterConfig
		field string
	}{
		{"no store", rpcshim.RouterConfig{Transport: c.tr, NodeStatuses: c.statuses}, "Store"},
		{"no transport", rpcshim.RouterConfig{Store: c.store, NodeStatuses: c.statuses}, "Transport"},
		{"no statuses", rpcshim.RouterConfig{Store: c.store, Transport: c.tr}, "NodeStatuses"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := rpcshim.NewRouter(tc.cfg)
			expectIs(t, err, csi.ErrInvalidRequest)
			expectContains(t, err.Error(), tc.field)
			if r != nil {
				t.Error("got a router with an invalid config")
			}
		})
	}
}

// TestRouter_ControllerPublish_Choice is the table of how the router
// picks a controller node when the request names none.
func TestRouter_ControllerPublish_Choice(t *testing.T) {
	tests := []struct {
		name  string
		setup func(c *rtCluster)
		// served is the node that must serve the call; "" means it fails.
		served string
		// calls are the nodes called, in order.
		calls []string
		check func(t *testing.T, err error)
	}{
		{
			name:  "no controllers",
			setup: func(c *rtCluster) { c.node("n1"); c.node("n2") },
			check: func(t *testing.T, err error) {
				expectNoController(t, err)
				expectEqual(t, err.Error(), "no controller available: plugin p1 has no controller that can serve ControllerPublishVolume: no node runs a controller instance of it; start the plugin's controller")
			},
		},
		{
			name:  "plugin unknown",
			setup: func(*rtCluster) {},
			check: func(t *testing.T, err error) {
				expectNoController(t, err)
				expectIs(t, err, csi.ErrPluginNotFound)
				expectContains(t, err.Error(), "plugin p1 is not registered")
			},
		},
		{
			name: "all unhealthy",
			setup: func(c *rtCluster) {
				c.controller("n1", false, "probe failed")
				c.controller("n2", false, "")
			},
			check: func(t *testing.T, err error) {
				expectNoController(t, err)
				expectContains(t, err.Error(), "node n1: controller unhealthy: probe failed; node n2: controller unhealthy; retry once")
				var nc *rpcshim.NoControllerError
				if !errors.As(err, &nc) {
					t.Fatalf("error %v is not a *NoControllerError", err)
				}
				expectEqual(t, nc.PassedOver, []rpcshim.PassedOver{
					{NodeID: "n1", Reason: "controller unhealthy: probe failed"},
					{NodeID: "n2", Reason: "controller unhealthy"},
				})
			},
		},
		{
			name: "first node down",
			setup: func(c *rtCluster) {
				c.controller("n1", true, "")
				c.controller("n2", true, "")
				c.statuses.Set("n1", csi.NodeStatusDown)
			},
			served: "n2",
			calls:  []string{"n2"},
		},
		{
			name: "every node not ready",
			setup: func(c *rtCluster) {
				c.controller("n1", true, "")
				c.controller("n2", true, "")
				c.controller("n3", true, "")
				c.statuses.Set("n1", csi.NodeStatusDown)
				c.statuses.Set("n2", csi.NodeStatusUnknown)
				c.statuses.fail("n3", errors.New("host records unavailable"))
			},
			check: func(t *testing.T, err error) {
				expectNoController(t, err)
				expectContains(t, err.Error(), "node n1: not ready (down); node n2: not ready (unknown); node n3: the host cannot tell whether it is ready: host records unavailable;")
			},
		},
		{
			name: "retryable errors move on",
			setup: func(c *rtCluster) {
				c.controller("n1", true, "").failNext(rtPluginMissing("n1"))
				c.controller("n2", true, "").failNext(rtUnavailable)
				c.controller("n3", true, "")
			},
			served: "n3",
			calls:  []string{"n1", "n2", "n3"},
		},
		{
			name: "uncertain error moves on",
			setup: func(c *rtCluster) {
				c.controller("n1", true, "").failNext(rtDeadline)
				c.controller("n2", true, "")
			},
			served: "n2",
			calls:  []string{"n1", "n2"},
		},
		{
			name: "final error stops",
			setup: func(c *rtCluster) {
				c.controller("n1", true, "").failNext(rtInvalid)
				c.controller("n2", true, "")
			},
			calls: []string{"n1"},
			check: func(t *testing.T, err error) {
				mustErr(t, err)
				expectClass(t, err, csi.ClassFinal)
				expectEqual(t, csi.CodeOf(err), csi.CodeInvalidArgument)
				expectContains(t, err.Error(), "by the controller of plugin p1 on node n1")
				if errors.Is(err, csi.ErrNoController) {
					t.Errorf("a final error reads as no controller: %v", err)
				}
			},
		},
		{
			name: "final NotFound stops",
			setup: func(c *rtCluster) {
				c.controller("n1", true, "").failNext(rtNotFound)
				c.controller("n2", true, "")
			},
			calls: []string{"n1"},
			check: func(t *testing.T, err error) {
				expectEqual(t, csi.CodeOf(err), csi.CodeNotFound)
			},
		},
		{
			name: "every candidate passed over",
			setup: func(c *rtCluster) {
				c.controller("n1", true, "").failNext(rtPluginMissing("n1"))
				c.controller("n2", true, "")
				c.controller("n3", false, "probe failed")
				c.controller("n4", true, "").failNext(rtUnavailable)
				c.statuses.Set("n2", csi.NodeStatusDown)
			},
			calls: []string{"n1", "n4"},
			check: func(t *testing.T, err error) {
				expectNoController(t, err)
				expectEqual(t, err.Error(), "no controller available: plugin p1 has no controller that can serve ControllerPublishVolume: "+
					"node n1: plugin not found on node; node n2: not ready (down); node n3: controller unhealthy: probe failed; "+
					"node n4: ControllerPublishVolume: Unavailable: backend busy; retry once a controller of the plugin is healthy on a ready node")
			},
		},
		{
			name: "unreachable node moves on",
			setup: func(c *rtCluster) {
				c.controller("n1", true, "")
				c.controller("n2", true, "")
				c.tr.SetDown("n1", true) // the host still thinks it is ready
			},
			served: "n2",
			calls:  []string{"n2"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newRTCluster(t)
			tc.setup(c)
			resp, err := c.publish(context.Background(), "")
			if tc.served != "" {
				must(t, err)
				expectEqual(t, resp.ControllerNodeID, tc.served)
				expectEqual(t, resp.PublishContext, map[string]string{"served-by": tc.served, "for": "csi-n9"})
			} else if tc.check == nil {
				t.Fatal("a failing case needs a check")
			}
			if tc.check != nil {
				tc.check(t, err)
			}
			var want []string
			for _, n := range tc.calls {
				want = append(want, n+" "+rpcshim.MethodControllerPublish)
			}
			expectEqual(t, c.called(), want)
		})
	}
}

func expectNoController(t *testing.T, err error) {
	t.Helper()
	mustErr(t, err)
	expectIs(t, err, csi.ErrNoController)
	expectClass(t, err, csi.ClassRetryable)
}

// TestRouter_ControllerPublish_Sticky checks that the node that last
// served a plugin goes first, and that the order is by node ID
// otherwise.
func TestRouter_ControllerPublish_Sticky(t *testing.T) {
	c := newRTCluster(t)
	n1 := c.controller("n1", true, "")
	c.controller("n2", true, "")
	c.controller("n3", true, "")
	ctx := context.Background()
	served := func() string {
		t.Helper()
		resp, err := c.publish(ctx, "")
		must(t, err)
		return resp.ControllerNodeID
	}

	expectEqual(t, served(), "n1") // sorted order
	expectEqual(t, served(), "n1")
	n1.failNext(rtUnavailable)
	expectEqual(t, served(), "n2") // n1 failed once
	expectEqual(t, served(), "n2") // sticky, though n1 is fine again
	expectEqual(t, c.called(), []string{
		"n1 " + rpcshim.MethodControllerPublish, "n1 " + rpcshim.MethodControllerPublish,
		"n1 " + rpcshim.MethodControllerPublish, "n2 " + rpcshim.MethodControllerPublish,
		"n2 " + rpcshim.MethodControllerPublish,
	})

	c.statuses.Set("n2", csi.NodeStatusDown)
	expectEqual(t, served(), "n1") // back to the sorted order
	c.statuses.Set("n2", csi.NodeStatusReady)
	expectEqual(t, served(), "n1")

	// A named node that serves becomes the sticky one.
	resp, err := c.publish(ctx, "n3")
	must(t, err)
	expectEqual(t, resp.ControllerNodeID, "n3")
	expectEqual(t, served(), "n3")
	expectEqual(t, c.called(), []string{
		"n1 " + rpcshim.MethodControllerPublish, "n1 " + rpcshim.MethodControllerPublish,
		"n3 " + rpcshim.MethodControllerPublish, "n3 " + rpcshim.MethodControllerPublish,
	})
}

// TestRouter_ControllerPublish_NamedNode checks the named-node rules: a
// node that is wrong in any way is refused before any call.
func TestRouter_ControllerPublish_NamedNode(t *testing.T) {
	tests := []struct {
		name     string
		named    string
		setup    func(c *rtCluster)
		sentinel error
		class    csi.Class
		contains string
	}{
		{
			name: "unknown to the host", named: "n7",
			setup:    func(*rtCluster) {},
			sentinel: csi.ErrNodeNotFound, class: csi.ClassFinal, contains: "the host reports the node unknown",
		},
		{
			name: "gone", named: "n1",
			setup:    func(c *rtCluster) { c.statuses.Set("n1", csi.NodeStatusGone) },
			sentinel: csi.ErrNodeNotFound, class: csi.ClassFinal, contains: "the host reports the node gone",
		},
		{
			name: "down", named: "n1",
			setup:    func(c *rtCluster) { c.statuses.Set("n1", csi.NodeStatusDown) },
			sentinel: csi.ErrNodeNotReady, class: csi.ClassRetryable, contains: "the node is down",
		},
		{
			name: "host cannot tell", named: "n1",
			setup:    func(c *rtCluster) { c.statuses.fail("n1", errors.New("records unavailable")) },
			sentinel: csi.ErrNodeNotReady, class: csi.ClassRetryable, contains: "records unavailable",
		},
		{
			name: "ready but reported no plugins", named: "n5",
			setup:    func(c *rtCluster) { c.serve("n5") },
			sentinel: csi.ErrPluginNotFound, class: csi.ClassRetryable, contains: "has reported no plugins",
		},
		{
			name: "runs only the node plugin", named: "n4",
			setup:    func(c *rtCluster) { c.node("n4") },
			sentinel: csi.ErrPluginNotFound, class: csi.ClassRetryable, contains: "runs no controller instance",
		},
		{
			name: "unhealthy controller", named: "n3",
			setup:    func(c *rtCluster) { c.controller("n3", false, "probe failed") },
			sentinel: csi.ErrPluginUnhealthy, class: csi.ClassRetryable, contains: "unhealthy (probe failed)",
		},
		{
			name: "invalid node ID", named: "../n1",
			setup:    func(*rtCluster) {},
			sentinel: csi.ErrInvalidID, class: csi.ClassFinal, contains: "ControllerNodeID",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newRTCluster(t)
			c.controller("n1", true, "")
			c.controller("n2", true, "")
			tc.setup(c)
			_, err := c.publish(context.Background(), tc.named)
			mustErr(t, err)
			expectIs(t, err, tc.sentinel)
			expectClass(t, err, tc.class)
			expectContains(t, err.Error(), tc.contains)
			expectEqual(t, len(c.called()), 0)
		})
	}

	t.Run("plugin unknown", func(t *testing.T) {
		c := newRTCluster(t)
		c.serve("n1")
		_, err := c.publish(context.Background(), "n1")
		expectIs(t, err, csi.ErrPluginNotFound)
		expectEqual(t, len(c.called()), 0)
	})

	t.Run("healthy named node is the only one called", func(t *testing.T) {
		c := newRTCluster(t)
		c.controller("n1", true, "")
		c.controller("n2", true, "").failNext(rtUnavailable)
		_, err := c.publish(context.Background(), "n2")
		mustErr(t, err)
		expectClass(t, err, csi.ClassRetryable)
		expectEqual(t, csi.CodeOf(err), csi.CodeUnavailable)
		expectContains(t, err.Error(), "on node n2")
		if errors.Is(err, csi.ErrNoController) {
			t.Errorf("a named node's error reads as no controller: %v", err)
		}
		resp, err := c.publish(context.Background(), "n2")
		must(t, err)
		expectEqual(t, resp.ControllerNodeID, "n2")
		expectEqual(t, c.called(), []string{"n2 " + rpcshim.MethodControllerPublish, "n2 " + rpcshim.MethodControllerPublish})
	})
}

// TestRouter_ControllerPublish_Forwarded checks what reaches the node:
// the request unchanged but for ControllerNodeID, which names the node.
func TestRouter_ControllerPublish_Forwarded(t *testing.T) {
	c := newRTCluster(t)
	n1 := c.controller("n1", true, "")
	req := rtPublishRequest("", "csi-n9")
	_, err := c.router.ControllerPublish(context.Background(), req)
	must(t, err)
	expectEqual(t, req.ControllerNodeID, "") // the caller's request is not changed
	got := n1.requests()
	if len(got) != 1 {
		t.Fatalf("node got %d requests, want 1", len(got))
	}
	want := *rtPublishRequest("n1", "csi-n9")
	expectEqual(t, *got[0].(*rpcshim.ControllerPublishRequest), want)
}

func TestRouter_ControllerPublish_BadRequest(t *testing.T) {
	c := newRTCluster(t)
	c.controller("n1", true, "")
	_, err := c.router.ControllerPublish(context.Background(), nil)
	expectIs(t, err, csi.ErrInvalidRequest)
	req := rtPublishRequest("", "csi-n9")
	req.PluginID = "no/slash"
	_, err = c.router.ControllerPublish(context.Background(), req)
	expectIs(t, err, csi.ErrInvalidID)
	expectEqual(t, len(c.called()), 0)
}

func TestRouter_ControllerPublish_ContextEnded(t *testing.T) {
	c := newRTCluster(t)
	c.controller("n1", true, "")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := c.publish(ctx, "")
	expectIs(t, err, context.Canceled)
	expectEqual(t, len(c.called()), 0)
}

// TestRouter_AttachLock_GivesUp checks that a call waiting for another
// attach to the same node gives up with its ctx, and that the lock map
// is empty once the calls are done.
func TestRouter_AttachLock_GivesUp(t *testing.T) {
	c := newRTCluster(t)
	n1 := c.controller("n1", true, "")
	gate := make(chan struct{})
	n1.gate, n1.enter = gate, make(chan string, 1)

	first := make(chan error, 1)
	go func() {
		_, err := c.publish(context.Background(), "")
		first <- err
	}()
	<-n1.enter // the first attach is running on the node
	expectEqual(t, c.router.Stats(), rpcshim.RouterStats{AttachRunning: 1})

	ctx, cancel := context.WithCancel(context.Background())
	second := make(chan error, 1)
	go func() {
		_, err := c.publish(ctx, "")
		second <- err
	}()
	waitStats(t, c.router, rpcshim.RouterStats{AttachRunning: 1, AttachWaiting: 1})
	cancel()
	err := <-second
	expectIs(t, err, context.Canceled)
	expectContains(t, err.Error(), `gave up waiting for another attach or detach to CSI node "csi-n9"`)
	expectEqual(t, c.router.Stats(), rpcshim.RouterStats{AttachRunning: 1})

	close(gate)
	must(t, <-first)
	expectEqual(t, c.router.Stats(), rpcshim.RouterStats{})
	expectEqual(t, c.called(), []string{"n1 " + rpcshim.MethodControllerPublish})
}

// TestRouter_AttachLock_NoGrowth checks that keys are dropped once their
// calls are done, however many target nodes were seen.
func TestRouter_AttachLock_NoGrowth(t *testing.T) {
	c := newRTCluster(t)
	c.controller("n1", true, "")
	for i := range 50 {
		_, err := c.router.ControllerPublish(context.Background(), rtPublishRequest("", fmt.Sprintf("csi-node-%d", i)))
		must(t, err)
	}
	expectEqual(t, c.router.Stats(), rpcshim.RouterStats{})
}

// waitStats waits until the router's stats are want. The router changes
// them from other goroutines with no signal to wait on, so this yields
// until they match; it never sleeps.
func waitStats(t *testing.T, r *rpcshim.Router, want rpcshim.RouterStats) {
	t.Helper()
	ctx := t.Context()
	for r.Stats() != want {
		if ctx.Err() != nil {
			t.Fatalf("router stats are %+v, want %+v", r.Stats(), want)
		}
		yield()
	}
}

func TestRouter_NodeDetach(t *testing.T) {
	vol := &csi.Volume{ID: "vol-1", Namespace: "default", PluginID: rtPlugin, ExternalID: "ext-1"}
	claim := &csi.Claim{AllocationID: "a1", NodeID: "n2", ExternalNodeID: "csi-n2", Mode: csi.ClaimWrite,
		AccessMode: csi.AccessModeSingleNodeWriter, AttachmentMode: csi.AttachmentModeFileSystem}
	tests := []struct {
		name     string
		setup    func(c *rtCluster, n2 *rtNode)
		called   bool
		sentinel error
		class    csi.Class
		code     csi.Code
	}{
		{name: "ready node", setup: func(*rtCluster, *rtNode) {}, called: true},
		{name: "down", setup: func(c *rtCluster, _ *rtNode) { c.statuses.Set("n2", csi.NodeStatusDown) },
			sentinel: csi.ErrNodeNotReady, class: csi.ClassRetryable},
		{name: "unknown", setup: func(c *rtCluster, _ *rtNode) { c.statuses.Set("n2", csi.NodeStatusUnknown) },
			sentinel: csi.ErrNodeNotReady, class: csi.ClassRetryable},
		{name: "gone", setup: func(c *rtCluster, _ *rtNode) { c.statuses.Set("n2", csi.NodeStatusGone) },
			sentinel: csi.ErrNodeNotFound, class: csi.ClassFinal},
		{name: "host cannot tell", setup: func(c *rtCluster, _ *rtNode) { c.statuses.fail("n2", errors.New("no records")) },
			sentinel: csi.ErrNodeNotReady, class: csi.ClassRetryable},
		{name: "node plugin missing", setup: func(_ *rtCluster, n2 *rtNode) { n2.failNext(rtPluginMissing("n2")) },
			called: true, sentinel: csi.ErrPluginNotFound, class: csi.ClassRetryable},
		{name: "plugin NotFound", setup: func(_ *rtCluster, n2 *rtNode) {
			n2.failNext(&csi.RPCError{Method: "NodeUnpublishVolume", Code: csi.CodeNotFound, Message: "not published"})
		}, called: true, class: csi.ClassFinal, code: csi.CodeNotFound},
		{name: "unreachable", setup: func(c *rtCluster, _ *rtNode) { c.tr.SetDown("n2", true) },
			sentinel: csi.ErrNodeNotReady, class: csi.ClassRetryable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newRTCluster(t)
			c.controller("n1", true, "")
			n2 := c.node("n2")
			tc.setup(c, n2)
			err := c.router.NodeDetach(context.Background(), vol, claim)
			if tc.called {
				expectEqual(t, c.called(), []string{"n2 " + rpcshim.MethodNodeDetach})
				expectEqual(t, *n2.requests()[0].(*rpcshim.NodeDetachRequest), rpcshim.NodeDetachRequest{
					NodeID: "n2", Namespace: "default", VolumeID: "vol-1", AllocationID: "a1", PluginID: rtPlugin,
					Usage: &mounter.Usage{ClaimMode: csi.ClaimWrite, AccessMode: csi.AccessModeSingleNodeWriter, AttachmentMode: csi.AttachmentModeFileSystem},
				})
			} else {
				expectEqual(t, len(c.called()), 0)
			}
			if tc.sentinel == nil && tc.code == csi.CodeOK {
				must(t, err)
				return
			}
			mustErr(t, err)
			if tc.sentinel != nil {
				expectIs(t, err, tc.sentinel)
			}
			expectClass(t, err, tc.class)
			expectEqual(t, csi.CodeOf(err) == tc.code || tc.code == csi.CodeOK, true)
			expectContains(t, err.Error(), "volume vol-1 for allocation a1 on node n2")
		})
	}
	t.Run("nil volume or claim", func(t *testing.T) {
		c := newRTCluster(t)
		expectIs(t, c.router.NodeDetach(context.Background(), nil, claim), csi.ErrInvalidRequest)
		expectIs(t, c.router.NodeDetach(context.Background(), vol, nil), csi.ErrInvalidRequest)
	})
}

func TestRouter_ControllerDetach(t *testing.T) {
	vol := &csi.Volume{ID: "vol-1", Namespace: "default", PluginID: rtPlugin, ExternalID: "ext-1", Secrets: csi.Secrets{"k": "v"}}
	claim := &csi.Claim{AllocationID: "a1", NodeID: "n2", ExternalNodeID: "csi-n2"}
	tests := []struct {
		name   string
		answer error
		ok     bool
		code   csi.Code
	}{
		{name: "detached", ok: true},
		{name: "NotFound is done", answer: &csi.RPCError{Method: "ControllerUnpublishVolume", Code: csi.CodeNotFound, Message: "gone"}, ok: true},
		{name: "failure", answer: &csi.RPCError{Method: "ControllerUnpublishVolume", Code: csi.CodeInternal, Message: "boom"}, code: csi.CodeInternal},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newRTCluster(t)
			n1 := c.controller("n1", true, "")
			n1.failNext(tc.answer)
			err := c.router.ControllerDetach(context.Background(), vol, claim)
			if tc.ok {
				must(t, err)
			} else {
				mustErr(t, err)
				expectEqual(t, csi.CodeOf(err), tc.code)
				expectContains(t, err.Error(), "controller detach of volume vol-1 from node n2")
			}
			want := rpcshim.ControllerUnpublishRequest{}
			want.PluginID, want.ControllerNodeID = rtPlugin, "n1"
			want.ExternalID, want.ExternalNodeID, want.Secrets = "ext-1", "csi-n2", csi.Secrets{"k": "v"}
			expectEqual(t, *n1.requests()[0].(*rpcshim.ControllerUnpublishRequest), want)
		})
	}
	t.Run("claim without CSI node ID", func(t *testing.T) {
		c := newRTCluster(t)
		c.controller("n1", true, "")
		err := c.router.ControllerDetach(context.Background(), vol, &csi.Claim{AllocationID: "a1", NodeID: "n2"})
		expectIs(t, err, csi.ErrInvalidRequest)
		expectContains(t, err.Error(), "no CSI node ID")
		expectEqual(t, len(c.called()), 0)
	})
	t.Run("no controller", func(t *testing.T) {
		c := newRTCluster(t)
		c.node("n1")
		err := c.router.ControllerDetach(context.Background(), vol, claim)
		expectNoController(t, err)
	})
	t.Run("nil volume or claim", func(t *testing.T) {
		c := newRTCluster(t)
		expectIs(t, c.router.ControllerDetach(context.Background(), nil, claim), csi.ErrInvalidRequest)
		expectIs(t, c.router.ControllerDetach(context.Background(), vol, nil), csi.ErrInvalidRequest)
	})
}

// TestRouter_HealthyControllers_Index checks that a controller that
// becomes healthy or leaves is seen at once: the router reads the store
// on every call and keeps no cache of its own beyond the sticky node.
func TestRouter_HealthyControllers_Index(t *testing.T) {
	c := newRTCluster(t)
	c.controller("n1", true, "")
	c.controller("n2", false, "starting")
	resp, err := c.publish(context.Background(), "")
	must(t, err)
	expectEqual(t, resp.ControllerNodeID, "n1")

	c.apply(state.UpsertNodePlugins{NodeID: "n1", Plugins: []csi.PluginInfo{rtNodeInstance("n1")}})
	_, err = c.publish(context.Background(), "")
	expectNoController(t, err)
	expectContains(t, err.Error(), "node n2: controller unhealthy: starting")

	c.apply(state.UpsertNodePlugins{NodeID: "n2", Plugins: []csi.PluginInfo{rtNodeInstance("n2"), rtControllerInstance(true, "")}})
	resp, err = c.publish(context.Background(), "")
	must(t, err)
	expectEqual(t, resp.ControllerNodeID, "n2")
}
