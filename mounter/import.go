package mounter

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"

	bolt "go.etcd.io/bbolt"

	"github.com/csikit/csikit/csi"
)

// Older versions kept the records in files of their own, which New
// imports once into the database and then removes:
//
//	<StateDir>/volumes/<namespace>/<volume>.json  versions 1 and 2: the record in plain JSON
//	<StateDir>/records/<n>.state                  version 3: two slots, each a header and the record
//
// A version 3 slot is a 32-byte header (little-endian: magic
// "csikitMS", format version 3, slot size S, generation, record length
// L, CRC-32C of bytes 0-27 and the record) and L bytes of record; a
// file is two slots of S bytes. The valid slot with the higher
// generation holds the file's record (L = 0: a free file), and of two
// files naming one volume the higher generation wins. Pool records win
// over version 1 and 2 files. A file that cannot be read fails New and
// nothing is imported.
const (
	legacyDir      = "volumes"
	poolDir        = "records"
	slotMagic      = "csikitMS"
	slotHeaderSize = 32
	minSlotSize    = 4096
)

// importOld adds the records of older files to recs and to the
// database (in one synced transaction), then removes the files. A
// volume the database already holds keeps its record: its file is a
// leftover of an import whose removals were cut short.
func (s *store) importOld(recs map[volKey]*volumeRecord) error {
	found := map[volKey]*volumeRecord{}
	var done []string // files read, removed after the import
	pool, err := s.readPool(found, &done)
	if err != nil {
		return err
	}
	if err := s.readLegacy(found, pool, &done); err != nil {
		return err
	}
	if len(done) == 0 {
		return nil
	}
	var add []*volumeRecord
	for k, rec := range found {
		if recs[k] == nil {
			recs[k] = rec
			add = append(add, rec)
		}
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(volumesBucket)
		for _, rec := range add {
			data, err := json.Marshal(rec)
			if err != nil {
				return err
			}
			if err := b.Put(volumeKey(rec.Namespace, rec.VolumeID), data); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return &StateError{Path: s.db.Path(), Reason: "cannot import the older state files", Err: err}
	}
	for _, p := range done {
		if err := s.removeSynced(p); err != nil {
			s.logger.Warn("cannot remove an imported mount state file; the next start does", "path", p, "error", err)
		}
	}
	for _, d := range []string{filepath.Join(s.dir, poolDir), filepath.Join(s.dir, legacyDir)} {
		removeEmptyTree(d)
	}
	s.logger.Info("imported older mount state files into the state database", "files", len(done), "volumes", len(add))
	return nil
}

// removeEmptyTree removes dir and the directories below it that are
// empty; anything an operator left there stays.
func removeEmptyTree(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.IsDir() {
			removeEmptyTree(filepath.Join(dir, e.Name()))
		}
	}
	_ = os.Remove(dir)
}

// readPool reads the version 3 files into found and returns the
// volumes they hold.
func (s *store) readPool(found map[volKey]*volumeRecord, done *[]string) (map[volKey]bool, error) {
	dir := filepath.Join(s.dir, poolDir)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, &StateError{Path: dir, Reason: "cannot list the state directory", Err: err}
	}
	gens := map[volKey]uint64{}
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		switch {
		case strings.HasSuffix(e.Name(), ".tmp"):
			*done = append(*done, p)
			continue
		case !strings.HasSuffix(e.Name(), ".state"):
			s.logger.Warn("ignoring unexpected entry in the mounter state directory", "path", p)
			continue
		case !e.Type().IsRegular():
			return nil, &StateError{Path: p, Reason: "is not a regular file"}
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, &StateError{Path: p, Reason: "cannot read", Err: err}
		}
		gen, record, err := newestSlot(data)
		if err != nil {
			return nil, &StateError{Path: p, Reason: err.Error()}
		}
		*done = append(*done, p)
		if len(record) == 0 {
			continue
		}
		rec, err := decodeRecord(record)
		if err != nil {
			return nil, &StateError{Path: p, Reason: fmt.Sprintf("generation %d is not a valid record", gen), Err: err}
		}
		k := volKey{rec.Namespace, rec.VolumeID}
		if gen > gens[k] {
			gens[k], found[k] = gen, rec
		}
	}
	pool := map[volKey]bool{}
	for k := range gens {
		pool[k] = true
	}
	return pool, nil
}

