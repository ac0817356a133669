package server

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
)

// aclFile is the ACL as LoadACL reads it: each token's hash
// (state.HashNodeSecret) with its policy. It holds no token.
type aclFile struct {
	Tokens []aclEntry
}

type aclEntry struct {
	Hash   string
	Policy Policy
}

// BootstrapACL makes the ACL file at path with one management token
// (csi.PermOperator) and returns that token, which is printed once and
// kept nowhere: the file holds its hash only (0600). An existing file is
// left as it is: the error matches fs.ErrExist.
func BootstrapACL(path string) (string, error) {
	token := rand.Text() + rand.Text()
	b, err := json.MarshalIndent(aclFile{Tokens: []aclEntry{{
		Hash: state.HashNodeSecret(token), Policy: Policy{Name: "management", Permissions: []csi.Permission{csi.PermOperator}},
	}}}, "", "  ")
	if err != nil {
		return "", err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", fmt.Errorf("bootstrap ACL: %w", err)
	}
	_, werr := f.Write(append(b, '\n'))
	if err := errors.Join(werr, f.Sync(), f.Close()); err != nil {
		_ = os.Remove(path)
		return "", fmt.Errorf("bootstrap ACL %s: %w", path, err)
	}
	return token, nil
}

// LoadACL reads the ACL file at path (see BootstrapACL).
func LoadACL(path string) (*ACL, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: ACL file %s does not exist; bootstrap it first", csi.ErrInvalidRequest, path)
	}
	if err != nil {
		return nil, err
	}
	var in aclFile
	if err := json.Unmarshal(b, &in); err != nil {
		return nil, fmt.Errorf("%w: ACL file %s: %v", csi.ErrInvalidRequest, path, err)
	}
	a := &ACL{byHash: map[string]*Policy{}}
	names := map[string]bool{}
	for _, e := range in.Tokens {
		p := e.Policy
		if p.Name == "" || names[p.Name] || len(e.Hash) != 64 {
			return nil, fmt.Errorf("%w: ACL file %s: policy %q has no name, a name used twice, or no token hash", csi.ErrInvalidRequest, path, p.Name)
		}
		for _, perm := range p.Permissions {
			if _, err := csi.ParsePermission(string(perm)); err != nil {
				return nil, fmt.Errorf("ACL file %s: policy %q: %w", path, p.Name, err)
			}
		}
		a.byHash[e.Hash], names[p.Name] = &p, true
	}
	return a, nil
}
