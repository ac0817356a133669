package mounter

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"pgregory.net/rapid"

	"github.com/csikit/csikit/csi"
)

var testStage = StageUsage{AccessMode: csi.AccessModeSingleNodeMultiWriter, AttachmentMode: csi.AttachmentModeFileSystem}

// testRecord is a valid record of volume vol1 with n publications,
// tagged so that two records differ.
func testRecord(tag string, n int) *volumeRecord {
	s := &stageRecord{Stage: stageStaged, StagingPath: "/mnt/staging/default/vol1/snmw-fs"}
	for i := range n {
		id := fmt.Sprintf("%s-alloc-%04d", tag, i)
		s.setPub(csi.ClaimWrite, id, &allocRecord{State: publishPublished, TargetPath: "/mnt/per-alloc/" + id + "/vol1/w-snmw-fs"})
	}
	return &volumeRecord{Namespace: "default", VolumeID: "vol1", ExternalID: "ext", PluginID: "p",
		Stages: map[StageUsage]*stageRecord{testStage: s}}
}

// fileSlots decodes both slots of the file.
func fileSlots(t *rapid.T, p string) (recs [2]string, gens [2]uint64, valid [2]bool) {
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("read %s: %v", p, err)
	}
	size := len(data) / 2
	for i := range 2 {
		if gen, rec, err := decodeSlot(data[i*size : (i+1)*size]); err == nil {
			recs[i], gens[i], valid[i] = string(rec), gen, true
		}
	}
	return recs, gens, valid
}

// tb is what the store test helpers need of a *testing.T, *testing.B
// or *rapid.T.
type tb interface {
	Helper()
	Fatal(args ...any)
}

