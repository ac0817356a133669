package sim

import (
	"context"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csitest"
)

// TestNoPublishAfterRelease drives a controller plugin over gRPC
// through publish, unpublish and publish again, and checks that the
// invariant flags the second publish unless a claim on that node spans
// the release.
func TestNoPublishAfterRelease(t *testing.T) {
	ctl := csitest.Start(t, csitest.Config{Type: csi.PluginTypeController, Name: simProvider,
		AdmitUnknownVolumes: true, Controller: csi.ControllerCapabilities{PublishUnpublishVolume: true}})
	ctl.AddVolume("ext-v0", 1<<30, nil)
	conn, err := grpc.NewClient(ctl.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	must(t, err)
	defer conn.Close()
	c := csipb.NewControllerClient(conn)
	ctx := context.Background()
	capab := &csipb.VolumeCapability{AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER}}
	publish := func() {
		_, err := c.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{VolumeId: "ext-v0", NodeId: "csi-n1", VolumeCapability: capab})
		must(t, err)
	}
	publish()
	r := &run{w: &world{ctl: ctl}, p: &plan{}}
	r.noteClaim("v0", "n1", 0) // the first claim: it returned before the release
	_, err = c.ControllerUnpublishVolume(ctx, &csipb.ControllerUnpublishVolumeRequest{VolumeId: "ext-v0", NodeId: "csi-n1"})
	must(t, err)
	if bad := invNoPublishAfterRelease(r); len(bad) != 0 {
		t.Fatalf("publish then unpublish: %v", bad)
	}
	publish()
	if bad := invNoPublishAfterRelease(r); len(bad) != 1 {
		t.Fatalf("a publish after the unpublish with no claim: got %v, want one failure", bad)
	}
	r.noteClaim("v0", "n2", 2) // a claim on another node does not count
	if bad := invNoPublishAfterRelease(r); len(bad) != 1 {
		t.Fatalf("a claim on another node: got %v, want one failure", bad)
	}
	r.claims = append(r.claims, claimSpan{vol: "v0", node: "n1", start: 2, end: 3})
	if bad := invNoPublishAfterRelease(r); len(bad) != 0 {
		t.Fatalf("a new claim on the node after the unpublish: %v", bad)
	}
}
