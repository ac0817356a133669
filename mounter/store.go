package mounter

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"github.com/csikit/csikit/csi"
)

// store persists volume records, one file per volume:
//
//	<StateDir>/volumes/<namespace>/<volume>.state  format version 3 (format.go), written in place
//	<StateDir>/volumes/<namespace>/<volume>.json   versions 1 and 2, read and replaced by a .state file
//
// One file per volume means a write touches only its own volume:
// operations on different volumes never wait for each other's writes.
//
// A .state file holds two slots and is overwritten in place: a write
// puts the record, with the next generation, in the slot that does not
// hold the newest record sure to be on disk, so a crash during a write
// leaves the previous record whole beside a torn slot that its checksum
// gives away. An in-place write changes no directory, so making it
// durable takes one fdatasync and no rename. A file is created (a
// volume's first write, or a record grown past the slot size) whole
// under a temporary name, synced, renamed into place and its directory
// synced: a file at its final name always holds a complete record.
//
// Writes come in two kinds, following the rule on volumeRecord:
//
//   - save writes a record that widens what may be staged or published
//     (an intent), and syncs it before it returns: the plugin call it
//     guards comes after.
//   - note writes a record that narrows it (a success, a teardown, a
//     refusal), without syncing. It reaches the page cache at once, so
//     a restarted agent reads it, and the disk with the next synced
//     write or the kernel's writeback; an OS crash may lose it, leaving
//     an older, more pessimistic record, which only makes the next call
//     repeat an idempotent plugin call. note is best effort and skips
//     what would need more than an overwrite in place.
//
// With Config.NoSync nothing is synced: each write is whole once it
// has returned (the page cache survives the agent), and an OS crash may
// lose recent writes or leave a file that New reports as corrupt.
//
// save, note and remove for one volume are never called concurrently
// (the Mounter holds the volume's lock); for different volumes they
// are.
type store struct {
	dir    string // <StateDir>/volumes
	sync   bool
	logger hclog.Logger

	fileSyncs atomic.Uint64
	dirSyncs  atomic.Uint64

	nsMu    sync.Mutex
	nsReady map[string]bool // namespace directories known to exist durably

	mu    sync.Mutex
	files map[volKey]*stateFile // guarded by mu; each entry by its volume's lock
}

// stateFile is what the store knows of one volume's files.
type stateFile struct {
	// slotSize is the slot size of the volume's .state file; 0 when
	// there is none yet, or when it must be written whole again (its
	// directory entry may not be durable): the next save creates it.
	slotSize int
	// gen is the highest generation written to the file or read from it.
	gen uint64
	// stable is the slot holding the newest record sure to survive the
	// failures the store guards against (synced; with NoSync, written).
	// Writes go to the other slot.
	stable int
	// unsure: the file was read at New with syncing on, and its newest
	// record may have been written without a sync (a note, or a save
	// cut short by a crash). The next save syncs the file before it
	// overwrites the other slot, which until then may be the only copy
	// on disk; a note skips the write.
	unsure bool
	// legacy: a version 1 or 2 file of the volume (.json) may still
	// exist. Creating the .state file removes it.
	legacy bool
}

const (
	recordExt = ".state"
	legacyExt = ".json"
	tempExt   = ".tmp"
)

func newStore(stateDir string, sync bool, logger hclog.Logger) (*store, error) {
	s := &store{
		dir:     filepath.Join(stateDir, "volumes"),
		sync:    sync,
		logger:  logger,
		nsReady: map[string]bool{},
		files:   map[volKey]*stateFile{},
	}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return nil, fmt.Errorf("create mounter state directory %s: %w", s.dir, err)
	}
	if err := s.syncDir(stateDir); err != nil {
		return nil, fmt.Errorf("sync mounter state directory %s: %w", stateDir, err)
	}
	return s, nil
}

func (s *store) path(namespace, volumeID string) string {
	return filepath.Join(s.dir, namespace, volumeID+recordExt)
}

func (s *store) legacyPath(namespace, volumeID string) string {
	return filepath.Join(s.dir, namespace, volumeID+legacyExt)
}

// file returns the volume's entry, adding an empty one.
func (s *store) file(k volKey) *stateFile {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.files[k]
	if f == nil {
		f = &stateFile{}
		s.files[k] = f
	}
	return f
}

