package mounter

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
)

// resolvers runs f with a tree on a fresh root. outside is a directory
// outside the root for links to point at, which must stay empty.
func resolvers(t *testing.T, f func(t *testing.T, tr *tree, outside string)) {
	dir := t.TempDir()
	tr, err := newTree(filepath.Join(dir, "root"))
	if err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(dir, "outside")
	mustMkdir(t, outside)
	f(t, tr, outside)
	if left := listAll(t, outside); len(left) != 0 {
		t.Errorf("changed outside the root: %v", left)
	}
}

// listAll lists what is beneath dir, relative to it.
func listAll(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func requireLinkError(t *testing.T, err error, p string) {
	t.Helper()
	var ue *UnsafePathError
	if !errors.As(err, &ue) || !errors.Is(err, ErrUnsafePath) {
		t.Fatalf("error %v, want an *UnsafePathError", err)
	}
	if ue.Path != p {
		t.Errorf("error names %s, want %s", ue.Path, p)
	}
}

// plantAt makes what a test case finds at rel beneath the root: a
// "dir", a "file", a "link" pointing outside the root, an "inner" link
// to a directory inside it, or a "dangling" link.
func plantAt(t *testing.T, tr *tree, outside, rel, what string) {
	t.Helper()
	p := filepath.Join(tr.root, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
		t.Fatal(err)
	}
	switch what {
	case "dir":
		mustMkdir(t, p)
	case "file":
		mustWrite(t, p)
	case "link":
		mustSymlink(t, outside, p)
	case "inner":
		inner := filepath.Join(tr.root, "inner")
		if err := os.MkdirAll(inner, 0o750); err != nil {
			t.Fatal(err)
		}
		// Relative, so that a resolver that only keeps to the root
		// (os.Root) would follow it.
		rel, err := filepath.Rel(filepath.Dir(p), inner)
		if err != nil {
			t.Fatal(err)
		}
		mustSymlink(t, rel, p)
	case "dangling":
		mustSymlink(t, filepath.Join(outside, "nowhere"), p)
	}
}

type planted struct{ rel, what string }

func TestTree_MkdirAll(t *testing.T) {
	for _, tc := range []struct {
		name     string
		plant    []planted
		p        string // beneath the root
		link     string // beneath the root: the link refused
		wantErrn error  // an error that is not a link's
	}{
		{name: "missing", p: "staging/ns/vol/snw-fs"},
		{name: "existing", plant: []planted{{"staging/ns/vol/snw-fs", "dir"}}, p: "staging/ns/vol/snw-fs"},
		{name: "link at the end", plant: []planted{{"staging/ns/vol/snw-fs", "link"}}, p: "staging/ns/vol/snw-fs", link: "staging/ns/vol/snw-fs"},
		{name: "link in the middle", plant: []planted{{"staging/ns", "link"}}, p: "staging/ns/vol/snw-fs", link: "staging/ns"},
		{name: "link to a directory inside the root", plant: []planted{{"staging/ns", "inner"}}, p: "staging/ns/vol", link: "staging/ns"},
		{name: "existing through a link inside the root", plant: []planted{{"staging/ns", "inner"}, {"inner/vol", "dir"}}, p: "staging/ns/vol", link: "staging/ns"},
		{name: "first element a link", plant: []planted{{"per-alloc-x", "link"}}, p: "per-alloc-x/a1", link: "per-alloc-x"},
		{name: "dangling link", plant: []planted{{"staging/ns", "dangling"}}, p: "staging/ns/vol", link: "staging/ns"},
		{name: "a file", plant: []planted{{"staging/ns", "file"}}, p: "staging/ns", wantErrn: syscall.ENOTDIR},
		{name: "below a file", plant: []planted{{"staging/ns", "file"}}, p: "staging/ns/vol", wantErrn: syscall.ENOTDIR},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resolvers(t, func(t *testing.T, tr *tree, outside string) {
				for _, pl := range tc.plant {
					plantAt(t, tr, outside, pl.rel, pl.what)
				}
				p := filepath.Join(tr.root, filepath.FromSlash(tc.p))
				err := tr.mkdirAll(p, false)
				switch {
				case tc.link != "":
					requireLinkError(t, err, filepath.Join(tr.root, filepath.FromSlash(tc.link)))
				case tc.wantErrn != nil:
					if !errors.Is(err, tc.wantErrn) || errors.Is(err, ErrUnsafePath) {
						t.Fatalf("error %v, want %v", err, tc.wantErrn)
					}
				case err != nil:
					t.Fatal(err)
				default:
					if fi, err := os.Lstat(p); err != nil || !fi.IsDir() {
						t.Fatalf("%s is not a directory afterwards (%v)", p, err)
					}
				}
			})
		})
	}
}

