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
	handlers map[string]func(ctx context.Context, body []byte) ([]byte, error)
}

var _ Handler = (*Mux)(nil)

// NewMux returns a Mux with no methods.
func NewMux() *Mux {
	return &Mux{handlers: make(map[string]func(context.Context, []byte) ([]byte, error))}
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
	m.handlers[method] = h
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
	return h(ctx, body)
}
