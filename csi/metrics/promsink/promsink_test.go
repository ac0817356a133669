package promsink_test

import (
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/csikit/csikit/csi/metrics"
	"github.com/csikit/csikit/csi/metrics/promsink"
)

// scrape registers s with a registry of its own and gathers it, failing
// the test if the gather fails: the scrape a Prometheus server makes.
func scrape(t *testing.T, s *promsink.Sink) map[string]*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewRegistry()
	if err := reg.Register(s); err != nil {
		t.Fatal(err)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := make(map[string]*dto.MetricFamily)
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out
}

// series returns the metric of family name whose labels are labels
// ("k=v,k=v", in name order), or nil.
func series(fams map[string]*dto.MetricFamily, name, labels string) *dto.Metric {
	for _, m := range fams[name].GetMetric() {
		var kv []string
		for _, l := range m.GetLabel() {
			kv = append(kv, l.GetName()+"="+l.GetValue())
		}
		if strings.Join(kv, ",") == labels {
			return m
		}
	}
	return nil
}

func newSink(t testing.TB) *promsink.Sink {
	t.Helper()
	s, err := promsink.New(promsink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSink_Kinds(t *testing.T) {
	s := newSink(t)
	s.IncrCounterWithLabels(metrics.MountsStaged, 2, []metrics.Label{{Name: "plugin", Value: "p1"}})
	s.IncrCounterWithLabels(metrics.MountsStaged, 1, []metrics.Label{{Name: "plugin", Value: "p1"}})
	s.IncrCounter(metrics.ClaimsTaken, 1)
	s.SetGauge(metrics.WorkerQueueDepth, 7)
	s.SetGauge(metrics.WorkerQueueDepth, 3)
	s.AddSampleWithLabels(metrics.PluginRPCLatency, 4, []metrics.Label{{Name: "method", Value: "NodeStageVolume"}, {Name: "code", Value: "OK"}})
	s.AddSampleWithLabels(metrics.PluginRPCLatency, 40, []metrics.Label{{Name: "method", Value: "NodeStageVolume"}, {Name: "code", Value: "OK"}})
	s.EmitKey([]string{"csikit", "ignored"}, 1)
	fams := scrape(t, s)

	if m := series(fams, "csikit_mounts_staged", "plugin=p1"); m.GetCounter().GetValue() != 3 {
		t.Errorf("mounts staged = %v, want 3", m)
	}
	if m := series(fams, "csikit_claims_taken", ""); m.GetCounter().GetValue() != 1 {
		t.Errorf("claims taken = %v, want 1", m)
	}
	if m := series(fams, "csikit_worker_queue_depth", ""); m.GetGauge().GetValue() != 3 {
		t.Errorf("queue depth = %v, want the last value set, 3", m)
	}
	h := series(fams, "csikit_plugin_rpc_latency", "code=OK,method=NodeStageVolume").GetHistogram()
	if h.GetSampleCount() != 2 || h.GetSampleSum() != 44 {
		t.Fatalf("rpc latency = %v, want 2 samples summing to 44", h)
	}
	for _, b := range h.GetBucket() {
		want := uint64(0)
		if b.GetUpperBound() >= 4 {
			want++
		}
		if b.GetUpperBound() >= 40 {
			want++
		}
		if b.GetCumulativeCount() != want {
			t.Errorf("bucket le=%v holds %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), want)
		}
	}
	if _, ok := fams["csikit_ignored"]; ok {
		t.Error("EmitKey kept a metric")
	}
	if _, ok := fams["promsink_dropped_total"]; ok {
		t.Error("dropped counter has a series though nothing was dropped")
	}
}

func TestSink_Names(t *testing.T) {
	s := newSink(t)
	s.IncrCounter([]string{"my.app", "req-count"}, 1)
	s.IncrCounter([]string{"9lives"}, 1)
	fams := scrape(t, s)
	for _, name := range []string{"my_app_req_count", "_9lives"} {
		if series(fams, name, "") == nil {
			t.Errorf("no series %s; have %v", name, fams)
		}
	}
}

// TestSink_Drops: an emit Prometheus could not take is counted under
// its reason, leaves the metric it names as it was, and the scrape
// still succeeds.
func TestSink_Drops(t *testing.T) {
	key := []string{"app", "thing"}
	one := []metrics.Label{{Name: "a", Value: "1"}}
	for _, tc := range []struct {
		name   string
		emit   func(s *promsink.Sink)
		reason string
	}{
		{"negative counter", func(s *promsink.Sink) { s.IncrCounterWithLabels(key, -1, one) }, "negative"},
		{"another kind", func(s *promsink.Sink) { s.SetGaugeWithLabels(key, 5, one) }, "kind"},
		{"sample on a counter", func(s *promsink.Sink) { s.AddSampleWithLabels(key, 5, one) }, "kind"},
		{"label names in another order", func(s *promsink.Sink) {
			s.IncrCounterWithLabels(key, 1, []metrics.Label{{Name: "b", Value: "2"}, {Name: "a", Value: "1"}})
			s.IncrCounterWithLabels(key, 1, []metrics.Label{{Name: "a", Value: "1"}, {Name: "b", Value: "2"}})
		}, "labels"},
		{"value not UTF-8", func(s *promsink.Sink) { s.IncrCounterWithLabels(key, 1, []metrics.Label{{Name: "a", Value: "\xff"}}) }, "value"},
		{"empty key", func(s *promsink.Sink) { s.IncrCounter(nil, 1) }, "name"},
		{"the dropped counter's name", func(s *promsink.Sink) { s.IncrCounter([]string{"promsink", "dropped", "total"}, 1) }, "name"},
		{"label name with a dash", func(s *promsink.Sink) {
			s.IncrCounterWithLabels([]string{"new"}, 1, []metrics.Label{{Name: "a-b", Value: "1"}})
		}, "name"},
		{"label name with a leading digit", func(s *promsink.Sink) {
			s.IncrCounterWithLabels([]string{"new"}, 1, []metrics.Label{{Name: "1a", Value: "1"}})
		}, "name"},
		{"empty label name", func(s *promsink.Sink) { s.IncrCounterWithLabels([]string{"new"}, 1, []metrics.Label{{Value: "1"}}) }, "name"},
		{"reserved label name", func(s *promsink.Sink) {
			s.IncrCounterWithLabels([]string{"new"}, 1, []metrics.Label{{Name: "__x", Value: "1"}})
		}, "name"},
		{"le on a sample", func(s *promsink.Sink) {
			s.AddSampleWithLabels([]string{"new"}, 1, []metrics.Label{{Name: "le", Value: "1"}})
		}, "name"},
		{"label named twice", func(s *promsink.Sink) {
			s.IncrCounterWithLabels([]string{"new"}, 1, []metrics.Label{{Name: "a", Value: "1"}, {Name: "a", Value: "2"}})
		}, "name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSink(t)
			s.IncrCounterWithLabels(key, 2, one)
			tc.emit(s)
			fams := scrape(t, s)
			if m := series(fams, "app_thing", "a=1"); m.GetCounter().GetValue() != 2 {
				t.Errorf("app_thing{a=1} = %v, want 2 as before", m)
			}
			if m := series(fams, "promsink_dropped_total", "reason="+tc.reason); m.GetCounter().GetValue() != 1 {
				t.Errorf("dropped{reason=%s} = %v, want 1; families %v", tc.reason, m, fams["promsink_dropped_total"])
			}
			if _, ok := fams["new"]; ok {
				t.Error("a dropped emit made a metric")
			}
		})
	}
}

// TestSink_LabelSets: emits of one name with other label names make
// series of their own, scraped together.
func TestSink_LabelSets(t *testing.T) {
	s := newSink(t)
	key := []string{"rpc"}
	s.AddSampleWithLabels(key, 1, []metrics.Label{{Name: "method", Value: "A"}})
	s.AddSampleWithLabels(key, 2, []metrics.Label{{Name: "method", Value: "A"}, {Name: "plugin", Value: "p"}})
	s.AddSample(key, 3)
	s.AddSampleWithLabels(key, 4, []metrics.Label{{Name: "method", Value: "A"}})
	fams := scrape(t, s)
	for labels, sum := range map[string]float64{"method=A": 5, "method=A,plugin=p": 2, "": 3} {
		if got := series(fams, "rpc", labels).GetHistogram().GetSampleSum(); got != sum {
			t.Errorf("rpc{%s} sum = %v, want %v", labels, got, sum)
		}
	}
}

// TestSink_DroppedFirstEmitFixesNoKind: a name whose first emit was
// dropped takes a later emit of another kind.
func TestSink_DroppedFirstEmitFixesNoKind(t *testing.T) {
	s := newSink(t)
	s.AddSampleWithLabels([]string{"new"}, 1, []metrics.Label{{Name: "le", Value: "1"}})
	s.IncrCounter([]string{"new"}, 1)
	fams := scrape(t, s)
	if m := series(fams, "new", ""); m.GetCounter().GetValue() != 1 {
		t.Errorf("new = %v, want the counter kept", m)
	}
	if m := series(fams, "promsink_dropped_total", "reason=kind"); m != nil {
		t.Errorf("dropped{reason=kind} = %v, want none", m)
	}
}

// TestSink_LeOnCounter: "le" is reserved for histograms only.
func TestSink_LeOnCounter(t *testing.T) {
	s := newSink(t)
	s.IncrCounterWithLabels([]string{"c"}, 1, []metrics.Label{{Name: "le", Value: "x"}})
	if m := series(scrape(t, s), "c", "le=x"); m.GetCounter().GetValue() != 1 {
		t.Errorf("c{le=x} = %v, want 1", m)
	}
}

// TestSink_ConcurrentFirstEmits: goroutines that emit a new name at
// once share one metric, so that no count is lost.
func TestSink_ConcurrentFirstEmits(t *testing.T) {
	const goroutines, each = 8, 500
	for round := range 20 {
		s := newSink(t)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for range goroutines {
			wg.Go(func() {
				<-start
				for range each {
					s.IncrCounterWithLabels([]string{"hits"}, 1, []metrics.Label{{Name: "a", Value: "1"}})
				}
			})
		}
		close(start)
		wg.Wait()
		if m := series(scrape(t, s), "hits", "a=1"); m.GetCounter().GetValue() != goroutines*each {
			t.Fatalf("round %d: hits = %v, want %d", round, m, goroutines*each)
		}
	}
}

// TestSink_ConcurrentFirstEmitsOfTwoKinds: when a counter's and a
// gauge's first emits of one name race, one kind is kept and the other
// dropped, and the scrape never fails.
func TestSink_ConcurrentFirstEmitsOfTwoKinds(t *testing.T) {
	for round := range 2000 {
		s := newSink(t)
		start := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			<-start
			s.IncrCounter([]string{"x"}, 1)
		})
		wg.Go(func() {
			<-start
			s.SetGauge([]string{"x"}, 1)
		})
		close(start)
		wg.Wait()
		fams := scrape(t, s)
		if len(fams["x"].GetMetric()) != 1 || series(fams, "promsink_dropped_total", "reason=kind").GetCounter().GetValue() != 1 {
			t.Fatalf("round %d: x = %v, dropped %v; want one kind kept and one emit dropped", round, fams["x"], fams["promsink_dropped_total"])
		}
	}
}