// With leafAnyKind (a staging directory the plugin may have staged on)
// the last element is made if missing and taken as it is otherwise, a
// link included; links above it are still refused.
func TestTree_MkdirAll_LeafAnyKind(t *testing.T) {
	const p = "staging/ns/vol/snw-fs"
	for _, tc := range []struct {
		name  string
		plant []planted
		link  string // the link refused
	}{
		{name: "missing"},
		{name: "a directory", plant: []planted{{p, "dir"}}},
		{name: "the plugin's link", plant: []planted{{p, "link"}}},
		{name: "a parent a link", plant: []planted{{"staging/ns/vol", "link"}}, link: "staging/ns/vol"},
		{name: "a parent a link inside the root", plant: []planted{{"staging/ns", "inner"}, {"inner/vol", "dir"}}, link: "staging/ns"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resolvers(t, func(t *testing.T, tr *tree, outside string) {
				for _, pl := range tc.plant {
					plantAt(t, tr, outside, pl.rel, pl.what)
				}
				err := tr.mkdirAll(filepath.Join(tr.root, filepath.FromSlash(p)), true)
				if tc.link != "" {
					requireLinkError(t, err, filepath.Join(tr.root, filepath.FromSlash(tc.link)))
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if _, err := os.Lstat(filepath.Join(tr.root, filepath.FromSlash(p))); err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}

func TestTree_Check(t *testing.T) {
	const target = "per-alloc/a1/vol1/w-snw-fs"
	for _, tc := range []struct {
		name  string
		plant []planted
		link  string // beneath the root; "" for no error
	}{
		{name: "missing"},
		{name: "parent only", plant: []planted{{"per-alloc/a1/vol1", "dir"}}},
		{name: "a directory", plant: []planted{{target, "dir"}}},
		{name: "a file (block target)", plant: []planted{{target, "file"}}},
		{name: "below a file", plant: []planted{{"per-alloc/a1", "file"}}},
		{name: "the target a link", plant: []planted{{target, "link"}}, link: target},
		{name: "the target a dangling link", plant: []planted{{target, "dangling"}}, link: target},
		{name: "a parent a link", plant: []planted{{"per-alloc/a1/vol1", "link"}}, link: "per-alloc/a1/vol1"},
		{name: "a parent a link inside the root", plant: []planted{{"per-alloc/a1", "inner"}}, link: "per-alloc/a1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resolvers(t, func(t *testing.T, tr *tree, outside string) {
				for _, pl := range tc.plant {
					plantAt(t, tr, outside, pl.rel, pl.what)
				}
				err := tr.check(filepath.Join(tr.root, filepath.FromSlash(target)))
				if tc.link == "" {
					if err != nil {
						t.Fatal(err)
					}
					return
				}
				requireLinkError(t, err, filepath.Join(tr.root, filepath.FromSlash(tc.link)))
			})
		})
	}
}

func TestTree_RemoveEmpty(t *testing.T) {
	const p = "per-alloc/a1/vol1"
	for _, tc := range []struct {
		name  string
		plant []planted
		left  []string // beneath the root afterwards, but for staging
		link  string   // the link reported
	}{
		{name: "empty", plant: []planted{{p, "dir"}}, left: []string{"per-alloc"}},
		{name: "missing", left: []string{"per-alloc"}},
		{name: "parent missing", plant: []planted{{"per-alloc/a1", "dir"}}, left: []string{"per-alloc"}},
		{name: "not empty", plant: []planted{{p + "/target", "dir"}},
			left: []string{"per-alloc", "per-alloc/a1", "per-alloc/a1/vol1", "per-alloc/a1/vol1/target"}},
		{name: "a sibling stays", plant: []planted{{p, "dir"}, {"per-alloc/a1/vol2", "dir"}},
			left: []string{"per-alloc", "per-alloc/a1", "per-alloc/a1/vol2"}},
		{name: "a file", plant: []planted{{p, "file"}}, left: []string{"per-alloc"}},
		{name: "a link", plant: []planted{{p, "link"}},
			left: []string{"per-alloc", "per-alloc/a1", "per-alloc/a1/vol1"}, link: p},
		{name: "a link inside the root", plant: []planted{{p, "inner"}},
			left: []string{"inner", "per-alloc", "per-alloc/a1", "per-alloc/a1/vol1"}, link: p},
		{name: "a parent a link", plant: []planted{{"per-alloc/a1", "link"}},
			left: []string{"per-alloc", "per-alloc/a1"}, link: "per-alloc/a1"},
		{name: "a parent a link inside the root", plant: []planted{{"per-alloc/a1", "inner"}, {"inner/vol1", "dir"}},
			left: []string{"inner", "inner/vol1", "per-alloc", "per-alloc/a1"}, link: "per-alloc/a1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resolvers(t, func(t *testing.T, tr *tree, outside string) {
				for _, pl := range tc.plant {
					plantAt(t, tr, outside, pl.rel, pl.what)
				}
				if tc.name == "a parent a link" {
					// What the link reaches looks like what the mounter
					// would remove: it must stay.
					mustMkdir(t, filepath.Join(outside, "vol1"))
				}
				at, err := tr.removeEmpty(filepath.Join(tr.root, filepath.FromSlash(p)), perAllocDir)
				if tc.link != "" {
					requireLinkError(t, err, filepath.Join(tr.root, filepath.FromSlash(tc.link)))
					if at != filepath.Join(tr.root, filepath.FromSlash(tc.link)) && at != filepath.Join(tr.root, filepath.FromSlash(p)) {
						t.Errorf("error reported at %s", at)
					}
				} else if err != nil {
					t.Fatalf("%s: %v", at, err)
				}
				var left []string
				for _, f := range listAll(t, tr.root) {
					if f != stagingDir {
						left = append(left, filepath.ToSlash(f))
					}
				}
				if !slices.Equal(left, tc.left) {
					t.Errorf("left %v, want %v", left, tc.left)
				}
				if tc.name == "a parent a link" {
					if err := os.Remove(filepath.Join(outside, "vol1")); err != nil {
						t.Errorf("what the link reaches: %v", err)
					}
				}
			})
		})
	}
}

