package plugintest_test

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/examples/hostpathplugin/hostpath"
	"github.com/csikit/csikit/plugintest"
)

// A second node of the same plugin takes the volume over after the
// release: the fake (a monolith and a node fake sharing its back end)
// and the hostpath example (a monolith and a node process on one data
// directory) both pass, and a single-node volume is refused on the
// first node meanwhile.
func TestRun_SecondNode(t *testing.T) {
	t.Run("fake", func(t *testing.T) {
		t.Parallel()
		p := csitest.Start(t, everyCapability())
		n2 := csitest.Start(t, csitest.Config{Type: csi.PluginTypeNode, NodeID: "node-2", Node: csi.NodeCapabilities{StageUnstageVolume: true}})
		sharedBackEnd(p, n2)
		r := &plugintest.Recorder{}
		if err := plugintest.Check(t.Context(), plugintest.Config{Endpoint: p.Endpoint(), SecondNodeEndpoint: n2.Endpoint(), DataCheck: plugintest.DataWriterOnly}, r); err != nil {
			t.Fatal(err)
		}
		if r.Failed() {
			t.Fatalf("failures: %v", r.Failures())
		}
		if got := p.CallCount(csitest.MethodControllerPublishVolume); got < 3 {
			t.Errorf("%d ControllerPublishVolume calls; the hand-over made none", got)
		}
		if n2.CallCount(csitest.MethodNodePublishVolume) != 1 || n2.CallCount(csitest.MethodNodeUnstageVolume) != 1 {
			t.Errorf("the second node saw %v", n2.Methods())
		}
		// The fake also checks the CO: the probe on the first node, which
		// the plugin must refuse, is the one violation it may see.
		for _, v := range p.Violations() {
			if v.Method != csitest.MethodControllerPublishVolume || v.Rule != "incompatible-controller-publish" {
				t.Errorf("violation %s", v)
			}
		}
		n2.RequireNoViolations(t)
		for _, f := range []*csitest.Plugin{p, n2} {
			requireClean(t, f, f == p, "")
		}
	})
	t.Run("hostpath", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		ep := startHostpath(t, hostpath.Config{DataDir: dir, ControllerPublish: true, Staging: true})
		n2 := startHostpath(t, hostpath.Config{DataDir: dir, ControllerPublish: true, Staging: true, Mode: hostpath.ModeNode, NodeID: "node-2"})
		plugintest.Run(t, plugintest.Config{Endpoint: ep, SecondNodeEndpoint: n2, StrictUnstage: true})
	})
}

// A controller that publishes a single-node volume to a second node
// while the first holds it is caught.
func TestCheck_SecondNodeNotExclusive(t *testing.T) {
	p := csitest.Start(t, everyCapability())
	n2 := csitest.Start(t, csitest.Config{Type: csi.PluginTypeNode, NodeID: "node-2", Node: csi.NodeCapabilities{StageUnstageVolume: true}})
	sharedBackEnd(p, n2)
	sock := startProxy(t, p.Endpoint(), recode("ControllerPublishVolume", codes.FailedPrecondition, codes.OK)())
	r := &plugintest.Recorder{}
	if err := plugintest.Check(t.Context(), plugintest.Config{Endpoint: sock, SecondNodeEndpoint: n2.Endpoint(), DataCheck: plugintest.DataWriterOnly}, r); err != nil {
		t.Fatal(err)
	}
	for _, f := range r.Failures() {
		if f.Step == "second node (hand-over)" && f.Call == "ControllerPublishVolume" && f.Code == csi.CodeOK && strings.Contains(f.Expect, "requires FailedPrecondition") {
			t.Logf("DETECT | two nodes | %s", f)
			return
		}
	}
	t.Fatalf("not caught: %v", r.Failures())
}
