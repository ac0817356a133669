package plugintest

import (
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/csikit/csikit/csi/plugin"
)

// onlyRepeats accepts repeats with identical arguments and the one
// outstanding NodeUnstageVolume, and reports a call with new arguments,
// a stage sent again, and a missing or doubled unstage.
func TestOnlyRepeats(t *testing.T) {
	unpub := call{Method: methodNodeUnpublish, Req: &plugin.NodeUnpublishRequest{TargetPath: "/t/1"}}
	other := call{Method: methodNodeUnpublish, Req: &plugin.NodeUnpublishRequest{TargetPath: "/t/2"}}
	stage := call{Method: methodNodeStage, Req: &plugin.NodeStageRequest{StagingPath: "/s"}}
	unstage := call{Method: methodNodeUnstage, Req: &plugin.NodeUnstageRequest{StagingPath: "/s"}}
	for _, tc := range []struct {
		name  string
		since []call
		want  []string // failure substrings; none for a pass
	}{
		{"unstage only", []call{unstage}, nil},
		{"repeat then unstage", []call{unpub, unstage}, nil},
		{"new arguments", []call{other, unstage}, []string{"NodeUnpublishVolume with new arguments"}},
		{"stage again", []call{stage, unstage}, []string{"NodeStageVolume with new arguments"}},
		{"no unstage", []call{unpub}, []string{"0 NodeUnstageVolume calls"}},
		{"two unstages", []call{unstage, unstage}, []string{"2 NodeUnstageVolume calls"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &Recorder{}
			l := &run{rep: rec, log: hclog.NewNullLogger()}
			l.onlyRepeats(t.Context(), []call{unpub}, tc.since)
			fs := rec.Failures()
			if len(fs) != len(tc.want) {
				t.Fatalf("failures %v, want %d", fs, len(tc.want))
			}
			for i, w := range tc.want {
				if !strings.Contains(fs[i].String(), w) {
					t.Errorf("failure %q, want %q", fs[i], w)
				}
			}
		})
	}
}
