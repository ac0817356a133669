package csitest

import (
	"context"
	"fmt"
	"path"
	"runtime/debug"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/csikit/csikit/csi/clock"
)

// Hook runs before the fake handles a call. A non-nil error (use a gRPC
// status error; anything else reaches the client as Unknown) is returned
// to the client instead of handling the call. req is the live request,
// secrets included, so a hook can check what a CO sent; it must not keep
// or modify it. A hook that blocks should return when ctx ends, as it
// does when the client gives up or the plugin is stopped.
type Hook func(ctx context.Context, method string, req any) error

type fault struct {
	queue   []codes.Code // FailNext, consumed first
	always  codes.Code   // FailAlways; OK means none
	latency time.Duration
	hook    Hook
	// gate holds requests before handling (Hold), replyGate replies
	// after it (HoldReplies).
	gate, replyGate *Gate
}

// faultLocked returns the method's knobs, creating them; p.mu is held.
func (p *Plugin) faultLocked(method string) *fault {
	f := p.faults[method]
	if f == nil {
		f = &fault{}
		p.faults[method] = f
	}
	return f
}

// FailNext makes the next times calls of method fail with code. Calls
// queue: FailNext(m, codes.Unavailable, 1) then FailNext(m, codes.Internal,
// 1) fails the next call with Unavailable and the one after with
// Internal. Queued failures take precedence over FailAlways. method is a
// Method… constant; an unknown name or codes.OK panics, as a test bug.
func (p *Plugin) FailNext(method string, code codes.Code, times int) {
	method = methodName(method)
	if code == codes.OK {
		panic(fmt.Sprintf("csitest: FailNext(%s) with codes.OK; use ClearFaults to stop failing", method))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	f := p.faultLocked(method)
	for range times {
		f.queue = append(f.queue, code)
	}
}

// FailAlways makes every call of method fail with code until ClearFaults
// or FailAlways(method, codes.OK).
func (p *Plugin) FailAlways(method string, code codes.Code) {
	method = methodName(method)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faultLocked(method).always = code
}

// SetLatency delays every call of method by d before anything else
// happens to it (injected failures, hooks, handling). The wait ends early
// when the call's context does, and the call then fails with Canceled or
// DeadlineExceeded. d <= 0 removes the delay. The delay is timed by
// Config.Clock.
func (p *Plugin) SetLatency(method string, d time.Duration) {
	method = methodName(method)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faultLocked(method).latency = max(d, 0)
}

// SetHook runs fn before every call of method (after latency and injected
// failures); see Hook. A nil fn removes the hook.
func (p *Plugin) SetHook(method string, fn Hook) {
	method = methodName(method)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faultLocked(method).hook = fn
}

// ClearFaults removes every injected failure, latency, hook and gate,
// opening the gates so that the calls they hold go on. It does not
// change Probe readiness, capabilities or the model.
func (p *Plugin) ClearFaults() {
	p.mu.Lock()
	var gates []*Gate
	for _, f := range p.faults {
		for _, g := range []*Gate{f.gate, f.replyGate} {
			if g != nil {
				gates = append(gates, g)
			}
		}
	}
	clear(p.faults)
	p.mu.Unlock()
	for _, g := range gates {
		g.Open()
	}
}

// intercept wraps every call: it logs the call, applies the fault knobs,
// answers Unimplemented for what the fake does not serve, and turns a
// panic into codes.Internal so the test process survives.
func (p *Plugin) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	method := path.Base(info.FullMethod)
	c := p.record(method, req)
	defer func() {
		if r := recover(); r != nil {
			p.log.Error("csitest: handler panicked", "method", method, "panic", r, "stack", string(debug.Stack()))
			p.violate(method, "", RulePanic, "%s panicked: %v", method, r)
			resp, err = nil, status.Errorf(codes.Internal, "csitest: %s panicked: %v", method, r)
		}
		p.finish(c, err)
	}()
	resp, err = p.handle(ctx, method, req, handler)
	if g := p.replyGate(method); g != nil {
		if gerr := g.pass(ctx); gerr != nil {
			return nil, gerr
		}
	}
	return resp, err
}

// handle applies the knobs that act before a call is handled, then
// handles it unless it is not served.
func (p *Plugin) handle(ctx context.Context, method string, req any, handler grpc.UnaryHandler) (any, error) {
	if err := p.inject(ctx, method, req); err != nil {
		return nil, err
	}
	if err := p.serves(method); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

func (p *Plugin) replyGate(method string) *Gate {
	p.mu.Lock()
	defer p.mu.Unlock()
	if f := p.faults[method]; f != nil {
		return f.replyGate
	}
	return nil
}

func (p *Plugin) inject(ctx context.Context, method string, req any) error {
	var (
		code    codes.Code
		latency time.Duration
		hook    Hook
		gate    *Gate
	)
	p.mu.Lock()
	if f := p.faults[method]; f != nil {
		latency, hook, code, gate = f.latency, f.hook, f.always, f.gate
		if len(f.queue) > 0 {
			code = f.queue[0]
			f.queue = f.queue[1:]
		}
	}
	p.mu.Unlock()

	if latency > 0 {
		if err := clock.Sleep(ctx, p.clock, latency); err != nil {
			return status.FromContextError(err).Err()
		}
	}
	if code != codes.OK {
		return status.Errorf(code, "csitest: injected %s failure for %s", code, method)
	}
	if hook != nil {
		if err := hook(ctx, method, req); err != nil {
			return err
		}
	}
	if gate != nil {
		if err := gate.pass(ctx); err != nil {
			return err
		}
	}
	// A call whose client has gone (or whose server was stopped) must not
	// change the model after the client saw it fail.
	if err := ctx.Err(); err != nil {
		return status.FromContextError(err).Err()
	}
	return nil
}

// serves answers Unimplemented for a service this plugin type does not
// serve or an RPC whose capability is not advertised.
func (p *Plugin) serves(method string) error {
	p.mu.Lock()
	ctrl, node := p.ctrlCaps, p.nodeCaps
	p.mu.Unlock()
	switch serviceOf(method) {
	case serviceController:
		if !p.typ.HasController() {
			return status.Errorf(codes.Unimplemented, "csitest: %s: this %s plugin does not serve the controller service", method, p.typ)
		}
	case serviceNode:
		if !p.typ.HasNode() {
			return status.Errorf(codes.Unimplemented, "csitest: %s: this %s plugin does not serve the node service", method, p.typ)
		}
	}
	if !advertised(method, ctrl, node) {
		return status.Errorf(codes.Unimplemented, "csitest: %s: the capability it needs is not advertised", method)
	}
	return nil
}
