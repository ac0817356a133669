package rpcshim_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/clock"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/rpcshim"
	"github.com/csikit/csikit/state"
)

func TestNewServer_Config(t *testing.T) {
	e := newSrvEnv(t, allControllerCaps)
	tests := []struct {
		name  string
		cfg   rpcshim.ServerConfig
		field string
	}{
		{"no store", rpcshim.ServerConfig{Applier: e.applier, Router: e.router}, "Store"},
		{"no applier", rpcshim.ServerConfig{Store: e.store, Router: e.router}, "Applier"},
		{"no router", rpcshim.ServerConfig{Store: e.store, Applier: e.applier}, "Router"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := rpcshim.NewServer(tc.cfg)
			expectIs(t, err, csi.ErrInvalidRequest)
			expectContains(t, err.Error(), tc.field)
			if s != nil {
				t.Error("got a server with an invalid config")
			}
		})
	}
}

func TestServer_RegisterVolume(t *testing.T) {
	ctx := context.Background()
	t.Run("capabilities validated with the controller", func(t *testing.T) {
		e := newSrvEnv(t, allControllerCaps)
		e.ctl.AddVolume("ext-a", 1<<30, nil)
		resp, err := e.server.RegisterVolume(ctx, &rpcshim.VolumeRegisterRequest{Volume: csi.Volume{
			ID: "vol-a", Namespace: "default", PluginID: rtPlugin, ExternalID: "ext-a", Capabilities: []csi.Capability{snwFS},
			Secrets: csi.Secrets{"token": "s3cr3t"},
		}})
		must(t, err)
		v := resp.Volume
		expectEqual(t, resp.ControllerNodeID, "n1")
		expectEqual(t, v.ExternalID, "ext-a")
		expectEqual(t, v.Secrets, csi.Secrets(nil)) // not in a response
		expectEqual(t, e.volume("vol-a").Secrets, csi.Secrets{"token": "s3cr3t"})
		calls := e.ctl.CallsTo(csitest.MethodValidateVolumeCapabilities)
		if len(calls) != 1 {
			t.Fatalf("ValidateVolumeCapabilities called %d times, want 1", len(calls))
		}
		expectEqual(t, calls[0].Request.(*csipb.ValidateVolumeCapabilitiesRequest).GetVolumeId(), "ext-a")
	})
	t.Run("capabilities not confirmed", func(t *testing.T) {
		e := newSrvEnv(t, allControllerCaps)
		cr, err := e.router.CreateVolume(ctx, &rpcshim.CreateVolumeRequest{
			CSIControllerQuery:  rpcshim.CSIControllerQuery{PluginID: rtPlugin},
			CreateVolumeRequest: plugin.CreateVolumeRequest{Name: "x", Capabilities: []csi.Capability{snwFS}},
		})
		must(t, err)
		_, err = e.server.RegisterVolume(ctx, &rpcshim.VolumeRegisterRequest{Volume: csi.Volume{
			ID: "vol-a", Namespace: "default", PluginID: rtPlugin, ExternalID: cr.Volume.ExternalID, Capabilities: []csi.Capability{mnmwFS},
		}})
		expectIs(t, err, csi.ErrAccessModeNotAllowed)
		expectClass(t, err, csi.ClassFinal)
		expectContains(t, err.Error(), "does not confirm the capabilities multi-node-multi-writer/file-system")
		expectNoVolume(t, e, "vol-a")
	})
	t.Run("external volume unknown to the plugin", func(t *testing.T) {
		e := newSrvEnv(t, allControllerCaps)
		_, err := e.server.RegisterVolume(ctx, &rpcshim.VolumeRegisterRequest{Volume: csi.Volume{
			ID: "vol-a", Namespace: "default", PluginID: rtPlugin, ExternalID: "nowhere", Capabilities: []csi.Capability{snwFS},
		}})
		expectEqual(t, csi.CodeOf(err), csi.CodeNotFound)
		expectContains(t, err.Error(), "register volume default/vol-a: validate its capabilities")
		expectNoVolume(t, e, "vol-a")
	})
	t.Run("plugin unknown", func(t *testing.T) {
		e := newSrvEnv(t, allControllerCaps)
		_, err := e.server.RegisterVolume(ctx, &rpcshim.VolumeRegisterRequest{Volume: csi.Volume{
			ID: "vol-a", Namespace: "default", PluginID: "nope", ExternalID: "ext", Capabilities: []csi.Capability{snwFS},
		}})
		expectIs(t, err, csi.ErrPluginNotFound)
		expectEqual(t, len(e.ctl.Calls()), 0)
	})
	t.Run("no healthy controller", func(t *testing.T) {
		e := newSrvEnv(t, allControllerCaps)
		e.statuses.Set("n1", csi.NodeStatusDown)
		e.ctl.AddVolume("ext-a", 1<<30, nil)
		_, err := e.server.RegisterVolume(ctx, &rpcshim.VolumeRegisterRequest{Volume: csi.Volume{
			ID: "vol-a", Namespace: "default", PluginID: rtPlugin, ExternalID: "ext-a", Capabilities: []csi.Capability{snwFS},
		}})
		expectIs(t, err, csi.ErrNoController)
		expectNoVolume(t, e, "vol-a")
	})
	t.Run("plugin without controller", func(t *testing.T) {
		e := newSrvEnv(t, allControllerCaps)
		e.nodeOnlyPlugin("p2")
		resp, err := e.server.RegisterVolume(ctx, &rpcshim.VolumeRegisterRequest{Volume: csi.Volume{
			ID: "vol-b", Namespace: "default", PluginID: "p2", ExternalID: "ext-b", Capabilities: []csi.Capability{snwFS},
		}})
		must(t, err)
		expectEqual(t, resp.Volume.PluginID, "p2")
		expectEqual(t, resp.ControllerNodeID, "") // no controller call
		expectEqual(t, len(e.ctl.Calls()), 0)
	})
	t.Run("bad input", func(t *testing.T) {
		e := newSrvEnv(t, allControllerCaps)
		_, err := e.server.RegisterVolume(ctx, nil)
		expectIs(t, err, csi.ErrInvalidRequest)
		_, err = e.server.RegisterVolume(ctx, &rpcshim.VolumeRegisterRequest{Volume: csi.Volume{ID: "../x", Namespace: "default", PluginID: rtPlugin}})
		expectIs(t, err, csi.ErrInvalidID)
		expectEqual(t, len(e.ctl.Calls()), 0)
	})
}

