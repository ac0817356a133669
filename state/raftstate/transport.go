package raftstate

import (
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// Defaults of NewTCPTransport.
const (
	// DefaultMaxPool is how many idle connections to each other server
	// the TCP transport keeps.
	DefaultMaxPool = 3
	// DefaultIOTimeout bounds each raft RPC's network I/O; a snapshot
	// install is scaled up from it by raft.
	DefaultIOTimeout = 10 * time.Second
)

// NewTCPTransport listens on bind (host:port; port 0 picks a free one)
// and returns raft's TCP transport with DefaultMaxPool and
// DefaultIOTimeout. advertise is the address the other servers dial,
// when it differs from the listener's (a bind on 0.0.0.0, NAT); nil
// means the listener's address, which must then be a concrete IP. The
// connections are plain TCP: run them on a private network, since raft
// entries hold volume secrets. A nil logger logs nothing.
func NewTCPTransport(bind string, advertise net.Addr, logger hclog.Logger) (*raft.NetworkTransport, error) {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	t, err := raft.NewTCPTransportWithLogger(bind, advertise, DefaultMaxPool, DefaultIOTimeout, logger.Named("raft-transport"))
	if err != nil {
		return nil, fmt.Errorf("raftstate: raft TCP transport on %s: %w", bind, err)
	}
	return t, nil
}
