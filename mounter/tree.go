package mounter

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
)

// tree is the mount root as the mounter reaches it: every directory it
// makes, checks or removes beneath the root is reached one element at a
// time through os.Root, which stays inside the root but follows a link
// that does. So each element is Lstat-ed first (a link is an
// *UnsafePathError naming it; anything but a directory is ENOTDIR,
// never opened), and what is opened must be what Lstat saw. The root is
// resolved once, at New (links above it are the host's). On Linux, a
// check and a removal first try one openat2(2) that refuses a link
// anywhere on the path (tree_linux.go); what it does not open goes to
// the walk.
type tree struct {
	mu   sync.Mutex // serializes making and removing shared parent directories
	root string     // the mount root, with no link in it
	// alias is the root as given when a host's link above it differs:
	// paths recorded by a version that did not resolve the root start
	// with it.
	alias string
}

// errLinkHere is removeNoLinks' answer for a name that is a link.
var errLinkHere = errors.New("is a symbolic link")

// newTree creates and resolves the root (its parents, the host's, may be
// links) and creates the staging and per-alloc directories beneath it.
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
		if err := t.mkdirAll(filepath.Join(resolved, d), false); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// elems splits p into its elements beneath the root. A path not
// strictly beneath it (recorded with another Config.Root, or edited by
// hand) is an *UnsafePathError.
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

func (t *tree) path(elems []string) string {
	return filepath.Join(append([]string{t.root}, elems...)...)
}

// linkError is the error for elems, whose last element (the root when
// there is none) is a link.
func (t *tree) linkError(elems []string) error {
	if len(elems) == 0 {
		return &UnsafePathError{Path: t.root, Reason: "(the mount root) has become a symbolic link since the mounter started: put the directory back, or restart the node agent if the host moved the root on purpose"}
	}
	return &UnsafePathError{Path: t.path(elems), Reason: "is a symbolic link, and the mounter follows none beneath its root " +
		"(no plugin call was made with a path through it): remove the link (and find out what made it), then retry"}
}

// pathError names the element at fault in err, an error of os.Root's
// (relative to the directory it was opened at).
func (t *tree) pathError(elems []string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return &fs.PathError{Op: pe.Op, Path: t.path(elems), Err: pe.Err}
	}
	return err
}

// mkdirAll is os.MkdirAll beneath the root (mode 0750) refusing links;
// with leafAnyKind, p itself is made if missing and otherwise taken as
// it is, a link included (a mount point of the plugin's).
func (t *tree) mkdirAll(p string, leafAnyKind bool) error {
	e, err := t.elems(p)
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	last := len(e) - 1
	parent, err := t.open(e[:last], true)
	if err != nil {
		return err
	}
	defer parent.Close()
	if leafAnyKind {
		if err := parent.Mkdir(e[last], 0o750); err != nil && !errors.Is(err, fs.ErrExist) {
			return t.pathError(e, err)
		}
		return nil
	}
	dir, err := t.step(parent, e[last], e, true)
	if err != nil {
		return err
	}
	return dir.Close()
}

// check returns an *UnsafePathError if an existing element of p
// beneath the root, p included, is a symbolic link. A path not beneath
// the root (recorded under an earlier Config.Root) passes, so that its
// teardown still reaches the plugin.
func (t *tree) check(p string) error {
	e, err := t.elems(p)
	if err != nil || noLinks(t.path(e)) {
		return nil
	}
	parent, err := t.open(e[:len(e)-1], false)
	if err == nil {
		_, err = t.lstat(parent, e[len(e)-1], e)
		parent.Close()
	}
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return nil // not made yet
	}
	return err
}

