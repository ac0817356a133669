package state

import (
	"encoding/binary"
	"maps"
	"slices"
	"strings"

	"github.com/csikit/csikit/csi"
)

// volRow is how the store keeps a volume: v with its Parameters, Context
// and Secrets nil, and those three maps in attrs. Nothing but
// registration changes them, and claims are what every other write
// changes, so a claim write copies v (claim maps included) and shares
// attrs. Code that needs the three maps reads them from attrs (full);
// code that checks claims uses &v, where they are nil.
//
// A read copies every stored volume it returns, and in a large store
// each separate object of a volume is a cache miss: the row keeps the
// capabilities of a volume that has few in caps, inside the row, and
// its attributes in one string.
type volRow struct {
	v     csi.Volume
	caps  [inlineCaps]csi.Capability
	attrs volAttrs
}

// inlineCaps is how many capabilities a row holds inside itself; a
// volume with more keeps them in a slice of their own.
const inlineCaps = 2

// volAttrs holds a volume's three string maps in one string: the
// entries of each map in turn (Parameters, Context, Secrets), sorted by
// key within each, as a key and a value, each a uvarint length and the
// bytes. n is each map's entry count; a map with none is nil (stored
// volumes hold no empty maps). Equal maps make equal attrs.
type volAttrs struct {
	s string
	n [3]int32
}

// newVolRow returns the row of a normalized volume (normalizeVolume). It
// takes the volume's maps apart; the caller must not use v afterwards.
func newVolRow(v *csi.Volume) *volRow {
	r := &volRow{v: *v, attrs: flattenAttrs(v.Parameters, v.Context, v.Secrets)}
	r.v.Parameters, r.v.Context, r.v.Secrets = nil, nil, nil
	if n := len(v.Capabilities); n > 0 && n <= inlineCaps {
		copy(r.caps[:], v.Capabilities)
		r.v.Capabilities = r.caps[:n:n]
	}
	return r
}

// clone returns a shallow copy of r whose capabilities, when inline, are
// the copy's own: the only part of a row that points into the row.
func (r *volRow) clone() *volRow {
	c := *r
	if n := len(r.v.Capabilities); n > 0 && n <= inlineCaps && &r.v.Capabilities[0] == &r.caps[0] {
		c.v.Capabilities = c.caps[:n:n]
	}
	return &c
}

func flattenAttrs(ms ...map[string]string) volAttrs {
	var a volAttrs
	size := 0
	for i, m := range ms {
		a.n[i] = int32(len(m))
		for k, v := range m {
			size += uvarintLen(len(k)) + len(k) + uvarintLen(len(v)) + len(v)
		}
	}
	if size == 0 {
		return a
	}
	var b strings.Builder
	b.Grow(size)
	var n [binary.MaxVarintLen64]byte
	put := func(s string) {
		b.Write(binary.AppendUvarint(n[:0], uint64(len(s))))
		b.WriteString(s)
	}
	for _, m := range ms {
		for _, k := range slices.Sorted(maps.Keys(m)) {
			put(k)
			put(m[k])
		}
	}
	a.s = b.String()
	return a
}

// maps returns new copies of the three maps, nil for an empty one. The
// keys and values are slices of a.s, which never changes.
func (a *volAttrs) maps() (params, context map[string]string, secrets csi.Secrets) {
	s := a.s
	next := func() string {
		l, w := uvarint(s)
		out := s[w : w+l]
		s = s[w+l:]
		return out
	}
	build := func(n int32) map[string]string {
		if n == 0 {
			return nil
		}
		m := make(map[string]string, n)
		for range n {
			k := next()
			m[k] = next()
		}
		return m
	}
	return build(a.n[0]), build(a.n[1]), build(a.n[2])
}

// full returns the volume as registered: a copy of v with new copies of
// its three maps and its capabilities. Claims are shared with the row.
func (r *volRow) full() *csi.Volume {
	v := r.v
	v.Capabilities = slices.Clone(r.v.Capabilities)
	v.Parameters, v.Context, v.Secrets = r.attrs.maps()
	return &v
}

func uvarintLen(n int) int {
	l := 1
	for ; n >= 0x80; n >>= 7 {
		l++
	}
	return l
}

// uvarint reads a length written by flattenAttrs at the start of s and
// returns it and its size.
func uvarint(s string) (n, size int) {
	shift := 0
	for i := 0; i < len(s); i++ {
		b := s[i]
		n |= int(b&0x7f) << shift
		if b < 0x80 {
			return n, i + 1
		}
		shift += 7
	}
	panic("state: truncated volume attributes") // flattenAttrs wrote s
}
