package state

import (
	"fmt"
	"maps"
	"testing"

	"pgregory.net/rapid"
)

// masks are the hash masks the tests run the trie with: the real hash,
// and weakened ones that make shared fragments, deep chains and
// collision lists common.
var masks = map[string]uint64{
	"maphash": ^uint64(0),
	// Keys share their low fragments: every row sits deep in the trie.
	"high-bits": ^uint64(1<<50 - 1),
	// Four hashes, all alike below the top two bits: every row is in a
	// collision list.
	"collide": 3 << 62,
}

func testHmap(mask uint64) hmap[int] {
	m := newHmap[int]()
	m.mask = mask
	return m
}

// TestHmap_Model applies random writes, each under its own owner, to a
// trie and to a map, checks after each write that they agree and that
// the trie keeps its invariants, and that every earlier version still
// reads as it did: a write never changes a node it does not own.
func TestHmap_Model(t *testing.T) {
	for name, mask := range masks {
		t.Run(name, func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				keyGen := rapid.Custom(func(t *rapid.T) string {
					return fmt.Sprintf("k%d", rapid.IntRange(0, rapid.IntRange(3, 2000).Draw(t, "span")).Draw(t, "n"))
				})
				m := testHmap(mask)
				model := map[string]int{}
				type version struct {
					m    hmap[int]
					rows map[string]int
				}
				var versions []version
				for w := range rapid.IntRange(1, 10).Draw(t, "writes") {
					o := new(owner)
					next := m
					for range rapid.IntRange(1, 300).Draw(t, "ops") {
						k := keyGen.Draw(t, "key")
						if rapid.IntRange(0, 2).Draw(t, "op") < 2 {
							v := rapid.Int().Draw(t, "val")
							old, replaced := next.set(o, k, v)
							want, had := model[k]
							if replaced != had || old != want {
								t.Fatalf("write %d: set(%s) replaced %v (%d), model %v (%d)", w, k, replaced, old, had, want)
							}
							model[k] = v
						} else {
							old, ok := next.delete(o, k)
							want, had := model[k]
							if ok != had || old != want {
								t.Fatalf("write %d: delete(%s) = %d, %v; model %d, %v", w, k, old, ok, want, had)
							}
							delete(model, k)
						}
					}
					if rapid.Bool().Draw(t, "abort") {
						model = hmapContents(&m)
						continue
					}
					m = next
					if err := hmapInvariants(&m); err != nil {
						t.Fatalf("write %d: %v", w, err)
					}
					if got := hmapContents(&m); !maps.Equal(got, model) {
						t.Fatalf("write %d: trie holds %v, model %v", w, got, model)
					}
					for k, v := range model {
						if got, ok := m.get(k); !ok || got != v {
							t.Fatalf("get(%s) = %d, %v; want %d", k, got, ok, v)
						}
					}
					if _, ok := m.get("absent"); ok {
						t.Fatalf("get(absent) found a row")
					}
					versions = append(versions, version{m, hmapContents(&m)})
					for i, v := range versions {
						if got := hmapContents(&v.m); !maps.Equal(got, v.rows) {
							t.Fatalf("version %d changed after write %d", i, w)
						}
					}
				}
			})
		})
	}
}

// TestHmap_DrainAndRefill fills a trie, empties it key by key under one
// owner per deletion, and checks the filled version survives intact.
func TestHmap_DrainAndRefill(t *testing.T) {
	for name, mask := range masks {
		t.Run(name, func(t *testing.T) {
			const n = 3000
			m := testHmap(mask)
			o := new(owner)
			for i := range n {
				m.set(o, fmt.Sprintf("k%05d", i), i)
			}
			full := m
			for i := range n {
				if _, ok := m.delete(new(owner), fmt.Sprintf("k%05d", (i*7919)%n)); !ok {
					t.Fatalf("delete %d: missing", (i*7919)%n)
				}
				if i%101 == 0 {
					if err := hmapInvariants(&m); err != nil {
						t.Fatalf("after %d deletions: %v", i+1, err)
					}
				}
			}
			if m.root != nil || m.len != 0 {
				t.Fatalf("drained trie: root %v, len %d", m.root, m.len)
			}
			if err := hmapInvariants(&full); err != nil || len(hmapContents(&full)) != n {
				t.Fatalf("the filled version changed: %v, %d rows", err, len(hmapContents(&full)))
			}
		})
	}
}