// nodeOnlyPlugin adds plugin id, with a node instance on n2 and no
// controller.
func (e *srvEnv) nodeOnlyPlugin(id string) {
	e.t.Helper()
	n, err := e.store.Node("n2")
	must(e.t, err)
	var list []csi.PluginInfo
	for _, p := range n.Plugins {
		list = append(list, *p)
	}
	list = append(list, csi.PluginInfo{PluginID: id, Type: csi.PluginTypeNode, Healthy: true, UpdateTime: rtTime,
		Provider: "plain.csikit.io", NodeInfo: &csi.NodeInfo{ID: "plain-n2"}})
	e.apply(state.UpsertNodePlugins{NodeID: "n2", Plugins: list})
}

func expectNoVolume(t *testing.T, e *srvEnv, id string) {
	t.Helper()
	_, err := e.store.Volume("default", id)
	expectIs(t, err, csi.ErrVolumeNotFound)
}

func TestServer_CreateVolume(t *testing.T) {
	ctx := context.Background()
	create := func(e *srvEnv, v csi.Volume) (*rpcshim.VolumeResponse, error) {
		if v.Namespace == "" {
			v.Namespace = "default"
		}
		v.PluginID = rtPlugin
		v.Capabilities = []csi.Capability{snwFS}
		v.Secrets = csi.Secrets{"token": "s3cr3t"}
		return e.server.CreateVolume(ctx, &rpcshim.VolumeCreateRequest{Volume: v})
	}
	t.Run("created and registered", func(t *testing.T) {
		e := newSrvEnv(t, allControllerCaps)
		resp, err := create(e, csi.Volume{ID: "vol-a", RequestedCapacityMin: 5 << 20, Parameters: map[string]string{"tier": "fast"}})
		must(t, err)
		v := resp.Volume
		got, ok := e.ctl.Volume(v.ExternalID)
		if !ok {
			t.Fatalf("the plugin has no volume %q", v.ExternalID)
		}
		expectEqual(t, got.Name, "default/vol-a")
		expectEqual(t, v.Capacity, got.Capacity)
		expectEqual(t, v.Secrets, csi.Secrets(nil))
		expectEqual(t, resp.ControllerNodeID, "n1")
		if resp.Index == 0 {
			t.Error("no index in the response")
		}

		_, err = create(e, csi.Volume{ID: "vol-a"})
		expectIs(t, err, csi.ErrVolumeExists)
		expectEqual(t, e.ctl.CallCount(csitest.MethodCreateVolume), 1)
	})
	t.Run("plugin name from Volume.Name", func(t *testing.T) {
		e := newSrvEnv(t, allControllerCaps)
		resp, err := create(e, csi.Volume{ID: "vol-a", Name: "database"})
		must(t, err)
		got, _ := e.ctl.Volume(resp.Volume.ExternalID)
		expectEqual(t, got.Name, "database")
	})
	t.Run("a refused intent calls no plugin", func(t *testing.T) {
		e := newSrvEnv(t, allControllerCaps)
		_, err := create(e, csi.Volume{ID: "vol-a", Provider: "someone.else"})
		expectIs(t, err, csi.ErrInvalidRequest)
		expectContains(t, err.Error(), "the plugin was not called")
		expectEqual(t, e.ctl.CallCount(csitest.MethodCreateVolume), 0)
		expectNoVolume(t, e, "vol-a")
	})
	t.Run("no quorum: the plugin is not called", func(t *testing.T) {
		e := newSrvEnv(t, allControllerCaps)
		srv := e.serverWith(t, func(state.Command) error { return fmt.Errorf("%w: no leader", csi.ErrUnavailable) })
		_, err := srv.CreateVolume(ctx, &rpcshim.VolumeCreateRequest{Volume: csi.Volume{
			ID: "vol-a", Namespace: "default", PluginID: rtPlugin, Capabilities: []csi.Capability{snwFS},
		}})
		expectIs(t, err, csi.ErrUnavailable)
		expectEqual(t, e.ctl.CallCount(csitest.MethodCreateVolume), 0)
		expectEqual(t, len(e.ctl.Volumes()), 0)
	})
	t.Run("the record fails after creation: the intent stays and a retry completes it", func(t *testing.T) {
		e := newSrvEnv(t, allControllerCaps)
		fail := true
		srv := e.serverWith(t, func(cmd state.Command) error {
			if r, ok := cmd.(state.RegisterVolume); ok && !r.Volume.Creating && fail {
				fail = false
				return fmt.Errorf("%w: leader lost", csi.ErrUnavailable)
			}
			return nil
		})
		req := &rpcshim.VolumeCreateRequest{Volume: csi.Volume{
			ID: "vol-a", Namespace: "default", PluginID: rtPlugin, Capabilities: []csi.Capability{snwFS},
		}}
		_, err := srv.CreateVolume(ctx, req)
		expectIs(t, err, csi.ErrUnavailable)
		expectContains(t, err.Error(), "retry the create")
		v := e.volume("vol-a")
		if !v.Creating || v.ExternalID != "" {
			t.Fatalf("volume after a lost record: %+v, want the creation intent", v)
		}
		// The intent keeps claims out.
		e.allocs("a1", "n2")
		_, err = e.claim("vol-a", "a1", "n2", csi.ClaimWrite, snwFS)
		expectIs(t, err, csi.ErrVolumeInUse)
		expectContains(t, err.Error(), "being created")
		_, err = e.server.DeleteVolume(ctx, &rpcshim.VolumeDeleteRequest{Namespace: "default", VolumeID: "vol-a"})
		expectIs(t, err, csi.ErrVolumeInUse)

		resp, err := srv.CreateVolume(ctx, req)
		must(t, err)
		expectEqual(t, resp.Volume.Creating, false)
		expectEqual(t, e.ctl.CallCount(csitest.MethodCreateVolume), 2)
		expectEqual(t, len(e.ctl.Volumes()), 1) // the same name: one backing volume
		_, ok := e.ctl.Volume(resp.Volume.ExternalID)
		expectEqual(t, ok, true)
		_, err = e.claim("vol-a", "a1", "n2", csi.ClaimWrite, snwFS)
		must(t, err)
	})
	t.Run("a retryable plugin error keeps the intent", func(t *testing.T) {
		e := newSrvEnv(t, allControllerCaps)
		e.ctl.FailNext(csitest.MethodCreateVolume, codes.Unavailable, 1)
		_, err := create(e, csi.Volume{ID: "vol-a"})
		expectEqual(t, csi.IsRetryable(err), true)
		expectEqual(t, e.volume("vol-a").Creating, true)
		resp, err := create(e, csi.Volume{ID: "vol-a"})
		must(t, err)
		expectEqual(t, resp.Volume.Creating, false)
		expectEqual(t, len(e.ctl.Volumes()), 1)
	})
	t.Run("plugin refuses for good: the intent goes", func(t *testing.T) {
		e := newSrvEnv(t, allControllerCaps)
		e.ctl.FailNext(csitest.MethodCreateVolume, codes.OutOfRange, 1)
		_, err := create(e, csi.Volume{ID: "vol-a"})
		expectEqual(t, csi.CodeOf(err), csi.CodeOutOfRange)
		expectNoVolume(t, e, "vol-a")
	})
	t.Run("no create capability", func(t *testing.T) {
		e := newSrvEnv(t, csi.ControllerCapabilities{PublishUnpublishVolume: true})
		_, err := create(e, csi.Volume{ID: "vol-a"})
		expectEqual(t, csi.CodeOf(err), csi.CodeUnimplemented)
		expectClass(t, err, csi.ClassFinal)
	})
}

