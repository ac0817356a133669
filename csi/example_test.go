package csi_test

import (
	"errors"
	"fmt"
	"maps"

	"github.com/csikit/csikit/csi"
)

func ExampleCheckClaim() {
	mode := csi.AccessModeMultiNodeSingleWriter
	vol := &csi.Volume{
		ID:           "db-data",
		Namespace:    "default",
		Capabilities: []csi.Capability{{AccessMode: mode, AttachmentMode: csi.AttachmentModeFileSystem}},
		WriteClaims: map[string]*csi.Claim{
			"alloc-1": {AllocationID: "alloc-1", NodeID: "node-1", Mode: csi.ClaimWrite, AccessMode: mode, AttachmentMode: csi.AttachmentModeFileSystem},
		},
	}
	reader := &csi.Claim{AllocationID: "alloc-2", NodeID: "node-2", Mode: csi.ClaimRead, AccessMode: mode, AttachmentMode: csi.AttachmentModeFileSystem}
	fmt.Println("reader:", csi.CheckClaim(vol, reader))

	writer := &csi.Claim{AllocationID: "alloc-3", NodeID: "node-2", Mode: csi.ClaimWrite, AccessMode: mode, AttachmentMode: csi.AttachmentModeFileSystem}
	err := csi.CheckClaim(vol, writer)
	fmt.Println("writer refused:", errors.Is(err, csi.ErrMaxClaims), "retryable:", csi.IsRetryable(err))
	fmt.Println(err)
	// Output:
	// reader: <nil>
	// writer refused: true retryable: true
	// volume has no free claims: volume db-data is multi-node-single-writer (one writer) and allocation alloc-1 holds it for writing; allocation alloc-3 can claim it for reading, or for writing once that claim is released
}

func ExampleSecrets() {
	s := csi.Secrets{"password": "hunter2"}
	fmt.Printf("%v\n", s)
	fmt.Println(s["password"] == "hunter2")
	// Output:
	// Secrets{1 keys [redacted]}
	// true
}

func ExampleClassify() {
	err := fmt.Errorf("release volume v1: %w", &csi.RPCError{Method: "NodeUnpublishVolume", Code: csi.CodeUnavailable, Message: "socket closed"})
	fmt.Println(csi.Classify(err), csi.CodeOf(err))
	fmt.Println(csi.Classify(fmt.Errorf("on node n1: %w", csi.ErrPluginNotFound)))
	// Output:
	// retryable Unavailable
	// retryable
}

// A store keeps older versions of a volume for the readers that hold
// them, so a new version replaces the claim it changes instead of
// modifying it: the older version still sees the claim as it was.
func ExampleVolume_replaceClaim() {
	older := &csi.Volume{ID: "db-data", PastClaims: map[string]*csi.Claim{
		"alloc-1": {AllocationID: "alloc-1", NodeID: "node-1", State: csi.ClaimUnpublishing},
	}}

	next := *older                                 // shares the claims...
	next.PastClaims = maps.Clone(older.PastClaims) // ...and now a map of its own
	c := next.PastClaims["alloc-1"].Copy()
	c.LastError = "node node-1 unreachable"
	next.PastClaims["alloc-1"] = c

	fmt.Printf("older: %q\nnext:  %q\n", older.PastClaims["alloc-1"].LastError, next.PastClaims["alloc-1"].LastError)
	// Output:
	// older: ""
	// next:  "node node-1 unreachable"
}
