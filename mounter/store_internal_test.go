package mounter

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
	bolt "go.etcd.io/bbolt"

	"github.com/csikit/csikit/csi"
)

// killChildEnv names the state directory of the child process of
// TestStore_KilledMidWrite.
const killChildEnv = "CSIKIT_TEST_KILLED_WRITER"

// killBaseEnv gives the child the first write number of its run, above
// every earlier run's.
const killBaseEnv = "CSIKIT_TEST_KILLED_WRITER_BASE"

// killNotesEnv says whether the child writes notes.
const killNotesEnv = "CSIKIT_TEST_KILLED_WRITER_NOTES"

// testRecord is a valid record of volume vol whose external ID carries
// n, so that a reader can tell which write it holds.
func testRecord(vol string, n int) *volumeRecord {
	var su StageUsage
	if err := su.UnmarshalText([]byte("snw-fs")); err != nil {
		panic(err)
	}
	allocs := map[string]*allocRecord{}
	// Records of varying size, so that pages split and free.
	for i := range n%7 + 1 {
		id := fmt.Sprintf("a%d", i)
		allocs[id] = &allocRecord{State: publishPublished, TargetPath: "/mnt/per-alloc/" + id + "/" + vol + "/w-snw-fs"}
	}
	return &volumeRecord{Namespace: "default", VolumeID: vol, ExternalID: "ext-" + strconv.Itoa(n), PluginID: "p",
		Stages: map[StageUsage]*stageRecord{su: {Stage: stageStaged, StagingPath: "/mnt/staging/default/" + vol + "/snw-fs", Writers: allocs}}}
}

// TestStore_KilledMidWrite kills a process that writes records from
// several goroutines at once (saves, and notes that remove a volume)
// at a random point of its writes, then opens the state again: the
// databases must open and pass bbolt's checks, every record must be
// valid, and every write the child reported committed must be there
// (or a later one of the same volume). Every other run has notes, and
// every other none, on the same state. 200 runs by default;
// CSIKIT_SOAK=1 makes it 1000.
func TestStore_KilledMidWrite(t *testing.T) {
	if dir := os.Getenv(killChildEnv); dir != "" {
		killedWriter(dir)
		return
	}
	runs := 200
	if os.Getenv("CSIKIT_SOAK") == "1" {
		runs = 1000
	}
	dir := t.TempDir()
	last := map[string]int{}    // volume -> the last write it reported committed
	held := map[string]string{} // volume -> what the database held after the last run
	for run := range runs {
		cmd := exec.Command(os.Args[0], "-test.run=^TestStore_KilledMidWrite$")
		cmd.Env = append(os.Environ(), killChildEnv+"="+dir, killBaseEnv+"="+strconv.Itoa(run*1_000_000), killNotesEnv+"="+strconv.FormatBool(run%2 == 0))
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		reported := map[string]bool{}
		sc := bufio.NewScanner(out)
		for i, kill := 0, 1+rand.IntN(300); sc.Scan(); i++ {
			if i == kill {
				_ = cmd.Process.Kill()
			}
			// After the kill, the reports still in the pipe are read
			// too: every commit but the one in flight is known.
			vol, n, _ := strings.Cut(sc.Text(), " ")
			last[vol], _ = strconv.Atoi(n)
			reported[vol] = true
		}
		_ = cmd.Wait()

		s, recs, err := openStore(dir, false, run%2 == 0, hclog.NewNullLogger())
		if err != nil {
			t.Fatalf("run %d: reopen after a kill: %v", run, err)
		}
		for vol, n := range last {
			got := "dropped"
			if rec := recs[volKey{"default", vol}]; rec != nil {
				got = rec.ExternalID
			}
			// The database holds the last reported write of the
			// volume, or the one in flight at the kill: the run's
			// first, if the run reported none.
			want, inFlight := writeState(n), writeState(n+1)
			if !reported[vol] {
				want, inFlight = held[vol], writeState(run*1_000_000+1)
			}
			if got != want && got != inFlight {
				t.Fatalf("run %d: volume %s holds %s, want %s or %s", run, vol, got, want, inFlight)
			}
			held[vol] = got
		}
		if err := s.close(); err != nil {
			t.Fatal(err)
		}
	}
}

// writeState is what the database holds for a volume after the
// child's write n: a drop every 11th write, else the record of write n.
func writeState(n int) string {
	if n%11 == 0 {
		return "dropped"
	}
	return "ext-" + strconv.Itoa(n)
}

