package server

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/csikit/csikit/csi"
)

// DefaultHeartbeatTTL is how long a node stays ready after its last
// heartbeat: how long a killed agent's node still looks ready. Agents
// heartbeat every third of it by default, so two lost heartbeats in a
// row do not mark a node down. An agent stopped cleanly leaves at once
// (Leave) and does not wait for it.
const DefaultHeartbeatTTL = 6 * time.Second

// Liveness decides each node's status from its registration and
// heartbeats: ready while its last heartbeat is at most TTL old, down
// after that, gone once forgotten, unknown if it never registered. It
// keeps node agents' addresses too, for the transport.
//
// Liveness reads no clock: every method that needs the time takes it,
// so the rules are tested with plain time values. The Server passes its
// Config.Now. All methods are safe for concurrent use.
type Liveness struct {
	ttl time.Duration

	mu    sync.Mutex
	nodes map[string]*liveNode
}

type liveNode struct {
	addr string
	last time.Time
	gone bool
	left bool // its agent stopped cleanly: down until it registers again
}

// NodeLiveness is one node's liveness at a point in time.
type NodeLiveness struct {
	ID            string
	Address       string
	LastHeartbeat time.Time
	Status        csi.NodeStatus
}

// NewLiveness returns an empty Liveness; ttl <= 0 means
// DefaultHeartbeatTTL.
func NewLiveness(ttl time.Duration) *Liveness {
	if ttl <= 0 {
		ttl = DefaultHeartbeatTTL
	}
	return &Liveness{ttl: ttl, nodes: make(map[string]*liveNode)}
}

// TTL returns the heartbeat TTL.
func (l *Liveness) TTL() time.Duration { return l.ttl }

// Register records a node agent and the gRPC target of its node service
// at now, which counts as a heartbeat. A node forgotten earlier comes
// back. It reports whether the node is new or changed its address.
func (l *Liveness) Register(id, addr string, now time.Time) (changed bool, err error) {
	if err := csi.ValidateNodeID(id); err != nil {
		return false, err
	}
	if err := validateAddress(addr); err != nil {
		return false, fmt.Errorf("%w: node %s: %v; give a gRPC target (host:port or unix:///path)", csi.ErrInvalidRequest, id, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	n, ok := l.nodes[id]
	if !ok {
		n = &liveNode{}
		l.nodes[id] = n
	}
	changed = !ok || n.gone || n.left || n.addr != addr
	n.addr, n.gone, n.left = addr, false, false
	if now.After(n.last) {
		n.last = now
	}
	return changed, nil
}

// Heartbeat records that the node was alive at now. An unknown or
// forgotten node is refused with csi.ErrNodeNotFound: the agent must
// register (again), since this server does not know its address.
func (l *Liveness) Heartbeat(id string, now time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, ok := l.nodes[id]
	if !ok || n.gone || n.left {
		return fmt.Errorf("%w: node %s has not registered with this server; register it again", csi.ErrNodeNotFound, id)
	}
	// A clock that steps back must not make a live node look older.
	if now.After(n.last) {
		n.last = now
	}
	return nil
}

// Leave records that the node's agent stopped cleanly: the node is down
// at once, without waiting for its heartbeat TTL, and stays down until
// it registers again (a heartbeat alone is refused). It keeps its
// address: the agent may come back, and its claims are released through
// it then. Leave on an unknown or forgotten node does nothing; it
// reports whether the node was known and had not left yet.
func (l *Liveness) Leave(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, ok := l.nodes[id]
	if !ok || n.gone || n.left {
		return false
	}
	n.left = true
	return true
}

// Forget marks a node gone for good: its claims skip the node step of
// their release. Forgetting an unknown node does nothing.
func (l *Liveness) Forget(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n, ok := l.nodes[id]; ok {
		n.gone = true
	}
}

// Status returns the node's status at now.
func (l *Liveness) Status(id string, now time.Time) csi.NodeStatus {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, ok := l.nodes[id]
	if !ok {
		return csi.NodeStatusUnknown
	}
	return l.statusLocked(n, now)
}

func (l *Liveness) statusLocked(n *liveNode, now time.Time) csi.NodeStatus {
	switch {
	case n.gone:
		return csi.NodeStatusGone
	case n.left, now.Sub(n.last) > l.ttl:
		return csi.NodeStatusDown
	}
	return csi.NodeStatusReady
}

// Address returns the node's gRPC target. A node that never registered,
// or was forgotten, is an error matching csi.ErrNodeNotReady (what a
// transport's resolver returns for a node it cannot reach). A node that
// is down still has its address: it may be back.
func (l *Liveness) Address(id string) (string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, ok := l.nodes[id]
	if !ok || n.gone {
		return "", fmt.Errorf("%w: node %s has not registered with this server", csi.ErrNodeNotReady, id)
	}
	return n.addr, nil
}

// Nodes returns every node known, sorted by ID, with its status at now.
func (l *Liveness) Nodes(now time.Time) []NodeLiveness {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]NodeLiveness, 0, len(l.nodes))
	for id, n := range l.nodes {
		out = append(out, NodeLiveness{ID: id, Address: n.addr, LastHeartbeat: n.last, Status: l.statusLocked(n, now)})
	}
	slices.SortFunc(out, func(a, b NodeLiveness) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// maxAddressLen bounds a node's address: a host name is at most 253
// bytes, a unix socket path 108.
const maxAddressLen = 512

// validateAddress refuses what cannot be a gRPC target and what must not
// reach a log or an error as it is: empty, too long, spaces or any
// control character (a NUL, a newline that would forge a log line, an
// escape sequence). The error quotes the address with %q, which escapes
// what is left.
func validateAddress(addr string) error {
	switch {
	case addr == "":
		return errors.New("the address is empty")
	case len(addr) > maxAddressLen:
		return fmt.Errorf("the address is %d bytes long, more than %d", len(addr), maxAddressLen)
	case !utf8.ValidString(addr):
		return fmt.Errorf("the address %q is not valid UTF-8", addr)
	}
	for _, r := range addr {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return fmt.Errorf("the address %q holds a space or control character (%U)", addr, r)
		}
	}
	return nil
}
