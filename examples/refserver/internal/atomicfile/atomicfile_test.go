package atomicfile_test

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/csikit/csikit/examples/refserver/internal/atomicfile"
)

func TestWrite(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name    string
		old     string // "" means no file before
		write   func(io.Writer) error
		wantErr error
		want    string
	}{
		{"new file", "", func(w io.Writer) error { _, err := io.WriteString(w, "new\n"); return err }, nil, "new\n"},
		{"replaces", "old\n", func(w io.Writer) error { _, err := io.WriteString(w, "new\n"); return err }, nil, "new\n"},
		{"failed write keeps the old file", "old\n", func(w io.Writer) error { _, _ = io.WriteString(w, "ne"); return boom }, boom, "old\n"},
		{"failed write makes no file", "", func(io.Writer) error { return boom }, boom, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, "f")
			if tc.old != "" {
				if err := os.WriteFile(p, []byte(tc.old), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			err := atomicfile.Write(p, tc.write)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("Write: %v, want %v", err, tc.wantErr)
			}
			got, rerr := os.ReadFile(p)
			switch {
			case tc.want == "" && !errors.Is(rerr, os.ErrNotExist):
				t.Errorf("file exists (%q, %v), want none", got, rerr)
			case tc.want != "" && string(got) != tc.want:
				t.Errorf("file holds %q (%v), want %q", got, rerr, tc.want)
			}
			if ents, _ := os.ReadDir(dir); len(ents) > 1 || (tc.want == "" && len(ents) != 0) {
				t.Errorf("directory holds %d entries, want only the file: a temporary file was left", len(ents))
			}
		})
	}
}

func TestWrite_MissingDirectory(t *testing.T) {
	p := filepath.Join(t.TempDir(), "missing", "f")
	if err := atomicfile.WriteBytes(p, []byte("x")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("WriteBytes into a missing directory: %v, want os.ErrNotExist", err)
	}
}

func ExampleWriteBytes() {
	dir, err := os.MkdirTemp("", "atomicfile")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	p := filepath.Join(dir, "server-id")
	if err := atomicfile.WriteBytes(p, []byte("srv-1\n")); err != nil {
		panic(err)
	}
	b, _ := os.ReadFile(p)
	os.Stdout.Write(b)
	// Output: srv-1
}
