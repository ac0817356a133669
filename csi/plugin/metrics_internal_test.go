package plugin

import (
	"context"
	"sync"
	"testing"

	gometrics "github.com/hashicorp/go-metrics"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/csikit/csikit/csi/metrics"
)

// The interceptor's labels are built once per method and code: an emit
// into a sink that keeps nothing allocates nothing of the interceptor's.
func TestMetricsInterceptor_NoAllocs(t *testing.T) {
	ic := metricsInterceptor(&gometrics.BlackholeSink{}, []metrics.Label{{Name: "plugin", Value: "p1"}})
	invoke := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
	ctx := context.Background()
	_ = ic(ctx, "/csi.v1.Identity/Probe", nil, nil, nil, invoke)
	if n := testing.AllocsPerRun(100, func() { _ = ic(ctx, "/csi.v1.Identity/Probe", nil, nil, nil, invoke) }); n != 0 {
		t.Errorf("allocations per call = %v, want 0", n)
	}
}

// Calls on many goroutines share the label cache (run with -race), and
// each method and code keeps its own labels.
func TestRPCLabels_Concurrent(t *testing.T) {
	ls := &rpcLabels{extra: []metrics.Label{{Name: "plugin", Value: "p1"}}, m: map[rpcLabelKey][]metrics.Label{}}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code := codes.Code(i % 3)
			l := ls.of("/csi.v1.Node/NodeGetVolumeStats", code)
			if l[0].Value != "NodeGetVolumeStats" || l[1].Value != code.String() || l[2].Value != "p1" {
				t.Errorf("labels = %v", l)
			}
		}()
	}
	wg.Wait()
	if len(ls.m) != 3 {
		t.Errorf("cached %d label slices, want 3", len(ls.m))
	}
}
