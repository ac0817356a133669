package rpcshim_test

import (
	"context"
	"errors"
	"maps"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/rpcshim"
	"github.com/csikit/csikit/state"
)

var bothExpand = xpConfig{controllerExpand: true, nodeExpand: true}

func TestServer_ExpandVolume_ControllerThenNodes(t *testing.T) {
	c := newXPCluster(t, bothExpand)
	c.volume(t)
	c.claimAndMount(t, "web-1", "n1")
	c.claimAndMount(t, "web-2", "n2")

	resp, err := c.expand(t, 4<<20)
	must(t, err)
	expectEqual(t, resp.ControllerNodeID, "n1")
	expectEqual(t, len(resp.PendingNodes), 0)
	expectEqual(t, resp.Volume.Secrets, csi.Secrets(nil))
	v := c.stored(t)
	expectEqual(t, v.Capacity, int64(4<<20))
	expectEqual(t, v.Expansion.State, csi.ExpansionDone)
	expectEqual(t, v.Expansion.DoneNodes, []string{"n1", "n2"})
	expectEqual(t, c.ctl.CallCount(csitest.MethodControllerExpandVolume), 1)
	expectEqual(t, c.nodeExpands(), map[string]int{"n1": 1, "n2": 1})
	if st, _ := c.ctl.Volume("ext-1"); st.Capacity != 4<<20 {
		t.Errorf("controller fake holds %d bytes, want 4 MiB", st.Capacity)
	}

	// A repeat changes nothing and calls nothing.
	_, err = c.expand(t, 4<<20)
	must(t, err)
	expectEqual(t, c.ctl.CallCount(csitest.MethodControllerExpandVolume), 1)

	// A node that stages the volume later gets the node step.
	c.claimAndMount(t, "web-3", "n3")
	must(t, c.server.CompleteNodeExpansions(t.Context(), "n3"))
	expectEqual(t, c.nodeExpands(), map[string]int{"n1": 1, "n2": 1, "n3": 1})
	expectEqual(t, c.stored(t).Expansion.DoneNodes, []string{"n1", "n2", "n3"})
	must(t, c.server.CompleteNodeExpansions(t.Context(), "n3"))
	expectEqual(t, c.nodeExpands()["n3"], 1)
	c.noViolations(t)
}

func TestServer_ExpandVolume_ShrinkRefused(t *testing.T) {
	c := newXPCluster(t, bothExpand)
	c.volume(t)
	_, err := c.expand(t, 1<<19)
	if !errors.Is(err, csi.ErrShrinkRefused) {
		t.Fatalf("shrink: %v, want ErrShrinkRefused", err)
	}
	expectEqual(t, c.ctl.CallCount(csitest.MethodControllerExpandVolume), 0)
	expectEqual(t, c.stored(t).Expansion, (*csi.Expansion)(nil))
}

func TestServer_ExpandVolume_Offline(t *testing.T) {
	cfg := bothExpand
	cfg.offline = true
	c := newXPCluster(t, cfg)
	c.volume(t)

	t.Run("FreeVolume", func(t *testing.T) {
		_, err := c.expand(t, 2<<20)
		must(t, err)
		v := c.stored(t)
		expectEqual(t, v.Capacity, int64(2<<20))
		expectEqual(t, v.Expansion.State, csi.ExpansionDone)
		expectEqual(t, len(c.nodeExpands()), 0) // mounted nowhere
	})
	t.Run("RefusedWhilePublished", func(t *testing.T) {
		c.claimAndMount(t, "web-1", "n1")
		before := c.stored(t)
		_, err := c.expand(t, 4<<20)
		if !errors.Is(err, csi.ErrExpansionOffline) || csi.Classify(err) != csi.ClassRetryable {
			t.Fatalf("offline expansion of a published volume: %v, want ErrExpansionOffline (retryable)", err)
		}
		expectEqual(t, c.stored(t).ModifyIndex, before.ModifyIndex) // no intent written
		expectEqual(t, c.ctl.CallCount(csitest.MethodControllerExpandVolume), 1)
	})
}

