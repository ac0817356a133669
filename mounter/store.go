package mounter

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	bolt "go.etcd.io/bbolt"

	"github.com/csikit/csikit/csi"
)

// dbName is the database file in Config.StateDir.
const dbName = "mounter.db"

// volumesBucket holds one key per tracked volume, "<namespace>/<volume
// ID>" (IDs never hold a '/'), whose value is the volumeRecord in JSON.
var volumesBucket = []byte("volumes")

// batchDelay is how long bbolt's Batch waits for more writers before it
// commits: about one fdatasync, the time the writer ahead of it holds
// the lock anyway. bbolt's default of 10ms would be paid by every mount
// that overlaps another.
const batchDelay = time.Millisecond

// store keeps the volume records in one bbolt database (see the package
// doc). save, note and drop for one volume are never called
// concurrently (the Mounter holds the volume's lock); for different
// volumes they are, and share bbolt's single writer.
type store struct {
	db     *bolt.DB
	dir    string
	sync   bool
	logger hclog.Logger

	writers atomic.Int32  // writes in flight
	lastTx  atomic.Uint64 // the highest write transaction counted
	commits atomic.Uint64 // synced commits
}

// newStore opens (creating) the database in stateDir. One that bbolt
// cannot read is a *StateError; one that another Mounter holds fails
// after a second, with an error that says so.
func newStore(stateDir string, sync bool, logger hclog.Logger) (*store, error) {
	if err := ensureDir(stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("create mounter state directory %s: %w", stateDir, err)
	}
	p := filepath.Join(stateDir, dbName)
	// NoFreelistSync: a commit does not write the free list, which Open
	// rebuilds by walking the database: a few pages for a node's
	// volumes. Timeout: a previous agent still stopping gets a second.
	db, err := bolt.Open(p, 0o600, &bolt.Options{Timeout: time.Second, NoSync: !sync, NoFreelistSync: true})
	if errors.Is(err, bolt.ErrTimeout) {
		// Not corrupt: in use. Retrying once the other holder has gone
		// (a previous agent still stopping) is safe.
		return nil, fmt.Errorf("state database %s is locked by another process (a second node agent on the same state directory, or one still stopping?): %w", p, err)
	}
	if err != nil {
		return nil, &StateError{Path: p, Reason: "cannot open the state database", Err: err}
	}
	db.MaxBatchDelay = batchDelay
	return &store{db: db, dir: stateDir, sync: sync, logger: logger}, nil
}

func (s *store) close() error { return s.db.Close() }

func volumeKey(namespace, volumeID string) []byte { return []byte(namespace + "/" + volumeID) }

// update runs fn in a write transaction, synced unless NoSync. A lone
// writer commits at once (Update); with syncing on, one that finds
// another writing joins bbolt's Batch, which commits every waiting
// writer's fn in one transaction and one sync. (Without syncs a commit
// costs microseconds, less than Batch's wait.) fn may run more than
// once (Batch retries a batch without the fn that failed), so it only
// puts or deletes.
func (s *store) update(fn func(*bolt.Tx) error) error {
	count := func(tx *bolt.Tx) error {
		id := uint64(tx.ID())
		for {
			last := s.lastTx.Load()
			if id <= last {
				break
			}
			if s.lastTx.CompareAndSwap(last, id) {
				if s.sync {
					s.commits.Add(1)
				}
				break
			}
		}
		return fn(tx)
	}
	defer s.writers.Add(-1)
	if s.writers.Add(1) > 1 && s.sync {
		return s.db.Batch(count)
	}
	return s.db.Update(count)
}

// save writes rec durably: once it returns nil, a crash of the agent or
// of the OS leaves rec or a later record of the volume.
func (s *store) save(rec *volumeRecord) error { return s.put(rec) }

// note writes rec, which narrows the last saved record. It is written
// like save (bbolt has no cheaper durable-enough path: an unsynced
// commit may leave a database that an OS crash corrupts), but the
// Mounter only logs its failure: losing it is safe.
func (s *store) note(rec *volumeRecord) error { return s.put(rec) }

func (s *store) put(rec *volumeRecord) error {
	rec.Version = formatVersion
	data, err := json.Marshal(rec)
	if err != nil {
		return &persistError{path: s.db.Path(), err: err}
	}
	k := volumeKey(rec.Namespace, rec.VolumeID)
	if err := s.update(func(tx *bolt.Tx) error { return tx.Bucket(volumesBucket).Put(k, data) }); err != nil {
		return &persistError{path: s.db.Path(), err: err}
	}
	return nil
}

// drop forgets a volume that tracks nothing any more. durable is the
// Mounter's wish that the removal survive an OS crash; every commit is
// synced (unless NoSync), so it is always met.
func (s *store) drop(namespace, volumeID string, durable bool) error {
	_ = durable
	k := volumeKey(namespace, volumeID)
	if err := s.update(func(tx *bolt.Tx) error { return tx.Bucket(volumesBucket).Delete(k) }); err != nil {
		return &persistError{path: s.db.Path(), err: err}
	}
	return nil
}

// load reads every record, after importing the files of older versions
// (import.go). A record that cannot be read or validated fails the
// whole load with a *StateError: forgetting a record could leak a mount
// or unstage a volume still in use.
func (s *store) load() (recs map[volKey]*volumeRecord, err error) {
	p := s.db.Path()
	defer func() {
		// bbolt panics on some damaged pages rather than failing.
		if r := recover(); r != nil {
			recs, err = nil, &StateError{Path: p, Reason: "is damaged", Err: fmt.Errorf("%v", r)}
		}
	}()
	recs = map[volKey]*volumeRecord{}
	err = s.db.View(func(tx *bolt.Tx) error {
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
		return b.ForEach(func(k, v []byte) error {
			rec, err := decodeRecord(v)
			if err == nil && !bytes.Equal(k, volumeKey(rec.Namespace, rec.VolumeID)) {
				err = fmt.Errorf("holds volume %s/%s", rec.Namespace, rec.VolumeID)
			}
			if err != nil {
				return &StateError{Path: p, Reason: fmt.Sprintf("record %q is not valid", k), Err: err}
			}
			recs[volKey{rec.Namespace, rec.VolumeID}] = rec
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	// Created only when missing: a start writes nothing to a database
	// it refuses, nor to one it only reads.
	var missing bool
	_ = s.db.View(func(tx *bolt.Tx) error { missing = tx.Bucket(volumesBucket) == nil; return nil })
	if missing {
		if err := s.db.Update(func(tx *bolt.Tx) error {
			_, err := tx.CreateBucket(volumesBucket)
			return err
		}); err != nil {
			return nil, &StateError{Path: p, Reason: "cannot prepare the state database", Err: err}
		}
	}
	if err := s.importOld(recs); err != nil {
		return nil, err
	}
	return recs, nil
}

// decodeRecord reads a record that names its volume itself (in the
// database, or in a slot file) and validates it.
func decodeRecord(v []byte) (*volumeRecord, error) {
	rec := new(volumeRecord)
	if err := decodeStrict(v, rec); err != nil {
		return nil, err
	}
	if err := csi.ValidateNamespace(rec.Namespace); err != nil {
		return nil, err
	}
	if err := csi.ValidateVolumeID(rec.VolumeID); err != nil {
		return nil, err
	}
	return rec, rec.check(rec.Namespace, rec.VolumeID)
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

// removeSynced removes a file and, when syncing, syncs its directory.
func (s *store) removeSynced(p string) error {
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if !s.sync {
		return nil
	}
	d, err := os.Open(filepath.Dir(p))
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
