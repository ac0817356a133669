package csitest_test

import (
	"context"
	"fmt"
	"log"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csitest"
)

// A test starts a fake (in a test, csitest.Start(t, cfg) does New, Start
// and the cleanup), talks to it over its socket, and checks the call log
// and the lifecycle checker (p.RequireNoViolations(t)).
func Example() {
	p, err := csitest.New(csitest.Config{
		Name:       "example.csikit.io",
		Controller: csi.ControllerCapabilities{CreateDeleteVolume: true},
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := p.Start(); err != nil {
		log.Fatal(err)
	}
	defer p.Stop()

	conn, err := grpc.NewClient(p.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	ctx := context.Background()

	info, err := csipb.NewIdentityClient(conn).GetPluginInfo(ctx, &csipb.GetPluginInfoRequest{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("plugin:", info.GetName())

	vol, err := csipb.NewControllerClient(conn).CreateVolume(ctx, &csipb.CreateVolumeRequest{
		Name: "data",
		VolumeCapabilities: []*csipb.VolumeCapability{{
			AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}},
			AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		}},
		Secrets: map[string]string{"token": "never logged"},
	})
	if err != nil {
		log.Fatal(err)
	}
	state, _ := p.Volume(vol.GetVolume().GetVolumeId())
	fmt.Println("volume:", state.ID, state.Name, state.Capacity)
	fmt.Println("calls:", p.Methods())
	fmt.Println("violations:", len(p.Violations()))
	// Output:
	// plugin: example.csikit.io
	// volume: vol-1 data 1073741824
	// calls: [GetPluginInfo CreateVolume]
	// violations: 0
}

// FailNext makes the next calls of one RPC fail, as a flaky plugin
// would; the call log records them.
func ExamplePlugin_FailNext() {
	p, err := csitest.New(csitest.Config{})
	if err != nil {
		log.Fatal(err)
	}
	if err := p.Start(); err != nil {
		log.Fatal(err)
	}
	defer p.Stop()
	conn, err := grpc.NewClient(p.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	identity := csipb.NewIdentityClient(conn)

	p.FailNext(csitest.MethodProbe, codes.Unavailable, 2)
	for range 3 {
		_, err := identity.Probe(context.Background(), &csipb.ProbeRequest{})
		fmt.Println(status.Code(err))
	}
	for _, c := range p.Calls() {
		fmt.Println(c.Method, c.Code)
	}
	// Output:
	// Unavailable
	// Unavailable
	// OK
	// Probe Unavailable
	// Probe Unavailable
	// Probe OK
}

// The lifecycle checker notices a CO that publishes a volume before
// staging it on a plugin that advertises STAGE_UNSTAGE_VOLUME.
func ExamplePlugin_Violations() {
	p, err := csitest.New(csitest.Config{
		Type: csi.PluginTypeNode,
		Node: csi.NodeCapabilities{StageUnstageVolume: true},
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := p.Start(); err != nil {
		log.Fatal(err)
	}
	defer p.Stop()
	p.AddVolume("vol-a", 1<<30, nil)
	conn, err := grpc.NewClient(p.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()

	_, err = csipb.NewNodeClient(conn).NodePublishVolume(context.Background(), &csipb.NodePublishVolumeRequest{
		VolumeId:   "vol-a",
		TargetPath: "/csi/targets/alloc-1",
		VolumeCapability: &csipb.VolumeCapability{
			AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}},
			AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		},
	})
	fmt.Println(status.Code(err))
	for _, v := range p.Violations() {
		fmt.Println(v.Method, v.VolumeID, v.Rule)
	}
	// Output:
	// FailedPrecondition
	// NodePublishVolume vol-a node-publish-before-stage
}
