package tlsconf

import (
	"crypto/tls"
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/csikit/csikit/csi"
)

// StreamLayer is a raft.StreamLayer over mutual TLS: it accepts only
// servers whose certificate the CA signed, and presents its own when it
// dials.
type StreamLayer struct {
	lis       net.Listener
	advertise net.Addr
	client    *tls.Config
}

// NewStreamLayer listens on bind (host:port) for raft traffic with
// server (a MutualServer configuration) and dials with client (a
// Client configuration). advertise is the address other servers dial
// (nil: the listen address, which must then not be unspecified).
func NewStreamLayer(bind string, advertise net.Addr, server, client *tls.Config) (*StreamLayer, error) {
	if server == nil || client == nil || server.ClientAuth != tls.RequireAndVerifyClientCert {
		return nil, fmt.Errorf("%w: raft TLS needs a server configuration that requires client certificates, and a client one", csi.ErrInvalidRequest)
	}
	lis, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, fmt.Errorf("raft TLS listener on %s: %w", bind, err)
	}
	if advertise == nil {
		advertise = lis.Addr()
	}
	if a, ok := advertise.(*net.TCPAddr); ok && a.IP.IsUnspecified() {
		_ = lis.Close()
		return nil, fmt.Errorf("raft TLS listener on %s: advertise address %s is not one other servers can dial", bind, advertise)
	}
	return &StreamLayer{lis: tls.NewListener(lis, server), advertise: advertise, client: client}, nil
}

// Accept waits for a server's connection. Its handshake runs at the
// first read, in raft's handler of that connection, so a slow or bad
// peer does not hold up the others; one without a certificate the CA
// signed fails there and is dropped before raft reads a byte of it.
func (s *StreamLayer) Accept() (net.Conn, error) { return s.lis.Accept() }

// Close stops listening.
func (s *StreamLayer) Close() error { return s.lis.Close() }

// Addr is the advertised address.
func (s *StreamLayer) Addr() net.Addr { return s.advertise }

// Dial opens a TLS connection to another server and verifies its
// certificate against the CA.
func (s *StreamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: timeout}, Config: s.client}
	return d.Dial("tcp", string(address))
}

// NewTransport is a raft network transport over a StreamLayer.
func NewTransport(bind string, advertise net.Addr, server, client *tls.Config, maxPool int, timeout time.Duration, logger hclog.Logger) (*raft.NetworkTransport, error) {
	sl, err := NewStreamLayer(bind, advertise, server, client)
	if err != nil {
		return nil, err
	}
	return raft.NewNetworkTransportWithLogger(sl, maxPool, timeout, logger), nil
}
