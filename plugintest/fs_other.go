//go:build !linux

package plugintest

import (
	"io/fs"
	"os"
)

// lstat checks that p exists, as os.Lstat does.
func lstat(p string) error {
	_, err := os.Lstat(p)
	return err
}

// readDir lists directory p, as os.ReadDir does.
func readDir(p string) ([]fs.DirEntry, error) { return os.ReadDir(p) }
