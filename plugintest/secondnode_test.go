package plugintest_test

import (
	"path/filepath"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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
		dir := t.TempDir()
		mnt := filepath.Join(dir, "mnt")
		if err := plugintest.Check(t.Context(), plugintest.Config{Endpoint: p.Endpoint(), SecondNodeEndpoint: n2.Endpoint(), DataCheck: plugintest.DataWriterOnly,
			MountRoot: mnt, StateDir: filepath.Join(dir, "state")}, r); err != nil {
			t.Fatal(err)
		}
		if r.Failed() {
			t.Fatalf("failures: %v", r.Failures())
		}
		if n2.CallCount(csitest.MethodNodePublishVolume) != 1 || n2.CallCount(csitest.MethodNodeUnstageVolume) != 1 {
			t.Errorf("the second node saw %v", n2.Methods())
		}
		// The hand-over went through the stack: the second node's
		// mounter chose the paths, beneath its own root, for the second
		// node's allocation, and the release worker detached the volume
		// from the second node.
		root2 := filepath.Join(mnt, "plugintest-node-2") + string(filepath.Separator)
		for _, c := range n2.CallsTo(csitest.MethodNodeStageVolume) {
			if p := c.Request.(*csipb.NodeStageVolumeRequest).GetStagingTargetPath(); !strings.HasPrefix(p, root2+"staging") {
				t.Errorf("staging path %s not the second node mounter's", p)
			}
		}
		for _, c := range n2.CallsTo(csitest.MethodNodePublishVolume) {
			if p := c.Request.(*csipb.NodePublishVolumeRequest).GetTargetPath(); !strings.HasPrefix(p, root2+filepath.Join("per-alloc", "alloc-node-2")) {
				t.Errorf("target %s not the second node mounter's for its allocation", p)
			}
		}
		attached, detached := 0, 0
		for _, c := range p.CallsTo(csitest.MethodControllerPublishVolume) {
			if c.Request.(*csipb.ControllerPublishVolumeRequest).GetNodeId() == "node-2" && c.Code == codes.OK {
				attached++
			}
		}
		for _, c := range p.CallsTo(csitest.MethodControllerUnpublishVolume) {
			if c.Request.(*csipb.ControllerUnpublishVolumeRequest).GetNodeId() == "node-2" {
				detached++
			}
		}
		if attached != 1 || detached != 1 {
			t.Errorf("%d publishes and %d unpublishes to node-2; want one each, from the claim and from the release worker", attached, detached)
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

// A second node that breaks the hand-over is caught in the hand-over's
// step, with a message that names the call, the code and what the spec
// expects; the run still cleans up (the fake ends with nothing in use).
func TestCheck_SecondNodeBroken(t *testing.T) {
	for _, tc := range []struct {
		name     string
		ctrl, n2 func() breakFunc // a fault on the controller, on the second node
		call     string
		code     codes.Code
		expect   string
	}{
		{name: "second node reports the first node's ID", n2: mutate("NodeGetInfo", func(_ *csipb.NodeGetInfoRequest, r *csipb.NodeGetInfoResponse) { r.NodeId = csitest.DefaultNodeID }),
			call: "NodeGetInfo", code: codes.OK, expect: "must report a node_id of its own"},
		{name: "attach to the second node refused", ctrl: answer("ControllerPublishVolume", func(r *csipb.ControllerPublishVolumeRequest) bool { return r.NodeId == "node-2" }, nil, status.Error(codes.Internal, "no")),
			call: "ControllerPublishVolume", code: codes.Internal, expect: `requires OK from ControllerPublishVolume to node "node-2"`},
		{name: "stage on the second node fails", n2: answer("NodeStageVolume", always[*csipb.NodeStageVolumeRequest], nil, status.Error(codes.Internal, "no")),
			call: "NodeStageVolume", code: codes.Internal, expect: "requires OK from NodeStageVolume on the second node"},
		{name: "detach from the second node fails", ctrl: answer("ControllerUnpublishVolume", func(r *csipb.ControllerUnpublishVolumeRequest) bool { return r.NodeId == "node-2" }, nil, status.Error(codes.Internal, "no")),
			call: "ControllerUnpublishVolume", code: codes.Internal, expect: `requires OK from ControllerUnpublishVolume of volume`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := csitest.Start(t, everyCapability())
			n2 := csitest.Start(t, csitest.Config{Type: csi.PluginTypeNode, NodeID: "node-2", Node: csi.NodeCapabilities{StageUnstageVolume: true}})
			sharedBackEnd(p, n2)
			ep, ep2 := p.Endpoint(), n2.Endpoint()
			if tc.ctrl != nil {
				ep = startProxy(t, ep, tc.ctrl())
			}
			if tc.n2 != nil {
				ep2 = startProxy(t, ep2, tc.n2())
			}
			r := check(t, plugintest.Config{Endpoint: ep, SecondNodeEndpoint: ep2, DataCheck: plugintest.DataWriterOnly, SkipChecks: "."})
			var caught *plugintest.Failure
			for _, f := range r.Failures() {
				if f.Step == "second node (hand-over)" && f.Call == tc.call && f.Code == csi.Code(tc.code) && strings.Contains(f.Expect, tc.expect) {
					caught = &f
					break
				}
			}
			if caught == nil {
				t.Fatalf("not caught: %v", r.Failures())
			}
			t.Logf("DETECT | two nodes | %s", caught)
			for _, f := range r.Failures() {
				if f.Step == "order of calls" {
					t.Errorf("a failed hand-over is also blamed on the order: %s", f)
				}
			}
			for _, v := range p.Volumes() {
				if v.InUse() {
					t.Errorf("volume %s still in use after the cleanups: attached %v", v.ID, v.AttachedNodes())
				}
			}
		})
	}
}
