package server

import (
	"testing"

	"github.com/csikit/csikit/csi/metrics"
	"github.com/csikit/csikit/examples/refserver/api"
)

// TestMetrics_PluginRPC_CountsSamples checks that plugin status's call
// counts are the counts of the plugin clients' latency samples, per
// method, with the calls not answered OK as errors, and that another
// plugin's calls stay out.
func TestMetrics_PluginRPC_CountsSamples(t *testing.T) {
	m, err := NewMetrics()
	if err != nil {
		t.Fatal(err)
	}
	emit := func(plugin, method, code string, n int) {
		for range n {
			m.Sink().AddSampleWithLabels(metrics.PluginRPCLatency, 0.5, []metrics.Label{
				{Name: "method", Value: method}, {Name: "code", Value: code}, {Name: "plugin", Value: plugin}})
		}
	}
	emit("p1", "Probe", "OK", 3)
	emit("p1", "Probe", "Unavailable", 1)
	emit("p1", "NodeStageVolume", "OK", 2)
	emit("p2", "Probe", "OK", 5)
	got, err := m.pluginRPC("p1")
	if err != nil {
		t.Fatal(err)
	}
	want := []api.RPCStat{{Method: "NodeStageVolume", Calls: 2}, {Method: "Probe", Calls: 4, Errors: 1}}
	if len(got) != len(want) {
		t.Fatalf("stats = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("stats[%d] = %+v, want %+v", i, got[i], want[i])
		}
	}
}