// save writes rec durably: once it returns nil, a crash of the agent or
// of the OS leaves rec or a later record on disk.
func (s *store) save(rec *volumeRecord) error { return s.write(rec, true) }

// note writes rec without syncing, if an overwrite in place can (see
// store). It is for records that narrow the last saved one: losing it
// is always safe.
func (s *store) note(rec *volumeRecord) error { return s.write(rec, false) }

func (s *store) write(rec *volumeRecord, durable bool) error {
	final := s.path(rec.Namespace, rec.VolumeID)
	f := s.file(volKey{rec.Namespace, rec.VolumeID})
	if !durable && (f.slotSize == 0 || f.unsure) {
		return nil
	}
	rec.Version = formatVersion
	data, err := json.Marshal(rec)
	if err != nil {
		return &persistError{path: final, err: err}
	}
	if f.slotSize > 0 && slotHeaderSize+len(data) <= f.slotSize {
		err := s.overwrite(f, final, data, durable)
		if err == nil {
			return nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return &persistError{path: final, err: err}
		}
		// The file was removed behind the Mounter's back: write it anew
		// from the record, which is the whole truth.
		s.logger.Warn("mount state file disappeared; writing it again", "path", final)
		f.slotSize = 0
	}
	if !durable {
		// Growing the file is a rename: not worth it for a record that
		// may as well be lost.
		return nil
	}
	if err := s.create(f, rec.Namespace, rec.VolumeID, data); err != nil {
		return &persistError{path: final, err: err}
	}
	return nil
}

// overwrite writes data to the slot of f's file that does not hold the
// stable record, and syncs it for a durable write.
func (s *store) overwrite(f *stateFile, final string, data []byte, durable bool) error {
	fd, err := os.OpenFile(final, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	err = s.put(fd, f, data, durable)
	if cerr := fd.Close(); err == nil {
		err = cerr
	}
	return err
}

func (s *store) put(fd *os.File, f *stateFile, data []byte, durable bool) error {
	if f.unsure {
		// Make the newest record durable before the other slot, which
		// may be the only record on disk, is overwritten.
		s.fileSyncs.Add(1)
		if err := fdatasync(fd); err != nil {
			return err
		}
		f.unsure = false
	}
	f.gen++
	slot := 1 - f.stable
	if _, err := fd.WriteAt(encodeSlot(f.slotSize, f.gen, data), int64(slot)*int64(f.slotSize)); err != nil {
		return err
	}
	if durable && s.sync {
		s.fileSyncs.Add(1)
		if err := fdatasync(fd); err != nil {
			return err
		}
	}
	if durable || !s.sync {
		f.stable = slot
	}
	return nil
}

// create writes the volume's .state file whole: the record in slot 0
// and zeros in slot 1 (so that later overwrites of slot 1 allocate
// nothing), to a temporary file that is synced and renamed into place,
// then syncs the directory. It also serves a record grown past the
// slot size, and the first write of a volume read from a .json file,
// which it then removes.
func (s *store) create(f *stateFile, namespace, volumeID string, data []byte) error {
	final := s.path(namespace, volumeID)
	nsDir := filepath.Dir(final)
	if err := s.ensureNamespace(namespace, nsDir); err != nil {
		return err
	}
	size := slotSizeFor(len(data))
	f.gen++
	buf := make([]byte, 2*size)
	copy(buf, encodeSlot(size, f.gen, data))
	tmp := final + tempExt
	if err := s.writeFile(tmp, buf); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	// rename(2) straight: os.Rename first lstats the target, to refuse
	// a directory there, which rename(2) refuses by itself.
	if err := syscall.Rename(tmp, final); err != nil {
		_ = os.Remove(tmp)
		return &os.LinkError{Op: "rename", Old: tmp, New: final, Err: err}
	}
	// Until the directory is synced the new name may not survive an OS
	// crash; f keeps no slot size meanwhile, so that a failure here makes
	// the next save write the file whole again.
	if err := s.syncDir(nsDir); err != nil {
		return err
	}
	f.slotSize, f.stable, f.unsure = size, 0, false
	if f.legacy {
		// The .state file is durable and a reader prefers it: the old
		// file's removal need not be.
		old := s.legacyPath(namespace, volumeID)
		if err := os.Remove(old); err != nil && !errors.Is(err, fs.ErrNotExist) {
			s.logger.Warn("cannot remove a superseded mount state file; the next start removes it", "path", old, "error", err)
		} else {
			f.legacy = false
		}
	}
	return nil
}

func (s *store) writeFile(name string, data []byte) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if s.sync {
		s.fileSyncs.Add(1)
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

// remove deletes a volume's file once it tracks nothing. The directory
// is deliberately not synced: if the removal is lost in a crash, the
// file that comes back holds only teardown intents that were already
// carried out, and the next call on that volume repeats them (the plugin
// answers NotFound or OK). That saves a sync per last unmount.
func (s *store) remove(namespace, volumeID string) error {
	k := volKey{namespace, volumeID}
	s.mu.Lock()
	f := s.files[k]
	s.mu.Unlock()
	p := s.path(namespace, volumeID)
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return &persistError{path: p, err: err}
	}
	if f != nil {
		f.slotSize = 0
		if f.legacy {
			old := s.legacyPath(namespace, volumeID)
			if err := os.Remove(old); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return &persistError{path: old, err: err}
			}
		}
	}
	s.mu.Lock()
	delete(s.files, k)
	s.mu.Unlock()
	return nil
}