// recordJSON is rec in JSON, marshalled by encoding/json: the oracle
// the store's own encoder is held to.
func recordJSON(t tb, rec *volumeRecord) string {
	t.Helper()
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// openStore returns a store on dir.
func openStore(t tb, dir string, sync bool) *store {
	t.Helper()
	s, err := newStore(dir, sync, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// reload opens a store on dir as a restarted agent does, and returns it
// with the records it read.
func reload(t tb, dir string, sync bool) (*store, map[volKey]*volumeRecord) {
	t.Helper()
	s := openStore(t, dir, sync)
	recs, err := s.load()
	if err != nil {
		t.Fatal(err)
	}
	return s, recs
}

// TestStore_Slots_Property runs random sequences of saves, notes and
// releases of a volume, with records of random sizes (some outgrowing
// the slots), and reloads, and checks after each step what a crash at
// that moment could leave:
//
//   - the newest valid slot holds the last record written (what a
//     restarted agent reads: the page cache); a released volume's file
//     holds the empty record, and the volume's next save takes it again;
//   - the last saved record is still whole in a slot until the next
//     save (what an OS crash falls back to when later writes are lost
//     or torn); with NoSync, the record of the write before the last;
//   - generations only grow, across reloads too.
func TestStore_Slots_Property(t *testing.T) {
	base := t.TempDir()
	rapid.Check(t, func(t *rapid.T) {
		noSync := rapid.Bool().Draw(t, "noSync")
		dir, err := os.MkdirTemp(base, "state")
		if err != nil {
			t.Fatal(err)
		}
		newS := func() *store {
			s, _ := reload(t, dir, !noSync)
			return s
		}
		s := newS()
		// One volume: it always has the pool's first file.
		p := filepath.Join(dir, "records", "1.state")
		var last, durable, previous string // records as written
		var lastGen uint64
		exists, pendingSync := false, false
		for i := range rapid.IntRange(1, 16).Draw(t, "steps") {
			op := rapid.SampledFrom([]string{"save", "save", "note", "note", "reload", "remove"}).Draw(t, "op")
			if op == "reload" {
				s = newS()
				// The newest record read may not be on disk: the next
				// write syncs it first.
				pendingSync = exists && !noSync
				continue
			}
			rec := testRecord(fmt.Sprintf("w%d", i), rapid.IntRange(1, 60).Draw(t, "pubs"))
			want := ""
			if op != "remove" {
				r := rec.clone()
				r.Version = formatVersion
				want = recordJSON(t, r)
			}
			var before []byte
			if exists {
				before, _ = os.ReadFile(p)
			}
			var err error
			switch op {
			case "save":
				err = s.save(rec)
			case "note":
				err = s.note(rec)
			case "remove":
				err = s.drop("default", "vol1", false)
			}
			if err != nil {
				t.Fatalf("%s: %v", op, err)
			}
			if !exists {
				if _, err := os.Stat(p); op != "save" && !os.IsNotExist(err) {
					t.Fatalf("a %s created the file: %v", op, err)
				}
				if op != "save" {
					continue
				}
			}
			after, _ := os.ReadFile(p)
			wrote := string(before) != string(after)
			if op == "save" && !wrote {
				t.Fatalf("a save wrote nothing")
			}
			if wrote {
				if pendingSync {
					durable, pendingSync = last, false
				}
				previous, last = last, want
				if op == "save" || noSync {
					durable = want
				}
				exists = true
			}
			recs, gens, valid := fileSlots(t, p)
			n := 0
			if !valid[0] || valid[1] && gens[1] > gens[0] {
				n = 1
			}
			if !valid[n] || recs[n] != last {
				t.Fatalf("after %s: newest slot holds %q, want the last record written %q", op, recs[n], last)
			}
			if gens[n] < lastGen {
				t.Fatalf("generation went back from %d to %d", lastGen, gens[n])
			}
			lastGen = gens[n]
			keep := durable
			if noSync {
				keep = previous
			}
			// (A file written whole, new or grown, holds one record: it
			// is synced before it replaces anything.)
			if wrote && len(after) == len(before) && !(valid[0] && recs[0] == keep) && !(valid[1] && recs[1] == keep) {
				t.Fatalf("after %s: the record that must survive a crash is in no slot:\nwant %q\nslots %q", op, keep, recs)
			}
		}
	})
}

// TestStore_Unsure: a file read at New with syncing on may hold an
// unsynced newest record: the first write syncs the file before writing
// the other slot.
func TestStore_Unsure(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, true)
	if err := s.save(testRecord("a", 1)); err != nil {
		t.Fatal(err)
	}
	if err := s.note(testRecord("b", 1)); err != nil {
		t.Fatal(err)
	}
	p := s.path(s.vols[volKey{"default", "vol1"}].file)
	before, _ := os.ReadFile(p)

	s2, recs := reload(t, dir, true)
	if rec := recs[volKey{"default", "vol1"}]; rec == nil || rec.Stages[testStage].Writers["b-alloc-0000"] == nil {
		t.Fatalf("load read %+v, want the noted record", rec)
	}
	if after, _ := os.ReadFile(p); string(after) != string(before) {
		t.Fatal("loading wrote the file")
	}
	syncs := s2.fileSyncs.Load()
	if err := s2.save(testRecord("d", 1)); err != nil {
		t.Fatal(err)
	}
	if got := s2.fileSyncs.Load() - syncs; got != 2 {
		t.Errorf("first save after load made %d file syncs, want 2 (the file, then the write)", got)
	}
	data, _ := os.ReadFile(p)
	size := len(data) / 2
	var got [2]string
	for i := range 2 {
		if _, rec, err := decodeSlot(data[i*size : (i+1)*size]); err == nil {
			got[i] = string(rec)
		}
	}
	// The noted record read at load (slot 1), synced now, stays; the
	// first save's record, which was the only durable one until then, is
	// overwritten.
	if !strings.Contains(got[0], "d-alloc") || !strings.Contains(got[1], "b-alloc") {
		t.Errorf("slots hold %q, want the new record and the one read at load", got)
	}
	// Now sure: notes write again, to the slot that is not stable.
	syncs = s2.fileSyncs.Load()
	if err := s2.note(testRecord("e", 1)); err != nil {
		t.Fatal(err)
	}
	if s2.fileSyncs.Load() != syncs {
		t.Error("a note synced")
	}
	data, _ = os.ReadFile(p)
	if _, rec, err := decodeSlot(data[size:]); err != nil || !strings.Contains(string(rec), "e-alloc") {
		t.Errorf("slot 1 after the note: %q, %v", rec, err)
	}
}

// BenchmarkStore_Lifecycle times the tracker writes of one volume's
// lifecycle with two allocations, as the Mounter makes them: mount-1
// (one save with both intents, a note of the stage, a note of the
// publish), mount-2 (a save, a note), unmount-2 (a save, a note),
// unmount-1 (a save, the release of the file).
//
// Metrics: ns/lifecycle, and the syncs per lifecycle.
func BenchmarkStore_Lifecycle(b *testing.B) {
	for _, tc := range []struct {
		name string
		sync bool
	}{{"sync", true}, {"nosync", false}} {
		b.Run(tc.name, func(b *testing.B) {
			s := openStore(b, b.TempDir(), tc.sync)
			st := testStage
			for i := 0; b.Loop(); i++ {
				rec := &volumeRecord{Namespace: "default", VolumeID: fmt.Sprintf("vol-%d", i), ExternalID: "ext", PluginID: "p",
					Stages: map[StageUsage]*stageRecord{st: {Stage: stageStaging, StagingPath: "/mnt/staging/default/vol/snmw-fs"}}}
				sr := rec.Stages[st]
				pub := func(id string, state publishState) {
					sr.setPub(csi.ClaimWrite, id, &allocRecord{State: state, TargetPath: "/mnt/per-alloc/" + id + "/vol/w-snmw-fs"})
				}
				must := func(err error) {
					if err != nil {
						b.Fatal(err)
					}
				}
				pub("a1", publishPublishing)
				must(s.save(rec))
				sr.Stage = stageStaged
				must(s.note(rec))
				pub("a1", publishPublished)
				must(s.note(rec))
				pub("a2", publishPublishing)
				must(s.save(rec))
				pub("a2", publishPublished)
				must(s.note(rec))
				pub("a2", publishUnpublishing)
				must(s.save(rec))
				sr.setPub(csi.ClaimWrite, "a2", nil)
				must(s.note(rec))
				pub("a1", publishUnpublishing)
				sr.Stage = stageUnstaging
				must(s.save(rec))
				must(s.drop("default", rec.VolumeID, false))
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/lifecycle")
			b.ReportMetric(float64(s.fileSyncs.Load()+s.dirSyncs.Load())/float64(b.N), "syncs/lifecycle")
		})
	}
}

// BenchmarkStore_NeighbourSync measures what the store's writes in
// place cost the other writers of the file system: the fsync of a
// neighbour's file (the plugin syncing its state, say), timed after a
// store write, against the same fsync without one, interleaved in one
// run. A change that moves a file's timestamps dirties its inode, and
// on ext4 the neighbour's next fsync is then slower (about 1.5 times
// here, on ext4 without a journal). Two kinds of write are timed:
//
//   - a write by a store that has written before (neighbour-sync-vs-alone):
//     a write(2) would move the file's mtime each time; the store
//     writes through a mapping, which moves it only when a clean page
//     is first dirtied;
//   - the first write of a store just opened on the same directory
//     (fresh-neighbour-sync-vs-alone), as after an agent's restart, or
//     in each plugintest run, which builds a Mounter of its own: its
//     new mapping's first write to a page moves the mtime. The store
//     never reads the file's timestamps (statx without them, where
//     fstat would read them), so the kernel stamps that change with
//     its coarse clock, which moves once per tick; since Linux 6.13 a
//     read of the timestamps makes the next change fine-grained, so it
//     always moves them and dirties the inode.
//
// Metrics: the two ratios (1 means the store's writes cost the
// neighbour nothing) and the three medians. On tmpfs, where fsync does
// nothing, the figures say nothing.
func BenchmarkStore_NeighbourSync(b *testing.B) {
	dir := b.TempDir()
	s := openStore(b, filepath.Join(dir, "state"), false)
	if err := s.save(testRecord("first", 4)); err != nil {
		b.Fatal(err)
	}
	// The fresh stores' directory, with the volume's file in it.
	freshDir := filepath.Join(dir, "fresh")
	f := openStore(b, freshDir, false)
	if err := f.save(testRecord("first", 4)); err != nil {
		b.Fatal(err)
	}
	closeAll(f)
	neighbour, err := os.Create(filepath.Join(dir, "neighbour"))
	if err != nil {
		b.Fatal(err)
	}
	defer neighbour.Close()
	recs := [2]*volumeRecord{testRecord("a", 4), testRecord("b", 4)}
	page := make([]byte, 512)
	timedSync := func() float64 {
		if _, err := neighbour.WriteAt(page, 0); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if err := neighbour.Sync(); err != nil {
			b.Fatal(err)
		}
		return float64(time.Since(start))
	}
	var after, fresh, alone []float64
	for i := 0; b.Loop(); i++ {
		if err := s.note(recs[i%2]); err != nil {
			b.Fatal(err)
		}
		after = append(after, timedSync())
		f, _ := reload(b, freshDir, false)
		if err := f.note(recs[i%2]); err != nil {
			b.Fatal(err)
		}
		fresh = append(fresh, timedSync())
		closeAll(f)
		alone = append(alone, timedSync())
	}
	a, fr, n := medianOf(after), medianOf(fresh), medianOf(alone)
	b.ReportMetric(a/n, "neighbour-sync-vs-alone")
	b.ReportMetric(fr/n, "fresh-neighbour-sync-vs-alone")
	b.ReportMetric(a, "after-write-ns")
	b.ReportMetric(fr, "after-fresh-write-ns")
	b.ReportMetric(n, "alone-ns")
}

// closeAll closes the files s keeps open, as the runtime does for a
// store that is dropped.
func closeAll(s *store) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range s.vols {
		if v.file != nil {
			v.file.closeFD()
		}
	}
	for _, f := range s.free {
		f.closeFD()
	}
}

func medianOf(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