func TestServer_ExpandVolume_NodeDownCompletedOnReturn(t *testing.T) {
	c := newXPCluster(t, bothExpand)
	c.volume(t)
	c.claimAndMount(t, "web-1", "n1")
	c.claimAndMount(t, "web-2", "n2")
	c.statuses.Set("n2", csi.NodeStatusDown)

	resp, err := c.expand(t, 4<<20)
	must(t, err)
	expectEqual(t, resp.PendingNodes, []string{"n2"})
	expectEqual(t, c.nodeExpands(), map[string]int{"n1": 1})
	v := c.stored(t)
	expectEqual(t, v.Expansion.State, csi.ExpansionNode)
	if v.Expansion.LastError == "" {
		t.Errorf("no error recorded for the node that was down")
	}

	// A new server (a restart) sees the pending step; the node's return
	// completes it.
	srv := c.newServer(t)
	c.statuses.Set("n2", csi.NodeStatusReady)
	must(t, srv.CompleteNodeExpansions(t.Context(), "n2"))
	expectEqual(t, c.nodeExpands(), map[string]int{"n1": 1, "n2": 1})
	v = c.stored(t)
	expectEqual(t, v.Expansion.State, csi.ExpansionDone)
	expectEqual(t, v.Expansion.LastError, "")
	c.noViolations(t)
}

func TestServer_ResumeVolumeChanges_AfterCrash(t *testing.T) {
	t.Run("BeforeThePluginCall", func(t *testing.T) {
		c := newXPCluster(t, bothExpand)
		c.volume(t)
		c.claimAndMount(t, "web-1", "n1")
		// The old leader wrote the intent and crashed.
		_, err := c.applier.Apply(t.Context(), state.RequestExpansion{Namespace: "default", VolumeID: "data", RequiredBytes: 4 << 20, Controller: true, RequestedAt: rtTime})
		must(t, err)
		must(t, c.newServer(t).ResumeVolumeChanges(t.Context()))
		expectEqual(t, c.ctl.CallCount(csitest.MethodControllerExpandVolume), 1)
		expectEqual(t, c.nodeExpands(), map[string]int{"n1": 1})
		expectEqual(t, c.stored(t).Expansion.State, csi.ExpansionDone)
		must(t, c.newServer(t).ResumeVolumeChanges(t.Context()))
		expectEqual(t, c.ctl.CallCount(csitest.MethodControllerExpandVolume), 1)
	})
	t.Run("AfterThePluginReply", func(t *testing.T) {
		c := newXPCluster(t, bothExpand)
		c.volume(t)
		_, err := c.applier.Apply(t.Context(), state.RequestExpansion{Namespace: "default", VolumeID: "data", RequiredBytes: 4 << 20, Controller: true, RequestedAt: rtTime})
		must(t, err)
		// The plugin grew the volume; the reply was lost with the leader.
		req := &rpcshim.ExpandVolumeRequest{CSIControllerQuery: rpcshim.CSIControllerQuery{PluginID: rtPlugin}}
		req.ExternalID, req.CapacityMin = "ext-1", 4<<20
		_, err = c.router.ExpandVolume(t.Context(), req)
		must(t, err)
		must(t, c.newServer(t).ResumeVolumeChanges(t.Context()))
		v := c.stored(t)
		expectEqual(t, v.Capacity, int64(4<<20))
		expectEqual(t, v.Expansion.State, csi.ExpansionDone)
		if st, _ := c.ctl.Volume("ext-1"); st.Capacity != 4<<20 {
			t.Errorf("the repeated call grew the volume again: %d bytes", st.Capacity)
		}
	})
}

