package mounter

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/internal/quietfs"
)

// store persists volume records in a pool of files, one volume per file
// at a time:
//
//	<StateDir>/records/<n>.state                  format version 3 (format.go), written in place
//	<StateDir>/volumes/<namespace>/<volume>.json  versions 1 and 2, read, then replaced by a record in the pool
//
// A volume holds a file of its own while it is tracked, so a write
// touches only its own volume: operations on different volumes never
// wait for each other's writes. A record names its volume; a file whose
// newest record is empty is free, and the next volume that needs a file
// takes it, so a node's volumes come and go without creating, renaming
// or removing files: metadata operations that cost far more than a
// write in place (and on ext4 a rename over an existing file also
// flushes the file's data). New starts the pool with a free file if it
// has none (addSpare); it grows when every file is in use.
//
// A file holds two slots and is overwritten in place: a write puts the
// record, with the next generation, in the slot that does not hold the
// newest record sure to be on disk, so a crash during a write leaves
// the previous record whole beside a torn slot that its checksum gives
// away. Making a write in place durable takes one fdatasync. A file is
// created (when the pool grows, or for a record grown past the slot
// size) whole under a temporary name, synced, renamed into place and
// the directory synced: a file at its final name always holds a
// complete record.
//
// Generations are drawn from one counter for the whole pool, started at
// New above every generation read, so that when two files name the same
// volume (a file freed without a sync, its release lost in an OS crash,
// while the volume had moved on to another file) the higher generation
// is the newer record. The older one only holds teardowns that were
// carried out before its file was freed.
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
//     what would need more than a write in place.
//
// drop frees a volume's file with a write of the empty record.
//
// With Config.NoSync nothing is synced: each write is whole once it
// has returned (the page cache survives the agent), and an OS crash may
// lose recent writes or leave a file that New reports as corrupt.
//
// save, note and drop for one volume are never called concurrently
// (the Mounter holds the volume's lock); for different volumes they
// are.
type store struct {
	dir       string // <StateDir>/records
	legacyDir string // <StateDir>/volumes
	sync      bool
	logger    hclog.Logger

	fileSyncs atomic.Uint64
	dirSyncs  atomic.Uint64
	gen       atomic.Uint64 // the last generation handed out

	mu   sync.Mutex
	vols map[volKey]*volFiles // tracked volumes
	free []*stateFile         // files holding no volume, the last freed first
	next int                  // number of the next new file
}

// volFiles is what the store knows of one volume's files.
type volFiles struct {
	// file is the volume's file in the pool; nil until its first save.
	file *stateFile
	// legacy is the path of a version 1 or 2 file of the volume, removed
	// once the volume's record is durable in the pool.
	legacy string
}

// stateFile is one file of the pool. Its fields are used by the holder
// of the volume that owns it, or under store.mu while it is free.
type stateFile struct {
	num int // <dir>/<num>.state
	// slotSize is the file's slot size; 0 when the file does not exist
	// yet, or must be written whole again (it vanished, or its
	// directory entry may not be durable): the next save creates it.
	slotSize int
	// stable is the slot holding the newest record sure to survive the
	// failures the store guards against (synced; with NoSync, written).
	// Writes go to the other slot.
	stable int
	// unsure: the file was read at New with syncing on, and its newest
	// record may have been written without a sync (a note, or a save
	// cut short by a crash). The next write syncs the file before it
	// overwrites the other slot, which until then may be the only copy
	// on disk.
	unsure bool
	// fd is the file, open for writing from its first write in place
	// (or from New, for the free file it adds) until it is created
	// anew, found gone or removed: a volume's writes cost a write each
	// (and a sync for a durable one), not an open and a close too. A
	// freed file keeps it for the next volume; the pool never holds
	// more files than the node tracked volumes at once, plus those New
	// found, which open on their first use.
	fd *os.File
	// mapped is fd's file mapped for writing (Linux), from the first
	// write in place until fd is closed; noMap: the file could not be
	// mapped, and is written with pwrite until it is opened again.
	mapped   []byte
	noMap    bool
	unmapper runtime.Cleanup // unmaps mapped if f is dropped mapped
}

const (
	recordExt = ".state"
	legacyExt = ".json"
	tempExt   = ".tmp"
)

