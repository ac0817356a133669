// apply_identity.go owns the identity of nodes: RegisterNode, and the
// check that a node's plugin report carries the node's secret. The
// store keeps only a hash of the secret (HashNodeSecret), never the
// secret, so neither the log nor a snapshot holds it.

package state

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"unicode"

	"github.com/csikit/csikit/csi"
)

// KindRegisterNode tags RegisterNode.
const KindRegisterNode Kind = "register-node"

// MaxNodeAddressLen bounds RegisterNode.Address.
const MaxNodeAddressLen = 512

// RegisterNode records who a node is: the hash of the secret its agent
// holds (HashNodeSecret) and the address the servers call it at.
//
// The first registration of a node ID (also of a node known so far
// only from plugin reports) sets both. A later one must carry the same
// secret: a registration with another secret, whatever its address, is
// refused with a *NodeIdentityError (csi.ErrPermissionDenied) and
// writes nothing, so a process that learns a node's ID cannot take its
// place and have the servers send it volumes and their secrets. With
// the same secret the address may change: the agent proved who it is,
// and an agent restarted on a new port must be reachable again. A node
// whose secret is lost is deleted (DeleteNode, an operator's decision)
// before it registers again.
//
// Once a node has a secret, its plugin reports (UpsertNodePlugins) must
// carry the same SecretHash.
type RegisterNode struct {
	NodeID     string
	SecretHash string
	Address    string
}

// Kind implements Command.
func (RegisterNode) Kind() Kind { return KindRegisterNode }

// HashNodeSecret returns the hash a node's secret is stored and
// compared as (hex SHA-256). The secret must be random (32 bytes from
// crypto/rand); a guessable one is not protected by any hash.
func HashNodeSecret(secret string) string {
	h := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(h[:])
}

// NodeIdentityError refuses a write for a node whose identity it does
// not carry. It matches csi.ErrPermissionDenied. Its text names the
// node and what differed, never a secret or a hash.
type NodeIdentityError struct {
	NodeID string
	// What differed: "secret".
	What string
}

func (e *NodeIdentityError) Error() string {
	return fmt.Sprintf("%s: node %s is registered with another %s; a node keeps its secret, so have it deleted (an operator's call) before it joins again",
		csi.ErrPermissionDenied, e.NodeID, e.What)
}

// Unwrap returns csi.ErrPermissionDenied.
func (e *NodeIdentityError) Unwrap() error { return csi.ErrPermissionDenied }

func validateNodeIdentity(c RegisterNode) error {
	if err := csi.ValidateNodeID(c.NodeID); err != nil {
		return err
	}
	if b, err := hex.DecodeString(c.SecretHash); err != nil || len(b) != sha256.Size {
		return fmt.Errorf("%w: register node %s: SecretHash is not a hex SHA-256; pass HashNodeSecret(secret)", csi.ErrInvalidRequest, c.NodeID)
	}
	if c.Address == "" || len(c.Address) > MaxNodeAddressLen {
		return fmt.Errorf("%w: register node %s: the address must be 1 to %d bytes", csi.ErrInvalidRequest, c.NodeID, MaxNodeAddressLen)
	}
	for _, r := range c.Address {
		if unicode.IsControl(r) || unicode.IsSpace(r) {
			return fmt.Errorf("%w: register node %s: the address %q holds a space or control character", csi.ErrInvalidRequest, c.NodeID, c.Address)
		}
	}
	return nil
}

// apply writes the identity of a new node, or checks a repeated one.
func (c RegisterNode) apply(w *writer) error {
	if err := validateNodeIdentity(c); err != nil {
		return err
	}
	old, err := getNode(w.txn, c.NodeID)
	if err != nil {
		return err
	}
	if old != nil && old.SecretHash != "" {
		if !sameHash(old.SecretHash, c.SecretHash) {
			return &NodeIdentityError{NodeID: c.NodeID, What: "secret"}
		}
		if old.Address == c.Address {
			return nil // a repeated registration changes nothing
		}
	}
	row := &Node{ID: c.NodeID, CreateIndex: w.index}
	if old != nil {
		row = old.Copy()
	}
	row.SecretHash, row.Address, row.ModifyIndex = c.SecretHash, c.Address, w.index
	return w.insert(tNodes, row)
}

// CheckSecretHash returns a *NodeIdentityError unless n has no secret
// (it never registered) or hash is the hash of its secret
// (HashNodeSecret). The hashes are compared in constant time. A host
// that checks a node's calls outside the store uses it as the store
// checks the node's reports.
func (n *Node) CheckSecretHash(hash string) error {
	if n.SecretHash == "" || sameHash(n.SecretHash, hash) {
		return nil
	}
	return &NodeIdentityError{NodeID: n.ID, What: "secret"}
}

func sameHash(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}