// removeEmpty removes p (a file too, as os.Remove would) and then its
// parents while they are empty, stopping below <root>/<stop>. A link is
// neither removed nor looked through: an *UnsafePathError stops it (one
// swapped in after an element's Lstat is removed itself, never what it
// points to). It returns the first error and its path; a missing
// directory is no error, and one not empty ends the work. Elements go
// through the fast path while it reaches their parents, then the walk.
func (t *tree) removeEmpty(p, stop string) (string, error) {
	e, err := t.elems(p)
	if err != nil || len(e) < 2 || e[0] != stop {
		return "", nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for k := len(e); k > 1; k-- {
		handled, err := removeNoLinks(t.path(e[:k-1]), e[k-1])
		switch {
		case !handled:
			return t.removeWalk(e[:k])
		case errors.Is(err, errLinkHere):
			return t.path(e[:k]), t.linkError(e[:k])
		case err == nil, errors.Is(err, fs.ErrNotExist):
		case errors.Is(err, syscall.ENOTEMPTY), errors.Is(err, syscall.EEXIST):
			return "", nil
		default:
			return t.path(e[:k]), &fs.PathError{Op: "remove", Path: t.path(e[:k]), Err: err}
		}
	}
	return "", nil
}

// removeWalk is removeEmpty's walk, with the lock held: the parents are
// walked down once and held open while the elements are removed bottom
// up, each through the directory it was found in.
func (t *tree) removeWalk(e []string) (string, error) {
	chain, err := t.walk(e[:len(e)-1], false)
	defer closeAll(chain)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return t.path(e), err
	}
	// chain[i] is the directory of e[:i]; e[k-1] is removed from
	// chain[k-1], from the deepest element whose parent is open.
	for k := min(len(e), len(chain)); k > 1; k-- {
		parent, name := chain[k-1], e[k-1]
		_, err := t.lstat(parent, name, e[:k])
		if err == nil {
			err = parent.Remove(name)
		}
		switch {
		case err == nil, errors.Is(err, fs.ErrNotExist):
		case errors.Is(err, syscall.ENOTEMPTY), errors.Is(err, syscall.EEXIST):
			return "", nil
		default:
			return t.path(e[:k]), t.pathError(e[:k], err)
		}
	}
	return "", nil
}

func closeAll(dirs []*os.Root) {
	for _, d := range dirs {
		d.Close()
	}
}

// lstat is dir.Lstat(name) (elems, for errors), refusing a link.
func (t *tree) lstat(dir *os.Root, name string, elems []string) (fs.FileInfo, error) {
	fi, err := dir.Lstat(name)
	switch {
	case err != nil:
		return nil, t.pathError(elems, err)
	case fi.Mode()&fs.ModeSymlink != 0:
		return nil, t.linkError(elems)
	}
	return fi, nil
}

// open opens directory elems beneath the root, following no link; with
// create, it makes the missing directories, the root included. The
// caller closes the Root.
func (t *tree) open(elems []string, create bool) (*os.Root, error) {
	if create {
		if err := os.MkdirAll(filepath.Dir(t.root), 0o750); err != nil {
			return nil, err
		}
	}
	chain, err := t.walk(elems, create)
	if err != nil {
		closeAll(chain)
		return nil, err
	}
	closeAll(chain[:len(chain)-1])
	return chain[len(chain)-1], nil
}

// walk opens the root and each directory of elems beneath it as open
// does, and returns them: the directory of elems[:i] at i. It stops at
// the first it cannot open, returning what it opened with the error.
// The caller closes them all.
func (t *tree) walk(elems []string, create bool) ([]*os.Root, error) {
	dir, err := os.OpenRoot(filepath.Dir(t.root))
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	chain := make([]*os.Root, 0, len(elems)+1)
	for i, name := range append([]string{filepath.Base(t.root)}, elems...) {
		next, err := t.step(dir, name, elems[:i], create)
		if err != nil {
			return chain, err
		}
		chain = append(chain, next)
		dir = next
	}
	return chain, nil
}

// step opens directory name (elems, for errors) in dir, making it first
// with create. A link is refused, and anything but a directory is
// ENOTDIR (a FIFO would block an open).
func (t *tree) step(dir *os.Root, name string, elems []string, create bool) (*os.Root, error) {
	if create {
		// EEXIST: made by another Mounter, or a link or a file, which
		// the Lstat finds.
		if err := dir.Mkdir(name, 0o750); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, t.pathError(elems, err)
		}
	}
	fi, err := t.lstat(dir, name, elems)
	if err == nil && !fi.IsDir() {
		err = &fs.PathError{Op: "open", Path: t.path(elems), Err: syscall.ENOTDIR}
	}
	if err != nil {
		return nil, err
	}
	return t.openSame(dir, name, elems, fi)
}

// openSame opens directory name in dir, which Lstat found to be fi, and
// refuses anything else: os.Root follows a link swapped in since.
func (t *tree) openSame(dir *os.Root, name string, elems []string, fi fs.FileInfo) (*os.Root, error) {
	sub, err := dir.OpenRoot(name)
	if err != nil {
		if now, lerr := dir.Lstat(name); lerr == nil && now.Mode()&fs.ModeSymlink != 0 {
			return nil, t.linkError(elems) // swapped in, and leaving dir
		}
		return nil, t.pathError(elems, err)
	}
	now, err := sub.Stat(".")
	if err != nil {
		sub.Close()
		return nil, t.pathError(elems, err)
	}
	if !os.SameFile(fi, now) {
		sub.Close()
		return nil, &UnsafePathError{Path: t.path(elems), Reason: "changed while the mounter opened it (into a symbolic link, or another directory moved there): " +
			"remove the link (and find out what made it), then retry"}
	}
	return sub, nil
}
