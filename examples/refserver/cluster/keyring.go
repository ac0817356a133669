package cluster

import (
	"fmt"
	"path/filepath"

	"github.com/csikit/csikit/state/sealed"
)

// keyringDir returns where the server's keyring is kept, or "" when it
// runs without one.
func (s *Server) keyringDir() string {
	switch {
	case s.cfg.Dev:
		return ""
	case s.cfg.KeyringDir != "":
		return s.cfg.KeyringDir
	case s.cfg.BootstrapExpect == 1:
		return filepath.Join(s.cfg.DataDir, KeyringDir)
	}
	return ""
}

// loadKeyring loads (on the first start, creates) the keyring that
// seals the raft log and snapshots; nil without one.
func (s *Server) loadKeyring() (*sealed.Keyring, error) {
	dir := s.keyringDir()
	if dir == "" {
		return nil, nil
	}
	k, err := sealed.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("cluster server %s: keyring %s: %w", s.id, dir, err)
	}
	s.cfg.Events.Printf("server", "raft log and snapshots sealed with keyring %s (key %d of %v)", dir, k.PrimaryID(), k.KeyIDs())
	return k, nil
}
