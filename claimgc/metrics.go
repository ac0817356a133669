package claimgc

import (
	"time"

	"github.com/csikit/csikit/csi/metrics"
)

// MetricsObserver returns an Observer that emits the Worker's events
// through sink: claims released and the release latency (from the
// allocation turning terminal to the free), failed steps by step and
// reason (metrics.WorkerRetries), and the queue depth. Pass it as
// Config.Observer, or call it from the host's own Observer.
func MetricsObserver(sink metrics.Sink) Observer { return metricsObserver{metrics.Or(sink)} }

type metricsObserver struct{ sink metrics.Sink }

var _ Observer = metricsObserver{}

func (o metricsObserver) ClaimFreed(_, _, _ string, sinceReleased time.Duration) {
	o.sink.IncrCounter(metrics.ClaimsReleased, 1)
	if sinceReleased > 0 {
		o.sink.AddSample(metrics.ReleaseLatency, float32(sinceReleased.Seconds()*1000))
	}
}

func (o metricsObserver) StepFailed(_, _, _ string, step Step, err error, final bool) {
	class := "retryable"
	if final {
		class = "final"
	}
	o.sink.IncrCounterWithLabels(metrics.WorkerRetries, 1, []metrics.Label{
		{Name: "step", Value: string(step)}, {Name: "reason", Value: metrics.Reason(err)}, {Name: "class", Value: class}})
}

func (o metricsObserver) QueueChanged(ready, running, waiting int) {
	o.sink.SetGauge(metrics.WorkerQueueDepth, float32(ready+running+waiting))
}
