package cluster

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/csikit/csikit/examples/refserver/server"
)

// loadACL reads Config.ACLFile, bootstrapping it first when it does not
// exist; nil without an ACLFile.
func (s *Server) loadACL() (*server.ACL, error) {
	path := s.cfg.ACLFile
	if path == "" {
		return nil, nil
	}
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		token, err := server.BootstrapACL(path)
		if err != nil {
			return nil, fmt.Errorf("cluster server %s: %w", s.id, err)
		}
		s.cfg.Events.Printf("server", "ACL bootstrapped in %s; management token (shown once): %s", path, token)
	}
	acl, err := server.LoadACL(path)
	if err != nil {
		return nil, fmt.Errorf("cluster server %s: %w", s.id, err)
	}
	return acl, nil
}
