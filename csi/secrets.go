package csi

import (
	"fmt"
	"maps"
)

// Secrets are the CSI secrets passed to a plugin call (credentials, keys).
// They are a plain map so callers build them naturally, but every way of
// printing them (String, GoString, every fmt verb) shows only the keys'
// count, so a Secrets value that reaches a log line, an error or a status
// output leaks nothing. JSON encoding is deliberately not redacted: the
// store and transports must carry the values.
type Secrets map[string]string

const redacted = "[redacted]"

// String implements fmt.Stringer with a redaction.
func (s Secrets) String() string {
	if len(s) == 0 {
		return "Secrets{}"
	}
	return fmt.Sprintf("Secrets{%d keys %s}", len(s), redacted)
}

// GoString implements fmt.GoStringer with a redaction.
func (s Secrets) GoString() string { return s.String() }

// Format implements fmt.Formatter so that %v, %+v, %#v, %s, %q, %x and any
// other verb print the redaction.
func (s Secrets) Format(f fmt.State, verb rune) { fmt.Fprint(f, s.String()) }

// Copy returns a copy of s; nil stays nil.
func (s Secrets) Copy() Secrets { return maps.Clone(s) }
