package mounter

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	bolt "go.etcd.io/bbolt"

	"github.com/csikit/csikit/csi"
)

// The state files (see the package doc).
const (
	dbName      = "mounter.db"
	notesPrefix = "notes-" // notes-<boot ID>.db
	bootIDFile  = "/proc/sys/kernel/random/boot_id"
)

// The buckets (see the package doc). A commit of another writer to
// mounter.db (an older version, which knows nothing of the notes)
// leaves "own" behind.
var volumesBucket, ownBucket = []byte("volumes"), []byte("own")

// batchDelay is how long bbolt's Batch waits for more writers: about
// one fdatasync, the time the writer ahead holds the lock anyway
// (bbolt's default of 10ms would be paid by every overlapping mount).
const batchDelay = time.Millisecond

// store keeps the volume records. Writes of one volume are never
// concurrent (the Mounter holds its lock); writes of different volumes
// are, and share each database's single writer.
type store struct {
	db     *bolt.DB // mounter.db: synced unless Config.NoSync
	notes  *bolt.DB // never synced; nil without a boot ID
	sync   bool
	logger hclog.Logger

	mu      sync.Mutex
	pending map[string][]byte // notes that db lacks, by key; nil: a removal

	writers atomic.Int32 // db writes in flight
	firstTx uint64       // db's last commit at open
}

func (k volKey) bytes() []byte { return []byte(k.namespace + "/" + k.volumeID) }

// openStore opens (creating) the state in dir, imports the files of
// older versions, and returns the records; notes asks for notes.
// mounter.db or an older file that cannot be read is a *StateError; a
// state that another Mounter holds fails after a second.
func openStore(dir string, sync, notes bool, logger hclog.Logger) (*store, map[volKey]*volumeRecord, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("create mounter state directory %s: %w", dir, err)
	}
	s := &store{sync: sync, logger: logger, pending: map[string][]byte{}}
	var err error
	if s.db, err = openDB(filepath.Join(dir, dbName), !sync); err != nil {
		return nil, nil, err
	}
	vals, recs, err := load(s.db)
	if err == nil && vals == nil { // never written to a database refused
		vals, recs = map[string][]byte{}, map[volKey]*volumeRecord{}
		if err = s.db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket(volumesBucket); return err }); err != nil {
			err = &StateError{Path: s.db.Path(), Reason: "cannot prepare the state database", Err: err}
		}
	}
	if err == nil {
		err = s.importOld(dir, recs, vals)
	}
	if err == nil {
		recs, err = s.openNotes(dir, recs, vals, notes)
	}
	if err != nil {
		_ = s.closeFiles()
		return nil, nil, err
	}
	s.firstTx = s.lastTx()
	return s, recs, nil
}

func (s *store) lastTx() (id uint64) {
	_ = s.db.View(func(tx *bolt.Tx) error { id = uint64(tx.ID()); return nil })
	return id
}

// syncs counts db's synced commits since open.
func (s *store) syncs() uint64 {
	if !s.sync {
		return 0
	}
	return s.lastTx() - s.firstTx
}

func openDB(p string, noSync bool) (*bolt.DB, error) {
	// A commit does not write the free list, which Open rebuilds; a
	// previous agent still stopping gets a second.
	db, err := bolt.Open(p, 0o600, &bolt.Options{Timeout: time.Second, NoSync: noSync, NoGrowSync: noSync, NoFreelistSync: true})
	if errors.Is(err, bolt.ErrTimeout) {
		return nil, fmt.Errorf("state database %s is locked by another process (a second node agent on the same state directory, or one still stopping?): %w", p, err)
	}
	if err != nil {
		return nil, &StateError{Path: p, Reason: "cannot open the state database", Err: err}
	}
	db.MaxBatchDelay = batchDelay
	return db, nil
}