func TestServer_DeleteVolume(t *testing.T) {
	ctx := context.Background()
	delResp := func(e *srvEnv, id string) (*rpcshim.WriteResponse, error) {
		return e.server.DeleteVolume(ctx, &rpcshim.VolumeDeleteRequest{Namespace: "default", VolumeID: id})
	}
	del := func(e *srvEnv, id string) error {
		_, err := delResp(e, id)
		return err
	}
	t.Run("deleted and deregistered", func(t *testing.T) {
		e := newSrvEnv(t, allControllerCaps)
		e.register("vol-a", "ext-a", snwFS)
		resp, err := delResp(e, "vol-a")
		must(t, err)
		expectEqual(t, resp.ControllerNodeID, "n1")
		expectNoVolume(t, e, "vol-a")
		expectEqual(t, len(e.ctl.Volumes()), 0)
		calls := e.ctl.CallsTo(csitest.MethodDeleteVolume)
		expectEqual(t, calls[0].Request.(*csipb.DeleteVolumeRequest).GetVolumeId(), "ext-a")
	})
	t.Run("in use", func(t *testing.T) {
		e := newSrvEnv(t, allControllerCaps)
		e.register("vol-a", "ext-a", snwFS)
		e.allocs("a1", "n2")
		_, err := e.claim("vol-a", "a1", "n2", csi.ClaimWrite, snwFS)
		must(t, err)
		err = del(e, "vol-a")
		expectIs(t, err, csi.ErrVolumeInUse)
		expectContains(t, err.Error(), "allocations a1 still claim it")
		expectEqual(t, e.ctl.CallCount(csitest.MethodDeleteVolume), 0)
	})
	t.Run("already gone in the plugin", func(t *testing.T) {
		e := newSrvEnv(t, allControllerCaps)
		e.register("vol-a", "ext-a", snwFS)
		e.ctl.RemoveVolume("ext-a")
		resp, err := delResp(e, "vol-a")
		must(t, err)
		expectEqual(t, resp.ControllerNodeID, "n1") // the plugin answered OK, as CSI asks
		expectNoVolume(t, e, "vol-a")
	})
	t.Run("plugin answers NotFound", func(t *testing.T) {
		e := newSrvEnv(t, allControllerCaps)
		e.register("vol-a", "ext-a", snwFS)
		e.ctl.FailNext(csitest.MethodDeleteVolume, codes.NotFound, 1)
		resp, err := delResp(e, "vol-a")
		must(t, err)
		// NotFound comes back from the Router as an error, without the
		// node that answered it.
		expectEqual(t, resp.ControllerNodeID, "")
		expectNoVolume(t, e, "vol-a")
	})
	t.Run("plugin fails", func(t *testing.T) {
		e := newSrvEnv(t, allControllerCaps)
		e.register("vol-a", "ext-a", snwFS)
		e.ctl.FailNext(csitest.MethodDeleteVolume, codes.Internal, 1)
		err := del(e, "vol-a")
		expectEqual(t, csi.CodeOf(err), csi.CodeInternal)
		e.volume("vol-a") // still registered
	})
	t.Run("unknown volume", func(t *testing.T) {
		e := newSrvEnv(t, allControllerCaps)
		expectIs(t, del(e, "vol-x"), csi.ErrVolumeNotFound)
	})
}

