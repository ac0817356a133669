package mounter

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/csikit/csikit/csi"
)

// Layout under Config.Root (see the package doc). Every element below
// the root is a validated ID or the String form of a (Stage)Usage, so
// no request can name a path outside the root. A version 1 record may
// name an older staging path (.../<usage>), used until it is unstaged.
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

// underRoot joins elements under root and checks, as a second line of
// defence behind ID validation, that the result is a clean path
// strictly inside it.
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
// of a target (the target is the plugin's to create and delete), so the
// mounter makes those, all through m.tree, and after a teardown removes
// only what it made, while empty (rmdir, never RemoveAll: a path may
// still hold a mount). Links are refused as the package doc says.

// refuseLinks refuses (*UnsafePathError) a staging or target path that
// passes through a symbolic link beneath the root before it goes to the
// plugin, which would follow it. leaf says that p itself is still the
// mounter's and must not be a link either. What is not made yet passes;
// its directories are checked as the mounter makes them.
func (m *Mounter) refuseLinks(p string, leaf bool) error {
	if !leaf {
		p = filepath.Dir(p)
	}
	return m.tree.check(p)
}

// removeEmpty removes p and then its parents while they are empty,
// stopping below <root>/<stop>, never through a link. Errors are
// logged, not returned: a leftover empty directory harms nothing, and a
// non-empty one, or a link, must stay.
func (m *Mounter) removeEmpty(p, stop string) {
	if at, err := m.tree.removeEmpty(p, stop); err != nil {
		m.logger.Warn("cannot remove directory under the mount root", "path", at, "error", err)
	}
}

// roots are the staging and target trees; one tree when both roots are
// the same directory, so that it serializes its own shared parents.
type roots struct{ staging, target *tree }

// newRoots makes the tree of each root (one when they are equal).
func newRoots(staging, target string) (roots, error) {
	s, err := newTree(staging)
	if err != nil {
		return roots{}, err
	}
	if filepath.Clean(target) == filepath.Clean(staging) {
		return roots{staging: s, target: s}, nil
	}
	t, err := newTree(target)
	if err != nil {
		return roots{}, err
	}
	return roots{staging: s, target: t}, nil
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

// stagingRoot is StagingRoot, or Root when it is unset.
func (c Config) stagingRoot() string {
	if c.StagingRoot != "" {
		return c.StagingRoot
	}
	return c.Root
}

// targetRoot is TargetRoot, or Root when it is unset.
func (c Config) targetRoot() string {
	if c.TargetRoot != "" {
		return c.TargetRoot
	}
	return c.Root
}

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
