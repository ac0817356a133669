package cluster

import (
	"fmt"
	"net"

	"github.com/hashicorp/raft"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/refserver/api"
	"github.com/csikit/csikit/examples/refserver/internal/tlsconf"
	"github.com/csikit/csikit/state/raftstate"
)

// checkTLS checks that the TLS settings are all set or all unset.
func (c Config) checkTLS() error {
	n := 0
	for _, t := range []bool{c.TLS != nil, c.PeerTLS != nil, c.ClientTLS != nil} {
		if t {
			n++
		}
	}
	if n != 0 && n != 3 {
		return fmt.Errorf("%w: cluster config: set TLS, PeerTLS and ClientTLS together (or none)", csi.ErrInvalidRequest)
	}
	return nil
}

// newClient is a client of another server's API at addr, with the
// cluster token and, when TLS is on, over https with the server's
// certificate.
func (s *Server) newClient(addr string) (*api.Client, error) {
	c, err := api.NewTLSClient(addr, s.cfg.ClientTLS)
	if err != nil {
		return nil, err
	}
	return c.WithClusterToken(s.cfg.ClusterToken), nil
}

// raftTransport is the raft network transport on RaftAddr: plain TCP,
// or mutual TLS between servers when TLS is on.
func (s *Server) raftTransport(adv net.Addr) (*raft.NetworkTransport, error) {
	if s.cfg.PeerTLS == nil {
		return raftstate.NewTCPTransport(s.cfg.RaftAddr, adv, s.cfg.Logger)
	}
	return tlsconf.NewTransport(s.cfg.RaftAddr, adv, s.cfg.PeerTLS, s.cfg.ClientTLS,
		raftstate.DefaultMaxPool, raftstate.DefaultIOTimeout, s.cfg.Logger.Named("raft-transport"))
}
