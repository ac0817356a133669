package rpcshim_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/rpcshim"
)

func TestMux_ServeCall_Cases(t *testing.T) {
	m := rpcshim.NewMux()
	rpcshim.Handle(m, "Echo", echo)
	rpcshim.Handle(m, "Fail", func(context.Context, *echoReq) (*echoResp, error) {
		return nil, fmt.Errorf("on node n1: %w", csi.ErrPluginNotFound)
	})
	rpcshim.Handle(m, "Unencodable", func(context.Context, *echoReq) (*struct{ C chan int }, error) {
		return &struct{ C chan int }{C: make(chan int)}, nil
	})
	tests := []struct {
		name    string
		method  string
		body    string
		want    string
		wantErr error
	}{
		{name: "round trip", method: "Echo", body: `{"Name":"a","Tags":["x"]}`, want: `{"Greeting":"hello a","Tags":["x"]}`},
		{name: "empty body is a zero request", method: "Echo", body: ``, want: `{"Greeting":"hello ","Tags":null}`},
		{name: "null body is a zero request", method: "Echo", body: `null`, want: `{"Greeting":"hello ","Tags":null}`},
		{name: "unknown fields are ignored", method: "Echo", body: `{"Name":"a","Later":1}`, want: `{"Greeting":"hello a","Tags":null}`},
		{name: "handler error passes through", method: "Fail", body: `{}`, wantErr: csi.ErrPluginNotFound},
		{name: "unknown method", method: "Nope", body: `{}`, wantErr: csi.ErrNotSupported},
		{name: "empty method", method: "", body: `{}`, wantErr: csi.ErrNotSupported},
		{name: "malformed body", method: "Echo", body: `{"Name":`, wantErr: csi.ErrInvalidRequest},
		{name: "body of the wrong type", method: "Echo", body: `{"Name":3}`, wantErr: csi.ErrInvalidRequest},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := m.ServeCall(context.Background(), tc.method, []byte(tc.body))
			if tc.wantErr != nil {
				expectIs(t, err, tc.wantErr)
				expectClass(t, err, csi.Classify(tc.wantErr))
				if got != nil {
					t.Errorf("reply %q next to an error", got)
				}
				return
			}
			must(t, err)
			expectEqual(t, string(got), tc.want)
		})
	}
	t.Run("reply that does not encode", func(t *testing.T) {
		_, err := m.ServeCall(context.Background(), "Unencodable", nil)
		mustErr(t, err)
		var jsonErr *json.UnsupportedTypeError
		if !errors.As(err, &jsonErr) {
			t.Errorf("error %v does not hold the JSON failure", err)
		}
		expectContains(t, err.Error(), "Unencodable")
		expectClass(t, err, csi.ClassFinal)
	})
}

func TestMux_ServeCall_PassesContext(t *testing.T) {
	type key struct{}
	m := rpcshim.NewMux()
	rpcshim.Handle(m, "Ctx", func(ctx context.Context, _ *struct{}) (*string, error) {
		v, _ := ctx.Value(key{}).(string)
		return &v, nil
	})
	got, err := m.ServeCall(context.WithValue(context.Background(), key{}, "seen"), "Ctx", nil)
	must(t, err)
	expectEqual(t, string(got), `"seen"`)
}

func TestHandle_Panics(t *testing.T) {
	tests := []struct {
		name string
		reg  func(m *rpcshim.Mux)
	}{
		{"duplicate method", func(m *rpcshim.Mux) {
			rpcshim.Handle(m, "Echo", echo)
			rpcshim.Handle(m, "Echo", echo)
		}},
		{"empty method", func(m *rpcshim.Mux) { rpcshim.Handle(m, "", echo) }},
		{"nil function", func(m *rpcshim.Mux) {
			rpcshim.Handle[echoReq, echoResp](m, "Echo", nil)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("Handle did not panic")
				}
			}()
			tc.reg(rpcshim.NewMux())
		})
	}
}

func TestMux_Handle_ConcurrentWithCalls(t *testing.T) {
	m := rpcshim.NewMux()
	rpcshim.Handle(m, "Echo", echo)
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			rpcshim.Handle(m, fmt.Sprintf("M%d", i), echo)
		})
		wg.Go(func() {
			if _, err := m.ServeCall(context.Background(), "Echo", []byte(`{}`)); err != nil {
				t.Errorf("Echo: %v", err)
			}
		})
	}
	wg.Wait()
	for i := range 20 {
		_, err := m.ServeCall(context.Background(), fmt.Sprintf("M%d", i), nil)
		must(t, err)
	}
}