// killedWriter is the child: it writes until it is killed, and reports
// each commit on stdout as "<volume> <n>".
func killedWriter(dir string) {
	s, _, err := openStore(dir, false, os.Getenv(killNotesEnv) == "true", hclog.NewNullLogger())
	if err != nil {
		panic(err)
	}
	base, _ := strconv.Atoi(os.Getenv(killBaseEnv))
	var mu sync.Mutex
	w := bufio.NewWriter(os.Stdout)
	report := func(vol string, n int) {
		mu.Lock()
		fmt.Fprintf(w, "%s %d\n", vol, n)
		_ = w.Flush()
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for g := range 4 {
		vol := fmt.Sprintf("vol%d", g)
		n := base
		wg.Go(func() {
			for {
				n++
				if writeState(n) == "dropped" {
					if err := s.note(volKey{"default", vol}, nil); err != nil {
						panic(err)
					}
					report(vol, n)
					continue
				}
				if err := s.save(volKey{"default", vol}, testRecord(vol, n)); err != nil {
					panic(err)
				}
				report(vol, n)
			}
		})
	}
	wg.Wait()
}

// A record's clone reads as the record does after a JSON round trip,
// and changing the clone, down to a publication, leaves the record as
// it was: saveTeardown changes a clone and keeps the record when the
// save fails.
func TestVolumeRecord_Clone(t *testing.T) {
	rec := testRecord("vol1", 3)
	var su StageUsage
	if err := su.UnmarshalText([]byte("mnro-fs")); err != nil {
		t.Fatal(err)
	}
	rec.Stages[su] = &stageRecord{Readers: map[string]*allocRecord{"r1": {State: publishPublished, TargetPath: "/mnt/per-alloc/r1/vol1/r-mnro-fs"}}, Writers: map[string]*allocRecord{}}
	data, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	want := new(volumeRecord)
	if err := json.Unmarshal(data, want); err != nil {
		t.Fatal(err)
	}
	c := rec.clone()
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("clone = %+v, want %+v", c, want)
	}
	for _, s := range c.Stages {
		s.Stage = stageUnstaging
		for _, a := range s.publications() {
			a.rec.State = publishUnpublishing
		}
		s.setPub(csi.ClaimWrite, "new", &allocRecord{State: publishPublishing})
	}
	if again, _ := json.Marshal(rec); string(again) != string(data) {
		t.Errorf("changing the clone changed the record:\n%s\nwas\n%s", again, data)
	}
	if (*volumeRecord)(nil).clone() != nil {
		t.Error("the clone of nil is not nil")
	}
}

// TestStore_FailedSaveKeepsNotes: a save whose write fails after it took
// the notes that mounter.db lacks gives them back, so that the next save
// writes them: otherwise mounter.db, all that an OS crash leaves, would
// keep a record that a note had already narrowed (here, removed). With
// another writer in flight the save goes through bbolt's Batch, which
// runs a failing fn a second time, alone: the second run must write the
// notes the first took, not the (now empty) pending set.
func TestStore_FailedSaveKeepsNotes(t *testing.T) {
	for _, batched := range []bool{false, true} {
		t.Run(fmt.Sprintf("batched=%v", batched), func(t *testing.T) {
			s, _, err := openStore(t.TempDir(), true, true, hclog.NewNullLogger())
			if err != nil {
				t.Fatal(err)
			}
			defer s.close()
			if s.notes == nil {
				t.Skip("no boot ID on this machine, so no notes")
			}
			a, b := volKey{"default", "a"}, volKey{"default", "b"}
			if err := s.save(a, testRecord("a", 1)); err != nil {
				t.Fatal(err)
			}
			if err := s.note(a, nil); err != nil { // a torn down: in the notes only
				t.Fatal(err)
			}
			// bbolt refuses the key, so the write fails after fn took the notes.
			huge := volKey{"default", strings.Repeat("x", bolt.MaxKeySize)}
			if batched {
				s.writers.Add(1) // another writer in flight
			}
			err = s.save(huge, testRecord("x", 1))
			if batched {
				s.writers.Add(-1)
			}
			if err == nil {
				t.Fatal("a save under a key bbolt refuses succeeded")
			}
			if err := s.save(b, testRecord("b", 1)); err != nil {
				t.Fatal(err)
			}
			err = s.db.View(func(tx *bolt.Tx) error {
				if v := tx.Bucket(volumesBucket).Get(a.bytes()); v != nil {
					t.Errorf("mounter.db still holds volume a after its removal was noted and a later save committed: %s", v)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}
