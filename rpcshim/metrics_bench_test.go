package rpcshim_test

import (
	"context"
	"testing"
	"time"

	gometrics "github.com/hashicorp/go-metrics"

	"github.com/csikit/csikit/claimgc"
	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/metrics"
	"github.com/csikit/csikit/csi/metrics/metricstest"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/rpcshim"
)

// meter makes e emit through sink: a plugin client with the interceptor,
// a Server with the sink, and a release Worker observed by
// claimgc.MetricsObserver, which it runs until the test ends.
func (e *srvEnv) meter(t testing.TB, sink metrics.Sink) {
	t.Helper()
	_, info, err := e.plugins.ControllerPlugin(rtPlugin)
	must(t, err)
	if sink != nil {
		c, err := plugin.New(plugin.Config{Endpoint: e.ctl.Endpoint(), MaxRetries: -1, MetricSink: sink})
		must(t, err)
		t.Cleanup(func() { _ = c.Close() })
		e.plugins.set(rtPlugin, c, info)
	}
	e.server, err = rpcshim.NewServer(rpcshim.ServerConfig{Store: e.store, Applier: e.applier, Router: e.router, MetricSink: sink})
	must(t, err)
	var obs claimgc.Observer
	if sink != nil {
		obs = claimgc.MetricsObserver(sink)
	}
	w, err := claimgc.New(claimgc.Config{
		Store: e.store, Applier: e.applier, Nodes: e.router, Controllers: e.router, NodeStatuses: e.statuses,
		Parallelism: 1, RetryBase: 20 * time.Millisecond, RetryMax: time.Second, FinalRetryInterval: time.Second, Observer: obs,
	})
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	w.SetEnabled(true)
}

func TestServer_Lifecycle_Metrics(t *testing.T) {
	e := newSrvEnv(t, csi.ControllerCapabilities{CreateDeleteVolume: true, PublishUnpublishVolume: true})
	rec := metricstest.New()
	e.meter(t, rec)
	lifecycleOnce(t, context.Background(), e, 1)
	_, err := e.claim("nope", "a1-1", "n2", csi.ClaimWrite, snwFS)
	if err == nil {
		t.Fatal("a claim on an unknown volume succeeded")
	}
	for name, want := range map[string]float64{
		metricstest.Name(metrics.ClaimsTaken):    2,
		metricstest.Name(metrics.ClaimsReleased): 2,
		metricstest.Name(metrics.ClaimsRefused, metrics.Label{Name: "reason", Value: csi.SentinelOf(err).Code()}): 1,
	} {
		if got := rec.Counter(name); got != want {
			t.Errorf("%s = %v, want %v; recorded %v", name, got, want, rec.Names())
		}
	}
	publish := metricstest.Name(metrics.PluginRPCLatency, metrics.Label{Name: "method", Value: "ControllerPublishVolume"}, metrics.Label{Name: "code", Value: "OK"})
	if got := rec.Samples(publish); got != 1 {
		t.Errorf("%s samples = %d, want 1; recorded %v", publish, got, rec.Names())
	}
	if rec.Samples(metricstest.Name(metrics.ReleaseLatency)) != 2 {
		t.Errorf("release latency samples = %d", rec.Samples(metricstest.Name(metrics.ReleaseLatency)))
	}
	if _, ok := rec.Gauge(metricstest.Name(metrics.WorkerQueueDepth)); !ok {
		t.Error("no queue depth gauge")
	}
}

// BenchmarkServer_MetricsOverhead is metrics-overhead: the lifecycle of
// BenchmarkServer_Lifecycle through a stack that emits every metric
// into a go-metrics InmemSink, against the same stack with no sink, in
// the same run, alternating. on/off is the ratio of the medians of the
// whole lifecycle (goal ≤ 1.03).
//
//	go test ./rpcshim -run '^$' -bench MetricsOverhead -benchtime 300x
func BenchmarkServer_MetricsOverhead(b *testing.B) {
	caps := csi.ControllerCapabilities{CreateDeleteVolume: true, PublishUnpublishVolume: true}
	off := newSrvEnv(b, caps)
	off.meter(b, nil)
	on := newSrvEnv(b, caps)
	on.meter(b, gometrics.NewInmemSink(10*time.Second, time.Minute))
	ctx := context.Background()
	var tOn, tOff []time.Duration
	i := 0
	run := func(e *srvEnv, into *[]time.Duration) {
		start := time.Now()
		lifecycleOnce(b, ctx, e, i)
		*into = append(*into, time.Since(start))
	}
	for b.Loop() {
		i++
		// Alternate which goes first, so neither pays for the other's
		// garbage more often.
		if i%2 == 0 {
			run(off, &tOff)
			run(on, &tOn)
		} else {
			run(on, &tOn)
			run(off, &tOff)
		}
	}
	b.ReportMetric(float64(median(tOn))/float64(median(tOff)), "metrics-overhead")
	b.ReportMetric(float64(median(tOn).Nanoseconds()), "ns/lifecycle-on")
	b.ReportMetric(float64(median(tOff).Nanoseconds()), "ns/lifecycle-off")
}
