//go:build linux

package mounter

import (
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// fileHolds reports whether the file at p holds the record tagged tag.
func fileHolds(t *testing.T, p, tag string) bool {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(string(data), tag+"-alloc-0000")
}

// Writes in place go through the file's mapping, and what they write is
// what a reader of the file (a restarted agent) reads.
func TestStore_WritesInPlaceThroughMapping(t *testing.T) {
	for _, sync := range []bool{true, false} {
		dir := t.TempDir()
		s := openStore(t, dir, sync)
		if err := s.save(testRecord("a", 1)); err != nil {
			t.Fatal(err)
		}
		f := s.vols[volKey{"default", "vol1"}].file
		if f.mapped != nil {
			t.Fatalf("sync %v: a file written whole (created) is mapped", sync)
		}
		for i, tag := range []string{"b", "c", "d"} {
			if err := s.save(testRecord(tag, 1)); err != nil {
				t.Fatal(err)
			}
			if f.mapped == nil || len(f.mapped) != 2*f.slotSize {
				t.Fatalf("sync %v: write %d in place did not go through a mapping of the whole file (%d bytes mapped)", sync, i, len(f.mapped))
			}
			_, recs := reload(t, dir, sync)
			if rec := recs[volKey{"default", "vol1"}]; rec == nil || rec.Stages[testStage].Writers[tag+"-alloc-0000"] == nil {
				t.Fatalf("sync %v: reload after write %q read %+v", sync, tag, rec)
			}
		}
		if err := s.drop("default", "vol1", false); err != nil {
			t.Fatal(err)
		}
		// A freed file keeps its descriptor and mapping for the next
		// volume; closing the descriptor drops the mapping.
		f.closeFD()
		if f.mapped != nil || f.fd != nil {
			t.Fatalf("sync %v: closeFD left the mapping or the descriptor", sync)
		}
	}
}

// A file cut short behind the store's back after it was mapped does not
// crash the agent: the write that meets the cut faults, the fault is
// caught, and the write goes out with pwrite, as without a mapping.
func TestStore_FileTruncatedUnderMapping(t *testing.T) {
	s := openStore(t, t.TempDir(), false)
	for _, tag := range []string{"a", "b"} {
		if err := s.save(testRecord(tag, 1)); err != nil {
			t.Fatal(err)
		}
	}
	f := s.vols[volKey{"default", "vol1"}].file
	if f.mapped == nil {
		t.Fatal("the second write did not map the file")
	}
	p := s.path(f)
	if err := os.Truncate(p, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.note(testRecord("c", 1)); err != nil {
		t.Fatalf("write to a file truncated under its mapping: %v", err)
	}
	if f.mapped != nil {
		t.Error("the mapping of a truncated file was kept")
	}
	if !fileHolds(t, p, "c") {
		t.Fatal("the write after the cut is not in the file")
	}
	// The file is shorter than two slots now: later writes do not map
	// it (that would fault again) and still land.
	if err := s.note(testRecord("d", 1)); err != nil {
		t.Fatal(err)
	}
	if f.mapped != nil {
		t.Error("a file shorter than its two slots was mapped")
	}
	if !fileHolds(t, p, "d") {
		t.Fatal("the write to the short file is not in it")
	}
}

// faulted catches memory faults only: a copy that does not fault
// reports none, and any other panic goes on.
func TestFaulted(t *testing.T) {
	dst := make([]byte, 4)
	if !copyFaultSafe(dst, []byte("abcd")) || string(dst) != "abcd" {
		t.Fatalf("copy to memory: %q", dst)
	}
	defer func() {
		if r := recover(); r != "not a fault" {
			t.Fatalf("recovered %v, want the panic that is not a memory fault", r)
		}
	}()
	faulted(func() { panic("not a fault") })
	t.Fatal("faulted swallowed a panic that is not a memory fault")
}

// mapped reports whether the process maps the file at p.
func mapped(t *testing.T, p string) bool {
	t.Helper()
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Skipf("cannot read /proc/self/maps: %v", err)
	}
	return strings.Contains(string(maps), p)
}

// A Mounter has no Close: a store dropped with its file mapped unmaps
// it once the garbage collector finds it unreachable, so a process that
// makes many Mounters (a test binary running plugintest many times)
// does not pile up mappings.
func TestStore_DroppedStoreUnmaps(t *testing.T) {
	dir := t.TempDir()
	p := func() string {
		s := openStore(t, dir, false)
		for _, tag := range []string{"a", "b"} {
			if err := s.save(testRecord(tag, 1)); err != nil {
				t.Fatal(err)
			}
		}
		return s.path(s.vols[volKey{"default", "vol1"}].file)
	}()
	if !mapped(t, p) {
		t.Fatal("the store's file is not mapped after a write in place")
	}
	for range 500 { // up to 5 s: the cleanup goroutine may be slow to run under -race on a busy machine
		runtime.GC()
		if !mapped(t, p) {
			break
		}
		time.Sleep(10 * time.Millisecond) // cleanups run on their own goroutine
	}
	if mapped(t, p) {
		t.Fatal("the file of a dropped store is still mapped")
	}
	// An explicit close unmaps at once, and the cleanup does not unmap
	// again (it would unmap whatever took the address meanwhile).
	s := openStore(t, dir, false)
	if err := s.save(testRecord("c", 1)); err != nil {
		t.Fatal(err)
	}
	if err := s.save(testRecord("d", 1)); err != nil {
		t.Fatal(err)
	}
	f := s.vols[volKey{"default", "vol1"}].file
	f.closeFD()
	if mapped(t, p) {
		t.Fatal("closeFD left the file mapped")
	}
}