func newStore(stateDir string, sync bool, logger hclog.Logger) (*store, error) {
	s := &store{
		dir:       filepath.Join(stateDir, "records"),
		legacyDir: filepath.Join(stateDir, "volumes"),
		sync:      sync,
		logger:    logger,
		vols:      map[volKey]*volFiles{},
		next:      1,
	}
	if err := ensureDir(s.dir, 0o700); err != nil {
		return nil, fmt.Errorf("create mounter state directory %s: %w", s.dir, err)
	}
	if err := s.syncDir(stateDir); err != nil {
		return nil, fmt.Errorf("sync mounter state directory %s: %w", stateDir, err)
	}
	return s, nil
}

func (s *store) path(f *stateFile) string {
	return filepath.Join(s.dir, strconv.Itoa(f.num)+recordExt)
}

// volume returns the volume's entry, adding an empty one.
func (s *store) volume(k volKey) *volFiles {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.vols[k]
	if v == nil {
		v = &volFiles{}
		s.vols[k] = v
	}
	return v
}

// take hands out a free file, or a new one to be created.
func (s *store) take() *stateFile {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.free); n > 0 {
		f := s.free[n-1]
		s.free = s.free[:n-1]
		return f
	}
	f := &stateFile{num: s.next}
	s.next++
	return f
}

// save writes rec durably: once it returns nil, a crash of the agent or
// of the OS leaves rec or a later record of the volume on disk.
func (s *store) save(rec *volumeRecord) error { return s.write(rec, true) }

// note writes rec without syncing, if a write in place can (see store).
// It is for records that narrow the last saved one: losing it is
// always safe.
func (s *store) note(rec *volumeRecord) error { return s.write(rec, false) }

func (s *store) write(rec *volumeRecord, durable bool) error {
	v := s.volume(volKey{rec.Namespace, rec.VolumeID})
	if v.file == nil {
		if !durable {
			return nil
		}
		v.file = s.take()
	}
	f := v.file
	if !durable && f.slotSize == 0 {
		return nil
	}
	rec.Version = formatVersion
	data, err := encodeRecord(rec)
	if err != nil {
		return &persistError{path: s.path(f), err: err}
	}
	if err := s.put(f, data, durable); err != nil {
		return &persistError{path: s.path(f), err: err}
	}
	if durable && v.legacy != "" {
		// The record is durable in the pool, which a reader prefers, but
		// only while the pool holds it: the volume's file is freed without
		// a sync, so the old file's removal is made durable here (once per
		// volume moved), lest an OS crash bring it back after the pool's
		// record has gone.
		if err := s.removeLegacy(v.legacy); err != nil {
			s.logger.Warn("cannot remove a superseded mount state file; the next write or start removes it", "path", v.legacy, "error", err)
		} else {
			v.legacy = ""
		}
	}
	return nil
}

// removeLegacy removes a version 1 or 2 file and syncs its directory.
func (s *store) removeLegacy(p string) error {
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return s.syncDir(filepath.Dir(p))
}

// put writes data to f: in place when it fits, else (for a durable
// write) by creating the file whole. A note that does not fit is
// skipped.
func (s *store) put(f *stateFile, data []byte, durable bool) error {
	if f.slotSize > 0 && slotHeaderSize+len(data) <= f.slotSize {
		err := s.overwrite(f, data, durable)
		if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		// The file was removed behind the Mounter's back: write it anew
		// from the record, which is the whole truth.
		s.logger.Warn("mount state file disappeared; writing it again", "path", s.path(f))
		f.slotSize = 0
	}
	if !durable {
		// Growing the file is a rename: not worth it for a record that
		// may as well be lost.
		return nil
	}
	return s.create(f, data)
}

// overwrite writes data to the slot of f that does not hold the stable
// record, and syncs it for a durable write. A file removed or replaced
// behind the Mounter's back is an error matching fs.ErrNotExist, as a
// failed open would be.
func (s *store) overwrite(f *stateFile, data []byte, durable bool) error {
	fd, err := s.open(f)
	if err != nil {
		return err
	}
	if err := s.writeSlot(fd, f, data, durable); err != nil {
		// The next write opens the file again.
		f.closeFD()
		return err
	}
	return nil
}

