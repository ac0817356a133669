package rpcshim

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/csikit/csikit/csi"
)

// Mux is a Handler that dispatches a call by method name to a typed
// function registered with Handle. It decodes the JSON request into the
// function's request type and encodes its reply. The zero value is not
// ready; use NewMux.
//
// Methods may be registered at any time, also while the Mux serves
// calls; all methods are safe for concurrent use.
type Mux struct {
	mu       sync.RWMutex
	handlers map[string]muxMethod
}

// muxMethod is one registered method.
type muxMethod struct {
	serve func(ctx context.Context, body []byte) ([]byte, error)
	// inline: the function is this package's own and returns soon after
	// ctx ends (see inlineHandler).
	inline bool
}

var (
	_ Handler       = (*Mux)(nil)
	_ inlineHandler = (*Mux)(nil)
)

// NewMux returns a Mux with no methods.
func NewMux() *Mux {
	return &Mux{handlers: make(map[string]muxMethod)}
}

// Handle registers fn for method on m. fn receives a freshly decoded *Req
// that it owns; the *Resp it returns is encoded once fn returns (a nil
// *Resp is sent as JSON null, which leaves the caller's reply untouched).
// fn's error is returned to the caller as it is (see Handler).
//
// A body that does not decode into Req is refused with an error matching
// csi.ErrInvalidRequest (Final) before fn runs.
//
// Handle panics if method is empty, fn is nil, or method already has a
// function: these are programmer errors found at start-up.
func Handle[Req, Resp any](m *Mux, method string, fn func(ctx context.Context, req *Req) (*Resp, error)) {
	handle(m, method, fn, false)
}

// handle is Handle; inline marks a function of this package that
// returns soon after ctx ends, whatever the host plugged in below it
// does not change that (see inlineHandler).
func handle[Req, Resp any](m *Mux, method string, fn func(ctx context.Context, req *Req) (*Resp, error), inline bool) {
	register(m, method, fn, muxMethod{inline: inline})
}

// register adds fn for method with the options in mm.
func register[Req, Resp any](m *Mux, method string, fn func(ctx context.Context, req *Req) (*Resp, error), mm muxMethod) {
	if method == "" {
		panic("rpcshim: Handle called with an empty method name")
	}
	if fn == nil {
		panic("rpcshim: Handle called with a nil function for method " + method)
	}
	h := func(ctx context.Context, body []byte) ([]byte, error) {
		req := new(Req)
		if len(body) > 0 {
			if err := json.Unmarshal(body, req); err != nil {
				return nil, fmt.Errorf("%w: method %s: request body does not decode into %T: %v; check that server and node run compatible csikit versions",
					csi.ErrInvalidRequest, method, req, err)
			}
		}
		resp, err := fn(ctx, req)
		if err != nil {
			return nil, err
		}
		out, err := json.Marshal(resp)
		if err != nil {
			return nil, fmt.Errorf("method %s: encode reply %T: %w", method, resp, err)
		}
		return out, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, dup := m.handlers[method]; dup {
		panic("rpcshim: method " + method + " registered twice on one Mux")
	}
	mm.serve = h
	m.handlers[method] = mm
}

// ServeCall implements Handler. An unknown method gives an error matching
// csi.ErrNotSupported (Final): the node does not serve it, for example
// because it runs an older csikit.
func (m *Mux) ServeCall(ctx context.Context, method string, body []byte) ([]byte, error) {
	m.mu.RLock()
	h, ok := m.handlers[method]
	m.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w: the node does not serve method %q; check that server and node run compatible csikit versions",
			csi.ErrNotSupported, method)
	}
	return h.serve(ctx, body)
}

// servesInline implements inlineHandler: only the methods this package
// registered itself (the NodeEndpoint's) qualify, never those of Handle.
func (m *Mux) servesInline(method string) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.handlers[method].inline
}
