package plugintest_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/csikit/csikit/examples/hostpathplugin/hostpath"
	"github.com/csikit/csikit/plugintest"
)

// BenchmarkCsicheckTime is csicheck-time: one full run of every check,
// lifecycle and coverage, against the hostpath example with every
// capability it has on (controller publish, staging, and the
// capabilities it always advertises), as csicheck runs it. It reports
// the milliseconds of a run and the number of checks that ran (passed
// or failed; skipped rows not counted), without and with Config.Faults.
func BenchmarkCsicheckTime(b *testing.B) {
	for _, faults := range []bool{false, true} {
		name := "hostpath"
		if faults {
			name += "-faults"
		}
		b.Run(name, func(b *testing.B) { benchCsicheck(b, faults) })
	}
}

func benchCsicheck(b *testing.B, faults bool) {
	endpoint := startHostpath(b, hostpath.Config{ControllerPublish: true, Staging: true})
	var total time.Duration
	checks := 0
	for i := 0; b.Loop(); i++ {
		dir := b.TempDir()
		r := &plugintest.Recorder{}
		cfg := plugintest.Config{Endpoint: endpoint, StrictUnstage: true, Faults: faults, MountRoot: filepath.Join(dir, "mnt"), StateDir: filepath.Join(dir, "state")}
		start := time.Now()
		if err := plugintest.Check(b.Context(), cfg, r); err != nil {
			b.Fatal(err)
		}
		total += time.Since(start)
		if r.Failed() {
			b.Fatalf("failures: %v", r.Failures())
		}
		checks = 0
		for _, s := range r.Steps() {
			if s.Status != plugintest.StatusSkip {
				checks++
			}
		}
	}
	b.ReportMetric(total.Seconds()*1000/float64(b.N), "ms/run")
	b.ReportMetric(float64(checks), "checks")
}
