package plugintest_test

import (
	"strings"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/examples/hostpathplugin/hostpath"
	"github.com/csikit/csikit/plugintest"
)

// everyCapability is a monolith fake that advertises every capability
// the coverage rows check, so that every row runs.
func everyCapability() csitest.Config {
	return csitest.Config{
		Type: csi.PluginTypeMonolith,
		Controller: csi.ControllerCapabilities{
			CreateDeleteVolume: true, PublishUnpublishVolume: true, ListVolumes: true, GetCapacity: true,
			CreateDeleteSnapshot: true, ListSnapshots: true, CloneVolume: true, ExpandVolume: true,
			GetVolume: true, ModifyVolume: true, GetSnapshot: true,
		},
		Node: csi.NodeCapabilities{StageUnstageVolume: true, GetVolumeStats: true, ExpandVolume: true},
	}
}

// Every shape of csitest.Shapes, on a fake with every capability the
// shape leaves: every check passes.
func TestRun_Shapes(t *testing.T) {
	for _, s := range csitest.Shapes() {
		t.Run(s.Name, func(t *testing.T) {
			t.Parallel()
			fc := everyCapability()
			s.Apply(&fc)
			p := csitest.Start(t, fc)
			cfg := plugintest.Config{Endpoint: p.Endpoint(), DataCheck: plugintest.DataWriterOnly}
			if !fc.Type.HasController() || !fc.Controller.CreateDeleteVolume {
				cfg.VolumeID = "disk-0042"
				p.AddVolume(cfg.VolumeID, 1<<30, nil)
			}
			plugintest.Run(t, cfg)
			p.RequireNoViolations(t)
		})
	}
}

// A fake with an attach limit: the limit row fills the node and the
// plugin refuses the next volume as the spec requires.
func TestRun_AttachLimit(t *testing.T) {
	fc := everyCapability()
	fc.MaxVolumes = 3
	p := csitest.Start(t, fc)
	r := &plugintest.Recorder{}
	if err := plugintest.Check(t.Context(), plugintest.Config{Endpoint: p.Endpoint(), DataCheck: plugintest.DataWriterOnly, RunChecks: "attach limit"}, r); err != nil {
		t.Fatal(err)
	}
	ran := false
	for _, s := range r.Steps() {
		ran = ran || s.Name == "ControllerPublishVolume (attach limit)" && s.Status == plugintest.StatusPass
	}
	if !ran || r.Failed() {
		t.Errorf("the attach limit row did not pass: %v", r.Steps())
	}
	p.RequireNoViolations(t)
	hp := startHostpath(t, hostpath.Config{ControllerPublish: true, Staging: true, MaxVolumes: 2})
	plugintest.Run(t, plugintest.Config{Endpoint: hp, StrictUnstage: true})
}

// RunChecks and SkipChecks choose the coverage rows by name; the
// lifecycle's steps run regardless.
func TestCheck_SelectChecks(t *testing.T) {
	p := csitest.Start(t, everyCapability())
	r := &plugintest.Recorder{}
	cfg := plugintest.Config{Endpoint: p.Endpoint(), DataCheck: plugintest.DataWriterOnly, RunChecks: "^List", SkipChecks: "paging"}
	if err := plugintest.Check(t.Context(), cfg, r); err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, s := range r.Steps() {
		names[s.Name] = true
	}
	for _, want := range []string{"ListVolumes", "ListSnapshots (invalid starting token)", "fingerprint", "release"} {
		if !names[want] {
			t.Errorf("step %q did not run: %v", want, names)
		}
	}
	for _, not := range []string{"ListVolumes (paging)", "GetCapacity", "CreateSnapshot"} {
		if names[not] {
			t.Errorf("step %q ran", not)
		}
	}
	if r.Failed() {
		t.Errorf("failures: %v", r.Failures())
	}
	err := plugintest.Check(t.Context(), plugintest.Config{Endpoint: p.Endpoint(), SkipChecks: "("}, r)
	if err == nil || !strings.Contains(err.Error(), "Config.SkipChecks") {
		t.Errorf("a bad regular expression: %v", err)
	}
}

// Run reports each check as a subtest of the test that called it:
// with -v, "TestRun_Subtests/plugin/ListVolumes_(paging)" shows, and
// -run selects it.
func TestRun_Subtests(t *testing.T) {
	p := csitest.Start(t, everyCapability())
	ran := t.Run("plugin", func(t *testing.T) {
		plugintest.Run(t, plugintest.Config{Endpoint: p.Endpoint(), DataCheck: plugintest.DataWriterOnly})
	})
	if !ran {
		t.Fatal("the run failed")
	}
}
