package mounter

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

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

// fileSlots decodes both slots of the file; an invalid slot is "".
func fileSlots(t *rapid.T, p string) (int, [2]string, [2]uint64) {
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("read %s: %v", p, err)
	}
	size := len(data) / 2
	var recs [2]string
	var gens [2]uint64
	for i := range 2 {
		if gen, rec, err := decodeSlot(data[i*size : (i+1)*size]); err == nil {
			recs[i], gens[i] = string(rec), gen
		}
	}
	return size, recs, gens
}

func marshalled(t *rapid.T, rec *volumeRecord) string {
	rec.Version = formatVersion
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestStore_Slots_Property runs random sequences of saves and notes,
// with records of random sizes (some outgrowing the slots), reloads and
// removals, and checks after each step what a crash at that moment
// could leave:
//
//   - the newest valid slot holds the last record written (what a
//     restarted agent reads: the page cache);
//   - the last saved record is still whole in a slot until the next
//     save (what an OS crash falls back to when later writes are lost
//     or torn); with NoSync, the record of the write before the last;
//   - generations only grow.
func TestStore_Slots_Property(t *testing.T) {
	base := t.TempDir()
	rapid.Check(t, func(t *rapid.T) {
		noSync := rapid.Bool().Draw(t, "noSync")
		dir, err := os.MkdirTemp(base, "state")
		if err != nil {
			t.Fatal(err)
		}
		newS := func() *store {
			s, err := newStore(dir, !noSync, hclog.NewNullLogger())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.load(); err != nil {
				t.Fatalf("load: %v", err)
			}
			return s
		}
		s := newS()
		p := s.path("default", "vol1")
		var last, durable, previous string // records as written
		var lastGen uint64
		exists := false
		for i := range rapid.IntRange(1, 16).Draw(t, "steps") {
			op := rapid.SampledFrom([]string{"save", "save", "note", "note", "reload", "remove"}).Draw(t, "op")
			switch op {
			case "reload":
				s = newS()
				continue
			case "remove":
				if err := s.remove("default", "vol1"); err != nil {
					t.Fatal(err)
				}
				// A new file starts its generations again.
				last, durable, previous, exists, lastGen = "", "", "", false, 0
				continue
			}
			rec := testRecord(fmt.Sprintf("w%d", i), rapid.IntRange(1, 60).Draw(t, "pubs"))
			want := marshalled(t, rec.clone())
			var before []byte
			if exists {
				before, _ = os.ReadFile(p)
			}
			var err error
			if op == "save" {
				err = s.save(rec)
			} else {
				err = s.note(rec)
			}
			if err != nil {
				t.Fatalf("%s: %v", op, err)
			}
			if !exists && op == "note" {
				if _, err := os.Stat(p); !os.IsNotExist(err) {
					t.Fatalf("a note created the file: %v", err)
				}
				continue
			}
			after, _ := os.ReadFile(p)
			wrote := string(before) != string(after)
			if op == "save" && !wrote {
				t.Fatalf("a save wrote nothing")
			}
			if wrote {
				previous, last = last, want
				if op == "save" || noSync {
					durable = want
				}
				exists = true
			}
			_, recs, gens := fileSlots(t, p)
			n := 0
			if gens[1] > gens[0] {
				n = 1
			}
			if recs[n] != last {
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
			if keep != "" && recs[0] != keep && recs[1] != keep && len(after) == len(before) {
				t.Fatalf("after %s: the record that must survive a crash is in no slot:\nwant %q\nslots %q", op, keep, recs)
			}
		}
	})
}

// TestStore_Unsure: a file read at New with syncing on may hold an
// unsynced newest record; notes skip it, and the first save syncs the
// file before writing the other slot.
func TestStore_Unsure(t *testing.T) {
	dir := t.TempDir()
	s, err := newStore(dir, true, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.save(testRecord("a", 1)); err != nil {
		t.Fatal(err)
	}
	if err := s.note(testRecord("b", 1)); err != nil {
		t.Fatal(err)
	}
	p := s.path("default", "vol1")
	before, _ := os.ReadFile(p)

	s2, err := newStore(dir, true, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	recs, err := s2.load()
	if err != nil {
		t.Fatal(err)
	}
	if rec := recs[volKey{"default", "vol1"}]; rec == nil || rec.Stages[testStage].Writers["b-alloc-0000"] == nil {
		t.Fatalf("load read %+v, want the noted record", rec)
	}
	if err := s2.note(testRecord("c", 1)); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(p); string(after) != string(before) {
		t.Fatal("a note after load wrote the file")
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
	if filepath.Base(p) != "vol1.state" {
		t.Errorf("path %s", p)
	}
}
