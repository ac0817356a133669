package plugintest_test

import (
	"context"
	"fmt"
	"log"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/plugintest"
)

// Check runs the lifecycle outside a test, here against csitest's fake
// plugin, and reports to a Recorder. In a test, plugintest.Run(t, cfg)
// does the same and reports to t.
func Example() {
	p, err := csitest.New(csitest.Config{
		Controller: csi.ControllerCapabilities{CreateDeleteVolume: true, PublishUnpublishVolume: true, ListVolumes: true, CreateDeleteSnapshot: true, ListSnapshots: true},
		Node:       csi.NodeCapabilities{StageUnstageVolume: true},
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := p.Start(); err != nil {
		log.Fatal(err)
	}
	defer p.Stop()

	r := &plugintest.Recorder{}
	err = plugintest.Check(context.Background(), plugintest.Config{
		Endpoint: "unix://" + p.Endpoint(),
		// The fake keeps no data: each target is a directory of its own.
		DataCheck: plugintest.DataWriterOnly,
	}, r)
	if err != nil {
		log.Fatal(err)
	}
	for _, s := range r.Steps()[:12] {
		fmt.Println(s.Status, s.Name)
	}
	fmt.Println("…", len(r.Steps()), "steps, failed:", r.Failed())
	fmt.Println("volumes left in the plugin:", len(p.Volumes()))
	// Output:
	// pass fingerprint
	// pass register plugin on the node
	// pass create volume
	// pass create volume (idempotent repeat)
	// pass create volume without a name
	// pass ListVolumes
	// pass ListVolumes (paging)
	// pass ListVolumes (invalid starting token)
	// skip GetCapacity
	// skip ControllerGetVolume
	// pass ValidateVolumeCapabilities
	// pass CreateVolume (128-byte name)
	// … 57 steps, failed: false
	// volumes left in the plugin: 0
}

// A plugin that is not idempotent: a second, identical NodePublishVolume
// answers AlreadyExists. The Recorder holds the failure, which names the
// step, the call, the code and what the spec requires.
func ExampleRecorder() {
	p, err := csitest.New(csitest.Config{
		Controller: csi.ControllerCapabilities{CreateDeleteVolume: true},
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := p.Start(); err != nil {
		log.Fatal(err)
	}
	defer p.Stop()
	published := map[string]bool{}
	p.SetHook(csitest.MethodNodePublishVolume, func(_ context.Context, _ string, req any) error {
		target := req.(interface{ GetTargetPath() string }).GetTargetPath()
		if published[target] {
			return status.Error(codes.AlreadyExists, "already published")
		}
		published[target] = true
		return nil
	})

	r := &plugintest.Recorder{}
	cfg := plugintest.Config{Endpoint: p.Endpoint(), DataCheck: plugintest.DataWriterOnly}
	if err := plugintest.Check(context.Background(), cfg, r); err != nil {
		log.Fatal(err)
	}
	for _, f := range r.Failures() {
		fmt.Println(f)
	}
	// Output:
	// step "publish (idempotent repeat)": NodePublishVolume returned AlreadyExists; the spec requires OK when the volume is already published at target_path with identical arguments (plugin message: "already published")
}

// Coverage checks are chosen by name, and Faults adds the orchestrator's
// own failures: node agent restarts and cancelled calls retried.
func ExampleConfig_coverageAndFaults() {
	p, err := csitest.New(csitest.Config{
		Controller: csi.ControllerCapabilities{CreateDeleteVolume: true, PublishUnpublishVolume: true, ListVolumes: true},
		Node:       csi.NodeCapabilities{StageUnstageVolume: true},
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := p.Start(); err != nil {
		log.Fatal(err)
	}
	defer p.Stop()

	r := &plugintest.Recorder{}
	err = plugintest.Check(context.Background(), plugintest.Config{
		Endpoint:   p.Endpoint(),
		DataCheck:  plugintest.DataWriterOnly,
		RunChecks:  "^ListVolumes",
		SkipChecks: "invalid",
		Faults:     true,
	}, r)
	if err != nil {
		log.Fatal(err)
	}
	for _, s := range r.Steps() {
		if strings.HasPrefix(s.Name, "ListVolumes") || strings.HasPrefix(s.Name, "restart") || strings.HasPrefix(s.Name, "cancelled") {
			fmt.Println(s.Status, s.Name)
		}
	}
	fmt.Println("failed:", r.Failed())
	// Output:
	// pass ListVolumes
	// pass ListVolumes (paging)
	// pass restart the node agent (after the first mount)
	// pass cancelled call retried (ControllerPublishVolume)
	// pass cancelled call retried (NodeStageVolume)
	// pass cancelled call retried (NodePublishVolume)
	// pass restart the node agent (between the unmounts)
	// pass restart the node agent (during the release, after NodeUnpublishVolume)
	// pass restart the node agent (before the release)
	// failed: false
}
