//go:build !unix

package mounter

import "errors"

// errNoUnix: the mounter reaches the mount root with openat(2), so as to
// follow no symbolic link beneath it; CSI node plugins run on Unix
// systems, and elsewhere the package builds but New fails.
var errNoUnix = errors.New("the mounter needs a Unix system")

func (t *tree) mkdirElems([]string, bool) error { return errNoUnix }
func (t *tree) checkElems([]string) error       { return errNoUnix }
func (t *tree) removeElems([]string) error      { return errNoUnix }
