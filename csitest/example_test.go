package csitest_test

import (
	"context"
	"fmt"
	"log"
	"strings"

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

// An end-to-end test runs its scenario once per shape a plugin may
// legally answer in, each on a fake of its own (in a test, inside
// t.Run(s.Name, …) with csitest.Start(t, cfg)). Here each shape only
// says what the fake it makes will do.
func ExampleShapes() {
	base := csitest.Config{
		Type:       csi.PluginTypeMonolith,
		Controller: csi.ControllerCapabilities{CreateDeleteVolume: true, PublishUnpublishVolume: true},
		Node:       csi.NodeCapabilities{StageUnstageVolume: true},
	}
	for _, s := range csitest.Shapes() {
		cfg := base
		s.Apply(&cfg)
		creates := cfg.Type.HasController() && cfg.Controller.CreateDeleteVolume
		attaches := cfg.Type.HasController() && cfg.Controller.PublishUnpublishVolume
		var more []string
		if cfg.RequiresTopologies {
			more = append(more, "topology")
		}
		if cfg.Controller.GetCapacity {
			more = append(more, fmt.Sprintf("capacity(pools=%d)", max(len(cfg.Pools), 1)))
		}
		if cfg.Controller.GetVolume {
			more = append(more, "get-volume(status="+cfg.VolumeStatus.String()+")")
		}
		line := fmt.Sprintf("%-22s create=%-5v attach=%-5v stage=%-5v publish_context=%-6s volume_context=%-6s %s",
			s.Name, creates, attaches, cfg.Node.StageUnstageVolume, cfg.PublishContext, cfg.VolumeContext, strings.Join(more, " "))
		fmt.Println(strings.TrimRight(line, " "))
	}
	// Output:
	// default                create=true  attach=true  stage=true  publish_context=set    volume_context=set
	// publish-context-empty  create=true  attach=true  stage=true  publish_context=empty  volume_context=set
	// publish-context-absent create=true  attach=true  stage=true  publish_context=absent volume_context=set
	// volume-context-empty   create=true  attach=true  stage=true  publish_context=set    volume_context=empty
	// volume-context-absent  create=true  attach=true  stage=true  publish_context=set    volume_context=absent
	// capacity-unknown       create=true  attach=true  stage=true  publish_context=set    volume_context=set
	// topology               create=true  attach=true  stage=true  publish_context=set    volume_context=set    topology
	// no-topology            create=true  attach=true  stage=true  publish_context=set    volume_context=set
	// get-capacity           create=true  attach=true  stage=true  publish_context=set    volume_context=set    capacity(pools=1)
	// capacity-by-topology   create=true  attach=true  stage=true  publish_context=set    volume_context=set    topology capacity(pools=2)
	// get-volume             create=true  attach=true  stage=true  publish_context=set    volume_context=set    get-volume(status=published-nodes)
	// get-volume-condition   create=true  attach=true  stage=true  publish_context=set    volume_context=set    get-volume(status=with-condition)
	// get-volume-no-status   create=true  attach=true  stage=true  publish_context=set    volume_context=set    get-volume(status=absent)
	// no-stage               create=true  attach=true  stage=false publish_context=set    volume_context=set
	// no-controller-publish  create=true  attach=false stage=true  publish_context=set    volume_context=set
	// node-only              create=false attach=false stage=true  publish_context=set    volume_context=set
	// sparse                 create=true  attach=true  stage=true  publish_context=absent volume_context=absent
	// minimal                create=false attach=false stage=false publish_context=set    volume_context=set
}

// HoldReplies makes a plugin that has done the work answer late, and
// out of order: the second ControllerPublishVolume is answered first,
// while the model already holds both attachments.
func ExamplePlugin_HoldReplies() {
	p, err := csitest.New(csitest.Config{Controller: csi.ControllerCapabilities{PublishUnpublishVolume: true}})
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
	ctrl := csipb.NewControllerClient(conn)
	ctx := context.Background()

	gate := p.HoldReplies(csitest.MethodControllerPublishVolume)
	answered := make(chan string, 2)
	publish := func(node string) {
		_, err := ctrl.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{
			VolumeId: "vol-a", NodeId: node,
			VolumeCapability: &csipb.VolumeCapability{
				AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}},
				AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY},
			},
		})
		if err != nil {
			log.Fatal(err)
		}
		answered <- node
	}
	go publish("node-1")
	if err := gate.Wait(ctx, 1); err != nil {
		log.Fatal(err)
	}
	go publish("node-2")
	if err := gate.Wait(ctx, 2); err != nil {
		log.Fatal(err)
	}
	fmt.Println("attached before any reply:", p.Attachments())
	gate.Release(2)
	fmt.Println("answered:", <-answered)
	gate.Release(1)
	fmt.Println("answered:", <-answered)
	// Output:
	// attached before any reply: map[vol-a:[node-1 node-2]]
	// answered: node-2
	// answered: node-1
}
