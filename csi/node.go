package csi

import "fmt"

// NodeStatus is what the host knows of a node's liveness. The router
// sends calls only to Ready nodes; the claim release worker retries while
// a node is Down or Unknown and skips the node step when it is Gone.
type NodeStatus int

// Node statuses.
const (
	// NodeStatusUnknown: the host has no record of the node (yet).
	NodeStatusUnknown NodeStatus = iota
	// NodeStatusReady: the node is up and reachable.
	NodeStatusReady
	// NodeStatusDown: the node is known but not reachable now; it may
	// come back.
	NodeStatusDown
	// NodeStatusGone: the node has left the cluster for good; nothing on
	// it needs cleaning up through it.
	NodeStatusGone
)

func (s NodeStatus) String() string {
	switch s {
	case NodeStatusUnknown:
		return "unknown"
	case NodeStatusReady:
		return "ready"
	case NodeStatusDown:
		return "down"
	case NodeStatusGone:
		return "gone"
	}
	return fmt.Sprintf("NodeStatus(%d)", int(s))
}

// MarshalText implements encoding.TextMarshaler.
func (s NodeStatus) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (s *NodeStatus) UnmarshalText(b []byte) error {
	for v := NodeStatusUnknown; v <= NodeStatusGone; v++ {
		if v.String() == string(b) {
			*s = v
			return nil
		}
	}
	return fmt.Errorf("%w: unknown node status %q", ErrInvalidRequest, b)
}
