// Package promsink is a go-metrics sink that keeps what csikit's parts
// emit in prometheus/client_golang collectors: counters as counters,
// gauges as gauges, and samples (milliseconds, as go-metrics times
// them) as histograms, which a Prometheus server can sum across hosts
// and rate over any window. Register a Sink with a prometheus.Registerer
// and serve that registry with promhttp.
//
// A metric's name is its key joined with "_", each character that
// Prometheus does not allow in a name made "_". Its kind is fixed by
// its first emit; emits with other label names make series of their
// own under the same name, as they would in go-metrics' own Prometheus
// sink. An emit that cannot be kept as it came is dropped and counted
// in promsink_dropped_total, label reason, so that a scrape never fails
// on it:
//
//   - "kind": the name is already a metric of another kind;
//   - "labels": its label names are those of earlier emits in another
//     order, which would make the same series twice;
//   - "name": an empty name, a label name Prometheus does not allow or
//     reserves ("le" on a sample, a leading "__"), a label named twice,
//     or the name of the dropped counter itself;
//   - "value": a label value that is not UTF-8;
//   - "negative": a counter decremented.
//
// Series never expire, unlike those of go-metrics' own Prometheus sink:
// keep labels bounded, as csikit's are (see package metrics).
package promsink

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	gometrics "github.com/hashicorp/go-metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
)

// DefaultBuckets are the upper bounds, in milliseconds, of a sample's
// histogram when Options.Buckets is nil: from a fast plugin call to a
// release retried for minutes.
var DefaultBuckets = []float64{1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10_000, 30_000, 60_000, 300_000}

// droppedName is the name of the counter of dropped emits.
const droppedName = "promsink_dropped_total"

// Options configures a Sink.
type Options struct {
	// Buckets are the upper bounds of each sample's histogram, in
	// increasing order; none is DefaultBuckets.
	Buckets []float64
}

// Sink is a go-metrics MetricSink and a prometheus.Collector. Its
// methods are safe for concurrent use.
type Sink struct {
	buckets  []float64
	families sync.Map // name → *family
	dropped  *prometheus.CounterVec
}

var (
	_ gometrics.MetricSink = (*Sink)(nil)
	_ prometheus.Collector = (*Sink)(nil)
)

// New returns an empty Sink, or an error if opts.Buckets do not
// increase.
func New(opts Options) (*Sink, error) {
	buckets := opts.Buckets
	if len(buckets) == 0 {
		buckets = DefaultBuckets
	}
	for i := 1; i < len(buckets); i++ {
		if !(buckets[i-1] < buckets[i]) {
			return nil, fmt.Errorf("promsink: buckets %v do not increase", buckets)
		}
	}
	return &Sink{
		buckets: slices.Clone(buckets),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: droppedName, Help: "Emits promsink could not keep, by reason."}, []string{"reason"}),
	}, nil
}

// kind is what a family keeps.
type kind uint8

const (
	counter kind = iota
	gauge
	histogram
)

// family is the metric of one name: its kind, and a series set for
// each list of label names emitted under it (most metrics have one).
type family struct {
	kind kind
	mu   sync.Mutex                   // held to add a set
	sets atomic.Pointer[[]*seriesSet] // replaced, never changed, under mu
}

// seriesSet is the series of a family that share label names.
type seriesSet struct {
	labels []string
	vec    prometheus.Collector
	// add adds v to (counter), sets (gauge) or observes v in
	// (histogram) the series of values.
	add func(values []string, v float64) error
}

// set returns the family's set with the names of labels, or nil.
func (f *family) set(labels []gometrics.Label) *seriesSet {
	sets := f.sets.Load()
	if sets == nil {
		return nil
	}
	for _, ss := range *sets {
		if len(ss.labels) == len(labels) && slices.EqualFunc(ss.labels, labels, func(n string, l gometrics.Label) bool { return n == l.Name }) {
			return ss
		}
	}
	return nil
}

// addSet returns the family's set with names, made if it has none, or
// nil if a set has the same names in another order: the two would
// yield the same series.
func (f *family) addSet(names []string, newSet func() *seriesSet) *seriesSet {
	f.mu.Lock()
	defer f.mu.Unlock()
	var sets []*seriesSet
	if p := f.sets.Load(); p != nil {
		sets = *p
	}
	sorted := slices.Sorted(slices.Values(names))
	for _, ss := range sets {
		if slices.Equal(ss.labels, names) {
			return ss
		}
		if slices.Equal(slices.Sorted(slices.Values(ss.labels)), sorted) {
			return nil
		}
	}
	ss := newSet()
	sets = append(slices.Clip(sets), ss)
	f.sets.Store(&sets)
	return ss
}

func (s *Sink) newSet(name string, k kind, labels []string) *seriesSet {
	opts := prometheus.Opts{Name: name, Help: name}
	switch k {
	case counter:
		return vecSet(labels, prometheus.NewCounterVec(prometheus.CounterOpts(opts), labels), prometheus.Counter.Add)
	case gauge:
		return vecSet(labels, prometheus.NewGaugeVec(prometheus.GaugeOpts(opts), labels), prometheus.Gauge.Set)
	default:
		hopts := prometheus.HistogramOpts{Name: name, Help: name, Buckets: s.buckets}
		return vecSet(labels, prometheus.NewHistogramVec(hopts, labels), prometheus.Observer.Observe)
	}
}

