package rpcshim_test

import (
	"context"
	"testing"
	"time"

	"github.com/csikit/csikit/claimgc"
	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/rpcshim"
)

// BenchmarkInmemTransport_WireCopy measures what the in-memory
// transport's wire copies save a single-process host: the whole server
// side of one volume's lifecycle (BenchmarkServer_Lifecycle's create,
// two claims, release through the Worker, delete) over two identical
// stacks in the same iteration, one whose InmemTransport hands the
// NodeEndpoint wire copies and one that sends every call through JSON.
// copy-vs-json is the sum of the step medians with wire copies over the
// sum without; 1 means they save nothing.
//
//	go test ./rpcshim -run '^$' -bench WireCopy -benchtime 500x -count 3
func BenchmarkInmemTransport_WireCopy(b *testing.B) {
	caps := csi.ControllerCapabilities{CreateDeleteVolume: true, PublishUnpublishVolume: true}
	ctx := context.Background()
	withCopy, withJSON := newSrvEnv(b, caps), newSrvEnv(b, caps)
	rpcshim.SetWireCopy(withJSON.tr, false)
	for _, e := range []*srvEnv{withCopy, withJSON} {
		runReleaseWorker(b, e)
	}
	steps := map[bool]map[string][]time.Duration{true: {}, false: {}}
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		i++
		for on, e := range map[bool]*srvEnv{true: withCopy, false: withJSON} {
			for step, d := range lifecycleOnce(b, ctx, e, i) {
				steps[on][step] = append(steps[on][step], d)
			}
		}
	}
	var sumCopy, sumJSON time.Duration
	for _, step := range lifecycleSteps {
		c, j := median(steps[true][step]), median(steps[false][step])
		sumCopy += c
		sumJSON += j
		b.ReportMetric(float64(c.Nanoseconds()), "ns/copy-"+step)
		b.ReportMetric(float64(j.Nanoseconds()), "ns/json-"+step)
	}
	b.ReportMetric(float64(sumCopy)/float64(sumJSON), "copy-vs-json")
}

// runReleaseWorker runs a claim release Worker for e until the
// benchmark ends.
func runReleaseWorker(b *testing.B, e *srvEnv) {
	w, err := claimgc.New(claimgc.Config{
		Store: e.store, Applier: e.applier, Nodes: e.router, Controllers: e.router, NodeStatuses: e.statuses,
		Parallelism: 1, RetryBase: 20 * time.Millisecond, RetryMax: time.Second, FinalRetryInterval: time.Second,
	})
	must(b, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	b.Cleanup(func() {
		cancel()
		<-done
	})
	w.SetEnabled(true)
}
