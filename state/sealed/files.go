package sealed

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

const keyPrefix = "key-"

// Load reads the keyring kept in dir. A missing or empty dir gets a
// first key (ID 1), written 0600 in a dir created 0700; concurrent
// Loads of one empty dir agree on that key. A key file with group or
// other permissions, of a length other than KeySize, or not a regular
// file is refused with an error matching ErrKeyFile that names it.
// Files not named key-XXXXXXXX are ignored.
func Load(dir string) (*Keyring, error) {
	keys, err := readKeys(dir)
	if err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("sealed: create keyring dir: %w", err)
		}
		if err := addKey(dir, 1); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, err
		}
		if keys, err = readKeys(dir); err != nil {
			return nil, err
		}
	}
	return New(keys)
}

// Read reads the keyring kept in dir, as Load does, but never creates
// one: a missing or empty dir is an error matching ErrKeyFile.
func Read(dir string) (*Keyring, error) {
	keys, err := readKeys(dir)
	if err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: keyring dir %s holds no key", ErrKeyFile, dir)
	}
	return New(keys)
}

// Rotate adds a new primary key to the keyring kept in dir (which must
// hold one already) and returns its ID. Servers that loaded the keyring
// before go on sealing with the old primary until they Load again; see
// the package doc for the steps across a cluster.
func Rotate(dir string) (uint32, error) {
	keys, err := readKeys(dir)
	if err != nil {
		return 0, err
	}
	if len(keys) == 0 {
		return 0, fmt.Errorf("%w: keyring dir %s holds no key to rotate from; Load creates the first", ErrKeyFile, dir)
	}
	var top uint32
	for id := range keys {
		top = max(top, id)
	}
	if top == ^uint32(0) {
		return 0, fmt.Errorf("%w: keyring dir %s: key IDs are exhausted", ErrKeyFile, dir)
	}
	if err := addKey(dir, top+1); err != nil {
		return 0, err
	}
	return top + 1, nil
}

// KeyFile returns the name of key id's file in a keyring dir.
func KeyFile(id uint32) string { return fmt.Sprintf("%s%08x", keyPrefix, id) }

// readKeys reads every key file in dir; a missing dir holds none.
func readKeys(dir string) (map[uint32][]byte, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sealed: read keyring dir: %w", err)
	}
	keys := map[uint32][]byte{}
	for _, e := range entries {
		id, ok := parseKeyName(e.Name())
		if !ok {
			continue
		}
		key, err := readKey(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		keys[id] = key
	}
	return keys, nil
}

func parseKeyName(name string) (uint32, bool) {
	hex, ok := strings.CutPrefix(name, keyPrefix)
	if !ok || len(hex) != 8 {
		return 0, false
	}
	id, err := strconv.ParseUint(hex, 16, 32)
	return uint32(id), err == nil && id != 0
}

func readKey(path string) ([]byte, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, fmt.Errorf("sealed: key file: %w", err)
	}
	switch {
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("%w: key file %s is not a regular file (%s)", ErrKeyFile, path, fi.Mode().Type())
	case fi.Mode().Perm()&0o077 != 0:
		return nil, fmt.Errorf("%w: key file %s has mode %#o; a key must be readable by its owner only: chmod 600 it, and replace the key if others may have read it",
			ErrKeyFile, path, fi.Mode().Perm())
	case fi.Size() != KeySize:
		return nil, fmt.Errorf("%w: key file %s is %d bytes long; a key is %d random bytes", ErrKeyFile, path, fi.Size(), KeySize)
	}
	key, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("sealed: key file: %w", err)
	}
	if len(key) != KeySize {
		return nil, fmt.Errorf("%w: key file %s is %d bytes long; a key is %d random bytes", ErrKeyFile, path, len(key), KeySize)
	}
	return key, nil
}

// addKey writes a new random key as key id's file, whole or not at all:
// the key goes to a temporary file that is then linked under its name,
// which fails with fs.ErrExist if another writer got there first.
func addKey(dir string, id uint32) error {
	key := make([]byte, KeySize)
	if _, err := rand.Read(key); err != nil {
		return fmt.Errorf("sealed: draw a key: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".new-key-*") // mode 0600
	if err != nil {
		return fmt.Errorf("sealed: write key: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, werr := tmp.Write(key)
	serr := tmp.Sync()
	cerr := tmp.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		return fmt.Errorf("sealed: write key: %w", err)
	}
	if err := os.Link(tmp.Name(), filepath.Join(dir, KeyFile(id))); err != nil {
		return fmt.Errorf("sealed: add key %d: %w", id, err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}
