package promsink_test

import (
	"testing"
	"time"

	gmprom "github.com/hashicorp/go-metrics/prometheus"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/csikit/csikit/csi/metrics"
)

// BenchmarkSink_Emit emits what one claim's lifecycle emits in the
// metrics-overhead benchmark (plugin call samples, claim counters, a
// release latency sample and a queue depth gauge) into a Sink and, for
// comparison, into go-metrics' own Prometheus sink.
//
//	go test ./csi/metrics/promsink -run '^$' -bench Emit
func BenchmarkSink_Emit(b *testing.B) {
	rpc := []metrics.Label{{Name: "method", Value: "NodeStageVolume"}, {Name: "code", Value: "OK"}}
	emit := func(b *testing.B, s metrics.Sink) {
		b.ReportAllocs()
		for b.Loop() {
			s.AddSampleWithLabels(metrics.PluginRPCLatency, 4, rpc)
			s.IncrCounter(metrics.ClaimsTaken, 1)
			s.IncrCounter(metrics.ClaimsReleased, 1)
			s.AddSample(metrics.ReleaseLatency, 30)
			s.SetGauge(metrics.WorkerQueueDepth, 1)
		}
	}
	b.Run("promsink", func(b *testing.B) { emit(b, newSink(b)) })
	b.Run("go-metrics", func(b *testing.B) {
		s, err := gmprom.NewPrometheusSinkFrom(gmprom.PrometheusOpts{Registerer: prometheus.NewRegistry(), Expiration: time.Hour, Name: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		emit(b, s)
	})
}
