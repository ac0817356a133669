package metricstest_test

import (
	"fmt"

	"github.com/csikit/csikit/csi/metrics"
	"github.com/csikit/csikit/csi/metrics/metricstest"
)

func ExampleRecorder() {
	rec := metricstest.New()
	var sink metrics.Sink = rec // pass it where a Config takes a MetricSink
	sink.AddSampleWithLabels(metrics.PluginRPCLatency, 0.4, []metrics.Label{{Name: "method", Value: "Probe"}, {Name: "code", Value: "OK"}})
	sink.SetGauge(metrics.WorkerQueueDepth, 3)
	fmt.Println(rec.Samples(metricstest.Name(metrics.PluginRPCLatency, metrics.Label{Name: "method", Value: "Probe"}, metrics.Label{Name: "code", Value: "OK"})))
	g, _ := rec.Gauge(metricstest.Name(metrics.WorkerQueueDepth))
	fmt.Println(g)
	// Output:
	// 1
	// 3
}
