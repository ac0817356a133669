// feasibility.go answers a scheduler's question before it places an
// allocation: which of these nodes can take a claim on this volume, and
// why not the others. The rules are csi.Placement's, which agree with
// ClaimVolume's checks; this file only gathers the facts per node from
// one read transaction.
//
// Rules a reader must know:
//
//   - It reads stored rows and copies none: the volume, the plugin and
//     its instances are shared, and nothing here may change them.
//   - It must stay cheap in a scheduler's inner loop: no allocation per
//     node. The candidates are sorted once and merged with the plugin's
//     node instances and with the attachment keys in tRefs, which both
//     come in node order, so no per-node lookup (which would encode a
//     key and allocate) is made.

package state

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/go-memdb"

	"github.com/csikit/csikit/csi"
)

// FeasibilityRequest asks which nodes can take a claim on a volume.
type FeasibilityRequest struct {
	// Namespace and VolumeID name the volume.
	Namespace string
	VolumeID  string
	// Claim is the claim to place; its Namespace is the allocation's.
	Claim csi.PlacementRequest
	// Nodes are the candidates, in any order, by host node ID. Nil means
	// every node the volume's plugin has a node instance on.
	Nodes []string
}

// NodeFeasibility is the answer for one candidate node: Reasons is zero
// when the node can take the claim.
type NodeFeasibility struct {
	NodeID  string
	Reasons csi.Reasons

	in       *csi.PluginInfo
	attached int64
}

// PlacementReader answers feasibility questions.
type PlacementReader interface {
	// Feasibility appends to out[:0] one entry per candidate node of req,
	// sorted by node ID, and returns it. Passing the previous call's
	// slice back reuses it, so that a scheduler calling Feasibility in a
	// loop allocates nothing per node. An unknown volume matches
	// csi.ErrVolumeNotFound. The answer agrees with ClaimVolume on the
	// same state: an entry with no reasons is a node where the claim
	// would be written (given an allocation there that may claim the
	// volume).
	Feasibility(req *FeasibilityRequest, out []NodeFeasibility) ([]NodeFeasibility, error)
}

// Feasibility implements PlacementReader.
func (s *MemStore) Feasibility(req *FeasibilityRequest, out []NodeFeasibility) ([]NodeFeasibility, error) {
	if err := validateVolumeRef(req.Namespace, req.VolumeID); err != nil {
		return nil, err
	}
	txn := s.read()
	v, err := getVolume(txn, req.Namespace, req.VolumeID)
	if err != nil {
		return nil, err
	}
	p, err := getPlugin(txn, v.PluginID)
	if err != nil {
		return nil, err
	}
	place := csi.NewPlacement(v, p, req.Claim)
	var needCounts bool
	if req.Nodes == nil {
		out, needCounts, err = everyNode(txn, v.PluginID, out, &place)
	} else {
		out, needCounts, err = givenNodes(txn, v.PluginID, req.Nodes, out, &place)
	}
	if err != nil {
		return nil, err
	}
	if needCounts {
		if err := mergeAttached(txn, v.PluginID, out); err != nil {
			return nil, err
		}
	}
	for i := range out {
		f := &out[i]
		f.Reasons = place.Node(csi.NodeFacts{NodeID: f.NodeID, Instance: f.in, Attached: f.attached})
		f.in = nil // the caller keeps no stored row
	}
	return out, nil
}

// everyNode fills out[:0] with every node of the plugin's node
// instances, in node order, and reports whether any of them needs its
// attachment count.
func everyNode(txn *memdb.Txn, pluginID string, out []NodeFeasibility, place *csi.Placement) ([]NodeFeasibility, bool, error) {
	out, need := out[:0], false
	err := eachInstance(txn, pluginID, csi.PluginTypeNode, func(in *instance) error {
		out = append(out, NodeFeasibility{NodeID: in.NodeID, in: in.Info})
		need = need || place.NeedsAttachedCount(in.NodeID, in.Info)
		return nil
	})
	return out, need, err
}

// givenNodes fills out[:0] with the nodes asked about, sorted, and sets
// each one's node instance, walking the plugin's node instances (in
// node order) beside them. It reports whether any candidate needs its
// attachment count.
func givenNodes(txn *memdb.Txn, pluginID string, nodes []string, out []NodeFeasibility, place *csi.Placement) ([]NodeFeasibility, bool, error) {
	out = out[:0]
	for _, n := range nodes {
		if err := csi.ValidateNodeID(n); err != nil {
			return nil, false, fmt.Errorf("feasibility: %w", err)
		}
		out = append(out, NodeFeasibility{NodeID: n})
	}
	slices.SortFunc(out, func(a, b NodeFeasibility) int { return strings.Compare(a.NodeID, b.NodeID) })
	i, need := 0, false
	err := eachInstance(txn, pluginID, csi.PluginTypeNode, func(in *instance) error {
		for i < len(out) && out[i].NodeID < in.NodeID {
			i++
		}
		for j := i; j < len(out) && out[j].NodeID == in.NodeID; j++ {
			out[j].in = in.Info
			need = need || place.NeedsAttachedCount(in.NodeID, in.Info)
		}
		return nil
	})
	return out, need, err
}

// mergeAttached counts, for each candidate, the volumes of pluginID
// attached to it, from the attachment keys in tRefs (table, kind, node,
// plugin, volume), which come in node order.
func mergeAttached(txn *memdb.Txn, pluginID string, out []NodeFeasibility) error {
	it, err := txn.Get(tRefs, iID, tVolumes, refAttached)
	if err != nil {
		return dbErr("count attachments", err)
	}
	prefix := len(tVolumes) + len(refAttached) + 2
	plugin := appendPart(nil, pluginID)
	i := 0
	for raw := it.Next(); raw != nil && i < len(out); raw = it.Next() {
		key := raw.(*refRow).Key[prefix:]
		end := bytes.IndexByte(key, 0)
		if end < 0 {
			continue
		}
		node, rest := key[:end], key[end+1:]
		if !bytes.HasPrefix(rest, plugin) {
			continue
		}
		for i < len(out) && out[i].NodeID < string(node) {
			i++
		}
		for j := i; j < len(out) && out[j].NodeID == string(node); j++ {
			out[j].attached++
		}
	}
	return nil
}
