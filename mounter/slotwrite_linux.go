//go:build linux

package mounter

import (
	"os"
	"runtime"
	"runtime/debug"
	"syscall"

	"github.com/csikit/csikit/internal/quietfs"
)

// writeAt writes b at offset off of f's file, open as fd, through a
// shared mapping of the file, made at the first write and kept until
// the file is closed (closeFD).
//
// Why not pwrite(2): every write(2) moves the file's mtime, at least
// once per tick of the kernel's coarse clock (a few ms), and always
// when the timestamps were read since the last change (fstat did that
// before each write; see quietfs), which dirties the file's inode,
// and on ext4 a dirty inode makes the next fsync of another file nearby
// slower: the plugin syncs its state after nearly every call, so a
// store that writes a slot at each step of a mount slowed each of the
// plugin's calls (BenchmarkStore_NeighbourSync: a neighbour's fsync
// took about 1.45 times as long after a pwrite). Through a mapping the
// mtime moves only when a clean page is first written (the first write
// of a new mapping, or after the page went to disk: at most once per
// writeback, or per fdatasync), and the copy takes no system call.
// fdatasync flushes the mapped pages as it flushes written ones: the
// page cache is the same.
//
// The mapping covers 2·slotSize bytes, the file's length; a file found
// shorter (cut behind the store's back) is written with pwrite, which
// extends it, as before. A file cut after it was mapped makes the store
// fault: the fault is caught (the write then goes through pwrite), not
// a crash of the agent.
func (f *stateFile) writeAt(fd *os.File, b []byte, off int) error {
	if f.mapped == nil && !f.noMap {
		f.mapped = mapFile(fd, 2*f.slotSize)
		f.noMap = f.mapped == nil
		if f.mapped != nil {
			// A Mounter has no Close: a store dropped with its files
			// mapped unmaps them once they are unreachable, as their
			// descriptors are closed then.
			f.unmapper = runtime.AddCleanup(f, munmap, f.mapped)
		}
	}
	if f.mapped != nil && off+len(b) <= len(f.mapped) && copyFaultSafe(f.mapped[off:], b) {
		return nil
	}
	f.unmap()
	_, err := fd.WriteAt(b, int64(off))
	return err
}

// mapFile maps the first size bytes of fd for writing, or returns nil
// when the file is shorter than that or cannot be mapped. It reads the
// file's size without its timestamps (quietfs.Stat).
func mapFile(fd *os.File, size int) []byte {
	if size <= 0 {
		return nil
	}
	if _, n, err := quietfs.Stat(fd); err != nil || n < int64(size) {
		return nil
	}
	m, err := syscall.Mmap(int(fd.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil
	}
	return m
}

// copyFaultSafe copies src to the start of dst, a file mapping, and
// reports whether it could: a page of the mapping past the file's end
// (the file was truncated meanwhile) faults, and the fault is turned
// into false rather than a SIGBUS that ends the process.
func copyFaultSafe(dst, src []byte) bool {
	return !faulted(func() { copy(dst, src) })
}

// faulted runs fn and reports whether it faulted on memory; any other
// panic goes on.
func faulted(fn func()) (fault bool) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(interface{ Addr() uintptr }); !ok {
				panic(r)
			}
			fault = true
		}
	}()
	fn()
	return false
}

// unmap drops the file's mapping, if any.
func (f *stateFile) unmap() {
	if f.mapped != nil {
		f.unmapper.Stop()
		munmap(f.mapped)
		f.mapped = nil
	}
}

func munmap(m []byte) { _ = syscall.Munmap(m) }