// vecSet returns the set of vec, whose series take a value through put.
func vecSet[M any, V interface {
	prometheus.Collector
	GetMetricWithLabelValues(...string) (M, error)
}](labels []string, vec V, put func(M, float64)) *seriesSet {
	if len(labels) == 0 {
		// One series, found once so that an emit skips the lookup: with
		// no labels to check the lookup cannot fail.
		m, _ := vec.GetMetricWithLabelValues()
		return &seriesSet{labels, vec, func(_ []string, x float64) error {
			put(m, x)
			return nil
		}}
	}
	return &seriesSet{labels, vec, func(values []string, x float64) error {
		m, err := vec.GetMetricWithLabelValues(values...)
		if err == nil {
			put(m, x)
		}
		return err
	}}
}

// emit keeps v under key and labels, or counts why it cannot.
func (s *Sink) emit(k kind, key []string, v float64, labels []gometrics.Label) {
	if k == counter && v < 0 {
		s.drop("negative")
		return
	}
	ss, reason := s.series(metricName(key), k, labels)
	if ss == nil {
		s.drop(reason)
		return
	}
	values := make([]string, len(labels))
	for i, l := range labels {
		values[i] = l.Value
	}
	if err := ss.add(values, v); err != nil {
		s.drop("value")
	}
}

// series returns the set that emits of name, kind k and labels go to,
// made if new, or nil and the reason to drop them. A dropped first emit
// makes no family, so fixes no kind.
func (s *Sink) series(name string, k kind, labels []gometrics.Label) (*seriesSet, string) {
	f, ok := s.families.Load(name)
	if ok {
		fam := f.(*family)
		if fam.kind != k {
			return nil, "kind"
		}
		if ss := fam.set(labels); ss != nil {
			return ss, ""
		}
	}
	names, valid := labelNames(k, labels)
	if name == "" || name == droppedName || !valid {
		return nil, "name"
	}
	f, _ = s.families.LoadOrStore(name, &family{kind: k})
	fam := f.(*family)
	if fam.kind != k { // another kind's first emit came in between
		return nil, "kind"
	}
	if ss := fam.addSet(names, func() *seriesSet { return s.newSet(name, k, names) }); ss != nil {
		return ss, ""
	}
	return nil, "labels"
}

func (s *Sink) drop(reason string) { s.dropped.WithLabelValues(reason).Inc() }

// metricName joins key into a Prometheus metric name, or returns "".
func metricName(key []string) string {
	name := strings.Map(func(r rune) rune {
		if r == '_' || r == ':' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' {
			return r
		}
		return '_'
	}, strings.Join(key, "_"))
	if name != "" && '0' <= name[0] && name[0] <= '9' {
		name = "_" + name
	}
	return name
}

// labelNames returns the names of labels, and whether Prometheus takes
// them as the label names of a metric of kind k.
func labelNames(k kind, labels []gometrics.Label) ([]string, bool) {
	names := make([]string, len(labels))
	for i, l := range labels {
		if !model.LegacyValidation.IsValidLabelName(l.Name) || k == histogram && l.Name == "le" || strings.HasPrefix(l.Name, "__") {
			return nil, false
		}
		if slices.Contains(names[:i], l.Name) {
			return nil, false
		}
		names[i] = l.Name
	}
	return names, true
}

// Describe sends nothing: a Sink's metrics are known only once emitted,
// so it registers as an unchecked collector.
func (s *Sink) Describe(chan<- *prometheus.Desc) {}

// Collect sends every series kept so far, and the count of emits
// dropped.
func (s *Sink) Collect(ch chan<- prometheus.Metric) {
	s.dropped.Collect(ch)
	s.families.Range(func(_, f any) bool {
		if sets := f.(*family).sets.Load(); sets != nil {
			for _, ss := range *sets {
				ss.vec.Collect(ch)
			}
		}
		return true
	})
}

// SetGauge sets the gauge key to val.
func (s *Sink) SetGauge(key []string, val float32) { s.emit(gauge, key, float64(val), nil) }

// SetGaugeWithLabels sets the series labels of gauge key to val.
func (s *Sink) SetGaugeWithLabels(key []string, val float32, labels []gometrics.Label) {
	s.emit(gauge, key, float64(val), labels)
}

// EmitKey does nothing: Prometheus has no kind for a lone key and
// value, as go-metrics' own Prometheus sink has not.
func (s *Sink) EmitKey([]string, float32) {}

// IncrCounter adds val to the counter key.
func (s *Sink) IncrCounter(key []string, val float32) { s.emit(counter, key, float64(val), nil) }

// IncrCounterWithLabels adds val to the series labels of counter key.
func (s *Sink) IncrCounterWithLabels(key []string, val float32, labels []gometrics.Label) {
	s.emit(counter, key, float64(val), labels)
}

// AddSample observes val in the histogram key.
func (s *Sink) AddSample(key []string, val float32) { s.emit(histogram, key, float64(val), nil) }

// AddSampleWithLabels observes val in the series labels of histogram
// key.
func (s *Sink) AddSampleWithLabels(key []string, val float32, labels []gometrics.Label) {
	s.emit(histogram, key, float64(val), labels)
}