func TestServer_DeregisterVolume(t *testing.T) {
	ctx := context.Background()
	e := newSrvEnv(t, allControllerCaps)
	e.register("vol-a", "ext-a", snwFS)
	e.allocs("a1", "n2")
	_, err := e.claim("vol-a", "a1", "n2", csi.ClaimWrite, snwFS)
	must(t, err)
	_, err = e.server.DeregisterVolume(ctx, &rpcshim.VolumeDeregisterRequest{Namespace: "default", VolumeID: "vol-a"})
	expectIs(t, err, csi.ErrVolumeInUse)
	resp, err := e.server.DeregisterVolume(ctx, &rpcshim.VolumeDeregisterRequest{Namespace: "default", VolumeID: "vol-a", Force: true})
	must(t, err)
	if resp.Index == 0 {
		t.Error("no index")
	}
	expectEqual(t, resp.ControllerNodeID, "") // no controller call
	expectNoVolume(t, e, "vol-a")
	expectEqual(t, e.ctl.CallCount(csitest.MethodDeleteVolume), 0)
}

// TestServer_Claim_Attachments walks the attachment decisions of claims
// on one multi-node volume.
func TestServer_Claim_Attachments(t *testing.T) {
	e := newSrvEnv(t, allControllerCaps)
	e.register("vol-a", "ext-a", mnmwFS, snwFS)
	e.allocs("a1", "n2", "a2", "n2", "a3", "n3", "a4", "n2", "a5", "n2")
	devicePath := map[string]string{"devicePath": "/dev/fake-ext-a"}

	// A new attachment: ControllerPublish once, to n2's CSI node ID.
	r1, err := e.claim("vol-a", "a1", "n2", csi.ClaimWrite, mnmwFS)
	must(t, err)
	expectEqual(t, r1.Claim.ExternalNodeID, "csi-n2")
	expectEqual(t, r1.ControllerNodeID, "n1") // the controller that attached it
	expectEqual(t, r1.Attachment.PublishContext, devicePath)
	expectEqual(t, r1.Attachment.State, csi.AttachmentAttached)
	expectEqual(t, r1.Volume.Attachments["n2"].PublishContext, devicePath)
	expectEqual(t, r1.Volume.Secrets, csi.Secrets{"token": "s3cr3t"}) // the node needs them to mount
	expectEqual(t, publishedTo(e.ctl), []string{"csi-n2"})
	call := e.ctl.CallsTo(csitest.MethodControllerPublishVolume)[0].Request.(*csipb.ControllerPublishVolumeRequest)
	expectEqual(t, call.GetVolumeId(), "ext-a")
	expectEqual(t, call.GetReadonly(), false)
	expectEqual(t, call.GetVolumeContext(), map[string]string{"zone": "a"})

	// The same allocation again: nothing new.
	again, err := e.claim("vol-a", "a1", "n2", csi.ClaimWrite, mnmwFS)
	must(t, err)
	expectEqual(t, again.Attachment.PublishContext, devicePath)
	expectEqual(t, again.ControllerNodeID, "")
	expectEqual(t, publishedTo(e.ctl), []string{"csi-n2"})

	// A second claim on n2 joins the attachment.
	r2, err := e.claim("vol-a", "a2", "n2", csi.ClaimRead, mnmwFS)
	must(t, err)
	expectEqual(t, r2.Attachment.PublishContext, devicePath)
	expectEqual(t, r2.Attachment.CreateIndex, r1.Attachment.CreateIndex)
	expectEqual(t, r2.ControllerNodeID, "")
	expectEqual(t, publishedTo(e.ctl), []string{"csi-n2"})

	// Another node: a new attachment.
	r3, err := e.claim("vol-a", "a3", "n3", csi.ClaimRead, mnmwFS)
	must(t, err)
	expectEqual(t, r3.ControllerNodeID, "n1")
	expectEqual(t, publishedTo(e.ctl), []string{"csi-n2", "csi-n3"})

	// a1 and a2 stop: their claims are past and the attachment stays
	// attached, so a new claim on n2 joins it.
	e.apply(state.UpsertAllocations{ReleasedAt: rtTime, Allocations: []csi.Allocation{
		{ID: "a1", Namespace: "default", NodeID: "n2", Terminal: true},
		{ID: "a2", Namespace: "default", NodeID: "n2", Terminal: true},
	}})
	r4, err := e.claim("vol-a", "a4", "n2", csi.ClaimWrite, mnmwFS)
	must(t, err)
	expectEqual(t, r4.Attachment.PublishContext, devicePath)
	expectEqual(t, r4.ControllerNodeID, "")
	expectEqual(t, publishedTo(e.ctl), []string{"csi-n2", "csi-n3"})

	// While the attachment to n2 is being detached, a claim there is
	// refused as retryable; once it is removed, a new claim there is a
	// new attachment again.
	e.apply(state.UpsertAllocations{ReleasedAt: rtTime, Allocations: []csi.Allocation{
		{ID: "a4", Namespace: "default", NodeID: "n2", Terminal: true},
	}})
	for _, a := range []string{"a1", "a2", "a4"} {
		e.apply(state.CheckpointClaim{Namespace: "default", VolumeID: "vol-a", AllocationID: a, State: csi.ClaimNodeDetached})
	}
	e.apply(state.DetachVolume{Namespace: "default", VolumeID: "vol-a", NodeID: "n2"})
	_, err = e.claim("vol-a", "a5", "n2", csi.ClaimWrite, mnmwFS)
	expectIs(t, err, csi.ErrVolumeInUse)
	expectEqual(t, csi.IsRetryable(err), true)
	e.apply(state.Batch{Commands: []state.Command{
		state.RemoveAttachment{Namespace: "default", VolumeID: "vol-a", NodeID: "n2"},
		state.FreeClaim{Namespace: "default", VolumeID: "vol-a", AllocationID: "a1"},
		state.FreeClaim{Namespace: "default", VolumeID: "vol-a", AllocationID: "a2"},
		state.FreeClaim{Namespace: "default", VolumeID: "vol-a", AllocationID: "a4"},
	}})
	r5, err := e.claim("vol-a", "a5", "n2", csi.ClaimWrite, mnmwFS)
	must(t, err)
	expectEqual(t, r5.ControllerNodeID, "n1")
	expectEqual(t, publishedTo(e.ctl), []string{"csi-n2", "csi-n3", "csi-n2"})
	e.ctl.RequireNoViolations(t)
}

