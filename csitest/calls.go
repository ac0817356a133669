package csitest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Call is one entry of the call log.
type Call struct {
	// Method is the bare RPC name (a Method… constant).
	Method string
	// Request is a copy of the request with every field the CSI spec
	// marks csi_secret cleared, so the log never holds a secret.
	Request proto.Message
	// Code is the status code the call answered with.
	Code codes.Code
	// Message is the status message of a failed call.
	Message string
	// Time is when the call arrived (Config.Clock).
	Time time.Time
	// Pending is true while the call has not answered yet; Code and
	// Message are then unset.
	Pending bool
}

func (c Call) String() string {
	s := c.Method + " " + c.Code.String()
	if c.Pending {
		s = c.Method + " (pending)"
	}
	if c.Message != "" {
		s += ": " + c.Message
	}
	if c.Request != nil {
		s += " {" + strings.TrimSpace(fmt.Sprint(c.Request)) + "}"
	}
	return s
}

// record logs a call as it arrives, so the log is in arrival order. With
// Config.MaxCalls set, the oldest call is dropped once the log is full;
// the per-method count keeps it.
func (p *Plugin) record(method string, req any) *Call {
	c := &Call{Method: method, Request: stripSecrets(req), Time: p.clock.Now(), Pending: true}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.callCounts[method]++
	if p.maxCalls > 0 && len(p.calls) >= p.maxCalls {
		// Drop from the front: append reallocates once the backing array
		// runs out, copying only the retained calls, so each call costs
		// O(1) amortized and the array stays within a small multiple of
		// MaxCalls. Clearing the slot lets the dropped call be collected.
		n := len(p.calls) - p.maxCalls + 1
		clear(p.calls[:n])
		p.calls = p.calls[n:]
		p.dropped += n
	}
	p.calls = append(p.calls, c)
	return c
}

// finish fills in the result of a logged call.
func (p *Plugin) finish(c *Call, err error) {
	st := status.Convert(err)
	p.mu.Lock()
	c.Code, c.Message, c.Pending = st.Code(), st.Message(), false
	p.mu.Unlock()
	p.log.Debug("csitest: call", "method", c.Method, "code", st.Code(), "request", c.Request)
}

// Calls returns a copy of the call log in arrival order: every call, or
// with Config.MaxCalls set the most recent ones.
func (p *Plugin) Calls() []Call {
	calls, _ := p.callLog()
	return calls
}

// callLog returns a copy of the call log and how many calls MaxCalls
// dropped before its first entry.
func (p *Plugin) callLog() ([]Call, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Call, len(p.calls))
	for i, c := range p.calls {
		out[i] = c.copy()
	}
	return out, p.dropped
}

// CallsTo returns a copy of the logged calls of one method, in order;
// with Config.MaxCalls set, only those still in the log.
func (p *Plugin) CallsTo(method string) []Call {
	method = methodName(method)
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []Call
	for _, c := range p.calls {
		if c.Method == method {
			out = append(out, c.copy())
		}
	}
	return out
}

func (c *Call) copy() Call {
	d := *c
	if c.Request != nil {
		d.Request = proto.Clone(c.Request)
	}
	return d
}

// CallCount returns how many calls of method arrived since New or the
// last ResetCalls, failed ones included. It counts calls that
// Config.MaxCalls has already dropped from the log too.
func (p *Plugin) CallCount(method string) int {
	method = methodName(method)
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.callCounts[method]
}

// Methods returns the method names of the call log (as Calls) in order.
func (p *Plugin) Methods() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, len(p.calls))
	for i, c := range p.calls {
		out[i] = c.Method
	}
	return out
}

// ResetCalls empties the call log and sets every CallCount to zero. Calls
// in flight finish without being logged or counted again.
func (p *Plugin) ResetCalls() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = nil
	p.dropped = 0
	clear(p.callCounts)
}

// RequireSequence fails the test unless methods appear in the call log in
// this relative order (other calls may come between them). The failure
// message shows the whole log, and how many calls Config.MaxCalls dropped
// from its front.
func (p *Plugin) RequireSequence(t testing.TB, methods ...string) {
	t.Helper()
	calls, dropped := p.callLog()
	next := 0
	for _, c := range calls {
		if next < len(methods) && c.Method == methods[next] {
			next++
		}
	}
	if next == len(methods) {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "csitest: call log lacks the sequence %s\n", strings.Join(methods, " → "))
	fmt.Fprintf(&b, "  matched %d of %d; first missing: %s\n", next, len(methods), methods[next])
	if dropped > 0 {
		fmt.Fprintf(&b, "  %d earlier calls were dropped (Config.MaxCalls); raise it if the sequence began before them\n", dropped)
	}
	b.WriteString(formatCalls(calls))
	t.Fatal(b.String())
}

func formatCalls(calls []Call) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  call log (%d calls):\n", len(calls))
	for i, c := range calls {
		fmt.Fprintf(&b, "  %3d. %s\n", i+1, c)
	}
	return b.String()
}

// stripSecrets returns a copy of req with every csi_secret field cleared,
// or nil when req is not a protobuf message.
func stripSecrets(req any) proto.Message {
	m, ok := req.(proto.Message)
	if !ok || m == nil {
		return nil
	}
	c := proto.Clone(m)
	clearSecrets(c.ProtoReflect())
	return c
}

// clearSecrets walks m and its nested messages and clears the fields
// whose options carry the csi_secret extension.
func clearSecrets(m protoreflect.Message) {
	var fields []protoreflect.FieldDescriptor
	m.Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
		fields = append(fields, fd)
		return true
	})
	for _, fd := range fields {
		switch {
		case isSecret(fd):
			m.Clear(fd)
		case fd.IsMap():
			if fd.MapValue().Message() == nil {
				continue
			}
			mp := m.Mutable(fd).Map()
			var keys []protoreflect.MapKey
			mp.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
				keys = append(keys, k)
				return true
			})
			for _, k := range keys {
				clearSecrets(mp.Mutable(k).Message())
			}
		case fd.IsList():
			if fd.Message() == nil {
				continue
			}
			l := m.Mutable(fd).List()
			for i := range l.Len() {
				clearSecrets(l.Get(i).Message())
			}
		case fd.Message() != nil:
			clearSecrets(m.Mutable(fd).Message())
		}
	}
}

func isSecret(fd protoreflect.FieldDescriptor) bool {
	opts := fd.Options()
	if opts == nil {
		return false
	}
	v, _ := proto.GetExtension(opts, csipb.E_CsiSecret).(bool)
	return v
}