// ensureNamespace creates a namespace directory and makes its entry in
// the parent durable, once per namespace per process.
func (s *store) ensureNamespace(namespace, nsDir string) error {
	s.nsMu.Lock()
	defer s.nsMu.Unlock()
	if s.nsReady[namespace] {
		return nil
	}
	if err := os.Mkdir(nsDir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	if err := s.syncDir(s.dir); err != nil {
		return err
	}
	s.nsReady[namespace] = true
	return nil
}

func (s *store) syncDir(dir string) error {
	if !s.sync {
		return nil
	}
	s.dirSyncs.Add(1)
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// load reads every record. A file that cannot be read, parsed or
// validated fails the whole load with a *StateError: forgetting a record
// could leak a mount or unstage a volume still in use. Leftover
// temporary files (a creation interrupted by a crash, whose rename never
// happened) are removed, and so is a .json file beside a .state file of
// the same volume (the .state file replaced it; only the removal was
// lost).
//
// With syncing on, the directories holding records are synced: an agent
// that crashed between a rename and its directory sync may have left a
// file whose name is not yet durable, and this Mounter overwrites files
// in place without renaming them again.
func (s *store) load() (map[volKey]*volumeRecord, error) {
	out := map[volKey]*volumeRecord{}
	nss, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, &StateError{Path: s.dir, Reason: "cannot list the state directory", Err: err}
	}
	for _, ns := range nss {
		nsDir := filepath.Join(s.dir, ns.Name())
		if !ns.IsDir() || csi.ValidateNamespace(ns.Name()) != nil {
			s.logger.Warn("ignoring unexpected entry in the mounter state directory", "path", nsDir)
			continue
		}
		s.nsReady[ns.Name()] = true
		n, err := s.loadNamespace(ns.Name(), nsDir, out)
		if err != nil {
			return nil, err
		}
		if n > 0 {
			if err := s.syncDir(nsDir); err != nil {
				return nil, &StateError{Path: nsDir, Reason: "cannot sync the namespace directory", Err: err}
			}
		}
	}
	if len(s.nsReady) > 0 {
		if err := s.syncDir(s.dir); err != nil {
			return nil, &StateError{Path: s.dir, Reason: "cannot sync the state directory", Err: err}
		}
	}
	return out, nil
}

// loadNamespace reads the records of one namespace into out and returns
// how many it read.
func (s *store) loadNamespace(namespace, nsDir string, out map[volKey]*volumeRecord) (int, error) {
	files, err := os.ReadDir(nsDir)
	if err != nil {
		return 0, &StateError{Path: nsDir, Reason: "cannot list the namespace directory", Err: err}
	}
	type found struct{ current, legacy bool }
	vols := map[string]*found{}
	for _, f := range files {
		p := filepath.Join(nsDir, f.Name())
		name := f.Name()
		var ext string
		switch {
		case strings.HasSuffix(name, tempExt) && f.Type().IsRegular():
			s.logger.Debug("removing an interrupted state write", "path", p)
			if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return 0, &StateError{Path: p, Reason: "cannot remove a leftover temporary file", Err: err}
			}
			continue
		case strings.HasSuffix(name, recordExt):
			ext = recordExt
		case strings.HasSuffix(name, legacyExt):
			ext = legacyExt
		default:
			s.logger.Warn("ignoring unexpected entry in the mounter state directory", "path", p)
			continue
		}
		volumeID := strings.TrimSuffix(name, ext)
		if err := csi.ValidateVolumeID(volumeID); err != nil {
			return 0, &StateError{Path: p, Reason: "the file name is not a valid volume ID", Err: err}
		}
		if !f.Type().IsRegular() {
			return 0, &StateError{Path: p, Reason: "is not a regular file"}
		}
		v := vols[volumeID]
		if v == nil {
			v = &found{}
			vols[volumeID] = v
		}
		if ext == recordExt {
			v.current = true
		} else {
			v.legacy = true
		}
	}
	for _, volumeID := range slices.Sorted(maps.Keys(vols)) {
		v := vols[volumeID]
		var rec *volumeRecord
		var f *stateFile
		if v.current {
			if rec, f, err = s.readState(s.path(namespace, volumeID), namespace, volumeID); err != nil {
				return 0, err
			}
			if v.legacy {
				old := s.legacyPath(namespace, volumeID)
				s.logger.Info("removing a mount state file that a version 3 file replaced", "path", old)
				if err := os.Remove(old); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return 0, &StateError{Path: old, Reason: "cannot remove a superseded state file", Err: err}
				}
			}
		} else {
			if rec, err = s.readLegacy(s.legacyPath(namespace, volumeID), namespace, volumeID); err != nil {
				return 0, err
			}
			f = &stateFile{legacy: true}
		}
		k := volKey{namespace, volumeID}
		out[k] = rec
		s.files[k] = f
	}
	return len(vols), nil
}

