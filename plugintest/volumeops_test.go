package plugintest_test

import (
	"strings"
	"testing"

	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/examples/hostpathplugin/hostpath"
	"github.com/csikit/csikit/plugintest"
)

// The volume operations steps, by name.
const (
	opExpand  = "expand online (data kept)"
	opSnap    = "snapshot"
	opRestore = "restore snapshot (read back)"
	opClone   = "clone volume (read back)"
	opModify  = "modify volume"
)

// checkOps runs cfg with a Recorder and requires every step in pass to
// pass and no failure at all.
func checkOps(t *testing.T, cfg plugintest.Config, pass ...string) *plugintest.Recorder {
	t.Helper()
	r := &plugintest.Recorder{}
	if err := plugintest.Check(t.Context(), cfg, r); err != nil {
		t.Fatal(err)
	}
	got := map[string]plugintest.Status{}
	for _, s := range r.Steps() {
		got[s.Name] = s.Status
	}
	for _, name := range pass {
		if got[name] != plugintest.StatusPass {
			t.Errorf("step %q: %q, want pass; steps %v", name, got[name], r.Steps())
		}
	}
	if r.Failed() {
		t.Errorf("failures: %v", r.Failures())
	}
	return r
}

// Against the hostpath plugin, which stores data, the operations read
// the file back: after the online expansion (controller and node step),
// from the restored snapshot and from the clone. Node-only, the volume
// expands on the node alone.
func TestVolumeOps_Hostpath(t *testing.T) {
	methods := []hostpath.MountMethod{hostpath.MountSymlink, hostpath.MountBind}
	all := []string{opExpand, opSnap, opRestore, opClone, opModify}
	for _, m := range methods {
		t.Run(string(m)+"/monolith", func(t *testing.T) {
			if m == hostpath.MountBind {
				bindMounts(t)
			}
			t.Parallel()
			ep := startHostpath(t, hostpath.Config{ControllerPublish: true, Staging: true, Mount: m})
			checkOps(t, plugintest.Config{Endpoint: ep, MutableParameters: map[string]string{hostpath.LabelParameter: "gold"}}, all...)
		})
		t.Run(string(m)+"/split", func(t *testing.T) {
			if m == hostpath.MountBind {
				bindMounts(t)
			}
			t.Parallel()
			base := hostpath.Config{DataDir: t.TempDir(), ControllerPublish: true, Staging: true, Mount: m}
			ctrl, node := base, base
			ctrl.Mode, node.Mode = hostpath.ModeController, hostpath.ModeNode
			checkOps(t, plugintest.Config{
				ControllerEndpoint: startHostpath(t, ctrl), NodeEndpoint: startHostpath(t, node),
				MutableParameters: map[string]string{hostpath.LabelParameter: "gold"},
			}, all...)
		})
	}
	t.Run("symlink/node-only", func(t *testing.T) {
		t.Parallel()
		base := hostpath.Config{DataDir: t.TempDir(), Staging: true}
		ctrl := base
		ctrl.Mode = hostpath.ModeController
		id := createHostpathVolume(t, startHostpath(t, ctrl))
		node := base
		node.Mode = hostpath.ModeNode
		r := checkOps(t, plugintest.Config{Endpoint: startHostpath(t, node), VolumeID: id}, opExpand)
		for _, s := range r.Steps() {
			if s.Name == opSnap || s.Name == opRestore || s.Name == opClone || s.Name == opModify {
				t.Errorf("step %q ran on a node-only plugin", s.Name)
			}
		}
	})
}

// Against csitest with every capability, the steps run; without
// MutableParameters the modify step says why it is skipped.
func TestVolumeOps_Fake(t *testing.T) {
	p := csitest.Start(t, everyCapability())
	r := checkOps(t, plugintest.Config{Endpoint: p.Endpoint(), DataCheck: plugintest.DataWriterOnly}, opExpand, opSnap, opRestore, opClone)
	p.RequireNoViolations(t)
	for _, s := range r.Steps() {
		if s.Name == opModify && (s.Status != plugintest.StatusSkip || !strings.Contains(s.Reason, "MutableParameters")) {
			t.Errorf("modify without MutableParameters: %+v", s)
		}
	}
}

// A plugin whose restored and cloned volumes come back empty (the fake
// keeps no data) fails the read-back, naming the step.
func TestVolumeOps_ReadBackFails(t *testing.T) {
	p := csitest.Start(t, everyCapability())
	r := &plugintest.Recorder{}
	if err := plugintest.Check(t.Context(), plugintest.Config{Endpoint: p.Endpoint(), DataCheck: plugintest.DataShared}, r); err != nil {
		t.Fatal(err)
	}
	failed := map[string]bool{}
	for _, f := range r.Failures() {
		if strings.Contains(f.Got, "the file written before the operation cannot be read") {
			failed[f.Step] = true
		}
	}
	if !failed[opRestore] || !failed[opClone] {
		t.Errorf("read-back failures %v, want %q and %q; all: %v", failed, opRestore, opClone, r.Failures())
	}
}

// A plugin that expands only offline skips the online expansion.
func TestVolumeOps_OfflineOnlySkipsOnline(t *testing.T) {
	fc := everyCapability()
	fc.OfflineExpansion = true
	p := csitest.Start(t, fc)
	r := checkOps(t, plugintest.Config{Endpoint: p.Endpoint(), DataCheck: plugintest.DataWriterOnly}, opSnap)
	for _, s := range r.Steps() {
		if s.Name == opExpand {
			t.Errorf("online expansion ran on an offline-only plugin: %+v", s)
		}
	}
}
