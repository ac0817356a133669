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
	return m.underRoot(stagingDir, namespace, volumeID, s.String())
}

// targetPath is where (volume, usage) is published for an allocation.
// Allocation IDs are unique on the node, so the namespace is not needed.
func (m *Mounter) targetPath(allocID, volumeID string, u Usage) (string, error) {
	return m.underRoot(perAllocDir, allocID, volumeID, u.String())
}

// underRoot joins elements under the root and checks, as a second line
// of defence behind ID validation, that the result is a clean path
// strictly inside the root.
func (m *Mounter) underRoot(elems ...string) (string, error) {
	for _, e := range elems {
		if e == "" || e == "." || e == ".." || strings.ContainsAny(e, "/\\\x00") {
			return "", fmt.Errorf("%w: path element %q is not a plain name", csi.ErrInvalidRequest, e)
		}
	}
	p := filepath.Join(append([]string{m.tree.root}, elems...)...)
	if !strings.HasPrefix(p, m.tree.root+string(filepath.Separator)) {
		return "", fmt.Errorf("%w: path %q leaves the mount root %s", csi.ErrInvalidRequest, p, m.tree.root)
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
