package mounter

import (
	"cmp"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/csikit/csikit/csi"
)

// Layout under the roots (see the package doc). Every element below a
// root is a validated ID or the String form of a (Stage)Usage. A
// version 1 record may name an older staging path (.../<usage>), used
// until it is unstaged.
const (
	stagingDir  = "staging"
	perAllocDir = "per-alloc"
)

// stagingPath is where (namespace, volume) is staged under stage usage s.
func (m *Mounter) stagingPath(namespace, volumeID string, s StageUsage) (string, error) {
	return underRoot(m.tree.staging.root, stagingDir, namespace, volumeID, s.String())
}

// targetPath is where (volume, usage) is published for an allocation.
// Allocation IDs are unique on the node, so the namespace is not needed.
func (m *Mounter) targetPath(allocID, volumeID string, u Usage) (string, error) {
	return underRoot(m.tree.target.root, perAllocDir, allocID, volumeID, u.String())
}

// underRoot joins elements under root, checking (behind ID validation)
// that the result is a clean path strictly inside it.
func underRoot(root string, elems ...string) (string, error) {
	for _, e := range elems {
		if e == "" || e == "." || e == ".." || strings.ContainsAny(e, "/\\\x00") {
			return "", fmt.Errorf("%w: path element %q is not a plain name", csi.ErrInvalidRequest, e)
		}
	}
	p := filepath.Join(append([]string{root}, elems...)...)
	if !strings.HasPrefix(p, root+string(filepath.Separator)) {
		return "", fmt.Errorf("%w: path %q leaves the mount root %s", csi.ErrInvalidRequest, p, root)
	}
	return p, nil
}

// The CSI spec has the CO create the staging directory and the parent
// of a target (the target is the plugin's), so the mounter makes those
// through m.tree, and after a teardown removes them while empty (rmdir,
// never RemoveAll: a path may still hold a mount).

// refuseLinks refuses (*UnsafePathError) a path to the plugin through a
// symbolic link beneath the root; with leaf, p itself is still the
// mounter's and must not be one either. What is not made yet passes.
func (m *Mounter) refuseLinks(p string, leaf bool) error {
	if !leaf {
		p = filepath.Dir(p)
	}
	return m.tree.check(p)
}

// removeEmpty is tree.removeEmpty, logging errors: a leftover empty
// directory harms nothing, and a non-empty one, or a link, must stay.
func (m *Mounter) removeEmpty(p, stop string) {
	if at, err := m.tree.removeEmpty(p, stop); err != nil {
		m.logger.Warn("cannot remove directory under the mount root", "path", at, "error", err)
	}
}

// roots are the staging and target trees; one tree when both roots are
// the same directory, so that it serializes its own shared parents.
type roots struct{ staging, target *tree }

func newRoots(staging, target string) (roots, error) {
	s, err := newTree(staging)
	t := s
	if err == nil && filepath.Clean(target) != filepath.Clean(staging) {
		t, err = newTree(target)
	}
	return roots{staging: s, target: t}, err
}

// pick is the tree p belongs to: the target tree for a path beneath
// <TargetRoot>/per-alloc, else the staging tree (which acts on nothing
// outside its root, as a path recorded under an older root may be).
func (r roots) pick(p string) *tree {
	if e, err := r.target.elems(p); err == nil && len(e) > 0 && e[0] == perAllocDir {
		return r.target
	}
	return r.staging
}

func (r roots) mkdirAll(p string, leafAnyKind bool) error { return r.pick(p).mkdirAll(p, leafAnyKind) }

func (r roots) check(p string) error { return r.pick(p).check(p) }

func (r roots) removeEmpty(p, stop string) (string, error) { return r.pick(p).removeEmpty(p, stop) }

func (c Config) stagingRoot() string { return cmp.Or(c.StagingRoot, c.Root) }

func (c Config) targetRoot() string { return cmp.Or(c.TargetRoot, c.Root) }

// checkRoots requires an absolute staging and target root, neither
// strictly inside the other (a teardown of one would then walk the
// other's directories).
func (c Config) checkRoots() error {
	for _, r := range []struct{ field, v string }{
		{"StagingRoot", c.stagingRoot()}, {"TargetRoot", c.targetRoot()},
	} {
		if r.v == "" || !filepath.IsAbs(r.v) {
			return fmt.Errorf("%w: mounter: %s %q must be an absolute directory (set Root, or StagingRoot and TargetRoot)",
				csi.ErrInvalidRequest, r.field, r.v)
		}
	}
	s, t := filepath.Clean(c.stagingRoot()), filepath.Clean(c.targetRoot())
	if s != t && (strings.HasPrefix(s, t+string(filepath.Separator)) || strings.HasPrefix(t, s+string(filepath.Separator))) {
		return fmt.Errorf("%w: mounter: StagingRoot %q and TargetRoot %q nest; use the same directory or two apart",
			csi.ErrInvalidRequest, s, t)
	}
	return nil
}
