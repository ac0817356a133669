package api_test

import (
	"crypto/tls"
	"testing"

	"github.com/csikit/csikit/examples/refserver/api"
)

// TestNewTLSClient_Scheme: with a TLS configuration every address is
// dialed with https, so a server address written http:// (a -join
// flag, an advertised address) never sends a request in clear.
func TestNewTLSClient_Scheme(t *testing.T) {
	conf := &tls.Config{MinVersion: tls.VersionTLS12}
	for _, tt := range []struct {
		addr string
		conf *tls.Config
		want string
	}{
		{"127.0.0.1:7646", conf, "https://127.0.0.1:7646"},
		{"http://127.0.0.1:7646", conf, "https://127.0.0.1:7646"},
		{"https://127.0.0.1:7646", conf, "https://127.0.0.1:7646"},
		{"127.0.0.1:7646", nil, "http://127.0.0.1:7646"},
	} {
		c, err := api.NewTLSClient(tt.addr, tt.conf)
		if err != nil {
			t.Fatalf("NewTLSClient(%q): %v", tt.addr, err)
		}
		if got := c.Address(); got != tt.want {
			t.Errorf("NewTLSClient(%q, %v).Address() = %q, want %q", tt.addr, tt.conf != nil, got, tt.want)
		}
		c.Close()
	}
}
