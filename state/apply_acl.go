// apply_acl.go owns the host's ACL tokens kept in the replicated
// state: UpsertACLToken and DeleteACLToken, and the ACLReader. The
// store keeps each token's hash (HashNodeSecret of the token secret)
// with its policy, never the secret, so that a token made on one
// server is known to every replica while neither the log nor a
// snapshot holds it.

package state

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"

	"github.com/csikit/csikit/csi"
	"github.com/hashicorp/go-memdb"
)

// The kinds of the ACL commands.
const (
	KindUpsertACLToken Kind = "upsert-acl-token"
	KindDeleteACLToken Kind = "delete-acl-token"
)

// tACLTokens holds ACLToken rows by name; iHash finds one by hash.
const (
	tACLTokens = "acl_tokens"
	iHash      = "hash"
)

// ACLToken is one token's policy: the permissions it grants in its
// namespaces ("*" for every one). Name identifies it and is not
// secret; Hash is HashNodeSecret of the secret the caller sends, which
// the store never sees. The caller owns what ACLReader returns.
type ACLToken struct {
	Name        string
	Hash        string
	Namespaces  []string         `json:",omitempty"`
	Permissions []csi.Permission `json:",omitempty"`
	CreateIndex uint64
	ModifyIndex uint64
}

func (t *ACLToken) copy() *ACLToken {
	c := *t
	c.Namespaces = slices.Clone(t.Namespaces)
	c.Permissions = slices.Clone(t.Permissions)
	return &c
}

// ErrACLBootstrapped is matched by an UpsertACLToken with Bootstrap set
// once the store holds a token: the first management token is made
// once, by whichever server's request commits first. It also matches
// csi.ErrPermissionDenied.
var ErrACLBootstrapped = fmt.Errorf("%w: ACLs are bootstrapped already; ask a holder of a management token for a token", csi.ErrPermissionDenied)

// UpsertACLToken creates the token Token.Name, or replaces its policy
// and hash. With Bootstrap it is refused with ErrACLBootstrapped when
// any token exists, so that racing bootstraps make one token. A hash
// used by another token is refused (csi.ErrInvalidRequest).
type UpsertACLToken struct {
	Token     ACLToken
	Bootstrap bool `json:",omitempty"`
}

// DeleteACLToken removes a token by name; an unknown name is a no-op.
type DeleteACLToken struct {
	Name string
}

// Kind implements Command.
func (UpsertACLToken) Kind() Kind { return KindUpsertACLToken }

// Kind implements Command.
func (DeleteACLToken) Kind() Kind { return KindDeleteACLToken }

// ACLReader reads the ACL tokens. It is not part of Reader, so that
// stores of hosts that keep their tokens elsewhere need not have it;
// MemStore does. The contract of VolumeReader applies, ownership
// included. A missing token matches ErrACLTokenNotFound.
type ACLReader interface {
	// ACLTokenByHash returns the token whose Hash is hash.
	ACLTokenByHash(hash string) (*ACLToken, error)
	// ACLTokens returns every token, sorted by name.
	ACLTokens() ([]*ACLToken, error)
}

// ErrACLTokenNotFound is matched by a read of an unknown token; it also
// matches csi.ErrPermissionDenied, since a caller with an unknown token
// is refused.
var ErrACLTokenNotFound = fmt.Errorf("%w: unknown ACL token", csi.ErrPermissionDenied)

var _ ACLReader = (*MemStore)(nil)

func aclTable() *memdb.TableSchema {
	return &memdb.TableSchema{Name: tACLTokens, Indexes: map[string]*memdb.IndexSchema{
		iID:   {Name: iID, Unique: true, Indexer: single(1, func(t *ACLToken) []string { return []string{t.Name} })},
		iHash: {Name: iHash, Unique: true, Indexer: single(1, func(t *ACLToken) []string { return []string{t.Hash} })},
	}}
}

// ACLTokenByHash implements ACLReader.
func (s *MemStore) ACLTokenByHash(hash string) (*ACLToken, error) {
	raw, err := s.read().First(tACLTokens, iHash, hash)
	if err != nil {
		return nil, dbErr("read ACL token", err)
	}
	if raw == nil {
		return nil, ErrACLTokenNotFound
	}
	return raw.(*ACLToken).copy(), nil
}

// ACLTokens implements ACLReader.
func (s *MemStore) ACLTokens() ([]*ACLToken, error) {
	it, err := s.read().Get(tACLTokens, iID)
	if err != nil {
		return nil, dbErr("list ACL tokens", err)
	}
	out := []*ACLToken{}
	for raw := it.Next(); raw != nil; raw = it.Next() {
		out = append(out, raw.(*ACLToken).copy())
	}
	return out, nil
}

func validateACLToken(t ACLToken) error {
	if err := csi.ValidateID("ACL token name", t.Name); err != nil {
		return err
	}
	if b, err := hex.DecodeString(t.Hash); err != nil || len(b) != sha256.Size {
		return fmt.Errorf("%w: ACL token %s: Hash is not a hex SHA-256; pass HashNodeSecret(secret)", csi.ErrInvalidRequest, t.Name)
	}
	var errs []error
	for _, p := range t.Permissions {
		if _, err := csi.ParsePermission(string(p)); err != nil {
			errs = append(errs, err)
		}
	}
	for _, ns := range t.Namespaces {
		if ns != csi.AllNamespaces {
			errs = append(errs, csi.ValidateNamespace(ns))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("ACL token %s: %w", t.Name, err)
	}
	return nil
}

func (c UpsertACLToken) apply(w *writer) error {
	if err := validateACLToken(c.Token); err != nil {
		return err
	}
	if c.Bootstrap {
		first, err := w.txn.First(tACLTokens, iID)
		if err != nil {
			return dbErr("read ACL tokens", err)
		}
		if first != nil {
			return ErrACLBootstrapped
		}
	}
	byHash, err := w.txn.First(tACLTokens, iHash, c.Token.Hash)
	if err != nil {
		return dbErr("read ACL token", err)
	}
	if byHash != nil && byHash.(*ACLToken).Name != c.Token.Name {
		return fmt.Errorf("%w: ACL token %s: its hash is another token's; draw a new random secret", csi.ErrInvalidRequest, c.Token.Name)
	}
	t := c.Token.copy()
	t.CreateIndex, t.ModifyIndex = w.index, w.index
	old, err := w.txn.First(tACLTokens, iID, t.Name)
	if err != nil {
		return dbErr("read ACL token", err)
	}
	if old != nil {
		t.CreateIndex = old.(*ACLToken).CreateIndex
		if err := w.delete(tACLTokens, old); err != nil {
			return err
		}
	}
	return w.insert(tACLTokens, t)
}

func (c DeleteACLToken) apply(w *writer) error {
	if err := csi.ValidateID("ACL token name", c.Name); err != nil {
		return err
	}
	old, err := w.txn.First(tACLTokens, iID, c.Name)
	if err != nil {
		return dbErr("read ACL token", err)
	}
	if old == nil {
		return nil
	}
	return w.delete(tACLTokens, old)
}
