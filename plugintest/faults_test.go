package plugintest_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/examples/hostpathplugin/hostpath"
	"github.com/csikit/csikit/plugintest"
)

// With faults on, every shape of the fake and the hostpath example
// still pass: the restarted node agent resumes from its state on disk,
// and cancelled calls retried succeed. The fake is also restarted
// itself through RestartPlugin.
func TestRun_Faults(t *testing.T) {
	for _, s := range csitest.Shapes() {
		t.Run("fake/"+s.Name, func(t *testing.T) {
			t.Parallel()
			fc := everyCapability()
			s.Apply(&fc)
			p := csitest.Start(t, fc)
			var restarts atomic.Int32
			cfg := plugintest.Config{Endpoint: p.Endpoint(), DataCheck: plugintest.DataWriterOnly, Faults: true,
				RestartPlugin: func(context.Context) error { restarts.Add(1); return p.Restart() }}
			if !fc.Type.HasController() || !fc.Controller.CreateDeleteVolume {
				cfg.VolumeID = "disk-0042"
				p.AddVolume(cfg.VolumeID, 1<<30, nil)
			}
			plugintest.Run(t, cfg)
			p.RequireNoViolations(t)
			if restarts.Load() != 1 {
				t.Errorf("RestartPlugin ran %d times", restarts.Load())
			}
		})
	}
	for _, m := range []hostpath.MountMethod{hostpath.MountSymlink, hostpath.MountBind} {
		t.Run("hostpath/"+string(m), func(t *testing.T) {
			if m == hostpath.MountBind {
				bindMounts(t)
			}
			t.Parallel()
			plugintest.Run(t, plugintest.Config{Endpoint: startHostpath(t, hostpath.Config{ControllerPublish: true, Staging: true, Mount: m}), Faults: true, StrictUnstage: true})
		})
	}
}

// A node agent restart that forgot its mounts would fail the run: the
// harness checks the restarted mounter against what it mounted.
func TestCheck_FaultStepsReported(t *testing.T) {
	p := csitest.Start(t, everyCapability())
	r := &plugintest.Recorder{}
	if err := plugintest.Check(t.Context(), plugintest.Config{Endpoint: p.Endpoint(), DataCheck: plugintest.DataWriterOnly, Faults: true}, r); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{
		"restart the node agent (after the first mount)": false, "restart the node agent (between the unmounts)": false,
		"restart the node agent (before the release)": false, "cancelled call retried (NodePublishVolume)": false,
		"cancelled call retried (ControllerPublishVolume)": false, "cancelled call retried (NodeStageVolume)": false,
		"unmount stopped before NodeUnstageVolume (allocation 1)":                false,
		"restart the node agent (during the release, after NodeUnpublishVolume)": false,
		"only idempotent repeats after the restart (release)":                    false,
	}
	for _, s := range r.Steps() {
		if _, ok := want[s.Name]; ok && s.Status == plugintest.StatusPass {
			want[s.Name] = true
		}
	}
	for n, ok := range want {
		if !ok {
			t.Errorf("step %q did not pass", n)
		}
	}
	if r.Failed() {
		t.Errorf("failures: %v", r.Failures())
	}
}
