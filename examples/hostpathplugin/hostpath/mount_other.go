//go:build !linux

package hostpath

import "errors"

// errNotLinux is returned by every mount primitive off Linux: bind mounts
// and /proc/self/mountinfo are Linux features. The symlink method works
// everywhere.
var errNotLinux = errors.New("bind mounts and volume statistics are only supported on Linux; use the symlink mount method")

func bindMount(source, target string, readonly bool) error { return errNotLinux }

func unmount(target string) error { return nil }

func isMountPoint(path string) (bool, error) { return false, nil }

func volumeUsage(path string) (bytes, inodes usage, err error) {
	return usage{}, usage{}, errNotLinux
}
