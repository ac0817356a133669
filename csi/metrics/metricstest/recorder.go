// Package metricstest holds a metrics.Sink that records what it is
// given, for tests that check what a part emits.
package metricstest

import (
	"sort"
	"strings"
	"sync"

	"github.com/csikit/csikit/csi/metrics"
)

// Recorder is a metrics.Sink that keeps counter sums, sample counts and
// the last gauge values by name: the key joined with dots, then each
// label as ";name=value" in the order given. It is safe for concurrent
// use.
type Recorder struct {
	mu       sync.Mutex
	counters map[string]float64
	samples  map[string]int
	gauges   map[string]float32
}

var _ metrics.Sink = (*Recorder)(nil)

// New returns an empty Recorder.
func New() *Recorder {
	return &Recorder{counters: map[string]float64{}, samples: map[string]int{}, gauges: map[string]float32{}}
}

// Name is the name Recorder files key and labels under.
func Name(key []string, labels ...metrics.Label) string {
	var b strings.Builder
	b.WriteString(strings.Join(key, "."))
	for _, l := range labels {
		b.WriteString(";" + l.Name + "=" + l.Value)
	}
	return b.String()
}

// Counter returns the sum of a counter.
func (r *Recorder) Counter(name string) float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.counters[name]
}

// Samples returns how many samples a name got.
func (r *Recorder) Samples(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.samples[name]
}

// Gauge returns a gauge's last value and whether it was set.
func (r *Recorder) Gauge(name string) (float32, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v, ok := r.gauges[name]
	return v, ok
}

// Names lists every name recorded, sorted.
func (r *Recorder) Names() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, m := range []map[string]bool{keys(r.counters), keys(r.samples), keys(r.gauges)} {
		for k := range m {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

func keys[V any](m map[string]V) map[string]bool {
	out := make(map[string]bool, len(m))
	for k := range m {
		out[k] = true
	}
	return out
}

// SetGauge implements metrics.Sink.
func (r *Recorder) SetGauge(key []string, val float32) { r.SetGaugeWithLabels(key, val, nil) }

// SetGaugeWithLabels implements metrics.Sink.
func (r *Recorder) SetGaugeWithLabels(key []string, val float32, labels []metrics.Label) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gauges[Name(key, labels...)] = val
}

// EmitKey implements metrics.Sink; it is recorded as a sample.
func (r *Recorder) EmitKey(key []string, val float32) { r.AddSample(key, val) }

// IncrCounter implements metrics.Sink.
func (r *Recorder) IncrCounter(key []string, val float32) { r.IncrCounterWithLabels(key, val, nil) }

// IncrCounterWithLabels implements metrics.Sink.
func (r *Recorder) IncrCounterWithLabels(key []string, val float32, labels []metrics.Label) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.counters[Name(key, labels...)] += float64(val)
}

// AddSample implements metrics.Sink.
func (r *Recorder) AddSample(key []string, val float32) { r.AddSampleWithLabels(key, val, nil) }

// AddSampleWithLabels implements metrics.Sink.
func (r *Recorder) AddSampleWithLabels(key []string, _ float32, labels []metrics.Label) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.samples[Name(key, labels...)]++
}