// load checks db and reads its records, by key and decoded; nil if it
// has no bucket yet. One bad record fails the load: forgetting it could
// leak a mount or unstage a volume in use.
func load(db *bolt.DB) (vals map[string][]byte, recs map[volKey]*volumeRecord, err error) {
	p := db.Path()
	defer func() {
		// bbolt panics on some damaged pages rather than failing.
		if r := recover(); r != nil {
			vals, recs, err = nil, nil, &StateError{Path: p, Reason: "is damaged", Err: fmt.Errorf("%v", r)}
		}
	}()
	err = db.View(func(tx *bolt.Tx) error {
		var bad error
		for cerr := range tx.Check() {
			bad = cmp.Or(bad, cerr) // drained: Check's goroutine ends with it
		}
		if bad != nil {
			return &StateError{Path: p, Reason: "fails bbolt's consistency check", Err: bad}
		}
		b := tx.Bucket(volumesBucket)
		if b == nil {
			return nil
		}
		vals, recs = map[string][]byte{}, map[volKey]*volumeRecord{}
		return b.ForEach(func(k, v []byte) error {
			rec, err := decodeRecord(v)
			if err == nil && !bytes.Equal(k, rec.key().bytes()) {
				err = fmt.Errorf("holds volume %s/%s", rec.Namespace, rec.VolumeID)
			}
			if err != nil {
				return &StateError{Path: p, Reason: fmt.Sprintf("record %q is not valid", k), Err: err}
			}
			vals[string(k)], recs[rec.key()] = bytes.Clone(v), rec
			return nil
		})
	})
	return vals, recs, err
}

// decodeRecord reads and validates a record of a database or a slot
// file.
func decodeRecord(v []byte) (*volumeRecord, error) {
	rec := new(volumeRecord)
	if err := decodeStrict(v, rec); err != nil {
		return nil, err
	}
	return rec, cmp.Or(csi.ValidateNamespace(rec.Namespace), csi.ValidateVolumeID(rec.VolumeID), rec.check(rec.Namespace, rec.VolumeID))
}

// decodeStrict decodes one JSON value, refusing unknown fields and
// trailing data.
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

// openNotes opens this boot's notes. If db's last commit is ours, they
// hold every write since and are what the Mounter loads (db catches up
// with its next commit). Otherwise, or if they cannot be read, they go
// unread, and new notes start as a copy of db. Without a boot ID, or
// unless enabled, there are no notes, and old ones go.
func (s *store) openNotes(dir string, recs map[volKey]*volumeRecord, vals map[string][]byte, enabled bool) (map[volKey]*volumeRecord, error) {
	p := ""
	if boot, err := os.ReadFile(bootIDFile); err == nil && enabled {
		p = filepath.Join(dir, notesPrefix+strings.TrimSpace(string(boot))+".db")
	}
	var ours bool
	_ = s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(ownBucket)
		ours = b != nil && bytes.Equal(b.Get(ownBucket), binary.BigEndian.AppendUint64(nil, uint64(tx.ID())))
		return nil
	})
	old, _ := filepath.Glob(filepath.Join(dir, notesPrefix+"*.db"))
	for _, o := range old {
		if o != p || !ours {
			_ = os.Remove(o)
		}
	}
	if p == "" {
		return recs, nil
	}
	var notes map[string][]byte
	var err error
	var nrecs map[volKey]*volumeRecord
	if s.notes, err = openDB(p, true); err == nil {
		notes, nrecs, err = load(s.notes)
	}
	if err == nil && notes != nil {
		for k, v := range notes {
			s.pending[k] = v
		}
		for k := range vals {
			if _, ok := notes[k]; !ok {
				s.pending[k] = nil
			}
		}
		return nrecs, nil
	}
	if err != nil {
		s.logger.Warn("dropping the state notes; starting from the state database", "path", p, "error", err)
		if s.notes != nil {
			_ = s.notes.Close()
		}
		_ = os.Remove(p)
		if s.notes, err = openDB(p, true); err != nil {
			return nil, err
		}
	}
	err = s.notes.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket(volumesBucket)
		return cmp.Or(err, putAll(b, vals))
	})
	if err != nil {
		return nil, &StateError{Path: p, Reason: "cannot prepare the state notes", Err: err}
	}
	return recs, nil
}

