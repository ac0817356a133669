package csitest

import (
	"context"
	"sync"

	"google.golang.org/grpc/status"
)

// Gate holds the calls of one method until the test lets them go: a
// plugin as slow as the test wants, paced by the test rather than by a
// clock, and, when the test lets a later call go before an earlier one,
// a plugin that answers out of order. Plugin.Hold makes a gate that
// holds requests before the fake handles them; Plugin.HoldReplies makes
// one that holds replies after the fake has handled the call.
//
// Calls are numbered from 1 in the order they reach the gate. With
// calls made from several goroutines that order is the scheduler's; a
// test that needs to know which call is number 2 makes its calls one
// after another, waiting with Wait for each to reach the gate.
//
// A held call whose context ends (the client gave up, or the plugin was
// stopped) fails with Canceled or DeadlineExceeded. Held by Hold, it
// then leaves the model untouched; held by HoldReplies, the fake has
// already done the work, as a plugin whose reply was lost would have.
//
// All methods are safe for concurrent use.
type Gate struct {
	method string

	mu      sync.Mutex
	arrived int
	open    bool
	// release has one channel per call number, closed when that call may
	// go; a number released before its call arrives gets its channel
	// then.
	release map[int]chan struct{}
	changed chan struct{} // closed and replaced whenever a call arrives
}

func newGate(method string) *Gate {
	return &Gate{method: method, release: make(map[int]chan struct{}), changed: make(chan struct{})}
}

// Hold installs a gate that holds every call of method, after its
// latency, injected failure and hook (a call failed by FailNext never
// reaches it) and before the fake handles it. A held call therefore has
// not changed the model yet, and calls let go in another order than
// they came are handled, and answered, in the order they were let go.
//
// A method has at most one gate of each kind: Hold replaces an earlier
// request gate of method, opening it. ClearFaults opens and removes
// every gate. method is a Method… constant; an unknown name panics.
func (p *Plugin) Hold(method string) *Gate {
	return p.installGate(method, func(f *fault) **Gate { return &f.gate })
}

// HoldReplies installs a gate that holds the reply of every call of
// method once the fake has handled it, whatever the reply is (injected
// failures and Unimplemented included). The model has changed by the time the call is held, so the
// test sees the plugin's work done before the CO hears of it, and
// replies let go out of order reach the clients out of order. Otherwise
// it is Hold's twin: one reply gate per method, replaced by the next
// HoldReplies and opened and removed by ClearFaults.
func (p *Plugin) HoldReplies(method string) *Gate {
	return p.installGate(method, func(f *fault) **Gate { return &f.replyGate })
}

func (p *Plugin) installGate(method string, slot func(*fault) **Gate) *Gate {
	method = methodName(method)
	g := newGate(method)
	p.mu.Lock()
	s := slot(p.faultLocked(method))
	old := *s
	*s = g
	p.mu.Unlock()
	if old != nil {
		old.Open()
	}
	return g
}

// Method returns the bare RPC name the gate holds.
func (g *Gate) Method() string { return g.method }

// Arrived returns how many calls have reached the gate, held or not.
func (g *Gate) Arrived() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.arrived
}

// Wait blocks until at least n calls have reached the gate, or ctx
// ends, and then returns ctx's error.
func (g *Gate) Wait(ctx context.Context, n int) error {
	for {
		g.mu.Lock()
		if g.arrived >= n {
			g.mu.Unlock()
			return nil
		}
		ch := g.changed
		g.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

// Release lets the numbered calls go. A number whose call has not
// arrived yet lets that call pass when it comes; releasing a call twice
// does nothing. A number below 1 panics, as a test bug.
func (g *Gate) Release(calls ...int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, n := range calls {
		if n < 1 {
			panic("csitest: Gate.Release: calls are numbered from 1")
		}
		ch := g.channelLocked(n)
		select {
		case <-ch:
		default:
			close(ch)
		}
	}
}

// Open lets every held call go and every later one pass, which makes
// the gate harmless; install a new one to hold calls again.
func (g *Gate) Open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.open = true
	for _, ch := range g.release {
		select {
		case <-ch:
		default:
			close(ch)
		}
	}
}

func (g *Gate) channelLocked(n int) chan struct{} {
	ch := g.release[n]
	if ch == nil {
		ch = make(chan struct{})
		g.release[n] = ch
	}
	return ch
}

// pass numbers a call and waits until it is let go or ctx ends.
func (g *Gate) pass(ctx context.Context) error {
	g.mu.Lock()
	g.arrived++
	close(g.changed)
	g.changed = make(chan struct{})
	if g.open {
		g.mu.Unlock()
		return nil
	}
	n := g.arrived
	ch := g.channelLocked(n)
	g.mu.Unlock()
	// The number is never reached again, so its channel can go.
	defer func() {
		g.mu.Lock()
		delete(g.release, n)
		g.mu.Unlock()
	}()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
}
