package mounter_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/csikit/csikit/mounter"
)

// The tests below build and read version 3 files by the layout that
// doc.go describes, with code of their own, so that they check the
// documented format rather than the package's encoder against itself.

// slot is one slot of a version 3 file as a test writes it.
type slot struct {
	gen     uint64
	record  string
	version uint32 // 0 means 3
	size    uint32 // slot size in the header; 0 means the file's
	magic   string // "" means "csikitMS"
	badCRC  bool
	length  int // record length in the header; 0 means len(record)
}

// v3File lays out two slots of slotSize bytes; a nil slot is left zero.
func v3File(slotSize int, slots [2]*slot) []byte {
	out := make([]byte, 2*slotSize)
	for i, s := range slots {
		if s == nil {
			continue
		}
		b := out[i*slotSize : (i+1)*slotSize]
		magic, version, size, length := s.magic, s.version, s.size, uint32(len(s.record))
		if magic == "" {
			magic = "csikitMS"
		}
		if version == 0 {
			version = 3
		}
		if size == 0 {
			size = uint32(slotSize)
		}
		if s.length != 0 {
			length = uint32(s.length)
		}
		copy(b, magic)
		binary.LittleEndian.PutUint32(b[8:], version)
		binary.LittleEndian.PutUint32(b[12:], size)
		binary.LittleEndian.PutUint64(b[16:], s.gen)
		binary.LittleEndian.PutUint32(b[24:], length)
		copy(b[32:], s.record)
		tab := crc32.MakeTable(crc32.Castagnoli)
		sum := crc32.Update(crc32.Checksum(b[:28], tab), tab, []byte(s.record))
		if s.badCRC {
			sum++
		}
		binary.LittleEndian.PutUint32(b[28:], sum)
	}
	return out
}

// slotView is what a test reads back from one slot.
type slotView struct {
	valid  bool
	gen    uint64
	record string
}

// readV3 reads a version 3 file's slots.
func readV3(t testing.TB, p string) (slotSize int, slots [2]slotView) {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("read state file: %v", err)
	}
	if len(data) < 8192 || len(data)%8192 != 0 {
		t.Fatalf("state file %s is %d bytes: not two slots of a multiple of 4096", p, len(data))
	}
	slotSize = len(data) / 2
	tab := crc32.MakeTable(crc32.Castagnoli)
	for i := range 2 {
		b := data[i*slotSize : (i+1)*slotSize]
		n := int(binary.LittleEndian.Uint32(b[24:]))
		if string(b[:8]) != "csikitMS" || binary.LittleEndian.Uint32(b[8:]) != 3 ||
			int(binary.LittleEndian.Uint32(b[12:])) != slotSize || 32+n > slotSize {
			continue
		}
		rec := b[32 : 32+n]
		if crc32.Update(crc32.Checksum(b[:28], tab), tab, rec) != binary.LittleEndian.Uint32(b[28:]) {
			continue
		}
		slots[i] = slotView{valid: true, gen: binary.LittleEndian.Uint64(b[16:]), record: string(rec)}
	}
	return slotSize, slots
}

// newest returns the valid slot with the higher generation, or -1.
func newest(slots [2]slotView) int {
	switch {
	case slots[0].valid && (!slots[1].valid || slots[0].gen > slots[1].gen):
		return 0
	case slots[1].valid:
		return 1
	}
	return -1
}

// recordFor is a valid version 3 record of volume vol1 in which the
// given allocation is published.
func recordFor(alloc string) string {
	return `{"Version":3,"Namespace":"default","VolumeID":"vol1","ExternalID":"ext","PluginID":"p",` +
		`"Stages":{"snw-fs":{"Stage":"staged","StagingPath":"/mnt/staging/default/vol1/snw-fs",` +
		`"Writers":{"` + alloc + `":{"State":"published","TargetPath":"/mnt/per-alloc/` + alloc + `/vol1/w-snw-fs"}}}}}`
}

func newOn(t *testing.T, state string) (*mounter.Mounter, error) {
	t.Helper()
	return mounter.New(mounter.Config{Root: filepath.Join(t.TempDir(), "mnt"), StateDir: state, Plugins: &registry{id: testPlugin}})
}