// A directory swapped for a link between the Lstat of an element and
// its open (a race a local attacker may win) is refused, be it a link
// that stays inside the directory opened so far (which os.Root would
// follow), one that leaves it, or another directory moved in its place.
func TestTree_Step_SwappedForLink(t *testing.T) {
	for _, swap := range []string{"inner", "outside", "dir"} {
		t.Run(swap, func(t *testing.T) {
			resolvers(t, func(t *testing.T, tr *tree, outside string) {
				plantAt(t, tr, outside, "staging/ns", "dir")
				plantAt(t, tr, outside, "staging/other", "dir")
				dir, err := tr.open([]string{stagingDir}, false)
				if err != nil {
					t.Fatal(err)
				}
				defer dir.Close()
				fi, err := dir.Lstat("ns")
				if err != nil {
					t.Fatal(err)
				}
				p := filepath.Join(tr.root, stagingDir, "ns")
				if err := os.Rename(p, filepath.Join(tr.root, "moved")); err != nil {
					t.Fatal(err)
				}
				switch swap {
				case "inner":
					mustSymlink(t, "other", p)
				case "outside":
					mustSymlink(t, outside, p)
				case "dir":
					mustMkdir(t, p)
				}
				sub, err := tr.openSame(dir, "ns", []string{stagingDir, "ns"}, fi)
				if err == nil {
					sub.Close()
				}
				requireLinkError(t, err, p)
			})
		})
	}
}

// Paths recorded in the state are taken beneath the root as resolved or
// as given (a host's link above it), and nowhere else.
func TestTree_Elems(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	mustMkdir(t, real)
	given := filepath.Join(dir, "given")
	mustSymlink(t, real, given)
	tr, err := newTree(given)
	if err != nil {
		t.Fatal(err)
	}
	if tr.root != real || tr.alias != given {
		t.Fatalf("root %q alias %q, want %q and %q", tr.root, tr.alias, real, given)
	}
	for _, p := range []string{real + "/staging/ns", given + "/staging/ns", given + "/x/../staging/ns"} {
		if e, err := tr.elems(p); err != nil || !slices.Equal(e, []string{"staging", "ns"}) {
			t.Errorf("elems(%s) = %v, %v", p, e, err)
		}
	}
	for _, p := range []string{real, given, dir, real + "x/staging", real + "/../elsewhere", "/etc"} {
		if _, err := tr.elems(p); !errors.Is(err, ErrUnsafePath) {
			t.Errorf("elems(%s) = %v, want ErrUnsafePath", p, err)
		}
	}
	// A path recorded under another root: checked as fine (its teardown
	// goes to the plugin as recorded), but nothing is made or removed
	// there.
	elsewhere := filepath.Join(dir, "elsewhere", "per-alloc", "a1", "vol1")
	if err := tr.check(elsewhere); err != nil {
		t.Errorf("check(%s) = %v", elsewhere, err)
	}
	if err := tr.mkdirAll(elsewhere, false); !errors.Is(err, ErrUnsafePath) {
		t.Errorf("mkdirAll(%s) = %v, want ErrUnsafePath", elsewhere, err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "elsewhere")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("made outside the root: %v", err)
	}
	if err := os.MkdirAll(elsewhere, 0o750); err != nil {
		t.Fatal(err)
	}
	if at, err := tr.removeEmpty(elsewhere, perAllocDir); err != nil {
		t.Errorf("removeEmpty(%s): %s: %v", elsewhere, at, err)
	}
	if _, err := os.Lstat(elsewhere); err != nil {
		t.Errorf("removed outside the root: %v", err)
	}

	// The resolved root replaced by a link after New is refused too.
	if err := os.Rename(real, real+".old"); err != nil {
		t.Fatal(err)
	}
	mustSymlink(t, real+".old", real)
	if err := tr.mkdirAll(real+"/staging/ns", false); !errors.Is(err, ErrUnsafePath) {
		t.Errorf("mkdir beneath a root turned link = %v, want ErrUnsafePath", err)
	}
}

func mustMkdir(t *testing.T, p string) {
	t.Helper()
	if err := os.Mkdir(p, 0o750); err != nil {
		t.Fatal(err)
	}
}

func mustSymlink(t *testing.T, target, p string) {
	t.Helper()
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
}

func mustWrite(t *testing.T, p string) {
	t.Helper()
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
}
