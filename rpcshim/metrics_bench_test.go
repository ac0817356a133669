package rpcshim_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/csikit/csikit/claimgc"
	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/metrics"
	"github.com/csikit/csikit/csi/metrics/metricstest"
	"github.com/csikit/csikit/csi/metrics/promsink"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/rpcshim"
)

// meter makes e emit through sink: a plugin client with the interceptor,
// a Server with the sink, and a release Worker observed by
// claimgc.MetricsObserver, which it runs until the test ends and
// returns.
func (e *srvEnv) meter(t testing.TB, sink metrics.Sink) *claimgc.Worker {
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
	return w
}

func TestServer_Lifecycle_Metrics(t *testing.T) {
	e := newSrvEnv(t, csi.ControllerCapabilities{CreateDeleteVolume: true, PublishUnpublishVolume: true})
	rec := metricstest.New()
	w := e.meter(t, rec)
	lifecycleOnce(t, context.Background(), e, 1)
	// The lifecycle goes on once the store shows the claims freed; the
	// Worker tells its Observer just after.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	must(t, w.Settle(ctx))
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
// BenchmarkServer_Lifecycle with every metric emitted into a
// promsink.Sink (the one the reference server serves /v1/metrics
// from), against the same lifecycle with the metrics dropped, on one
// stack whose sink is switched on or off before each lifecycle
// (switchSink): the same store, plugin connection, Server and release
// Worker serve both, so that nothing but the emits differs; two stacks,
// one with a sink and one without, also differ in their connections and
// their place in the heap, by as much as the figure. (The plugin
// client's interceptor, which a client built without a sink does not
// have, runs on both sides: two clock reads per call.)
//
// Each iteration runs on, off and off again, in an order that rotates:
// metrics-overhead is the ratio of the medians of on and of the first
// off (goal ≤ 1.03), and off-vs-off the same ratio for the two offs: the
// figure's noise, which on a shared 2-core machine is a few percent in
// a run, so read the figure as the mean of ten runs.
//
//	go test ./rpcshim -run '^$' -bench MetricsOverhead -benchtime 2000x -count 10
func BenchmarkServer_MetricsOverhead(b *testing.B) {
	e := newSrvEnv(b, csi.ControllerCapabilities{CreateDeleteVolume: true, PublishUnpublishVolume: true})
	prom, err := promsink.New(promsink.Options{})
	must(b, err)
	must(b, prometheus.NewRegistry().Register(prom))
	sink := newSwitchSink(prom)
	e.meter(b, sink)
	ctx := context.Background()
	var tOn, tOff, tOff2 []time.Duration
	i := 0
	run := func(on bool, into *[]time.Duration) {
		i++
		sink.on.Store(on)
		start := time.Now()
		lifecycleOnce(b, ctx, e, i)
		*into = append(*into, time.Since(start))
	}
	order := []func(){
		func() { run(true, &tOn) }, func() { run(false, &tOff) }, func() { run(false, &tOff2) },
	}
	for b.Loop() {
		first := len(tOn) % len(order)
		for k := range order {
			order[(first+k)%len(order)]()
		}
	}
	b.ReportMetric(float64(median(tOn))/float64(median(tOff)), "metrics-overhead")
	b.ReportMetric(float64(median(tOff2))/float64(median(tOff)), "off-vs-off")
	b.ReportMetric(float64(median(tOn).Nanoseconds()), "ns/lifecycle-on")
	b.ReportMetric(float64(median(tOff).Nanoseconds()), "ns/lifecycle-off")
}

// switchSink passes every emit to its sink while on, and drops it
// otherwise.
type switchSink struct {
	on      atomic.Bool
	to, off metrics.Sink
}

func newSwitchSink(to metrics.Sink) *switchSink { return &switchSink{to: to, off: metrics.Or(nil)} }

// now is the sink an emit goes to.
func (s *switchSink) now() metrics.Sink {
	if s.on.Load() {
		return s.to
	}
	return s.off
}

func (s *switchSink) SetGauge(key []string, val float32)    { s.now().SetGauge(key, val) }
func (s *switchSink) EmitKey(key []string, val float32)     { s.now().EmitKey(key, val) }
func (s *switchSink) IncrCounter(key []string, val float32) { s.now().IncrCounter(key, val) }
func (s *switchSink) AddSample(key []string, val float32)   { s.now().AddSample(key, val) }

func (s *switchSink) SetGaugeWithLabels(key []string, val float32, labels []metrics.Label) {
	s.now().SetGaugeWithLabels(key, val, labels)
}

func (s *switchSink) IncrCounterWithLabels(key []string, val float32, labels []metrics.Label) {
	s.now().IncrCounterWithLabels(key, val, labels)
}

func (s *switchSink) AddSampleWithLabels(key []string, val float32, labels []metrics.Label) {
	s.now().AddSampleWithLabels(key, val, labels)
}
