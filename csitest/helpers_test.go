package csitest_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csitest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// clients are raw CSI clients on one connection to a fake.
type clients struct {
	conn *grpc.ClientConn
	id   csipb.IdentityClient
	ctrl csipb.ControllerClient
	node csipb.NodeClient
}

func dial(t testing.TB, p *csitest.Plugin) clients {
	t.Helper()
	conn, err := grpc.NewClient(p.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dial %s: %v", p.Addr(), err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return clients{conn: conn, id: csipb.NewIdentityClient(conn), ctrl: csipb.NewControllerClient(conn), node: csipb.NewNodeClient(conn)}
}

// start runs a fake with every capability on unless cfg says otherwise,
// and a client for it.
func start(t testing.TB, cfg csitest.Config) (*csitest.Plugin, clients) {
	t.Helper()
	p := csitest.Start(t, cfg)
	return p, dial(t, p)
}

var (
	allController = csi.ControllerCapabilities{
		CreateDeleteVolume: true, PublishUnpublishVolume: true, ListVolumes: true, GetCapacity: true,
		CreateDeleteSnapshot: true, ListSnapshots: true, CloneVolume: true, PublishReadonly: true,
		ExpandVolume: true, ListVolumesPublishedNodes: true, GetVolume: true, SingleNodeMultiWriter: true,
		ModifyVolume: true, GetSnapshot: true,
	}
	allNode = csi.NodeCapabilities{
		StageUnstageVolume: true, GetVolumeStats: true, ExpandVolume: true,
		SingleNodeMultiWriter: true, VolumeMountGroup: true,
	}
	fullConfig = csitest.Config{Controller: allController, Node: allNode}
)

func ctxT(t testing.TB) context.Context {
	t.Helper()
	// A safety net so that a bug hangs no test forever; no test depends on
	// it firing.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func mountCap(mode csipb.VolumeCapability_AccessMode_Mode) *csipb.VolumeCapability {
	return &csipb.VolumeCapability{
		AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{FsType: "ext4", MountFlags: []string{"noatime"}}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: mode},
	}
}

func blockCap(mode csipb.VolumeCapability_AccessMode_Mode) *csipb.VolumeCapability {
	return &csipb.VolumeCapability{
		AccessType: &csipb.VolumeCapability_Block{Block: &csipb.VolumeCapability_BlockVolume{}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: mode},
	}
}

const (
	snw = csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
	mnr = csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
	ssw = csipb.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER
)

func wantCode(t testing.TB, err error, want codes.Code) {
	t.Helper()
	if got := status.Code(err); got != want {
		t.Fatalf("got code %s (%v), want %s", got, err, want)
	}
}

func noErr(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
}

// paths returns a staging directory and a target path whose parent
// exists, under a per-test temporary directory.
func paths(t testing.TB) (staging, target string) {
	t.Helper()
	d := t.TempDir()
	staging = filepath.Join(d, "staging")
	if err := os.Mkdir(staging, 0o750); err != nil {
		t.Fatal(err)
	}
	parent := filepath.Join(d, "targets")
	if err := os.Mkdir(parent, 0o750); err != nil {
		t.Fatal(err)
	}
	return staging, filepath.Join(parent, "alloc-1")
}

// lifecycle runs a correct claim and release of a created volume on a
// full monolith: create, controller publish, stage, publish, unpublish,
// unstage, controller unpublish, delete.
func lifecycle(t testing.TB, p *csitest.Plugin, c clients, secrets map[string]string) {
	t.Helper()
	ctx := ctxT(t)
	staging, target := paths(t)
	vc := mountCap(snw)
	cr, err := c.ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{
		Name: "data", VolumeCapabilities: []*csipb.VolumeCapability{vc}, Secrets: secrets,
	})
	noErr(t, err)
	vol := cr.GetVolume()
	id := vol.GetVolumeId()
	pub, err := c.ctrl.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{
		VolumeId: id, NodeId: csitest.DefaultNodeID, VolumeCapability: vc, Secrets: secrets, VolumeContext: vol.GetVolumeContext(),
	})
	noErr(t, err)
	_, err = c.node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{
		VolumeId: id, StagingTargetPath: staging, VolumeCapability: vc, PublishContext: pub.GetPublishContext(),
		Secrets: secrets, VolumeContext: vol.GetVolumeContext(),
	})
	noErr(t, err)
	_, err = c.node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{
		VolumeId: id, StagingTargetPath: staging, TargetPath: target, VolumeCapability: vc,
		PublishContext: pub.GetPublishContext(), Secrets: secrets, VolumeContext: vol.GetVolumeContext(),
	})
	noErr(t, err)
	_, err = c.node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target})
	noErr(t, err)
	_, err = c.node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging})
	noErr(t, err)
	_, err = c.ctrl.ControllerUnpublishVolume(ctx, &csipb.ControllerUnpublishVolumeRequest{
		VolumeId: id, NodeId: csitest.DefaultNodeID, Secrets: secrets,
	})
	noErr(t, err)
	_, err = c.ctrl.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: id, Secrets: secrets})
	noErr(t, err)
}

// fatalRecorder captures a helper's failure instead of failing the test.
type fatalRecorder struct {
	testing.TB
	failed bool
	msg    string
}

func (r *fatalRecorder) Helper() {}
func (r *fatalRecorder) Fatal(args ...any) {
	r.failed, r.msg = true, fmt.Sprint(args...)
}
func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.failed, r.msg = true, fmt.Sprintf(format, args...)
}
