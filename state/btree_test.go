package state

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// checkTree fails t if the tree breaks a B-tree invariant.
func checkTree[V any](t rapid.TB, tr *tree[V]) {
	t.Helper()
	if err := treeInvariants(tr); err != nil {
		t.Fatalf("%v", err)
	}
}

// contents returns the tree's items in order.
func contents(tr *tree[int]) []item[int] {
	var out []item[int]
	tr.ascend("", func(k string, v int) bool {
		out = append(out, item[int]{k, v})
		return true
	})
	return out
}

func modelItems(m map[string]int) []item[int] {
	var out []item[int]
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, item[int]{k, m[k]})
	}
	return out
}

// TestTree_Model applies random writes, each a batch under its own
// owner, to a tree and to a map, and checks after every write that they
// agree on every read, that the invariants hold, and that every earlier
// version of the tree still reads exactly as it did when it was taken:
// a write never changes a node it does not own.
func TestTree_Model(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		// Few distinct keys make replacements and deletions of present
		// keys common; many writes per batch build deep trees.
		keyGen := rapid.Custom(func(t *rapid.T) string {
			return fmt.Sprintf("k%03d", rapid.IntRange(0, rapid.IntRange(5, 600).Draw(t, "span")).Draw(t, "n"))
		})
		var tr tree[int]
		model := map[string]int{}
		type version struct {
			tr    tree[int]
			items []item[int]
		}
		var versions []version
		for w := range rapid.IntRange(1, 12).Draw(t, "writes") {
			o := new(owner)
			next := tr // the write works on a copy of the tree value
			for range rapid.IntRange(1, 400).Draw(t, "ops") {
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
				// A dropped write leaves the published tree as it was.
				model = map[string]int{}
				for _, it := range contents(&tr) {
					model[it.key] = it.val
				}
				continue
			}
			tr = next
			checkTree(t, &tr)
			if got, want := contents(&tr), modelItems(model); !slices.Equal(got, want) {
				t.Fatalf("write %d: tree holds %v, model %v", w, got, want)
			}
			for k, v := range model {
				if got, ok := tr.get(k); !ok || got != v {
					t.Fatalf("get(%s) = %d, %v; want %d", k, got, ok, v)
				}
			}
			versions = append(versions, version{tr, contents(&tr)})
			for i, v := range versions {
				if got := contents(&v.tr); !slices.Equal(got, v.items) {
					t.Fatalf("version %d changed after write %d", i, w)
				}
			}
		}
		// Prefix scans and seeks agree with the model.
		p := rapid.StringMatching(`k[0-9]{0,3}`).Draw(t, "prefix")
		var got []string
		tr.prefix(p, func(k string, _ int) bool { got = append(got, k); return true })
		var want []string
		for _, k := range slices.Sorted(maps.Keys(model)) {
			if strings.HasPrefix(k, p) {
				want = append(want, k)
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("prefix(%s) = %v, want %v", p, got, want)
		}
		if k, _, ok := tr.first(p); ok != (len(want) > 0) || (ok && k != want[0]) {
			t.Fatalf("first(%s) = %s, %v; want %v", p, k, ok, want)
		}
	})
}

func TestTree_AscendStops(t *testing.T) {
	var tr tree[int]
	o := new(owner)
	for i := range 1000 {
		tr.set(o, fmt.Sprintf("k%04d", i), i)
	}
	checkTree(t, &tr)
	for _, tc := range []struct {
		from string
		take int
		want []int
	}{
		{"", 3, []int{0, 1, 2}},
		{"k0500", 2, []int{500, 501}},
		{"k05001", 2, []int{501, 502}},
		{"k0998", 5, []int{998, 999}},
		{"l", 5, nil},
	} {
		t.Run(tc.from, func(t *testing.T) {
			var got []int
			tr.ascend(tc.from, func(_ string, v int) bool {
				got = append(got, v)
				return len(got) < tc.take
			})
			if !slices.Equal(got, tc.want) {
				t.Errorf("ascend(%q) taking %d = %v, want %v", tc.from, tc.take, got, tc.want)
			}
		})
	}
}

// TestTree_DrainAndRefill empties a deep tree key by key, in several
// orders, under one owner and then under one owner per deletion.
func TestTree_DrainAndRefill(t *testing.T) {
	const n = 3000
	orders := map[string]func(i int) int{
		"ascending":   func(i int) int { return i },
		"descending":  func(i int) int { return n - 1 - i },
		"interleaved": func(i int) int { return (i * 7919) % n },
	}
	for name, at := range orders {
		for _, perOp := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/owner-per-op-%v", name, perOp), func(t *testing.T) {
				var tr tree[int]
				o := new(owner)
				for i := range n {
					tr.set(o, fmt.Sprintf("k%05d", i), i)
				}
				before := tr
				for i := range n {
					if perOp {
						o = new(owner)
					}
					if _, ok := tr.delete(o, fmt.Sprintf("k%05d", at(i))); !ok {
						t.Fatalf("delete %d: missing", at(i))
					}
					if i%97 == 0 {
						checkTree(t, &tr)
					}
				}
				if tr.root != nil || tr.len != 0 {
					t.Fatalf("drained tree: root %v, len %d", tr.root, tr.len)
				}
				if perOp && before.len != n {
					t.Fatalf("the filled version lost items: len %d", before.len)
				}
				if perOp {
					checkTree(t, &before)
				}
			})
		}
	}
}
