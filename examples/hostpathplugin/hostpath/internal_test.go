package hostpath

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestMountPoints_Parse(t *testing.T) {
	const info = `22 27 0:21 / /proc rw,relatime - proc proc rw
42 27 254:0 /tmp/a /tmp/with\040space rw,relatime - ext4 /dev/vda rw
43 27 254:0 /tmp/a /tmp/tab\011and\134backslash rw shared:1 - ext4 /dev/vda rw

44 27 254:0 /tmp/a /tmp/not\9escape rw - ext4 /dev/vda rw
`
	got, err := mountPoints(strings.NewReader(info))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/proc", "/tmp/with space", "/tmp/tab\tand\\backslash", `/tmp/not\9escape`}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("mountPoints = %q, want %q", got, want)
	}
}

func TestMountPoints_ShortLine(t *testing.T) {
	_, err := mountPoints(strings.NewReader("22 27 0:21 /\n"))
	if err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("want an error naming line 1, got %v", err)
	}
}

func TestUnescapeMountinfo(t *testing.T) {
	for in, want := range map[string]string{
		`plain`:       "plain",
		`\040`:        " ",
		`a\012b`:      "a\nb",
		`trailing\04`: `trailing\04`,
		`\477`:        `\477`, // above \377: not an escape the kernel writes
		`\\`:          `\\`,
	} {
		if got := unescapeMountinfo(in); got != want {
			t.Errorf("unescapeMountinfo(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestVolumeID_Format(t *testing.T) {
	for range 100 {
		if id := newVolumeID(); !validVolumeID(id) {
			t.Fatalf("newVolumeID made %q, which validVolumeID refuses", id)
		}
	}
	for _, bad := range []string{
		"", "vol-", "../../etc/passwd", "vol-../../../../../../../../../../etc",
		"vol-0000000000000000000000000000000g", "vol-0000000000000000000000000000000A",
		"vol-00000000000000000000000000000000/", "VOL-00000000000000000000000000000000",
		"vol-000000000000000000000000000000000",
	} {
		if validVolumeID(bad) {
			t.Errorf("validVolumeID(%q) = true, want false", bad)
		}
	}
}

func TestNodeFileStem_SafeName(t *testing.T) {
	for _, id := range []string{"node-1", "../../x", strings.Repeat("n", 256), "a/b"} {
		s := nodeFileStem(id)
		if strings.ContainsAny(s, "/.") || len(s) > 64 {
			t.Errorf("nodeFileStem(%q) = %q: not a short single path element", id, s)
		}
	}
	if nodeFileStem("a") == nodeFileStem("b") {
		t.Error("different node IDs share a state file")
	}
}

func TestWriteJSON_ReplacesAtomically(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	for _, v := range []int{1, 2} {
		if err := writeJSON(path, map[string]int{"v": v}); err != nil {
			t.Fatal(err)
		}
	}
	var got map[string]int
	if err := readJSON(path, &got); err != nil {
		t.Fatal(err)
	}
	if got["v"] != 2 {
		t.Fatalf("read %v, want v=2", got)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Fatalf("want only state.json in %s, found %d entries (a temporary file left behind?)", dir, len(entries))
	}
}

func TestWriteJSON_UnwritableDir(t *testing.T) {
	err := writeJSON(filepath.Join(t.TempDir(), "missing", "state.json"), 1)
	if err == nil {
		t.Fatal("want an error writing into a missing directory")
	}
}

func TestNodeState_RememberForget(t *testing.T) {
	errSave := errors.New("disk full")
	ok := func() error { return nil }
	fail := func() error { return errSave }
	tests := []struct {
		name string
		run  func(m map[string]int) error
		want map[string]int
		err  error
	}{
		{"remember saved", func(m map[string]int) error { return remember(m, "b", 2, ok) }, map[string]int{"a": 1, "b": 2}, nil},
		{"remember save fails", func(m map[string]int) error { return remember(m, "b", 2, fail) }, map[string]int{"a": 1}, errSave},
		{"forget saved", func(m map[string]int) error { return forget(m, "a", ok) }, map[string]int{}, nil},
		{"forget save fails", func(m map[string]int) error { return forget(m, "a", fail) }, map[string]int{"a": 1}, errSave},
		{"forget absent save fails", func(m map[string]int) error { return forget(m, "z", fail) }, map[string]int{"a": 1}, errSave},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := map[string]int{"a": 1}
			if err := tt.run(m); !errors.Is(err, tt.err) {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
			if !reflect.DeepEqual(m, tt.want) {
				t.Fatalf("map = %v, want %v (memory must match what was saved)", m, tt.want)
			}
		})
	}
}
