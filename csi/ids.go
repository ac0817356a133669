package csi

import (
	"fmt"
	"strconv"
)

// MaxIDLength is the longest identifier csikit accepts, in bytes. It keeps
// every path built from a handful of IDs well under PATH_MAX and matches
// the CSI spec's 128-byte limit on volume and node IDs.
const MaxIDLength = 128

// IDKind names the kind of identifier being validated. It appears in
// IDError messages.
type IDKind string

// The kinds of identifiers csikit validates.
const (
	KindNamespace  IDKind = "namespace"
	KindVolume     IDKind = "volume ID"
	KindPlugin     IDKind = "plugin ID"
	KindNode       IDKind = "node ID"
	KindAllocation IDKind = "allocation ID"
)

// ErrInvalidID is matched (errors.Is) by every identifier validation
// failure. It is Final: the same input will never pass.
var ErrInvalidID = newSentinel("invalid_id", "invalid identifier", ClassFinal)

// IDError reports why an identifier was refused.
type IDError struct {
	Kind   IDKind // which identifier
	Value  string // the refused value, quoted and truncated in Error
	Reason string // why it was refused
}

func (e *IDError) Error() string {
	v := e.Value
	if len(v) > 40 {
		v = v[:40] + "…"
	}
	return fmt.Sprintf("invalid %s %s: %s", e.Kind, strconv.Quote(v), e.Reason)
}

// Is reports whether target is ErrInvalidID.
func (e *IDError) Is(target error) bool { return target == ErrInvalidID }

// ErrorClass implements Classed: an invalid ID is always Final.
func (e *IDError) ErrorClass() Class { return ClassFinal }

// ValidateID checks that s is a safe identifier of the given kind: 1 to
// MaxIDLength bytes drawn from [A-Za-z0-9._-], and neither "." nor "..".
// Such an ID can be used as a single path element and as a store key.
func ValidateID(kind IDKind, s string) error {
	switch {
	case s == "":
		return &IDError{Kind: kind, Value: s, Reason: "must not be empty"}
	case len(s) > MaxIDLength:
		return &IDError{Kind: kind, Value: s, Reason: fmt.Sprintf("is %d bytes long, the limit is %d", len(s), MaxIDLength)}
	case s == "." || s == "..":
		return &IDError{Kind: kind, Value: s, Reason: "must not be a relative path element"}
	}
	for i := 0; i < len(s); i++ {
		if !idByte(s[i]) {
			return &IDError{Kind: kind, Value: s, Reason: fmt.Sprintf("byte %d (%q) is not a letter, digit, '-', '_' or '.'", i, s[i])}
		}
	}
	return nil
}

func idByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '_' || c == '.'
}

// ValidateNamespace validates a namespace.
func ValidateNamespace(s string) error { return ValidateID(KindNamespace, s) }

// ValidateVolumeID validates a csikit volume ID (not the plugin's external ID).
func ValidateVolumeID(s string) error { return ValidateID(KindVolume, s) }

// ValidatePluginID validates a plugin ID.
func ValidatePluginID(s string) error { return ValidateID(KindPlugin, s) }

// ValidateNodeID validates a host node ID (not the plugin's CSI node ID).
func ValidateNodeID(s string) error { return ValidateID(KindNode, s) }

// ValidateAllocationID validates an allocation ID.
func ValidateAllocationID(s string) error { return ValidateID(KindAllocation, s) }

// ValidateExternalID checks an identifier chosen by a plugin (a CSI volume
// ID, a CSI node ID, a snapshot ID). The CSI spec allows any non-empty
// string of at most 128 bytes, so csikit never uses one in a path.
func ValidateExternalID(field, s string) error {
	switch {
	case s == "":
		return &IDError{Kind: IDKind(field), Value: s, Reason: "must not be empty"}
	case len(s) > MaxIDLength:
		return &IDError{Kind: IDKind(field), Value: s, Reason: fmt.Sprintf("is %d bytes long, the limit is %d", len(s), MaxIDLength)}
	}
	return nil
}
