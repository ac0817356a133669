package rpcshim_test

import (
	"context"
	"testing"
	"time"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/clock"
	"github.com/csikit/csikit/health"
	"github.com/csikit/csikit/rpcshim"
)

var driftCaps = csi.ControllerCapabilities{PublishUnpublishVolume: true, ListVolumes: true, ListVolumesPublishedNodes: true, GetVolume: true}

func (e *srvEnv) monitor(clk clock.Clock) *health.Monitor {
	e.t.Helper()
	m, err := health.New(health.Config{Store: e.store, Applier: e.applier, Controllers: e.router.HealthControllers(), Clock: clk, LeakGrace: time.Minute})
	must(e.t, err)
	return m
}

// A vanished attachment that the health monitor flagged is published
// again by the next claim on the node, a new one or a repeated one.
func TestServer_Claim_RepublishesVanished(t *testing.T) {
	e := newSrvEnv(t, driftCaps)
	e.register("vol-a", "ext-a", mnmwFS)
	e.allocs("a1", "n2", "a2", "n2")
	m := e.monitor(nil)
	ctx := context.Background()

	_, err := e.claim("vol-a", "a1", "n2", csi.ClaimWrite, mnmwFS)
	must(t, err)
	e.ctl.DropAttachment("ext-a", "csi-n2")
	must(t, m.Pass(ctx))
	expectEqual(t, e.volume("vol-a").Attachments["n2"].State, csi.AttachmentAttaching)

	r, err := e.claim("vol-a", "a2", "n2", csi.ClaimWrite, mnmwFS)
	must(t, err)
	expectEqual(t, r.Attachment.State, csi.AttachmentAttached)
	expectEqual(t, publishedTo(e.ctl), []string{"csi-n2", "csi-n2"})
	expectEqual(t, e.ctl.Attachments()["ext-a"], []string{"csi-n2"})

	// Lost again: the first allocation's repeated claim publishes too.
	e.ctl.DropAttachment("ext-a", "csi-n2")
	must(t, m.Pass(ctx))
	_, err = e.claim("vol-a", "a1", "n2", csi.ClaimWrite, mnmwFS)
	must(t, err)
	expectEqual(t, publishedTo(e.ctl), []string{"csi-n2", "csi-n2", "csi-n2"})
	expectEqual(t, e.volume("vol-a").Attachments["n2"].State, csi.AttachmentAttached)
}

// Through the router and a node endpoint on the transport: a leak seen
// by ControllerGetVolume is detached after the grace period with
// ControllerUnpublishVolume on the controller's node.
func TestRouter_HealthControllers_DetachesLeak(t *testing.T) {
	caps := driftCaps
	caps.ListVolumes = false // ControllerGetVolume per volume
	e := newSrvEnv(t, caps)
	e.register("vol-a", "ext-a", mnmwFS)
	clk := clock.NewFake(rtTime)
	m := e.monitor(clk)
	ctx := context.Background()
	e.ctl.AttachOutOfBand("ext-a", "csi-n3")
	must(t, m.Pass(ctx))
	clk.Advance(time.Minute)
	must(t, m.Pass(ctx))
	expectEqual(t, len(e.ctl.Attachments()["ext-a"]), 0)
	expectEqual(t, len(e.volume("vol-a").Attachments), 0)
}

// The Router's adapters meet the interfaces package health declares.
var (
	_ health.Controllers = rpcshim.ControllerCalls{}
	_ health.Nodes       = rpcshim.NodeStatsCalls{}
)
