package plugin

import (
	"context"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/csikit/csikit/csi/metrics"
)

// metricsInterceptor counts each attempt of a plugin call and samples
// its latency, by CSI method and gRPC code (metrics.PluginRPC and
// metrics.PluginRPCLatency). Both labels come from closed sets.
func metricsInterceptor(sink metrics.Sink, extra []metrics.Label) grpc.UnaryClientInterceptor {
	extra = slices.Clone(extra)
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		start := time.Now()
		err := invoker(ctx, method, req, reply, cc, opts...)
		labels := append([]metrics.Label{
			{Name: "method", Value: method[strings.LastIndexByte(method, '/')+1:]},
			{Name: "code", Value: status.Code(err).String()},
		}, extra...)
		sink.IncrCounterWithLabels(metrics.PluginRPC, 1, labels)
		metrics.Since(sink, metrics.PluginRPCLatency, start, labels...)
		return err
	}
}