func TestServer_ExpandVolume_UnavailableRetriedOnClock(t *testing.T) {
	c := newXPCluster(t, bothExpand)
	c.volume(t)
	c.ctl.FailNext(csitest.MethodControllerExpandVolume, codes.Unavailable, 2)
	done := make(chan error, 1)
	go func() {
		_, err := c.expand(t, 4<<20)
		done <- err
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for i := range 2 {
		if err := c.clock.BlockUntil(ctx, 1); err != nil {
			t.Fatalf("retry %d: the server never waited on its clock: %v", i+1, err)
		}
		if d := c.clock.AdvanceToNext(); d <= 0 {
			t.Fatalf("retry %d: no backoff delay (%s)", i+1, d)
		}
	}
	select {
	case err := <-done:
		must(t, err)
	case <-ctx.Done():
		t.Fatal("ExpandVolume did not return after two retries")
	}
	expectEqual(t, c.ctl.CallCount(csitest.MethodControllerExpandVolume), 3)
	expectEqual(t, c.stored(t).Capacity, int64(4<<20))
}

func TestServer_ExpandVolume_FinalRefusalDropsIntent(t *testing.T) {
	c := newXPCluster(t, bothExpand)
	c.volume(t)
	c.ctl.FailNext(csitest.MethodControllerExpandVolume, codes.OutOfRange, 1)
	if _, err := c.expand(t, 4<<20); csi.CodeOf(err) != csi.CodeOutOfRange {
		t.Fatalf("refused expansion: %v, want OutOfRange", err)
	}
	expectEqual(t, c.stored(t).Expansion, (*csi.Expansion)(nil))
	expectEqual(t, c.ctl.CallCount(csitest.MethodControllerExpandVolume), 1)
}

func TestServer_ExpandVolume_NodeOnly(t *testing.T) {
	c := newXPCluster(t, xpConfig{nodeExpand: true})
	c.volume(t)
	c.claimAndMount(t, "web-1", "n2")
	_, err := c.expand(t, 4<<20)
	must(t, err)
	expectEqual(t, c.ctl.CallCount(csitest.MethodControllerExpandVolume), 0)
	expectEqual(t, c.nodeExpands(), map[string]int{"n2": 1})
	v := c.stored(t)
	expectEqual(t, v.Expansion.State, csi.ExpansionDone)
	expectEqual(t, v.Capacity, int64(4<<20)) // as the node reported it
	c.noViolations(t)
}

func TestServer_ExpandVolume_Unsupported(t *testing.T) {
	c := newXPCluster(t, xpConfig{})
	c.volume(t)
	if _, err := c.expand(t, 4<<20); !errors.Is(err, csi.ErrExpansionUnsupported) {
		t.Fatalf("expansion without EXPAND_VOLUME: %v, want ErrExpansionUnsupported", err)
	}
}

func TestServer_ModifyVolume(t *testing.T) {
	c := newXPCluster(t, xpConfig{modify: true})
	c.volume(t)
	ctx := t.Context()
	mod := func(params map[string]string) error {
		_, err := c.server.ModifyVolume(ctx, &rpcshim.VolumeModifyRequest{Namespace: "default", VolumeID: "data", MutableParameters: params})
		return err
	}
	must(t, mod(map[string]string{"iops": "3000"}))
	st, _ := c.ctl.Volume("ext-1")
	expectEqual(t, maps.Clone(st.MutableParameters), map[string]string{"iops": "3000"})
	v := c.stored(t)
	expectEqual(t, v.MutableParameters, map[string]string{"iops": "3000"})
	expectEqual(t, v.ModifyingParameters, map[string]string(nil))

	c.ctl.FailNext(csitest.MethodControllerModifyVolume, codes.InvalidArgument, 1)
	if err := mod(map[string]string{"tier": "nope"}); csi.CodeOf(err) != csi.CodeInvalidArgument {
		t.Fatalf("refused modify: %v", err)
	}
	v = c.stored(t)
	expectEqual(t, v.MutableParameters, map[string]string{"iops": "3000"})
	expectEqual(t, v.ModifyingParameters, map[string]string(nil))

	// A modify the old leader wrote is resumed.
	_, err := c.applier.Apply(ctx, state.RequestModify{Namespace: "default", VolumeID: "data", Parameters: map[string]string{"tier": "fast"}})
	must(t, err)
	must(t, c.newServer(t).ResumeVolumeChanges(ctx))
	expectEqual(t, c.stored(t).MutableParameters, map[string]string{"iops": "3000", "tier": "fast"})
	if err := mod(nil); !errors.Is(err, csi.ErrInvalidRequest) {
		t.Errorf("modify without parameters: %v", err)
	}
}

func TestServer_ModifyVolume_NotSupported(t *testing.T) {
	c := newXPCluster(t, bothExpand)
	c.volume(t)
	_, err := c.server.ModifyVolume(t.Context(), &rpcshim.VolumeModifyRequest{Namespace: "default", VolumeID: "data", MutableParameters: map[string]string{"a": "b"}})
	if !errors.Is(err, csi.ErrNotSupported) {
		t.Fatalf("modify without MODIFY_VOLUME: %v", err)
	}
	expectEqual(t, c.ctl.CallCount(csitest.MethodControllerModifyVolume), 0)
}

func TestServer_ExpandVolume_RetriesBounded(t *testing.T) {
	c := newXPCluster(t, bothExpand)
	c.volume(t)
	c.ctl.FailAlways(csitest.MethodControllerExpandVolume, codes.Unavailable)
	done := make(chan error, 1)
	go func() {
		_, err := c.expand(t, 4<<20)
		done <- err
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for i := range 4 { // five attempts, four waits between them
		if err := c.clock.BlockUntil(ctx, 1); err != nil {
			t.Fatalf("wait %d: the server never waited on its clock: %v", i+1, err)
		}
		c.clock.AdvanceToNext()
	}
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		t.Fatal("ExpandVolume never gave up")
	}
	if !csi.IsRetryable(err) {
		t.Fatalf("exhausted retries: %v, want a retryable error", err)
	}
	expectEqual(t, c.ctl.CallCount(csitest.MethodControllerExpandVolume), 5)
	v := c.stored(t)
	expectEqual(t, v.Expansion.State, csi.ExpansionController) // left for a resume
	if v.Expansion.LastError == "" {
		t.Error("no error recorded")
	}
}
