package promsink_test

import (
	"fmt"
	"log"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/csikit/csikit/csi/metrics"
	"github.com/csikit/csikit/csi/metrics/promsink"
)

// A host passes the Sink as every part's MetricSink and serves the
// registry (promhttp.HandlerFor(reg, promhttp.HandlerOpts{})).
func Example() {
	sink, err := promsink.New(promsink.Options{})
	if err != nil {
		log.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(sink); err != nil {
		log.Fatal(err)
	}

	sink.IncrCounter(metrics.ClaimsTaken, 1)
	sink.AddSampleWithLabels(metrics.PluginRPCLatency, 12.5, []metrics.Label{{Name: "method", Value: "NodeStageVolume"}, {Name: "code", Value: "OK"}})

	fams, err := reg.Gather()
	if err != nil {
		log.Fatal(err)
	}
	for _, f := range fams {
		fmt.Println(f.GetName(), f.GetType())
	}
	// Output:
	// csikit_claims_taken COUNTER
	// csikit_plugin_rpc_latency HISTOGRAM
}