// TestNew_StateV3_Slots: a reader takes the valid slot with the higher
// generation, whatever happened to the other one.
func TestNew_StateV3_Slots(t *testing.T) {
	a1, a2 := recordFor("a1"), recordFor("a2")
	for _, tc := range []struct {
		name     string
		slotSize int
		slots    [2]*slot
		want     string // the allocation whose record wins
	}{
		{name: "slot 0 only", slotSize: 4096, slots: [2]*slot{{gen: 1, record: a1}, nil}, want: "a1"},
		{name: "slot 1 only", slotSize: 4096, slots: [2]*slot{nil, {gen: 7, record: a2}}, want: "a2"},
		{name: "slot 1 newer", slotSize: 4096, slots: [2]*slot{{gen: 4, record: a1}, {gen: 5, record: a2}}, want: "a2"},
		{name: "slot 0 newer", slotSize: 4096, slots: [2]*slot{{gen: 6, record: a1}, {gen: 5, record: a2}}, want: "a1"},
		{name: "newer slot torn", slotSize: 4096, slots: [2]*slot{{gen: 4, record: a1}, {gen: 5, record: a2, badCRC: true}}, want: "a1"},
		{name: "newer slot 0 torn", slotSize: 4096, slots: [2]*slot{{gen: 6, record: a1, badCRC: true}, {gen: 5, record: a2}}, want: "a2"},
		{name: "slot 0 header lost", slotSize: 4096, slots: [2]*slot{{gen: 6, record: a1, magic: "\x00\x00\x00\x00\x00\x00\x00\x00"}, {gen: 5, record: a2}}, want: "a2"},
		{name: "slot 1 of another slot size", slotSize: 4096, slots: [2]*slot{{gen: 4, record: a1}, {gen: 5, record: a2, size: 8192}}, want: "a1"},
		{name: "slot 1 of a future version", slotSize: 4096, slots: [2]*slot{{gen: 4, record: a1}, {gen: 5, record: a2, version: 4}}, want: "a1"},
		{name: "slot 1 length overflows", slotSize: 4096, slots: [2]*slot{{gen: 4, record: a1}, {gen: 5, record: a2, length: 5000}}, want: "a1"},
		{name: "slot 1 generation 0", slotSize: 4096, slots: [2]*slot{{gen: 4, record: a1}, {gen: 0, record: a2}}, want: "a1"},
		{name: "generations at the top of the range", slotSize: 4096, slots: [2]*slot{{gen: math.MaxUint64, record: a1}, {gen: math.MaxUint64 - 1, record: a2}}, want: "a1"},
		{name: "generations differing in the high bit", slotSize: 4096, slots: [2]*slot{{gen: 1 << 63, record: a1}, {gen: 1<<63 - 1, record: a2}}, want: "a1"},
		{name: "larger slots", slotSize: 16384, slots: [2]*slot{{gen: 2, record: a1}, {gen: 3, record: a2}}, want: "a2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := t.TempDir()
			p := filepath.Join(state, "records", "1.state")
			content := v3File(tc.slotSize, tc.slots)
			writeState(t, p, string(content))
			m, err := newOn(t, state)
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range []string{"a1", "a2"} {
				if has, err := m.HasMount(context.Background(), "default", "vol1", a); err != nil || has != (a == tc.want) {
					t.Errorf("HasMount(%s) = %v, %v; want %v", a, has, err, a == tc.want)
				}
			}
			if data, _ := os.ReadFile(p); string(data) != string(content) {
				t.Errorf("loading changed the file")
			}
		})
	}
}

