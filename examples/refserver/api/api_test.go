package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/refserver/api"
	"github.com/csikit/csikit/rpcshim"
)

func TestNewClient_Address(t *testing.T) {
	tests := []struct {
		in, want string
		err      error
	}{
		{"", api.DefaultAddress, nil},
		{"127.0.0.1:4646", "http://127.0.0.1:4646", nil},
		{"http://127.0.0.1:4646/", "http://127.0.0.1:4646", nil},
		{"https://refserver.example:443", "https://refserver.example:443", nil},
		{"ftp://127.0.0.1:21", "", csi.ErrInvalidRequest},
		{"http://", "", csi.ErrInvalidRequest},
		{"http://[::1", "", csi.ErrInvalidRequest},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			c, err := api.NewClient(tt.in, nil)
			if !errors.Is(err, tt.err) {
				t.Fatalf("error %v, want %v", err, tt.err)
			}
			if err == nil && c.Address() != tt.want {
				t.Errorf("address %q, want %q", c.Address(), tt.want)
			}
		})
	}
}

func TestStatusOf(t *testing.T) {
	tests := []struct {
		err  error
		want int
	}{
		{csi.ErrVolumeNotFound, http.StatusNotFound},
		{fmt.Errorf("wrapped: %w", csi.ErrAllocationNotFound), http.StatusNotFound},
		{csi.ErrInvalidID, http.StatusBadRequest},
		{csi.ErrAccessModeNotAllowed, http.StatusBadRequest},
		{csi.ErrVolumeInUse, http.StatusConflict},
		{csi.ErrAttachedElsewhere, http.StatusConflict},
		{csi.ErrNoController, http.StatusServiceUnavailable},
		{csi.ErrNodeNotReady, http.StatusServiceUnavailable},
		{context.DeadlineExceeded, http.StatusGatewayTimeout},
		{&rpcshim.RemoteError{Message: "not leader, no leader known", Class: csi.ClassRetryable}, http.StatusServiceUnavailable},
		{errors.New("boom"), http.StatusInternalServerError},
	}
	for _, tt := range tests {
		t.Run(tt.err.Error(), func(t *testing.T) {
			if got := api.StatusOf(tt.err); got != tt.want {
				t.Errorf("StatusOf(%v) = %d, want %d", tt.err, got, tt.want)
			}
		})
	}
}

// TestClient_Errors checks how the client reads what a server answers:
// a refusal keeps its sentinel and class, anything else is a clear
// error.
func TestClient_Errors(t *testing.T) {
	tests := []struct {
		name    string
		handler http.HandlerFunc
		want    error
		class   csi.Class
		status  int
		text    string
	}{
		{"refusal", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusConflict)
			_ = json.NewEncoder(w).Encode(api.ErrorBody(fmt.Errorf("volume default/db: %w", csi.ErrVolumeInUse)))
		}, csi.ErrVolumeInUse, csi.ClassRetryable, http.StatusConflict, "volume default/db: volume in use"},
		{"not an API", func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "teapot", http.StatusTeapot)
		}, csi.ErrInvalidRequest, csi.ClassFinal, http.StatusTeapot, "is this a refserver server?"},
		{"garbage reply", func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write([]byte("{not json"))
		}, csi.ErrUnavailable, csi.ClassRetryable, 0, "does not decode"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hs := httptest.NewServer(tt.handler)
			defer hs.Close()
			c, err := api.NewClient(hs.URL, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_, _, err = c.Volume(context.Background(), "default", "db", nil)
			if !errors.Is(err, tt.want) || csi.Classify(err) != tt.class || !strings.Contains(err.Error(), tt.text) {
				t.Fatalf("got %v (class %s), want %v (class %s) saying %q", err, csi.Classify(err), tt.want, tt.class, tt.text)
			}
			var ae *api.Error
			if tt.status != 0 && (!errors.As(err, &ae) || ae.StatusCode != tt.status) {
				t.Errorf("error %#v, want an *api.Error with status %d", err, tt.status)
			}
		})
	}
}

func TestClient_Unreachable(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	c, err := api.NewClient(addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Nodes(context.Background())
	if !errors.Is(err, csi.ErrUnavailable) || !strings.Contains(err.Error(), "is it running?") {
		t.Fatalf("got %v, want csi.ErrUnavailable asking whether the server runs", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Nodes(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("with an ended ctx: got %v, want context.Canceled", err)
	}
}

// TestClient_Requests checks the paths, methods and query of the
// client's requests against a recording handler.
func TestClient_Requests(t *testing.T) {
	var got []string
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Method+" "+r.URL.RequestURI())
		w.Header().Set(api.IndexHeader, "42")
		_, _ = w.Write([]byte("{}"))
	}))
	defer hs.Close()
	c, err := api.NewClient(hs.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	_, meta, err := c.Volume(ctx, "", "db", &api.QueryOptions{WaitIndex: 7})
	if err != nil || meta.Index != 42 {
		t.Fatalf("volume: index %v, %v", meta, err)
	}
	_, _ = c.DeregisterVolume(ctx, "ns", "db", true)
	_ = c.Heartbeat(ctx, "node-1")
	_, _ = c.Release(ctx, "web-1")
	want := []string{
		"GET /v1/volumes/default/db?index=7",
		"DELETE /v1/volumes/ns/db?deregister=true&force=true",
		"PUT /v1/nodes/node-1/heartbeat",
		"POST /v1/allocations/web-1/release?namespace=default",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("requests:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
