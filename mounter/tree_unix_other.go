//go:build unix && !linux

package mounter

import "golang.org/x/sys/unix"

// oPath is 0: only Linux has O_PATH, so the walk opens directories for
// reading, which does not move their access times.
const oPath = 0

// openBeneath is Linux's openat2; without it, every operation takes
// the walk.
func openBeneath(int, string, int) (int, error) { return -1, unix.ENOSYS }