// TestNew_StateV3_Corrupt: a version 3 file in which no slot holds a
// valid record, or whose chosen record does not validate, stops New
// with ErrCorruptState and is left as it is. A record whose checksum
// holds but whose content is wrong is never passed over for the older
// slot: that is not a torn write.
func TestNew_StateV3_Corrupt(t *testing.T) {
	a1 := recordFor("a1")
	good := v3File(4096, [2]*slot{{gen: 1, record: a1}, nil})
	for _, tc := range []struct {
		name, file string
		content    []byte
		reason     string // part of the error, if set
	}{
		{name: "both slots torn", content: v3File(4096, [2]*slot{{gen: 1, record: a1, badCRC: true}, {gen: 2, record: a1, badCRC: true}}), reason: "no valid slot"},
		{name: "both slots zero", content: make([]byte, 8192), reason: "no valid slot"},
		{name: "wrong magic", content: v3File(4096, [2]*slot{{gen: 1, record: a1, magic: "csikitXX"}, {gen: 2, record: a1, magic: "CSIKITMS"}}), reason: "no slot header"},
		{name: "JSON in a .state file", content: []byte(strings.Replace(a1, `"Version":3`, `"Version":2`, 1)), reason: "bytes long"},
		{name: "empty file", content: nil, reason: "0 bytes long"},
		{name: "short file", content: good[:100], reason: "100 bytes long"},
		{name: "one slot only", content: good[:4096], reason: "4096 bytes long"},
		{name: "odd size", content: append(append([]byte{}, good...), 0), reason: "8193 bytes long"},
		{name: "slots not a multiple of 4096", content: v3File(6144, [2]*slot{{gen: 1, record: a1}, nil}), reason: "12288 bytes long"},
		{name: "wrong slot size", content: v3File(8192, [2]*slot{{gen: 1, record: a1, size: 4096}, {gen: 2, record: a1, size: 4096}}), reason: "4096-byte slots"},
		{name: "future version", content: v3File(4096, [2]*slot{{gen: 1, record: a1, version: 4}, nil}), reason: "format version 4"},
		{name: "same generation twice", content: v3File(4096, [2]*slot{{gen: 3, record: a1}, {gen: 3, record: recordFor("a2")}}), reason: "two records of generation 3"},
		{name: "newest record not JSON", content: v3File(4096, [2]*slot{{gen: 1, record: a1}, {gen: 2, record: `{"Version":3,`}}), reason: "slot 1 (generation 2)"},
		{name: "newest record unknown field", content: v3File(4096, [2]*slot{{gen: 1, record: a1}, {gen: 2, record: strings.Replace(a1, `"PluginID":"p"`, `"PluginID":"p","Extra":1`, 1)}})},
		{name: "newest record with a bad volume ID", content: v3File(4096, [2]*slot{{gen: 2, record: strings.Replace(a1, `"VolumeID":"vol1"`, `"VolumeID":"../vol1"`, 1)}, {gen: 1, record: a1}}), reason: "slot 0 (generation 2)"},
		{name: "record with a bad namespace", content: v3File(4096, [2]*slot{{gen: 1, record: strings.Replace(a1, `"Namespace":"default"`, `"Namespace":"a/b"`, 1)}, nil})},
		{name: "version 2 record in a slot", content: v3File(4096, [2]*slot{{gen: 1, record: strings.Replace(a1, `"Version":3`, `"Version":2`, 1)}, nil}), reason: "format version 2"},
		{name: "empty record", content: v3File(4096, [2]*slot{{gen: 1, record: `{"Version":3,"Namespace":"default","VolumeID":"vol1","ExternalID":"ext","PluginID":"p","Stages":{}}`}, nil}), reason: "tracks no stage"},
		{name: "bad target in the record", content: v3File(4096, [2]*slot{{gen: 1, record: strings.Replace(a1, `"/mnt/per-alloc/a1/vol1/w-snw-fs"`, `"../x"`, 1)}, nil})},
		{name: "file name not a number", file: "vol1.state", content: good, reason: "positive number"},
		{name: "file name with a leading zero", file: "01.state", content: good},
		{name: "file number 0", file: "0.state", content: good},
		{name: "directory as record", file: "1.state/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := t.TempDir()
			file := tc.file
			if file == "" {
				file = "1.state"
			}
			p := filepath.Join(state, "records", file)
			if strings.HasSuffix(file, "/") {
				if err := os.MkdirAll(p, 0o700); err != nil {
					t.Fatal(err)
				}
			} else {
				writeState(t, p, string(tc.content))
			}
			requireStateRefused(t, state, p, string(tc.content), strings.HasSuffix(file, "/"), tc.reason)
		})
	}
}

