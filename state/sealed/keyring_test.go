package sealed_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/csikit/csikit/state/sealed"
)

func mustLoad(t *testing.T, dir string) *sealed.Keyring {
	t.Helper()
	k, err := sealed.Load(dir)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return k
}

func TestKeyring_SealOpen_RoundTrip(t *testing.T) {
	k := mustLoad(t, filepath.Join(t.TempDir(), "keyring"))
	plain := []byte(`{"Secrets":{"password":"hunter2"}}`)
	a, err := k.Seal(plain)
	if err != nil {
		t.Fatal(err)
	}
	b, err := k.Seal(plain)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(a, []byte("hunter2")) || !sealed.IsSealed(a) || sealed.KeyID(a) != 1 {
		t.Fatalf("sealed value holds the clear text or no header: %q", a)
	}
	if bytes.Equal(a, b) {
		t.Errorf("two seals of the same bytes are equal: the nonce is not fresh")
	}
	got, err := k.Open(a)
	if err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("Open = %q, %v; want %q", got, err, plain)
	}
}

func TestKeyring_Open_Refusals(t *testing.T) {
	k := mustLoad(t, t.TempDir())
	other := mustLoad(t, t.TempDir()) // another key 1
	v, err := k.Seal([]byte("secret"))
	if err != nil {
		t.Fatal(err)
	}
	tampered := bytes.Clone(v)
	tampered[len(tampered)-1] ^= 1
	unknown := bytes.Clone(v)
	unknown[len("CSKS\x01")+3] = 9
	for _, tc := range []struct {
		name string
		k    *sealed.Keyring
		in   []byte
		want error
	}{
		{"clear bytes", k, []byte(`{"kind":"x"}`), sealed.ErrNotSealed},
		{"other key under the same ID", other, v, sealed.ErrWrongKey},
		{"altered ciphertext", k, tampered, sealed.ErrWrongKey},
		{"truncated", k, v[:20], sealed.ErrWrongKey},
		{"key not held", k, unknown, sealed.ErrUnknownKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.k.Open(tc.in); !errors.Is(err, tc.want) {
				t.Errorf("Open: %v; want %v", err, tc.want)
			}
		})
	}
}

func TestLoad_CreatesPrivateKey(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "keyring")
	k := mustLoad(t, dir)
	if k.PrimaryID() != 1 {
		t.Errorf("PrimaryID = %d, want 1", k.PrimaryID())
	}
	fi, err := os.Stat(filepath.Join(dir, sealed.KeyFile(1)))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 || fi.Size() != sealed.KeySize {
		t.Errorf("key file mode %v size %d; want 0600, %d", fi.Mode().Perm(), fi.Size(), sealed.KeySize)
	}
	di, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if di.Mode().Perm() != 0o700 {
		t.Errorf("keyring dir mode %v, want 0700", di.Mode().Perm())
	}
	v, err := k.Seal([]byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	again := mustLoad(t, dir)
	if _, err := again.Open(v); err != nil {
		t.Errorf("a second Load does not open what the first sealed: %v", err)
	}
}

func TestLoad_ConcurrentFirstStartsAgree(t *testing.T) {
	dir := t.TempDir()
	var wg sync.WaitGroup
	rings := make([]*sealed.Keyring, 4)
	errs := make([]error, 4)
	for i := range rings {
		wg.Go(func() { rings[i], errs[i] = sealed.Load(dir) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Load %d: %v", i, err)
		}
	}
	v, err := rings[0].Seal([]byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	for i, k := range rings {
		if _, err := k.Open(v); err != nil {
			t.Errorf("keyring %d does not open keyring 0's value: %v", i, err)
		}
	}
}

func TestLoad_RefusesBadKeyFiles(t *testing.T) {
	for _, tc := range []struct {
		name  string
		mode  os.FileMode
		size  int
		wantS string
	}{
		{"group readable", 0o640, sealed.KeySize, "mode"},
		{"world readable", 0o604, sealed.KeySize, "mode"},
		{"short", 0o600, sealed.KeySize - 1, "bytes long"},
		{"long", 0o600, sealed.KeySize + 1, "bytes long"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, sealed.KeyFile(1))
			if err := os.WriteFile(path, make([]byte, tc.size), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, tc.mode); err != nil {
				t.Fatal(err)
			}
			_, err := sealed.Load(dir)
			if !errors.Is(err, sealed.ErrKeyFile) || !bytes.Contains([]byte(err.Error()), []byte(tc.wantS)) {
				t.Errorf("Load: %v; want ErrKeyFile about %q", err, tc.wantS)
			}
		})
	}
}

func TestRotate_OldValuesStillOpen(t *testing.T) {
	dir := t.TempDir()
	k1 := mustLoad(t, dir)
	old, err := k1.Seal([]byte("before"))
	if err != nil {
		t.Fatal(err)
	}
	id, err := sealed.Rotate(dir)
	if err != nil || id != 2 {
		t.Fatalf("Rotate = %d, %v; want 2", id, err)
	}
	k2 := mustLoad(t, dir)
	if k2.PrimaryID() != 2 {
		t.Fatalf("PrimaryID after rotation = %d, want 2", k2.PrimaryID())
	}
	v, err := k2.Seal([]byte("after"))
	if err != nil {
		t.Fatal(err)
	}
	if sealed.KeyID(v) != 2 {
		t.Errorf("new value sealed with key %d, want 2", sealed.KeyID(v))
	}
	if got, err := k2.Open(old); err != nil || string(got) != "before" {
		t.Errorf("Open of a value sealed before the rotation = %q, %v", got, err)
	}
	if _, err := k1.Open(v); !errors.Is(err, sealed.ErrUnknownKey) {
		t.Errorf("old keyring opened a value of the new key: %v", err)
	}
	if _, err := sealed.Rotate(t.TempDir()); !errors.Is(err, sealed.ErrKeyFile) {
		t.Errorf("Rotate of an empty dir: %v; want ErrKeyFile", err)
	}
}

func TestNew_Refusals(t *testing.T) {
	for name, keys := range map[string]map[uint32][]byte{
		"no key":     nil,
		"ID 0":       {0: make([]byte, sealed.KeySize)},
		"short key":  {1: make([]byte, 16)},
		"second bad": {1: make([]byte, sealed.KeySize), 2: make([]byte, 3)},
	} {
		if _, err := sealed.New(keys); !errors.Is(err, sealed.ErrKeyFile) {
			t.Errorf("%s: New: %v; want ErrKeyFile", name, err)
		}
	}
}

// TestRead_NeverCreates reads a keyring dir without a key: refused,
// and still without a key; once Load made one, Read reads it.
func TestRead_NeverCreates(t *testing.T) {
	dir := t.TempDir()
	if _, err := sealed.Read(dir); !errors.Is(err, sealed.ErrKeyFile) {
		t.Fatalf("Read of an empty dir: %v, want ErrKeyFile", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("Read wrote %d files", len(entries))
	}
	if _, err := sealed.Load(dir); err != nil {
		t.Fatal(err)
	}
	k, err := sealed.Read(dir)
	if err != nil {
		t.Fatalf("Read after Load: %v", err)
	}
	if k.PrimaryID() != 1 {
		t.Fatalf("Read after Load: primary %d, want 1", k.PrimaryID())
	}
}
