package plugin

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/csikit/csikit/csi/metrics"
)

// metricsInterceptor samples the latency of each attempt of a plugin
// call, by CSI method and gRPC code (metrics.PluginRPCLatency, whose
// count is the call count). Both labels come from closed sets.
func metricsInterceptor(sink metrics.Sink, extra []metrics.Label) grpc.UnaryClientInterceptor {
	ls := &rpcLabels{extra: slices.Clone(extra), m: map[rpcLabelKey][]metrics.Label{}}
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		start := time.Now()
		err := invoker(ctx, method, req, reply, cc, opts...)
		metrics.Since(sink, metrics.PluginRPCLatency, start, ls.of(method, status.Code(err))...)
		return err
	}
}

type rpcLabelKey struct {
	method string
	code   codes.Code
}

// rpcLabels builds each call's label slice once per method and code, so
// that an emit allocates nothing of ours. The map stays bounded: the
// client calls only the CSI methods, and gRPC has 17 codes. The slices
// are shared with the sink, read-only.
type rpcLabels struct {
	extra []metrics.Label
	mu    sync.RWMutex
	m     map[rpcLabelKey][]metrics.Label
}

func (r *rpcLabels) of(method string, code codes.Code) []metrics.Label {
	k := rpcLabelKey{method, code}
	r.mu.RLock()
	l, ok := r.m[k]
	r.mu.RUnlock()
	if ok {
		return l
	}
	l = append([]metrics.Label{
		{Name: "method", Value: method[strings.LastIndexByte(method, '/')+1:]},
		{Name: "code", Value: code.String()},
	}, r.extra...)
	r.mu.Lock()
	defer r.mu.Unlock()
	if old, ok := r.m[k]; ok {
		return old
	}
	r.m[k] = l
	return l
}