// TestMounter_StateFile_SlotWrites follows a volume's file through a
// lifecycle: the free file New made (an empty record of generation 1)
// takes the first mount's intents, and every write goes in place, each
// with the next generation into the slot that does not hold the newest
// durable record, until the last unmount frees the file (an empty
// record) again; the next volume takes the free file.
func TestMounter_StateFile_SlotWrites(t *testing.T) {
	e := newEnv(t, stageCaps)
	e.volume("vol1")
	e.volume("vol2")
	p := filepath.Join(e.state, "records", "1.state")
	// The hook reads the file as each plugin call arrives: what a crash
	// at that moment leaves.
	type seen struct {
		method string
		slots  [2]slotView
	}
	var log []seen
	for _, method := range []string{"NodeStageVolume", "NodePublishVolume", "NodeUnpublishVolume", "NodeUnstageVolume"} {
		e.p.SetHook(method, func(_ context.Context, method string, _ any) error {
			_, slots := readV3(t, p)
			log = append(log, seen{method, slots})
			return nil
		})
	}
	m := e.mounter()
	mustMount(t, m, mountReq("vol1", "a1"))
	mustMount(t, m, mountReq("vol1", "a2"))
	mustUnmount(t, m, unmountReq("vol1", "a2"))
	mustUnmount(t, m, unmountReq("vol1", "a1"))
	if left := stateFiles(t, e.state); len(left) != 0 {
		t.Fatalf("records left: %v", left)
	}
	_, slots := readV3(t, p)
	if n := newest(slots); n < 0 || slots[n].record != "" || slots[n].gen != 10 {
		t.Fatalf("after the last unmount the file holds %+v, want an empty record of generation 10", slots)
	}

	want := []struct {
		method string
		gen    uint64
		has    []string // in the newest record
	}{
		// One write before the stage holds both intents.
		{"NodeStageVolume", 2, []string{`"Stage":"staging"`, `"a1":{"State":"publishing"`}},
		// The stage's success was noted (generation 3).
		{"NodePublishVolume", 3, []string{`"Stage":"staged"`, `"a1":{"State":"publishing"`}},
		// The mount's success (4), then a2's intent (5).
		{"NodePublishVolume", 5, []string{`"a1":{"State":"published"`, `"a2":{"State":"publishing"`}},
		// a2's success (6), then its teardown intent (7).
		{"NodeUnpublishVolume", 7, []string{`"a2":{"State":"unpublishing"`}},
		// a2 gone (8), then a1's teardown intent (9).
		{"NodeUnpublishVolume", 9, []string{`"Stage":"unstaging"`, `"a1":{"State":"unpublishing"`}},
		{"NodeUnstageVolume", 9, []string{`"Stage":"unstaging"`}},
		// vol2 takes the free file: its intents go in place (11).
		{"NodeStageVolume", 11, []string{`"VolumeID":"vol2"`, `"Stage":"staging"`, `"b1":{"State":"publishing"`}},
	}
	mustMount(t, m, mountReq("vol2", "b1"))
	if got := files(t, filepath.Join(e.state, "records")); len(got) != 1 {
		t.Errorf("files of the pool: %v, want vol2 in the freed one", got)
	}
	if len(log) < len(want) {
		t.Fatalf("%d plugin calls seen, want %d", len(log), len(want))
	}
	for i, w := range want {
		got := log[i]
		n := newest(got.slots)
		if got.method != w.method || n < 0 || got.slots[n].gen != w.gen {
			t.Errorf("call %d: %s with newest record %+v, want %s with generation %d", i, got.method, got.slots, w.method, w.gen)
			continue
		}
		for _, s := range w.has {
			if !strings.Contains(got.slots[n].record, s) {
				t.Errorf("call %d (%s): newest record %s lacks %s", i, got.method, got.slots[n].record, s)
			}
		}
	}
	// The synced records before each intent stay whole beside the next
	// writes: when a2's intent (5) is read, the first mount's intent (2)
	// must be in the other slot, and so on; vol2's intent went over the
	// note that freed the file, beside vol1's last synced record.
	for _, c := range []struct {
		call    int
		durable uint64
	}{{2, 2}, {3, 5}, {4, 7}, {6, 9}} {
		other := log[c.call].slots[1-newest(log[c.call].slots)]
		if !other.valid || other.gen != c.durable {
			t.Errorf("call %d: the other slot holds %+v, want the synced record of generation %d", c.call, other, c.durable)
		}
	}
	mustUnmount(t, m, unmountReq("vol2", "b1"))
	e.p.RequireNoViolations(t)
}

// TestMounter_StateFile_TornWrite: a write cut short spoils the slot it
// was writing; a restarted agent reads the record before it, and its
// next write goes to the spoiled slot, not over that record.
func TestMounter_StateFile_TornWrite(t *testing.T) {
	e := newEnv(t, stageCaps)
	e.volume("vol1")
	m := e.mounter()
	mustMount(t, m, mountReq("vol1", "a1"))
	mustMount(t, m, mountReq("vol1", "a2"))
	p := poolFile(t, e.state, "vol1")
	size, slots := readV3(t, p)
	n := newest(slots)
	if n < 0 || !strings.Contains(slots[n].record, `"a2":{"State":"published"`) {
		t.Fatalf("newest record %+v, want a2 published", slots)
	}
	// Tear the newest slot: as if the write of a2's success had been cut
	// short.
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	data[n*size+100] ^= 0xff
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	older := slots[1-n]
	if !older.valid || !strings.Contains(older.record, `"a2":{"State":"publishing"`) {
		t.Fatalf("the other slot holds %+v, want a2's synced intent", older)
	}

	m2 := e.mounter()
	for _, a := range []string{"a1", "a2"} {
		if has, err := m2.HasMount(context.Background(), testNS, "vol1", a); err != nil || !has {
			t.Fatalf("HasMount(%s) after the torn write = %v, %v", a, has, err)
		}
	}
	e.p.ResetCalls()
	var during [2]slotView
	e.p.SetHook("NodeUnpublishVolume", func(context.Context, string, any) error {
		_, during = readV3(t, p)
		return nil
	})
	mustUnmount(t, m2, unmountReq("vol1", "a2"))
	requireCounts(t, e.p, [4]int{0, 0, 1, 0}, "a2's unmount")
	// When the unpublish was sent, its intent was in the spoiled slot
	// and the record read at start still whole in the other.
	if !during[1-n].valid || during[1-n].record != older.record {
		t.Errorf("the record read at start was overwritten: %+v", during[1-n])
	}
	if !during[n].valid || during[n].gen <= older.gen || !strings.Contains(during[n].record, `"a2":{"State":"unpublishing"`) {
		t.Errorf("the spoiled slot holds %+v, want a2's teardown intent with a newer generation", during[n])
	}
	mustUnmount(t, m2, unmountReq("vol1", "a1"))
	e.p.RequireNoViolations(t)
}

