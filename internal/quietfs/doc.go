// Package quietfs reads files and directories without dirtying their
// inodes, for csikit's node side, which shares a file system with the
// plugins it drives.
//
// A change to a file's or directory's timestamps dirties its inode, and
// on ext4 the next fsync of another file nearby is then slower (about
// 1.5 times here, on ext4 without a journal): a CSI plugin syncs its
// state after nearly every call, so each such change made by the CO
// slows one of the plugin's calls. Two kinds of read cause changes that
// the write alone would not:
//
//   - Reading the timestamps. Since Linux 6.13 (multigrain timestamps)
//     a read of a file's ctime, which stat(2), fstat(2), lstat(2) and
//     os.ReadFile's stat return, makes the kernel stamp the file's next
//     change with a fine-grained time, which always moves; otherwise the
//     kernel stamps it with its coarse clock, which moves once per tick
//     (a few ms), so that changes close together move it once. Stat,
//     IsDir and Lexists use statx(2) with a mask without timestamps.
//   - Moving the access time. Under relatime (the default) a read or a
//     mapping of a file, or a listing of a directory, that changed
//     since it was last read moves its atime. Open, ReadFile and ReadDir
//     open with O_NOATIME.
//
// Where statx(2) is refused (ENOSYS before Linux 4.11, or EPERM from a
// seccomp filter that predates it), or leaves out a field asked for,
// the functions fall back on the stat family; where O_NOATIME is refused (it needs the file's owner,
// or CAP_FOWNER), they open without it. On other systems they are the
// os package's functions.
package quietfs