// readState reads a version 3 file.
func (s *store) readState(p, namespace, volumeID string) (*volumeRecord, *stateFile, error) {
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, nil, &StateError{Path: p, Reason: "cannot read", Err: err}
	}
	size, slot, gen, record, err := slotted(data)
	if err != nil {
		return nil, nil, &StateError{Path: p, Reason: err.Error()}
	}
	rec := new(volumeRecord)
	if err := decodeStrict(record, rec); err != nil {
		return nil, nil, &StateError{Path: p, Reason: fmt.Sprintf("slot %d (generation %d) is not a valid record", slot, gen), Err: err}
	}
	if err := rec.check(namespace, volumeID); err != nil {
		return nil, nil, &StateError{Path: p, Reason: fmt.Sprintf("slot %d (generation %d) is not a valid record", slot, gen), Err: err}
	}
	return rec, &stateFile{slotSize: size, gen: gen, stable: slot, unsure: s.sync}, nil
}

// readLegacy reads a version 1 or 2 file (plain JSON).
func (s *store) readLegacy(p, namespace, volumeID string) (*volumeRecord, error) {
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, &StateError{Path: p, Reason: "cannot read", Err: err}
	}
	// Read the version alone first, so that a file of another format is
	// reported as such rather than as a field this build does not know.
	var head struct{ Version int }
	if err := json.Unmarshal(data, &head); err != nil {
		return nil, &StateError{Path: p, Reason: "is not a valid record", Err: err}
	}
	var rec *volumeRecord
	switch head.Version {
	case 1:
		old := new(volumeRecordV1)
		if err := decodeStrict(data, old); err != nil {
			return nil, &StateError{Path: p, Reason: "is not a valid version 1 record", Err: err}
		}
		if rec, err = old.upgrade(); err != nil {
			return nil, &StateError{Path: p, Reason: "is a version 1 record that cannot be upgraded", Err: err}
		}
	case 2:
		// Version 2 records are version 3 records in plain JSON.
		rec = new(volumeRecord)
		if err := decodeStrict(data, rec); err != nil {
			return nil, &StateError{Path: p, Reason: "is not a valid version 2 record", Err: err}
		}
		rec.Version = formatVersion
	default:
		return nil, &StateError{Path: p, Reason: fmt.Sprintf("has format version %d; this build reads versions 1 and 2 from .json files and version %d from .state files (written by another csikit version, or not a mounter state file?)", head.Version, formatVersion)}
	}
	if err := rec.check(namespace, volumeID); err != nil {
		return nil, &StateError{Path: p, Reason: "is not a valid record", Err: err}
	}
	s.logger.Info("read a version 1 or 2 mount state file; the volume's next change replaces it with a version 3 file",
		"path", p, "version", head.Version)
	return rec, nil
}

// decodeStrict decodes one JSON value into v, refusing unknown fields
// and trailing data.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("data after the record")
	}
	return nil
}