// TestMounter_StateFile_Grows: a record that outgrows its slots is
// written to a new file with larger slots, which a restarted agent
// reads.
func TestMounter_StateFile_Grows(t *testing.T) {
	e := newEnv(t, stageCaps)
	ext := e.volume("vol1")
	p := filepath.Join(e.state, "records", "1.state")
	m := e.mounter()
	const allocs = 60
	sizes := map[int]bool{}
	for i := range allocs {
		mustMount(t, m, mountReq("vol1", fmt.Sprintf("alloc-with-a-longish-name-%03d", i)))
		size, _ := readV3(t, p)
		sizes[size] = true
	}
	if len(sizes) < 2 {
		t.Fatalf("slot sizes seen %v: the file never grew", sizes)
	}
	if left := files(t, filepath.Dir(p)); len(left) != 1 {
		t.Errorf("files beside the record: %v", left)
	}
	m2 := e.mounter()
	for i := range allocs {
		a := fmt.Sprintf("alloc-with-a-longish-name-%03d", i)
		if has, err := m2.HasMount(context.Background(), testNS, "vol1", a); err != nil || !has {
			t.Fatalf("HasMount(%s) after a restart = %v, %v", a, has, err)
		}
	}
	for i := range allocs {
		mustUnmount(t, m2, unmountReq("vol1", fmt.Sprintf("alloc-with-a-longish-name-%03d", i)))
	}
	requireCounts(t, e.p, [4]int{1, allocs, allocs, 1}, "after every allocation left")
	if vs, _ := e.p.Volume(ext); vs.InUse() {
		t.Errorf("volume still in use: %+v", vs)
	}
	requireNoStateLeft(t, e.state)
	e.p.RequireNoViolations(t)
}

// TestMounter_StateFile_Removed: a state file removed or replaced
// behind the Mounter's back is written whole again, or in the file now
// at its name, by the volume's next intent: never only to the file the
// Mounter kept open from its earlier writes.
func TestMounter_StateFile_Removed(t *testing.T) {
	for _, tc := range []struct {
		name   string
		tamper func(t *testing.T, p string)
	}{
		{"removed", func(t *testing.T, p string) {
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
		}},
		{"replaced by a copy", func(t *testing.T, p string) {
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p+".copy", data, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(p+".copy", p); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, stageCaps)
			e.volume("vol1")
			m := e.mounter()
			mustMount(t, m, mountReq("vol1", "a1"))
			tc.tamper(t, poolFile(t, e.state, "vol1"))
			mustMount(t, m, mountReq("vol1", "a2"))
			m2 := e.mounter()
			for _, a := range []string{"a1", "a2"} {
				if has, err := m2.HasMount(context.Background(), testNS, "vol1", a); err != nil || !has {
					t.Errorf("HasMount(%s) from the file at the record's name = %v, %v", a, has, err)
				}
			}
			mustUnmount(t, m, unmountReq("vol1", "a1"))
			mustUnmount(t, m, unmountReq("vol1", "a2"))
			requireNoStateLeft(t, e.state)
			e.p.RequireNoViolations(t)
		})
	}

	// A freed file keeps its descriptor for the next volume; removed
	// meanwhile, it is written again at its name by that volume.
	t.Run("removed while free", func(t *testing.T) {
		e := newEnv(t, stageCaps)
		e.volume("vol1")
		e.volume("vol2")
		m := e.mounter()
		mustMount(t, m, mountReq("vol1", "a1"))
		p := poolFile(t, e.state, "vol1")
		mustUnmount(t, m, unmountReq("vol1", "a1"))
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
		mustMount(t, m, mountReq("vol2", "b1"))
		if has, err := e.mounter().HasMount(context.Background(), testNS, "vol2", "b1"); err != nil || !has {
			t.Errorf("HasMount(b1) from the file at the record's name = %v, %v", has, err)
		}
		mustUnmount(t, m, unmountReq("vol2", "b1"))
		requireNoStateLeft(t, e.state)
		e.p.RequireNoViolations(t)
	})
}

