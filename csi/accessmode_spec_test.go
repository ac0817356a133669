package csi_test

// This file holds the CSI spec's access-mode table (csi.proto,
// VolumeCapability.AccessMode.Mode), one test case per sentence of the
// spec, each checked against CheckClaim.

import (
	"errors"
	"testing"

	"github.com/csikit/csikit/csi"
)

// claimOn builds a live claim for alloc on node.
func claimOn(alloc, node string, mode csi.ClaimMode, am csi.AccessMode) *csi.Claim {
	return &csi.Claim{AllocationID: alloc, NodeID: node, Mode: mode, AccessMode: am, AttachmentMode: csi.AttachmentModeFileSystem}
}

// volumeWith returns a volume allowing am (file system) that already holds
// the given live claims.
func volumeWith(am csi.AccessMode, held ...*csi.Claim) *csi.Volume {
	v := &csi.Volume{
		ID: "vol", Namespace: "default", PluginID: "p",
		Capabilities: []csi.Capability{{AccessMode: am, AttachmentMode: csi.AttachmentModeFileSystem}},
		ReadClaims:   map[string]*csi.Claim{},
		WriteClaims:  map[string]*csi.Claim{},
		PastClaims:   map[string]*csi.Claim{},
	}
	for _, c := range held {
		if c.Mode == csi.ClaimWrite {
			v.WriteClaims[c.AllocationID] = c
		} else {
			v.ReadClaims[c.AllocationID] = c
		}
	}
	return v
}

func TestAccessModeSpec(t *testing.T) {
	const (
		r = csi.ClaimRead
		w = csi.ClaimWrite
	)
	type tc struct {
		sentence string
		mode     csi.AccessMode
		held     []*csi.Claim
		claim    *csi.Claim
		want     error // nil: allowed
	}
	snw := csi.AccessModeSingleNodeWriter
	snro := csi.AccessModeSingleNodeReaderOnly
	mnro := csi.AccessModeMultiNodeReaderOnly
	mnsw := csi.AccessModeMultiNodeSingleWriter
	mnmw := csi.AccessModeMultiNodeMultiWriter
	snsw := csi.AccessModeSingleNodeSingleWriter
	snmw := csi.AccessModeSingleNodeMultiWriter
	cases := []tc{
		// SINGLE_NODE_WRITER: "Can only be published once as read/write on a single node, at any given time."
		{"SNW: can be published as read/write", snw, nil, claimOn("a1", "n1", w, snw), nil},
		{"SNW: only once as read/write", snw, []*csi.Claim{claimOn("a1", "n1", w, snw)}, claimOn("a2", "n1", w, snw), csi.ErrMaxClaims},
		{"SNW: on a single node", snw, []*csi.Claim{claimOn("a1", "n1", r, snw)}, claimOn("a2", "n2", r, snw), csi.ErrAttachedElsewhere},
		{"SNW: a reader beside the writer on the same node", snw, []*csi.Claim{claimOn("a1", "n1", w, snw)}, claimOn("a2", "n1", r, snw), nil},

		// SINGLE_NODE_READER_ONLY: "Can only be published once as readonly on a single node, at any given time."
		{"SNRO: can be published as readonly", snro, nil, claimOn("a1", "n1", r, snro), nil},
		{"SNRO: as readonly only", snro, nil, claimOn("a1", "n1", w, snro), csi.ErrAccessModeNotAllowed},
		{"SNRO: on a single node", snro, []*csi.Claim{claimOn("a1", "n1", r, snro)}, claimOn("a2", "n2", r, snro), csi.ErrAttachedElsewhere},

		// MULTI_NODE_READER_ONLY: "Can be published as readonly at multiple nodes simultaneously."
		{"MNRO: as readonly at multiple nodes", mnro, []*csi.Claim{claimOn("a1", "n1", r, mnro)}, claimOn("a2", "n2", r, mnro), nil},
		{"MNRO: readonly, never read/write", mnro, nil, claimOn("a1", "n1", w, mnro), csi.ErrAccessModeNotAllowed},

		// MULTI_NODE_SINGLE_WRITER: "Can be published at multiple nodes simultaneously. Only one of the node can be used as read/write. The rest will be readonly."
		{"MNSW: published at multiple nodes", mnsw, []*csi.Claim{claimOn("a1", "n1", r, mnsw)}, claimOn("a2", "n2", r, mnsw), nil},
		{"MNSW: only one can be used as read/write", mnsw, []*csi.Claim{claimOn("a1", "n1", w, mnsw)}, claimOn("a2", "n2", w, mnsw), csi.ErrMaxClaims},
		{"MNSW: the rest will be readonly", mnsw, []*csi.Claim{claimOn("a1", "n1", w, mnsw)}, claimOn("a2", "n2", r, mnsw), nil},

		// MULTI_NODE_MULTI_WRITER: "Can be published as read/write at multiple nodes simultaneously."
		{"MNMW: read/write at multiple nodes", mnmw, []*csi.Claim{claimOn("a1", "n1", w, mnmw), claimOn("a2", "n2", w, mnmw)}, claimOn("a3", "n3", w, mnmw), nil},

		// SINGLE_NODE_SINGLE_WRITER: "Can only be published once as read/write at a single workload on a single node, at any given time."
		{"SNSW: published as read/write at a single workload", snsw, nil, claimOn("a1", "n1", w, snsw), nil},
		{"SNSW: only once, even on the same node", snsw, []*csi.Claim{claimOn("a1", "n1", w, snsw)}, claimOn("a2", "n1", w, snsw), csi.ErrMaxClaims},
		{"SNSW: a single workload, readers included", snsw, []*csi.Claim{claimOn("a1", "n1", r, snsw)}, claimOn("a2", "n1", r, snsw), csi.ErrMaxClaims},
		{"SNSW: on a single node", snsw, []*csi.Claim{claimOn("a1", "n1", w, snsw)}, claimOn("a2", "n2", r, snsw), csi.ErrAttachedElsewhere},

		// SINGLE_NODE_MULTI_WRITER: "Can be published as read/write at multiple workloads on a single node simultaneously."
		{"SNMW: read/write at multiple workloads", snmw, []*csi.Claim{claimOn("a1", "n1", w, snmw), claimOn("a2", "n1", w, snmw)}, claimOn("a3", "n1", w, snmw), nil},
		{"SNMW: on a single node", snmw, []*csi.Claim{claimOn("a1", "n1", w, snmw)}, claimOn("a2", "n2", w, snmw), csi.ErrAttachedElsewhere},
	}
	for _, c := range cases {
		t.Run(c.sentence, func(t *testing.T) {
			v := volumeWith(c.mode, c.held...)
			err := csi.CheckClaim(v, c.claim)
			if c.want == nil {
				if err != nil {
					t.Fatalf("CheckClaim = %v, want allowed", err)
				}
				return
			}
			if !errors.Is(err, c.want) {
				t.Fatalf("CheckClaim = %v, want %v", err, c.want)
			}
		})
	}
}