// TestServer_Claim_SecondWriterMessage pins what a refused second
// writer is told: who holds the volume and what to do, in the claim's
// own words (it read "batch command 0 (claim-volume): …" when a claim
// that shared an attachment was written as a batch).
func TestServer_Claim_SecondWriterMessage(t *testing.T) {
	e := newSrvEnv(t, allControllerCaps)
	e.register("vol-a", "ext-a", snwFS)
	e.allocs("a1", "n2", "a2", "n2")
	_, err := e.claim("vol-a", "a1", "n2", csi.ClaimWrite, snwFS)
	must(t, err)
	_, err = e.claim("vol-a", "a2", "n2", csi.ClaimWrite, snwFS)
	expectIs(t, err, csi.ErrMaxClaims)
	msg := err.Error()
	for _, want := range []string{"allocation a1 holds it for writing", "allocation a2 can claim it for reading", "once that claim is released"} {
		expectContains(t, msg, want)
	}
	if strings.Contains(msg, "batch command") || strings.Contains(msg, "allocations a1, a2") {
		t.Errorf("message %q names the batch or the requester as a holder", msg)
	}
}

func TestServer_Claim_ReadOnlyAttachment(t *testing.T) {
	e := newSrvEnv(t, allControllerCaps)
	e.register("vol-ro", "ext-ro", mnroFS)
	e.allocs("a1", "n2")
	_, err := e.claim("vol-ro", "a1", "n2", csi.ClaimRead, mnroFS)
	must(t, err)
	call := e.ctl.CallsTo(csitest.MethodControllerPublishVolume)[0].Request.(*csipb.ControllerPublishVolumeRequest)
	expectEqual(t, call.GetReadonly(), true)
}