// newestSlot returns the generation and record of the newest valid
// slot of a version 3 file.
func newestSlot(data []byte) (uint64, []byte, error) {
	n := len(data)
	if n < 2*minSlotSize || n%(2*minSlotSize) != 0 {
		return 0, nil, fmt.Errorf("is %d bytes long; a version 3 file is two equal slots of a multiple of %d bytes", n, minSlotSize)
	}
	size := n / 2
	var gen uint64
	var record []byte
	var errs [2]error
	for i := range 2 {
		g, r, err := decodeSlot(data[i*size : (i+1)*size])
		switch {
		case err != nil:
			errs[i] = err
		case g == gen:
			return 0, nil, fmt.Errorf("has two records of generation %d", g)
		case g > gen:
			gen, record = g, r
		}
	}
	if gen == 0 {
		return 0, nil, fmt.Errorf("has no valid slot (slot 0: %v; slot 1: %v)", errs[0], errs[1])
	}
	return gen, record, nil
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func decodeSlot(slot []byte) (uint64, []byte, error) {
	le := binary.LittleEndian
	switch {
	case string(slot[:len(slotMagic)]) != slotMagic:
		return 0, nil, errors.New("no slot header")
	case le.Uint32(slot[8:]) != formatVersion:
		return 0, nil, fmt.Errorf("format version %d; version 3 files hold version 3 slots", le.Uint32(slot[8:]))
	case int64(le.Uint32(slot[12:])) != int64(len(slot)):
		return 0, nil, fmt.Errorf("written for %d-byte slots, but the file's size makes them %d bytes", le.Uint32(slot[12:]), len(slot))
	case le.Uint64(slot[16:]) == 0:
		return 0, nil, errors.New("generation 0")
	case int64(le.Uint32(slot[24:])) > int64(len(slot)-slotHeaderSize):
		return 0, nil, fmt.Errorf("record length %d overflows the slot", le.Uint32(slot[24:]))
	}
	record := slot[slotHeaderSize : slotHeaderSize+int(le.Uint32(slot[24:]))]
	sum := crc32.Update(crc32.Checksum(slot[:28], castagnoli), castagnoli, record)
	if le.Uint32(slot[28:]) != sum {
		return 0, nil, errors.New("checksum mismatch (a torn or damaged write)")
	}
	return le.Uint64(slot[16:]), record, nil
}

// readLegacy reads the version 1 and 2 files of volumes that the pool
// does not hold into found.
func (s *store) readLegacy(found map[volKey]*volumeRecord, pool map[volKey]bool, done *[]string) error {
	root := filepath.Join(s.dir, legacyDir)
	nss, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return &StateError{Path: root, Reason: "cannot list the state directory", Err: err}
	}
	for _, ns := range nss {
		nsDir := filepath.Join(root, ns.Name())
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
			switch {
			case strings.HasSuffix(f.Name(), ".tmp") && f.Type().IsRegular():
				*done = append(*done, p)
				continue
			case !strings.HasSuffix(f.Name(), ".json"):
				s.logger.Warn("ignoring unexpected entry in the mounter state directory", "path", p)
				continue
			}
			volumeID := strings.TrimSuffix(f.Name(), ".json")
			if err := csi.ValidateVolumeID(volumeID); err != nil {
				return &StateError{Path: p, Reason: "the file name is not a valid volume ID", Err: err}
			}
			if !f.Type().IsRegular() {
				return &StateError{Path: p, Reason: "is not a regular file"}
			}
			*done = append(*done, p)
			k := volKey{ns.Name(), volumeID}
			if pool[k] {
				continue
			}
			rec, err := readJSONRecord(p, ns.Name(), volumeID)
			if err != nil {
				return err
			}
			found[k] = rec
		}
	}
	return nil
}

// readJSONRecord reads a version 1 or 2 file.
func readJSONRecord(p, namespace, volumeID string) (*volumeRecord, error) {
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, &StateError{Path: p, Reason: "cannot read", Err: err}
	}
	// The version alone first, so that a file of another format is
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
		// Version 2 records are version 3 records.
		rec = new(volumeRecord)
		if err := decodeStrict(data, rec); err != nil {
			return nil, &StateError{Path: p, Reason: "is not a valid version 2 record", Err: err}
		}
		rec.Version = formatVersion
	default:
		return nil, &StateError{Path: p, Reason: fmt.Sprintf("has format version %d; this build imports versions 1 and 2 from volumes/<namespace>/<volume>.json files and keeps version %d records in %s (written by another csikit version, or not a mounter state file?)", head.Version, formatVersion, dbName)}
	}
	if err := rec.check(namespace, volumeID); err != nil {
		return nil, &StateError{Path: p, Reason: "is not a valid record", Err: err}
	}
	return rec, nil
}