func TestNew_Buckets(t *testing.T) {
	for _, b := range [][]float64{{1, 1}, {2, 1}, {1, math.NaN()}} {
		if _, err := promsink.New(promsink.Options{Buckets: b}); err == nil {
			t.Errorf("buckets %v: no error", b)
		}
	}
	empty, err := promsink.New(promsink.Options{Buckets: []float64{}})
	if err != nil {
		t.Fatal(err)
	}
	empty.AddSample([]string{"lat"}, 50)
	if bs := series(scrape(t, empty), "lat", "").GetHistogram().GetBucket(); len(bs) != len(promsink.DefaultBuckets) {
		t.Errorf("no buckets given: %d buckets, want DefaultBuckets' %d", len(bs), len(promsink.DefaultBuckets))
	}
	s, err := promsink.New(promsink.Options{Buckets: []float64{10, 100}})
	if err != nil {
		t.Fatal(err)
	}
	s.AddSample([]string{"lat"}, 50)
	bs := series(scrape(t, s), "lat", "").GetHistogram().GetBucket()
	if len(bs) != 2 || bs[0].GetCumulativeCount() != 0 || bs[1].GetCumulativeCount() != 1 {
		t.Errorf("buckets = %v, want le=10 holding 0 and le=100 holding 1", bs)
	}
}
