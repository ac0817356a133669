package mounter

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

// tree is the mount root as the mounter reaches it: every directory the
// mounter makes, checks or removes beneath the root is reached without
// following a link (see the package doc), on Linux by openat2(2) with
// RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS from a descriptor of the root;
// where the kernel lacks it (before 5.6), on other Unix systems, or
// when it fails for a reason it cannot explain, by a walk that opens
// one element at a time with O_NOFOLLOW|O_DIRECTORY. A link found is an
// *UnsafePathError naming it. The root itself is resolved once, at New
// (links above it are the host's), and the paths handed to the plugin
// are built on it, so the directory checked is the one the plugin gets.
type tree struct {
	mu sync.Mutex // serializes making and removing shared parent directories
	// root is the mount root with no link in it.
	root string
	// alias is Config.Root as given when it differs from root (a
	// host's link above the root): paths recorded in the state by a
	// version that did not resolve the root start with it, and name the
	// same directories.
	alias string
	// walkOnly makes every operation take the element-by-element walk:
	// set once openat2 is found missing or refused (a seccomp filter
	// that predates it answers EPERM), and by tests to exercise the
	// walk on a kernel that has openat2.
	walkOnly atomic.Bool
}

// newTree creates the root if need be (its parents, the host's, may be
// links), resolves it, and creates the staging and per-alloc
// directories beneath it, which must not be links.
func newTree(given string) (*tree, error) {
	given = filepath.Clean(given)
	if err := os.MkdirAll(given, 0o750); err != nil {
		return nil, err
	}
	resolved, err := filepath.EvalSymlinks(given)
	if err != nil {
		return nil, err
	}
	t := &tree{root: resolved}
	if resolved != given {
		t.alias = given
	}
	for _, d := range []string{stagingDir, perAllocDir} {
		if err := t.mkdirElems([]string{d}, false); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// elems splits p, a path built on the root or recorded in the state,
// into its elements beneath the root. A path not strictly beneath it
// (a state file edited by hand, or written with another Config.Root)
// is an *UnsafePathError: the mounter acts on nothing outside its root.
func (t *tree) elems(p string) ([]string, error) {
	p = filepath.Clean(p)
	for _, r := range []string{t.root, t.alias} {
		if r == "" {
			continue
		}
		if rest, ok := strings.CutPrefix(p, r+string(filepath.Separator)); ok {
			return strings.Split(rest, string(filepath.Separator)), nil
		}
	}
	return nil, &UnsafePathError{Path: p, Reason: "is not beneath the mount root " + t.root +
		" (recorded under another Config.Root?): the mounter makes and removes directories only beneath its root; unmount the volume there, or restore Config.Root"}
}

// path is the full path of elems, for errors and logs.
func (t *tree) path(elems []string) string {
	return filepath.Join(append([]string{t.root}, elems...)...)
}

// linkError is the error for elems, whose last element is a link.
func (t *tree) linkError(elems []string) error {
	return &UnsafePathError{Path: t.path(elems), Reason: "is a symbolic link, and the mounter follows none beneath its root " +
		"(no plugin call was made with a path through it): remove the link (and find out what made it), then retry"}
}

// mkdirAll creates directory p beneath the root and its missing parents
// (mode 0750), as os.MkdirAll would, but refuses a link anywhere beneath
// the root; with leafAnyKind, p itself is made if missing and otherwise
// taken as it is, a link included (a mount point of the plugin's).
func (t *tree) mkdirAll(p string, leafAnyKind bool) error {
	e, err := t.elems(p)
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.mkdirElems(e, leafAnyKind)
}

// check returns an *UnsafePathError if an element of p beneath the root
// that exists, p itself included, is a symbolic link. Missing elements
// and a file in the way are left for the mkdir (or the plugin) to
// report: check refuses links only. A path not beneath the root can
// only come from the state, recorded under an earlier Config.Root: it
// passes, so that its teardown still reaches the plugin as before
// (mkdirAll refuses to make directories there, removeEmpty leaves it).
func (t *tree) check(p string) error {
	e, err := t.elems(p)
	if err != nil {
		return nil
	}
	return t.checkElems(e)
}

// removeEmpty removes p and then its parents while they are empty,
// stopping below <root>/<stop>. It never removes, or looks through, a
// link: an *UnsafePathError stops it. It returns the first error, with
// the path it concerns; a missing directory is not an error, and one
// not empty (ENOTEMPTY, or EEXIST on some systems) ends the work
// without one. Nothing outside the root is removed.
func (t *tree) removeEmpty(p, stop string) (string, error) {
	e, err := t.elems(p)
	if err != nil {
		return "", nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for len(e) > 1 && e[0] == stop {
		err := t.removeElems(e)
		switch {
		case err == nil, errors.Is(err, syscall.ENOENT):
		case errors.Is(err, syscall.ENOTEMPTY), errors.Is(err, syscall.EEXIST):
			return "", nil
		default:
			return t.path(e), err
		}
		e = e[:len(e)-1]
	}
	return "", nil
}

// elemError is errno from op on the last of elems, as a path error
// naming that element.
func (t *tree) elemError(op string, elems []string, errno error) error {
	return &fs.PathError{Op: op, Path: t.path(elems), Err: errno}
}
