package plugintest_test

import (
	"path/filepath"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/plugintest"
)

// A node plugin that advertises VOLUME_CONDITION passes with the
// condition csitest sends, and fails "NodeGetVolumeStats (values)" when
// a proxy drops the condition or reports it abnormal with no message.
func TestCheck_VolumeCondition(t *testing.T) {
	abnormalNoMessage := protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType),
		protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 1))
	for _, tc := range []struct {
		name  string
		brk   func() breakFunc
		fails bool
	}{
		{"as sent", func() breakFunc { return breakFunc{} }, false},
		{"no condition", mutate("NodeGetVolumeStats", func(_ *csipb.NodeGetVolumeStatsRequest, r *csipb.NodeGetVolumeStatsResponse) {
			r.ProtoReflect().SetUnknown(nil)
		}), true},
		{"abnormal without a message", mutate("NodeGetVolumeStats", func(_ *csipb.NodeGetVolumeStatsRequest, r *csipb.NodeGetVolumeStatsResponse) {
			r.ProtoReflect().SetUnknown(abnormalNoMessage)
		}), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := everyCapability()
			c.Node.GetVolumeHealth = true
			p := csitest.Start(t, c)
			sock := startProxy(t, p.Endpoint(), tc.brk())
			r := &plugintest.Recorder{}
			dir := t.TempDir()
			cfg := plugintest.Config{Endpoint: sock, DataCheck: plugintest.DataWriterOnly, Timeout: 10 * time.Second,
				MountRoot: filepath.Join(dir, "mnt"), StateDir: filepath.Join(dir, "state")}
			if err := plugintest.Check(t.Context(), cfg, r); err != nil {
				t.Fatal(err)
			}
			var caught bool
			for _, f := range r.Failures() {
				if f.Step == "NodeGetVolumeStats (values)" {
					caught = true
				} else if !tc.fails {
					t.Errorf("unexpected failure: %v", f)
				}
			}
			if caught != tc.fails {
				t.Errorf("NodeGetVolumeStats (values) failed: %v, want %v; failures: %v", caught, tc.fails, r.Failures())
			}
		})
	}
}
