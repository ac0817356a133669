package cluster

import (
	"context"
	"time"

	"github.com/csikit/csikit/csi/metrics"
	"github.com/csikit/csikit/state"
)

// timedApplier samples how long each command takes through raft
// (metrics.RaftApplyLatency), labelled by the command's kind, a closed
// set, and whether it was applied.
type timedApplier struct {
	state.Applier
	sink metrics.Sink
}

var _ state.Applier = timedApplier{}

// Apply implements state.Applier.
func (a timedApplier) Apply(ctx context.Context, cmd state.Command) (state.Result, error) {
	start := time.Now()
	res, err := a.Applier.Apply(ctx, cmd)
	kind := "nil"
	if cmd != nil {
		kind = string(cmd.Kind())
	}
	metrics.Since(a.sink, metrics.RaftApplyLatency, start,
		metrics.Label{Name: "kind", Value: kind}, metrics.Label{Name: "result", Value: metrics.Reason(err)})
	return res, err
}