// save writes the volume's record (nil: it tracks nothing) so that no
// crash loses it: to db, with the notes db lacks, then to the notes. A
// write that fails gives the notes back for the next.
func (s *store) save(k volKey, rec *volumeRecord) error {
	key, data, err := encode(k, rec)
	if err == nil {
		var pend map[string][]byte // never nil once taken
		err = s.update(func(b *bolt.Bucket) error {
			if pend == nil { // fn may run again (see update): the same notes
				pend = s.takePending()
			}
			if err := putAll(b, pend); err != nil {
				return err
			}
			return put(b, key, data) // newer than a note of k
		})
		if err != nil {
			s.givePending(pend)
		}
	}
	if err == nil && s.notes != nil {
		err = s.putNote(key, data)
	}
	if err != nil {
		return &persistError{path: s.db.Path(), err: err}
	}
	return nil
}

// note writes the volume's record, which narrows the last one saved, to
// the notes alone: an agent crash keeps it, an OS crash may lose it,
// and db gets it with its next commit. Without notes it is a save.
func (s *store) note(k volKey, rec *volumeRecord) error {
	if s.notes == nil {
		return s.save(k, rec)
	}
	key, data, err := encode(k, rec)
	if err == nil {
		err = s.putNote(key, data)
	}
	if err != nil {
		return &persistError{path: s.notes.Path(), err: err}
	}
	s.mu.Lock()
	s.pending[string(key)] = data
	s.mu.Unlock()
	return nil
}

// takePending returns the notes db lacks, which are then the caller's
// to write.
func (s *store) takePending() map[string][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	pend := s.pending
	s.pending = map[string][]byte{}
	return pend
}

// givePending gives back notes taken for a write that failed, under
// the newer notes of their volumes.
func (s *store) givePending(pend map[string][]byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, v := range pend {
		if _, newer := s.pending[k]; !newer {
			s.pending[k] = v
		}
	}
}

func (s *store) putNote(key, data []byte) error {
	return s.notes.Update(func(tx *bolt.Tx) error { return put(tx.Bucket(volumesBucket), key, data) })
}

// update runs fn in a db write transaction and marks the commit as this
// version's. A lone writer commits at once (Update); with syncing on,
// one that finds another writing joins bbolt's Batch, which commits
// every waiting writer's fn with one sync. fn may run more than once
// (Batch retries a batch without the fn that failed).
func (s *store) update(fn func(*bolt.Bucket) error) error {
	count := func(tx *bolt.Tx) error {
		own, err := tx.CreateBucketIfNotExists(ownBucket)
		if err == nil {
			err = own.Put(ownBucket, binary.BigEndian.AppendUint64(nil, uint64(tx.ID())))
		}
		if err != nil {
			return err
		}
		return fn(tx.Bucket(volumesBucket))
	}
	defer s.writers.Add(-1)
	if s.writers.Add(1) > 1 && s.sync {
		return s.db.Batch(count)
	}
	return s.db.Update(count)
}

func encode(k volKey, rec *volumeRecord) ([]byte, []byte, error) {
	if rec == nil {
		return k.bytes(), nil, nil
	}
	rec.Version = formatVersion
	data, err := json.Marshal(rec)
	return k.bytes(), data, err
}

// putAll stores each value under its key; a nil value removes the key.
func putAll(b *bolt.Bucket, vals map[string][]byte) error {
	for k, v := range vals {
		if err := put(b, []byte(k), v); err != nil {
			return err
		}
	}
	return nil
}

func put(b *bolt.Bucket, k, v []byte) error {
	if v == nil {
		return b.Delete(k)
	}
	return b.Put(k, v)
}

// close writes the notes db lacks and closes both databases.
func (s *store) close() error {
	var err error
	if len(s.pending) > 0 {
		err = s.update(func(b *bolt.Bucket) error { return putAll(b, s.pending) })
	}
	return errors.Join(err, s.closeFiles())
}

func (s *store) closeFiles() error {
	var err error
	if s.notes != nil {
		err = s.notes.Close()
	}
	return errors.Join(err, s.db.Close())
}
