package server_test

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/csikit/csikit/examples/refserver/api"
	"github.com/csikit/csikit/examples/refserver/internal/tlsconf"
	"github.com/csikit/csikit/examples/refserver/server"
)

// TestServer_TLS_RefusesPlainHTTP: with TLS on, a plain HTTP request
// gets no API answer, and a client that does not trust the CA fails
// its handshake; a client with the CA is served.
func TestServer_TLS_RefusesPlainHTTP(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	must(t, tlsconf.Init(dir, nil))
	b, err := tlsconf.Load(tlsconf.Paths(dir, "server"))
	must(t, err)
	srv, err := server.New(server.Config{TLS: b.APIServer()})
	must(t, err)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, lis) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server Run: %v", err)
		}
	}()
	addr := lis.Addr().String()

	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("http://" + addr + "/v1/volumes")
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("plain HTTP: status %d, want 400 (or no answer)", resp.StatusCode)
		}
	}

	untrusting, err := api.NewTLSClient(addr, &tls.Config{MinVersion: tls.VersionTLS12})
	must(t, err)
	defer untrusting.Close()
	if _, _, err := untrusting.Volumes(context.Background(), "", "", nil); err == nil {
		t.Fatal("a client without the CA was served")
	}

	pool, err := tlsconf.LoadCA(filepath.Join(dir, tlsconf.CAFile))
	must(t, err)
	client, err := api.NewTLSClient(addr, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
	must(t, err)
	defer client.Close()
	if _, _, err := client.Volumes(context.Background(), "", "", nil); err != nil {
		t.Fatalf("a client with the CA: %v", err)
	}
}