// TestNew_StateVersion2_Replaced: a version 2 file is read, and replaced
// by a record in the pool with the volume's next write; a version 2 file
// left beside a record of the volume in the pool (its removal lost in a
// crash) is the older record: the pool's wins and the other is removed.
func TestNew_StateVersion2_Replaced(t *testing.T) {
	v2 := strings.Replace(recordFor("a1"), `"Version":3`, `"Version":2`, 1)
	t.Run("replaced on the next write", func(t *testing.T) {
		e := newEnv(t, stageCaps)
		e.volume("vol1")
		dir := filepath.Join(e.state, "volumes", testNS)
		writeState(t, filepath.Join(dir, "vol1.json"),
			// Staging and publishing, so that the fake need not have
			// staged it: the next mount stages again.
			strings.NewReplacer(`"ExternalID":"ext"`, `"ExternalID":"ext-vol1"`, `"PluginID":"p"`, `"PluginID":"`+testPlugin+`"`, "/mnt/", e.root+"/",
				`"snw-fs"`, `"snmw-fs"`, `"staged"`, `"staging"`, `"published"`, `"publishing"`).Replace(v2))
		m := e.mounter()
		mustMount(t, m, mountReq("vol1", "a2"))
		if got := stateFiles(t, e.state); len(got) != 1 || got[0] != "records/1.state: default/vol1" {
			t.Fatalf("records %v, want only vol1's in the pool", got)
		}
		m2 := e.mounter()
		for _, a := range []string{"a1", "a2"} {
			if has, err := m2.HasMount(context.Background(), testNS, "vol1", a); err != nil || !has {
				t.Errorf("HasMount(%s) from the version 3 file = %v, %v", a, has, err)
			}
		}
	})
	t.Run("version 3 file beside it wins", func(t *testing.T) {
		state := t.TempDir()
		dir := filepath.Join(state, "volumes", "default")
		writeState(t, filepath.Join(dir, "vol1.json"), v2)
		writeState(t, filepath.Join(state, "records", "1.state"), string(v3File(4096, [2]*slot{{gen: 1, record: recordFor("a2")}, nil})))
		m, err := newOn(t, state)
		if err != nil {
			t.Fatal(err)
		}
		if has, _ := m.HasMount(context.Background(), "default", "vol1", "a1"); has {
			t.Error("the version 2 record was read over the version 3 one")
		}
		if has, _ := m.HasMount(context.Background(), "default", "vol1", "a2"); !has {
			t.Error("the version 3 record was not read")
		}
		if got := stateFiles(t, state); len(got) != 1 || got[0] != "records/1.state: default/vol1" {
			t.Errorf("records %v, want only vol1's in the pool", got)
		}
	})
	t.Run("corrupt version 2 file beside a version 3 one", func(t *testing.T) {
		state := t.TempDir()
		dir := filepath.Join(state, "volumes", "default")
		writeState(t, filepath.Join(dir, "vol1.json"), "{")
		writeState(t, filepath.Join(state, "records", "1.state"), string(v3File(4096, [2]*slot{{gen: 1, record: recordFor("a2")}, nil})))
		if _, err := newOn(t, state); err != nil {
			t.Fatalf("New = %v: a superseded file is not read", err)
		}
	})
}

