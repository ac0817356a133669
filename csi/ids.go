package csi

import (
	"fmt"
	"strconv"
	"unicode"
	"unicode/utf8"
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

// MaxExternalNodeIDLength is the longest CSI node ID csikit accepts, in
// bytes. The spec lets NodeGetInfo's node_id override the general 128-byte
// limit up to 256 bytes.
const MaxExternalNodeIDLength = 256

// ValidateExternalID checks an identifier chosen by a plugin (a CSI volume
// ID, a snapshot ID). The CSI spec allows any non-empty string of at most
// 128 bytes, so csikit never uses one in a path. It must be valid UTF-8, as
// every protobuf string is, and hold no control character: such an ID is
// logged and shown to operators, and a NUL or an escape sequence in it is
// never a real backend's identifier.
func ValidateExternalID(field, s string) error {
	return validateExternal(field, s, MaxIDLength)
}

// ValidateExternalNodeID checks a CSI node ID reported by a node plugin:
// the rules of ValidateExternalID with the spec's 256-byte limit.
func ValidateExternalNodeID(field, s string) error {
	return validateExternal(field, s, MaxExternalNodeIDLength)
}

func validateExternal(field, s string, limit int) error {
	kind := IDKind(field)
	switch {
	case s == "":
		return &IDError{Kind: kind, Value: s, Reason: "must not be empty"}
	case len(s) > limit:
		return &IDError{Kind: kind, Value: s, Reason: fmt.Sprintf("is %d bytes long, the limit is %d", len(s), limit)}
	case !utf8.ValidString(s):
		return &IDError{Kind: kind, Value: s, Reason: "is not valid UTF-8"}
	}
	for i, r := range s {
		if unicode.IsControl(r) {
			return &IDError{Kind: kind, Value: s, Reason: fmt.Sprintf("byte %d (%q) is a control character", i, r)}
		}
	}
	return nil
}