func TestServer_Claim_PublishFails(t *testing.T) {
	t.Run("final error removes the claim", func(t *testing.T) {
		e := newSrvEnv(t, allControllerCaps)
		e.register("vol-a", "ext-a", snwFS)
		e.allocs("a1", "n2")
		e.ctl.FailNext(csitest.MethodControllerPublishVolume, codes.FailedPrecondition, 1)
		_, err := e.claim("vol-a", "a1", "n2", csi.ClaimWrite, snwFS)
		mustErr(t, err)
		expectClass(t, err, csi.ClassFinal)
		expectEqual(t, csi.CodeOf(err), csi.CodeFailedPrecondition)
		expectContains(t, err.Error(), "so the claim was removed")
		expectEqual(t, e.volume("vol-a").InUse(), false)
	})
	t.Run("retryable error keeps the claim for a retry", func(t *testing.T) {
		e := newSrvEnv(t, allControllerCaps)
		e.register("vol-a", "ext-a", snwFS)
		e.allocs("a1", "n2")
		e.ctl.FailNext(csitest.MethodControllerPublishVolume, codes.Unavailable, 1)
		_, err := e.claim("vol-a", "a1", "n2", csi.ClaimWrite, snwFS)
		mustErr(t, err)
		expectEqual(t, csi.IsRetryable(err), true)
		expectContains(t, err.Error(), "the claim is kept")
		v := e.volume("vol-a")
		if c, a := v.WriteClaims["a1"], v.Attachments["n2"]; c == nil || a == nil || a.State != csi.AttachmentAttaching {
			t.Fatalf("claim and attachment after a retryable failure: %+v, %+v", c, a)
		}

		r, err := e.claim("vol-a", "a1", "n2", csi.ClaimWrite, snwFS)
		must(t, err)
		expectEqual(t, r.Attachment.PublishContext, map[string]string{"devicePath": "/dev/fake-ext-a"})
		expectEqual(t, r.ControllerNodeID, "n1")
		expectEqual(t, publishedTo(e.ctl), []string{"csi-n2", "csi-n2"})
		expectEqual(t, e.volume("vol-a").Attachments["n2"].PublishContext, r.Attachment.PublishContext)
	})
	t.Run("no healthy controller keeps the claim", func(t *testing.T) {
		e := newSrvEnv(t, allControllerCaps)
		e.register("vol-a", "ext-a", snwFS)
		e.allocs("a1", "n2")
		// The claim is written while the controller is healthy (a new
		// claim is refused without one), and its publish does not go
		// through; then the controller turns unhealthy.
		e.ctl.FailNext(csitest.MethodControllerPublishVolume, codes.Unavailable, 1)
		_, err := e.claim("vol-a", "a1", "n2", csi.ClaimWrite, snwFS)
		expectEqual(t, csi.IsRetryable(err), true)
		ctrl := rtControllerInstance(false, "probe failed")
		e.apply(state.UpsertNodePlugins{NodeID: "n1", Plugins: []csi.PluginInfo{ctrl}})

		_, err = e.claim("vol-a", "a1", "n2", csi.ClaimWrite, snwFS)
		expectIs(t, err, csi.ErrNoController)
		expectClass(t, err, csi.ClassRetryable)
		expectContains(t, err.Error(), "the claim is kept")
		if e.volume("vol-a").WriteClaims["a1"] == nil {
			t.Error("the claim was dropped")
		}
		expectEqual(t, e.ctl.CallCount(csitest.MethodControllerPublishVolume), 1)
	})
}