// TestMounter_Stats_Syncs counts the syncs of each step of a lifecycle
// (the default, syncing configuration): every intent, in the free file
// New made or in one a volume freed, is one fdatasync of a write in
// place, and a volume that finds no free file creates one for the pool
// (a file sync and a directory sync); successes and the last unmount's
// release of the file are not synced.
func TestMounter_Stats_Syncs(t *testing.T) {
	e := newEnv(t, stageCaps)
	for _, v := range []string{"vol1", "vol2", "vol3"} {
		e.volume(v)
	}
	m := e.mounter()
	type syncs struct{ file, dir uint64 }
	for _, step := range []struct {
		name string
		do   func()
		want syncs
	}{
		{"first mount", func() { mustMount(t, m, mountReq("vol1", "a1")) }, syncs{1, 0}},
		{"second mount", func() { mustMount(t, m, mountReq("vol1", "a2")) }, syncs{1, 0}},
		{"repeated mount", func() { mustMount(t, m, mountReq("vol1", "a2")) }, syncs{0, 0}},
		{"first unmount", func() { mustUnmount(t, m, unmountReq("vol1", "a2")) }, syncs{1, 0}},
		{"last unmount", func() { mustUnmount(t, m, unmountReq("vol1", "a1")) }, syncs{1, 0}},
		{"mount again, in the freed file", func() { mustMount(t, m, mountReq("vol1", "a3")) }, syncs{1, 0}},
		{"another volume, in the freed file", func() { mustMount(t, m, mountReq("vol2", "b1")) }, syncs{1, 1}},
		{"unmount again", func() { mustUnmount(t, m, unmountReq("vol1", "a3")) }, syncs{1, 0}},
		{"a third volume, in the freed file", func() { mustMount(t, m, mountReq("vol3", "c1")) }, syncs{1, 0}},
		{"unmount the others", func() {
			mustUnmount(t, m, unmountReq("vol2", "b1"))
			mustUnmount(t, m, unmountReq("vol3", "c1"))
		}, syncs{2, 0}},
	} {
		before := m.Stats()
		step.do()
		after := m.Stats()
		if got := (syncs{after.FileSyncs - before.FileSyncs, after.DirSyncs - before.DirSyncs}); got != step.want {
			t.Errorf("%s: %d file syncs and %d directory syncs, want %d and %d", step.name, got.file, got.dir, step.want.file, step.want.dir)
		}
	}
	e.p.RequireNoViolations(t)
}

// TestNew_StateV3_LeftoverTemp: a temporary file left by a creation that
// a crash cut short (its rename never happened) is removed, and the
// records read from the pool.
func TestNew_StateV3_LeftoverTemp(t *testing.T) {
	state := t.TempDir()
	dir := filepath.Join(state, "records")
	writeState(t, filepath.Join(dir, "1.state"), string(v3File(4096, [2]*slot{{gen: 1, record: recordFor("a1")}, nil})))
	writeState(t, filepath.Join(dir, "1.state.tmp"), string(v3File(8192, [2]*slot{{gen: 2, record: recordFor("a2")}, nil})[:5000]))
	writeState(t, filepath.Join(dir, "2.state.tmp"), "")
	m, err := newOn(t, state)
	if err != nil {
		t.Fatal(err)
	}
	if has, err := m.HasMount(context.Background(), "default", "vol1", "a1"); err != nil || !has {
		t.Errorf("HasMount(a1) = %v, %v", has, err)
	}
	// No temporary file is left; 2.state is the free file New adds to a
	// pool that has none.
	if got := files(t, dir); !slices.Equal(got, []string{"1.state", "2.state"}) {
		t.Errorf("files %v, want 1.state and 2.state", got)
	}
	if v := poolVolume(t, filepath.Join(dir, "2.state")); v != "" {
		t.Errorf("2.state holds %q, want a free file", v)
	}
}

// TestNew_Prepares: New creates the directories every mount works
// below, and keeps one free file in the pool, so that the first mount
// on a node creates neither; a second New on the same state adds none.
// When it cannot create the free file, New fails and says which file.
func TestNew_Prepares(t *testing.T) {
	dir := t.TempDir()
	root, state := filepath.Join(dir, "mnt"), filepath.Join(dir, "state")
	for range 2 {
		if _, err := mounter.New(mounter.Config{Root: root, StateDir: state, Plugins: &registry{id: testPlugin}}); err != nil {
			t.Fatal(err)
		}
		for _, d := range []string{"staging", "per-alloc"} {
			if fi, err := os.Stat(filepath.Join(root, d)); err != nil || !fi.IsDir() {
				t.Errorf("%s under the mount root: %v, want a directory", d, err)
			}
		}
		got := files(t, filepath.Join(state, "records"))
		if !slices.Equal(got, []string{"1.state"}) {
			t.Fatalf("files of the pool %v, want one", got)
		}
		if v := poolVolume(t, filepath.Join(state, "records", "1.state")); v != "" {
			t.Errorf("1.state holds %q, want a free file", v)
		}
	}

	t.Run("cannot create the free file", func(t *testing.T) {
		state := t.TempDir()
		// A directory where the new file's temporary name goes.
		if err := os.MkdirAll(filepath.Join(state, "records", "1.state.tmp", "x"), 0o700); err != nil {
			t.Fatal(err)
		}
		_, err := newOn(t, state)
		if err == nil || !strings.Contains(err.Error(), "1.state") {
			t.Fatalf("New = %v, want an error naming the free file it could not create", err)
		}
		if _, err := os.Stat(filepath.Join(state, "records", "1.state")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("1.state: %v, want nothing at the final name", err)
		}
	})
}

