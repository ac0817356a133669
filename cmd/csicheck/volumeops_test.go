package main

import (
	"strings"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csitest"
)

// A fake that advertises snapshots, clones, expansion and modify: the
// volume operations steps show in the table, and --mutable-parameter
// makes "modify volume" run instead of being skipped.
func TestRun_VolumeOps(t *testing.T) {
	p := csitest.Start(t, csitest.Config{
		Controller: csi.ControllerCapabilities{
			CreateDeleteVolume: true, PublishUnpublishVolume: true, CreateDeleteSnapshot: true,
			CloneVolume: true, ExpandVolume: true, ModifyVolume: true,
		},
		Node: csi.NodeCapabilities{StageUnstageVolume: true, ExpandVolume: true},
	})
	code, out, errOut := csicheck(t, append(dirs(t), "--endpoint", p.Endpoint(), "--data-check", "writer-only", "--mutable-parameter", "tier=gold")...)
	if code != exitPass {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	for _, step := range []string{"expand online (data kept)", "snapshot", "restore snapshot (read back)", "clone volume (read back)", "modify volume"} {
		row := ""
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, step+" ") {
				row = l
			}
		}
		if !strings.Contains(row, "pass") || strings.Contains(row, "skip") {
			t.Errorf("step %q: row %q, want pass:\n%s", step, row, out)
		} else if testing.Verbose() {
			t.Log(row)
		}
	}
	p.RequireNoViolations(t)
}