func TestServer_Claim_NoPublish(t *testing.T) {
	t.Run("plugin without PUBLISH_UNPUBLISH_VOLUME", func(t *testing.T) {
		e := newSrvEnv(t, csi.ControllerCapabilities{CreateDeleteVolume: true})
		e.register("vol-a", "ext-a", snwFS)
		e.allocs("a1", "n2")
		r, err := e.claim("vol-a", "a1", "n2", csi.ClaimWrite, snwFS)
		must(t, err)
		expectEqual(t, r.Attachment.PublishContext, map[string]string(nil))
		expectEqual(t, r.Attachment.State, csi.AttachmentAttached)
		expectEqual(t, r.ControllerNodeID, "")
		expectEqual(t, e.ctl.CallCount(csitest.MethodControllerPublishVolume), 0)
	})
	t.Run("plugin without controller", func(t *testing.T) {
		e := newSrvEnv(t, allControllerCaps)
		e.nodeOnlyPlugin("p2")
		e.allocs("a1", "n2")
		_, err := e.server.RegisterVolume(context.Background(), &rpcshim.VolumeRegisterRequest{Volume: csi.Volume{
			ID: "vol-b", Namespace: "default", PluginID: "p2", ExternalID: "ext-b", Capabilities: []csi.Capability{snwFS},
		}})
		must(t, err)
		r, err := e.claim("vol-b", "a1", "n2", csi.ClaimWrite, snwFS)
		must(t, err)
		expectEqual(t, r.Claim.ExternalNodeID, "plain-n2")
		expectEqual(t, r.ControllerNodeID, "")
		expectEqual(t, len(e.ctl.Calls()), 0)
	})
	t.Run("refused claims call nothing", func(t *testing.T) {
		e := newSrvEnv(t, allControllerCaps)
		e.register("vol-a", "ext-a", snwFS)
		e.allocs("a1", "n2", "a2", "n3")
		e.apply(state.UpsertAllocations{ReleasedAt: rtTime, Allocations: []csi.Allocation{
			{ID: "a2", Namespace: "default", NodeID: "n3", Terminal: true},
		}})
		_, err := e.claim("vol-a", "a2", "n3", csi.ClaimWrite, snwFS)
		expectIs(t, err, csi.ErrAllocationTerminal)
		_, err = e.claim("vol-a", "ghost", "n2", csi.ClaimWrite, snwFS)
		expectIs(t, err, csi.ErrAllocationNotFound)
		_, err = e.claim("vol-a", "a1", "n2", csi.ClaimWrite, mnmwFS)
		expectIs(t, err, csi.ErrAccessModeNotAllowed)
		_, err = e.server.Claim(context.Background(), nil)
		expectIs(t, err, csi.ErrInvalidRequest)
		expectEqual(t, e.ctl.CallCount(csitest.MethodControllerPublishVolume), 0)
	})
}

// TestServer_Unpublish checks a node's early release of a claim, and
// that no release path ever calls ControllerPublishVolume.
func TestServer_Unpublish(t *testing.T) {
	ctx := context.Background()
	e := newSrvEnv(t, allControllerCaps)
	fake := clock.NewFake(rtTime.Add(time.Hour))
	var err error
	e.server, err = rpcshim.NewServer(rpcshim.ServerConfig{Store: e.store, Applier: e.applier, Router: e.router, Clock: fake})
	must(t, err)
	e.register("vol-a", "ext-a", mnmwFS)
	e.register("vol-b", "ext-b", mnmwFS)
	e.allocs("a1", "n2", "a2", "n3")
	for _, v := range []string{"vol-a", "vol-b"} {
		_, err := e.claim(v, "a1", "n2", csi.ClaimWrite, mnmwFS)
		must(t, err)
	}
	_, err = e.claim("vol-a", "a2", "n3", csi.ClaimWrite, mnmwFS)
	must(t, err)
	published := e.ctl.CallCount(csitest.MethodControllerPublishVolume)

	unpublish := func(vol, alloc, node string, detached bool) (*rpcshim.VolumeUnpublishResponse, error) {
		return e.server.Unpublish(ctx, &rpcshim.VolumeUnpublishRequest{
			Namespace: "default", VolumeID: vol, AllocationID: alloc, NodeID: node, NodeDetached: detached,
		})
	}

	_, err = unpublish("vol-a", "a1", "n3", true)
	expectIs(t, err, csi.ErrInvalidRequest)
	expectContains(t, err.Error(), "the claim is on node n2")

	r, err := unpublish("vol-a", "a1", "n2", true)
	must(t, err)
	expectEqual(t, r.Claim.State, csi.ClaimNodeDetached)
	expectEqual(t, r.Claim.ReleasedAt, rtTime.Add(time.Hour))
	// The allocation stopped: its other claim is released too, and waits
	// for its own node step.
	expectEqual(t, e.volume("vol-b").PastClaims["a1"].State, csi.ClaimUnpublishing)

	// Repeating the report changes nothing.
	again, err := unpublish("vol-a", "a1", "n2", true)
	must(t, err)
	expectEqual(t, again.Claim.State, csi.ClaimNodeDetached)
	expectEqual(t, again.Index, uint64(0))

	// Without NodeDetached the claim is released and left to the worker.
	r, err = unpublish("vol-a", "a2", "n3", false)
	must(t, err)
	expectEqual(t, r.Claim.State, csi.ClaimUnpublishing)

	// A claim that was freed is no error.
	e.apply(state.Batch{Commands: []state.Command{
		state.RemoveAttachment{Namespace: "default", VolumeID: "vol-a", NodeID: "n2"},
		state.FreeClaim{Namespace: "default", VolumeID: "vol-a", AllocationID: "a1"},
	}})
	r, err = unpublish("vol-a", "a1", "n2", true)
	must(t, err)
	if r.Claim != nil {
		t.Errorf("claim of a freed allocation: %+v", r.Claim)
	}

	// So is a volume that is gone.
	r, err = unpublish("vol-gone", "a1", "n2", true)
	must(t, err)
	if r.Claim != nil {
		t.Errorf("claim on a missing volume: %+v", r.Claim)
	}

	expectEqual(t, e.ctl.CallCount(csitest.MethodControllerPublishVolume), published)
	_, err = unpublish("vol-a", "../a1", "n2", true)
	expectIs(t, err, csi.ErrInvalidID)
}