// TestNew_StateV3_Pool: files of the pool whose newest record is empty
// are free, and two files naming one volume (a release lost in an OS
// crash after the volume moved to another file) resolve by generation:
// the older file is free. Free files are taken, lowest number first,
// before the pool grows; at most 64 are kept.
func TestNew_StateV3_Pool(t *testing.T) {
	free := func(gen uint64) []byte {
		return v3File(4096, [2]*slot{{gen: gen}, {gen: gen - 1, record: recordFor("old")}})
	}
	for _, tc := range []struct {
		name    string
		files   map[string][]byte
		has     []string // allocations of vol1 tracked
		reuse   string   // the file the next volume takes
		maxLeft int      // files left after New, if set
		reason  string   // New fails with this, if set
	}{
		{name: "free file", files: map[string][]byte{"1.state": free(5)}, reuse: "1.state"},
		{name: "newer copy of a volume wins", files: map[string][]byte{
			"3.state": v3File(4096, [2]*slot{{gen: 7, record: recordFor("a1")}, nil}),
			"5.state": v3File(4096, [2]*slot{{gen: 9, record: recordFor("a2")}, {gen: 2}}),
		}, has: []string{"a2"}, reuse: "3.state"},
		{name: "newer copy in the lower file", files: map[string][]byte{
			"3.state": v3File(4096, [2]*slot{{gen: 17, record: recordFor("a1")}, nil}),
			"5.state": v3File(4096, [2]*slot{{gen: 9, record: recordFor("a2")}, nil}),
		}, has: []string{"a1"}, reuse: "5.state"},
		{name: "lowest free number first", files: map[string][]byte{
			"2.state": free(3), "7.state": free(4), "4.state": free(8),
		}, reuse: "2.state"},
		{name: "pool full: New adds a free file", files: map[string][]byte{
			"1.state": v3File(4096, [2]*slot{{gen: 7, record: recordFor("a1")}, nil}),
		}, has: []string{"a1"}, reuse: "2.state"},
		{name: "same generation twice", files: map[string][]byte{
			"1.state": v3File(4096, [2]*slot{{gen: 7, record: recordFor("a1")}, nil}),
			"2.state": v3File(4096, [2]*slot{{gen: 7, record: recordFor("a2")}, nil}),
		}, reason: "with generation 7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, stageCaps)
			e.volume("vol2")
			dir := filepath.Join(e.state, "records")
			for name, content := range tc.files {
				writeState(t, filepath.Join(dir, name), string(content))
			}
			m, err := mounter.New(mounter.Config{Root: e.root, StateDir: e.state, Plugins: e.reg})
			if tc.reason != "" {
				if !errors.Is(err, mounter.ErrCorruptState) || !strings.Contains(err.Error(), tc.reason) {
					t.Fatalf("New = %v, want ErrCorruptState saying %q", err, tc.reason)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range []string{"a1", "a2", "old"} {
				want := slices.Contains(tc.has, a)
				if has, err := m.HasMount(context.Background(), "default", "vol1", a); err != nil || has != want {
					t.Errorf("HasMount(%s) = %v, %v; want %v", a, has, err, want)
				}
			}
			mustMount(t, m, mountReq("vol2", "b1"))
			if got := poolFile(t, e.state, "vol2"); filepath.Base(got) != tc.reuse {
				t.Errorf("vol2 went to %s, want %s", filepath.Base(got), tc.reuse)
			}
			mustUnmount(t, m, unmountReq("vol2", "b1"))
			e.p.RequireNoViolations(t)
		})
	}

	t.Run("free files trimmed", func(t *testing.T) {
		state := t.TempDir()
		dir := filepath.Join(state, "records")
		writeState(t, filepath.Join(dir, "1.state"), string(v3File(4096, [2]*slot{{gen: 500, record: recordFor("a1")}, nil})))
		for i := 2; i <= 101; i++ {
			writeState(t, filepath.Join(dir, fmt.Sprintf("%d.state", i)), string(free(uint64(i))))
		}
		if _, err := newOn(t, state); err != nil {
			t.Fatal(err)
		}
		got := files(t, dir)
		if len(got) != 1+64 {
			t.Errorf("%d files left, want the record and 64 free ones", len(got))
		}
		for _, name := range []string{"1.state", "2.state", "65.state"} {
			if !slices.Contains(got, name) {
				t.Errorf("%s removed; the lowest numbers are kept", name)
			}
		}
		if slices.Contains(got, "66.state") {
			t.Error("66.state kept; the highest numbers go")
		}
	})
}
