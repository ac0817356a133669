package raftstate

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/hashicorp/raft"

	"github.com/csikit/csikit/csi"
)

// Join tells this server about other servers of the cluster (their ID
// and raft address, from the host's configuration or discovery; the
// server itself may be listed too). Before the cluster has formed, a
// server that knows BootstrapExpect servers bootstraps the cluster with
// exactly those, sorted by ID; every server that reaches the count
// does the same with the same list, which raft accepts since the
// configurations are identical (or finds it already received that
// configuration from the leader). Until then this server writes
// nothing and cannot stand for election.
//
// Join may be called before or after Start, any number of times, with
// any subset of the peers. It is refused, and changes nothing, when a
// peer is malformed, when an ID is known at another address (or an
// address under another ID), or when the known servers would exceed
// BootstrapExpect: each of those means the servers were not given the
// same configuration.
//
// Once the cluster has formed, including on a server restarted from a
// data dir with raft state, Join changes nothing and returns nil: the
// membership lives in the log. To grow a formed cluster, call AddVoter
// on the leader's Raft.
func (s *Server) Join(peers ...Peer) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.phase == phaseStopped {
		return errNotRunning("join")
	}
	for _, p := range peers {
		if err := validateServerID(p.ID); err != nil {
			return fmt.Errorf("raftstate: join %s: %w", p, err)
		}
		if err := validateAddr(p.Addr); err != nil {
			return fmt.Errorf("raftstate: join %s: %w", p, err)
		}
	}
	if s.formed {
		s.cfg.Logger.Debug("cluster already formed; join changes nothing", "peers", peers)
		return nil
	}
	next := maps.Clone(s.known)
	for _, p := range peers {
		if addr, ok := next[p.ID]; ok && addr != p.Addr {
			return fmt.Errorf("%w: raftstate: join: server %s is known at %s, and now given at %s; server IDs must be unique and stable",
				csi.ErrInvalidRequest, p.ID, addr, p.Addr)
		}
		for id, addr := range next {
			if addr == p.Addr && id != p.ID {
				return fmt.Errorf("%w: raftstate: join: address %s is known as server %s, and now given as %s; give each server one ID",
					csi.ErrInvalidRequest, p.Addr, id, p.ID)
			}
		}
		next[p.ID] = p.Addr
	}
	if len(next) > s.cfg.BootstrapExpect {
		return fmt.Errorf("%w: raftstate: join: %d servers would be known (%s) but BootstrapExpect is %d; give every server the same expected count and the same servers",
			csi.ErrInvalidRequest, len(next), strings.Join(sortedPeerList(next), ", "), s.cfg.BootstrapExpect)
	}
	s.known = next
	if s.phase != phaseRunning {
		return nil
	}
	return s.maybeBootstrapLocked()
}

func sortedPeerList(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, p := range sortedPeers(m) {
		out = append(out, p.String())
	}
	return out
}

func sortedPeers(m map[string]string) []Peer {
	out := make([]Peer, 0, len(m))
	for id, addr := range m {
		out = append(out, Peer{ID: id, Addr: addr})
	}
	slices.SortFunc(out, func(a, b Peer) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// maybeBootstrapLocked bootstraps once every expected server is known.
func (s *Server) maybeBootstrapLocked() error {
	if s.formed || len(s.known) < s.cfg.BootstrapExpect {
		if !s.formed {
			s.cfg.Logger.Info("waiting for servers before bootstrapping", "known", len(s.known), "expect", s.cfg.BootstrapExpect)
		}
		return nil
	}
	var conf raft.Configuration
	for _, p := range sortedPeers(s.known) {
		conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.Addr)})
	}
	err := s.raft.BootstrapCluster(conf).Error()
	switch {
	case errors.Is(err, raft.ErrCantBootstrap):
		s.cfg.Logger.Info("raft state appeared before bootstrap; not bootstrapping")
	case err != nil:
		return fmt.Errorf("raftstate: bootstrap the cluster with %s: %w", strings.Join(sortedPeerList(s.known), ", "), err)
	default:
		s.cfg.Logger.Info("bootstrapped the cluster", "servers", sortedPeerList(s.known))
	}
	s.formed = true
	return nil
}

// Servers returns the servers of the latest raft configuration, sorted
// by ID; empty until the cluster has formed.
func (s *Server) Servers() ([]Peer, error) {
	r := s.running()
	if r == nil {
		return nil, errNotRunning("servers")
	}
	f := r.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, fmt.Errorf("raftstate: read the raft configuration: %w", err)
	}
	m := map[string]string{}
	for _, srv := range f.Configuration().Servers {
		m[string(srv.ID)] = string(srv.Address)
	}
	return sortedPeers(m), nil
}
