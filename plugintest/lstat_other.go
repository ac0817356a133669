//go:build !linux

package plugintest

import "os"

// lstat checks that p exists, as os.Lstat does.
func lstat(p string) error {
	_, err := os.Lstat(p)
	return err
}