func TestServer_Reads(t *testing.T) {
	ctx := context.Background()
	e := newSrvEnv(t, allControllerCaps)
	e.register("vol-a", "ext-a", snwFS)
	e.register("vol-b", "ext-b", snwFS)

	v, err := e.server.Volume(ctx, "default", "vol-a")
	must(t, err)
	expectEqual(t, v.Secrets, csi.Secrets(nil))
	expectEqual(t, v.ControllerRequired, true)
	vols, err := e.server.Volumes(ctx, "default", "vol-")
	must(t, err)
	expectEqual(t, len(vols), 2)
	for _, v := range vols {
		expectEqual(t, v.Secrets, csi.Secrets(nil))
	}
	_, err = e.server.Volume(ctx, "default", "nope")
	expectIs(t, err, csi.ErrVolumeNotFound)

	p, err := e.server.Plugin(ctx, rtPlugin)
	must(t, err)
	expectEqual(t, p.ControllersHealthy, 1)
	expectEqual(t, p.NodesHealthy, 2)
	ps, err := e.server.Plugins(ctx)
	must(t, err)
	expectEqual(t, len(ps), 1)
	_, err = e.server.Plugin(ctx, "nope")
	expectIs(t, err, csi.ErrPluginNotFound)

	done, cancel := context.WithCancel(ctx)
	cancel()
	_, err = e.server.Volumes(done, "", "")
	if !errors.Is(err, context.Canceled) {
		t.Errorf("read with a done ctx: %v", err)
	}
}

// kindsApplier applies through the environment's applier and records the
// kind of each command, a batch as "batch(kind,kind…)".
type kindsApplier struct {
	state.Applier
	mu    sync.Mutex
	kinds []string
}

func (a *kindsApplier) Apply(ctx context.Context, cmd state.Command) (state.Result, error) {
	k := string(cmd.Kind())
	if b, ok := cmd.(state.Batch); ok {
		var in []string
		for _, c := range b.Commands {
			in = append(in, string(c.Kind()))
		}
		k = "batch(" + strings.Join(in, ",") + ")"
	}
	a.mu.Lock()
	a.kinds = append(a.kinds, k)
	a.mu.Unlock()
	return a.Applier.Apply(ctx, cmd)
}

func (a *kindsApplier) take() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := a.kinds
	a.kinds = nil
	return out
}

// TestServer_Claim_Writes checks which writes a claim makes: a new
// attachment writes the claim (with its Attaching record), then, after
// ControllerPublishVolume, AttachVolume; a claim that joins an attached
// attachment writes the claim alone, as a repeated claim does; a refused
// claim stores nothing.
func TestServer_Claim_Writes(t *testing.T) {
	e := newSrvEnv(t, allControllerCaps)
	e.register("vol-a", "ext-a", mnmwFS)
	e.allocs("a1", "n2", "a2", "n2")
	rec := &kindsApplier{Applier: e.applier}
	srv, err := rpcshim.NewServer(rpcshim.ServerConfig{Store: e.store, Applier: rec, Router: e.router})
	must(t, err)
	claim := func(alloc string) (*rpcshim.VolumeClaimResponse, error) {
		return srv.Claim(context.Background(), &rpcshim.VolumeClaimRequest{Namespace: "default", VolumeID: "vol-a",
			Claim: csi.Claim{AllocationID: alloc, NodeID: "n2", Mode: csi.ClaimWrite, AccessMode: mnmwFS.AccessMode, AttachmentMode: mnmwFS.AttachmentMode}})
	}
	devicePath := map[string]string{"devicePath": "/dev/fake-ext-a"}

	tests := []struct {
		name      string
		alloc     string
		wantKinds []string
		wantErr   error
	}{
		{"new attachment", "a1", []string{"claim-volume", "attach-volume"}, nil},
		{"shared attachment", "a2", []string{"claim-volume"}, nil},
		{"repeated claim", "a2", []string{"claim-volume"}, nil},
		{"refused claim", "a9", []string{"claim-volume"}, csi.ErrAllocationNotFound},
	}
	for _, tc := range tests {
		r, err := claim(tc.alloc)
		if got := rec.take(); !slices.Equal(got, tc.wantKinds) {
			t.Errorf("%s: writes %v, want %v", tc.name, got, tc.wantKinds)
		}
		if tc.wantErr != nil {
			expectIs(t, err, tc.wantErr)
			if v := e.volume("vol-a"); v.Claim(tc.alloc) != nil {
				t.Errorf("%s: the refused claim was stored: %+v", tc.name, v.Claim(tc.alloc))
			}
			continue
		}
		must(t, err)
		expectEqual(t, r.Attachment.PublishContext, devicePath)
		expectEqual(t, r.Volume.Attachments["n2"].PublishContext, devicePath)
		// The response's attachment is the caller's own, apart from the volume.
		r.Attachment.PublishContext["devicePath"] = "changed"
		expectEqual(t, r.Volume.Attachments["n2"].PublishContext, devicePath)
	}
	expectEqual(t, publishedTo(e.ctl), []string{"csi-n2"})
	e.ctl.RequireNoViolations(t)
}
