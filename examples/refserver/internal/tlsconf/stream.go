package tlsconf

import (
	"crypto/tls"
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// StreamLayer is a raft.StreamLayer over mutual TLS: it accepts only
// servers whose certificate the CA signed, and presents its own when it
// dials.
type StreamLayer struct {
	lis       net.Listener
	advertise net.Addr
	client    *tls.Config
}

// NewStreamLayer listens on bind (host:port) for raft traffic with b's
// certificate. advertise is the address other servers dial (nil: the
// listen address, which must then not be unspecified).
func NewStreamLayer(bind string, advertise net.Addr, b *Bundle) (*StreamLayer, error) {
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
	return &StreamLayer{lis: tls.NewListener(lis, b.MutualServer()), advertise: advertise, client: b.Client()}, nil
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
func NewTransport(bind string, advertise net.Addr, b *Bundle, maxPool int, timeout time.Duration, logger hclog.Logger) (*raft.NetworkTransport, error) {
	sl, err := NewStreamLayer(bind, advertise, b)
	if err != nil {
		return nil, err
	}
	return raft.NewNetworkTransportWithLogger(sl, maxPool, timeout, logger), nil
}