// open returns f's open file, opening it if need be. The file kept open
// from an earlier write is checked first: one that lost its name (its
// link count is 0: removed, or replaced by a rename) is closed, and the
// path opened again, which reports a removal as fs.ErrNotExist.
func (s *store) open(f *stateFile) (*os.File, error) {
	if f.fd != nil {
		if linked(f.fd) {
			return f.fd, nil
		}
		f.closeFD()
	}
	// Read and write: a shared mapping for writing needs both.
	fd, err := quietfs.Open(s.path(f), os.O_RDWR)
	if err != nil {
		return nil, err
	}
	f.fd = fd
	return fd, nil
}

// closeFD closes the file kept open, if any.
func (f *stateFile) closeFD() {
	f.unmap()
	f.noMap = false
	if f.fd != nil {
		_ = f.fd.Close()
		f.fd = nil
	}
}

func (s *store) writeSlot(fd *os.File, f *stateFile, data []byte, durable bool) error {
	if f.unsure {
		// Make the newest record durable before the other slot, which
		// may be the only record on disk, is overwritten.
		s.fileSyncs.Add(1)
		if err := fdatasync(fd); err != nil {
			return err
		}
		f.unsure = false
	}
	slot := 1 - f.stable
	if err := f.writeAt(fd, encodeSlot(f.slotSize, s.gen.Add(1), data), slot*f.slotSize); err != nil {
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

// create writes f whole: the record in slot 0 and zeros in slot 1 (so
// that later writes of slot 1 allocate nothing), to a temporary file
// that is synced and renamed into place, then syncs the directory.
func (s *store) create(f *stateFile, data []byte) error {
	// A file kept open is the one the rename replaces.
	f.closeFD()
	final := s.path(f)
	size := slotSizeFor(len(data))
	buf := make([]byte, 2*size)
	copy(buf, encodeSlot(size, s.gen.Add(1), data))
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
	f.slotSize = 0
	if err := s.syncDir(s.dir); err != nil {
		return err
	}
	f.slotSize, f.stable, f.unsure = size, 0, false
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

// drop frees a volume's file once the volume tracks nothing: a write of
// the empty record, and the file goes back to the pool. After a
// teardown it is not synced (durable false): if the write is lost in a
// crash, the file that comes back holds only teardown intents that were
// already carried out, and the next call on that volume repeats them
// (the plugin answers NotFound or OK); if the file was taken by another
// volume meanwhile, that volume's record has the higher generation.
// That saves a sync per last unmount. After a mount the plugin refused
// it is synced (durable true): the file holds the refused publish
// intent, which the host's UnmountVolume would find gone and so not
// write over. A failed write is reported, and the file is freed all the
// same: whatever it holds, the next write to it is newer.
//
// A file whose slot size is unknown (its creation failed after the
// rename) is removed instead: it may hold the volume's last saved
// record at its final name.
func (s *store) drop(namespace, volumeID string, durable bool) error {
	k := volKey{namespace, volumeID}
	s.mu.Lock()
	v := s.vols[k]
	delete(s.vols, k)
	s.mu.Unlock()
	if v == nil {
		return nil
	}
	var err error
	if v.legacy != "" {
		if rerr := s.removeLegacy(v.legacy); rerr != nil {
			err = &persistError{path: v.legacy, err: rerr}
		}
	}
	if f := v.file; f != nil {
		if f.slotSize > 0 {
			if werr := s.overwrite(f, nil, durable); werr != nil {
				if errors.Is(werr, fs.ErrNotExist) {
					f.slotSize = 0
				}
				err = &persistError{path: s.path(f), err: werr}
			}
		} else {
			f.closeFD()
			if rerr := os.Remove(s.path(f)); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
				err = &persistError{path: s.path(f), err: rerr}
			} else if rerr == nil && durable {
				if serr := s.syncDir(s.dir); serr != nil {
					err = &persistError{path: s.dir, err: serr}
				}
			}
		}
		// The file keeps its open descriptor for the next volume that
		// takes it.
		s.mu.Lock()
		s.free = append(s.free, f)
		s.mu.Unlock()
	}
	return err
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

// maxFreeKept bounds the free files kept at New: a node that once
// tracked many volumes at a time does not keep as many files for ever.
const maxFreeKept = 64

// load reads every record. A file that cannot be read, parsed or
// validated fails the whole load with a *StateError: forgetting a record
// could leak a mount or unstage a volume still in use. Leftover
// temporary files (a creation interrupted by a crash, whose rename never
// happened) are removed, and so are free files beyond what the pool
// needs, and a version 1 or 2 file of a volume that has a record in the
// pool (which replaced it; only the removal was lost).
//
// With syncing on, the pool directory is synced: an agent that crashed
// between a rename and its directory sync may have left a file whose
// name is not yet durable, and this Mounter writes files in place
// without renaming them again.
func (s *store) load() (map[volKey]*volumeRecord, error) {
	out := map[volKey]*volumeRecord{}
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, &StateError{Path: s.dir, Reason: "cannot list the state directory", Err: err}
	}
	type owner struct {
		file *stateFile
		gen  uint64
		path string
	}
	owners := map[volKey]owner{}
	var free []*stateFile
	var maxGen uint64
	for _, e := range entries {
		name := e.Name()
		p := filepath.Join(s.dir, name)
		switch {
		case strings.HasSuffix(name, tempExt) && e.Type().IsRegular():
			s.logger.Debug("removing an interrupted state write", "path", p)
			if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil, &StateError{Path: p, Reason: "cannot remove a leftover temporary file", Err: err}
			}
			continue
		case !strings.HasSuffix(name, recordExt):
			s.logger.Warn("ignoring unexpected entry in the mounter state directory", "path", p)
			continue
		}
		num, err := strconv.Atoi(strings.TrimSuffix(name, recordExt))
		if err != nil || num < 1 || strconv.Itoa(num) != strings.TrimSuffix(name, recordExt) {
			return nil, &StateError{Path: p, Reason: "is not named <n>.state with n a positive number"}
		}
		if !e.Type().IsRegular() {
			return nil, &StateError{Path: p, Reason: "is not a regular file"}
		}
		s.next = max(s.next, num+1)
		rec, f, gen, err := s.readState(p, num)
		if err != nil {
			return nil, err
		}
		maxGen = max(maxGen, gen)
		if rec == nil {
			free = append(free, f)
			continue
		}
		k := volKey{rec.Namespace, rec.VolumeID}
		if o, dup := owners[k]; dup {
			if o.gen == gen {
				return nil, &StateError{Path: p, Reason: fmt.Sprintf("holds volume %s/%s with generation %d, as %s does", k.namespace, k.volumeID, gen, o.path)}
			}
			older := o
			if gen < o.gen {
				older = owner{f, gen, p}
			} else {
				owners[k], out[k] = owner{f, gen, p}, rec
			}
			s.logger.Info("a newer file holds the volume; the older one is free", "namespace", k.namespace, "volume", k.volumeID, "path", older.path)
			free = append(free, older.file)
			continue
		}
		owners[k], out[k] = owner{f, gen, p}, rec
	}
	s.gen.Store(maxGen)
	for k, o := range owners {
		s.vols[k] = &volFiles{file: o.file}
	}
	if err := s.loadLegacy(out); err != nil {
		return nil, err
	}
	// Free files are handed out from the end of the list: lowest numbers
	// first. Those with the highest numbers beyond what the pool may need
	// are removed (unsynced: one that comes back is free all the same).
	slices.SortFunc(free, func(a, b *stateFile) int { return b.num - a.num })
	if keep := maxFreeKept; len(free) > keep {
		for _, f := range free[:len(free)-keep] {
			if err := os.Remove(s.path(f)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil, &StateError{Path: s.path(f), Reason: "cannot remove a free state file", Err: err}
			}
		}
		free = free[len(free)-keep:]
	}
	s.free = free
	if len(entries) > 0 {
		if err := s.syncDir(s.dir); err != nil {
			return nil, &StateError{Path: s.dir, Reason: "cannot sync the state directory", Err: err}
		}
	}
	return out, nil
}

// addSpare makes sure the pool holds a free file, creating one (an
// empty record) when it holds none, so that the first volume the
// Mounter tracks writes its first record in place: creating a file
// costs a rename and, with syncing on, a file and a directory sync more
// than a write in place, which New pays once instead of a mount. Later
// growth of the pool is paid by the mount that needs the file.
func (s *store) addSpare() error {
	s.mu.Lock()
	if len(s.free) > 0 {
		s.mu.Unlock()
		return nil
	}
	f := &stateFile{num: s.next}
	s.next++
	s.mu.Unlock()
	if err := s.create(f, nil); err != nil {
		return fmt.Errorf("create a free state file %s: %w", s.path(f), err)
	}
	// Opened now, so that the first mount only writes.
	if _, err := s.open(f); err != nil {
		return fmt.Errorf("open the free state file %s: %w", s.path(f), err)
	}
	s.mu.Lock()
	s.free = append(s.free, f)
	s.mu.Unlock()
	return nil
}

// readState reads one file of the pool: its newest record (nil for a
// free file), the file's state, and the record's generation, the
// highest of the file's valid slots.
func (s *store) readState(p string, num int) (*volumeRecord, *stateFile, uint64, error) {
	data, err := quietfs.ReadFile(p)
	if err != nil {
		return nil, nil, 0, &StateError{Path: p, Reason: "cannot read", Err: err}
	}
	size, slot, gen, record, err := slotted(data)
	if err != nil {
		return nil, nil, 0, &StateError{Path: p, Reason: err.Error()}
	}
	f := &stateFile{num: num, slotSize: size, stable: slot, unsure: s.sync}
	if len(record) == 0 {
		return nil, f, gen, nil
	}
	bad := func(err error) error {
		return &StateError{Path: p, Reason: fmt.Sprintf("slot %d (generation %d) is not a valid record", slot, gen), Err: err}
	}
	rec := new(volumeRecord)
	if err := decodeStrict(record, rec); err != nil {
		return nil, nil, 0, bad(err)
	}
	if err := csi.ValidateNamespace(rec.Namespace); err != nil {
		return nil, nil, 0, bad(err)
	}
	if err := csi.ValidateVolumeID(rec.VolumeID); err != nil {
		return nil, nil, 0, bad(err)
	}
	if err := rec.check(rec.Namespace, rec.VolumeID); err != nil {
		return nil, nil, 0, bad(err)
	}
	return rec, f, gen, nil
}

// loadLegacy reads the version 1 and 2 files of volumes that have no
// record in the pool into out, and removes those of volumes that have.
func (s *store) loadLegacy(out map[volKey]*volumeRecord) error {
	nss, err := os.ReadDir(s.legacyDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return &StateError{Path: s.legacyDir, Reason: "cannot list the state directory", Err: err}
	}
	for _, ns := range nss {
		nsDir := filepath.Join(s.legacyDir, ns.Name())
		if !ns.IsDir() || csi.ValidateNamespace(ns.Name()) != nil {
			s.logger.Warn("ignoring unexpected entry in the mounter state directory", "path", nsDir)
			continue
		}
		files, err := os.ReadDir(nsDir)
		if err != nil {
			return &StateError{Path: nsDir, Reason: "cannot list the namespace directory", Err: err}
		}
		for _, f := range files {
			p := filepath.Join(nsDir, f.Name())
			name := f.Name()
			switch {
			case strings.HasSuffix(name, tempExt) && f.Type().IsRegular():
				s.logger.Debug("removing an interrupted state write", "path", p)
				if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return &StateError{Path: p, Reason: "cannot remove a leftover temporary file", Err: err}
				}
				continue
			case !strings.HasSuffix(name, legacyExt):
				s.logger.Warn("ignoring unexpected entry in the mounter state directory", "path", p)
				continue
			}
			volumeID := strings.TrimSuffix(name, legacyExt)
			if err := csi.ValidateVolumeID(volumeID); err != nil {
				return &StateError{Path: p, Reason: "the file name is not a valid volume ID", Err: err}
			}
			if !f.Type().IsRegular() {
				return &StateError{Path: p, Reason: "is not a regular file"}
			}
			k := volKey{ns.Name(), volumeID}
			if out[k] != nil {
				s.logger.Info("removing a mount state file that a version 3 record replaced", "path", p)
				if err := s.removeLegacy(p); err != nil {
					return &StateError{Path: p, Reason: "cannot remove a superseded state file", Err: err}
				}
				continue
			}
			rec, err := s.readLegacy(p, ns.Name(), volumeID)
			if err != nil {
				return err
			}
			out[k] = rec
			s.vols[k] = &volFiles{legacy: p}
		}
	}
	return nil
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
		return nil, &StateError{Path: p, Reason: fmt.Sprintf("has format version %d; this build reads versions 1 and 2 from volumes/<namespace>/<volume>.json files and version %d from records/<n>.state files (written by another csikit version, or not a mounter state file?)", head.Version, formatVersion)}
	}
	if err := rec.check(namespace, volumeID); err != nil {
		return nil, &StateError{Path: p, Reason: "is not a valid record", Err: err}
	}
	s.logger.Info("read a version 1 or 2 mount state file; the volume's next change moves it to a version 3 record",
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
