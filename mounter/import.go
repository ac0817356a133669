package mounter

import (
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hashicorp/go-hclog"
	bolt "go.etcd.io/bbolt"

	"github.com/csikit/csikit/csi"
)

// Older versions kept the records in files of their own, which New
// imports once into the database and then removes:
//
//	<StateDir>/volumes/<namespace>/<volume>.json  versions 1 and 2: the record in plain JSON
//	<StateDir>/records/<n>.state                  version 3: two slots of a record each
//
// A version 3 file is two slots of S bytes; a slot is a 32-byte header
// (little-endian: magic "csikitMS", version 3, S, generation, record
// length L, CRC-32C of bytes 0-27 and the record) and L bytes of
// record. The valid slot with the higher generation holds the file's
// record (L = 0: a free file); of two files naming one volume the
// higher generation wins, and slot files win over JSON files.
const (
	jsonDir   = "volumes"
	slotDir   = "records"
	slotMagic = "csikitMS"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// importOld adds the records of older files to recs, vals and the
// database in one synced transaction, then removes the files. A file
// that cannot be read fails New, and nothing is imported. A volume the
// database already holds keeps its record: its file is the leftover of
// an import cut short.
func (s *store) importOld(dir string, recs map[volKey]*volumeRecord, vals map[string][]byte) error {
	found, done, err := readOldFiles(dir, s.logger)
	if err != nil || len(done) == 0 {
		return err
	}
	add := map[string][]byte{}
	for k, rec := range found {
		if recs[k] == nil {
			key, data, err := encode(k, rec)
			if err != nil {
				return err
			}
			recs[k], vals[string(key)], add[string(key)] = rec, data, data
		}
	}
	// Not through update: the import's commit is not marked as ours, so
	// that notes of this boot (older than the files) are dropped.
	if err := s.db.Update(func(tx *bolt.Tx) error { return putAll(tx.Bucket(volumesBucket), add) }); err != nil {
		return &StateError{Path: s.db.Path(), Reason: "cannot import the older state files", Err: err}
	}
	for _, p := range done {
		if err := os.Remove(p); err != nil {
			s.logger.Warn("cannot remove an imported mount state file; the next start does", "path", p, "error", err)
		}
	}
	for _, d := range []string{slotDir, jsonDir} {
		removeEmptyTree(filepath.Join(dir, d))
	}
	s.logger.Info("imported older mount state files into the state database", "files", len(done), "volumes", len(add))
	return nil
}

// removeEmptyTree removes dir and the empty directories below it.
func removeEmptyTree(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.IsDir() {
			removeEmptyTree(filepath.Join(dir, e.Name()))
		}
	}
	_ = os.Remove(dir)
}

// readOldFiles returns the records of the version 1 to 3 files in dir,
// and every file read (leftover temporary files too).
func readOldFiles(dir string, logger hclog.Logger) (map[volKey]*volumeRecord, []string, error) {
	found, gens := map[volKey]*volumeRecord{}, map[volKey]uint64{}
	var done []string
	err := eachFile(filepath.Join(dir, slotDir), ".state", logger, &done, func(p, _ string, data []byte) error {
		gen, record, err := newestSlot(data)
		if err != nil {
			return &StateError{Path: p, Reason: err.Error()}
		}
		if len(record) == 0 {
			return nil // a free file
		}
		rec, err := decodeRecord(record)
		if err != nil {
			return &StateError{Path: p, Reason: fmt.Sprintf("generation %d is not a valid record", gen), Err: err}
		}
		if k := rec.key(); gen > gens[k] {
			gens[k], found[k] = gen, rec
		}
		return nil
	})
	nss, lerr := listDir(filepath.Join(dir, jsonDir))
	for _, ns := range nss {
		nsDir := filepath.Join(dir, jsonDir, ns.Name())
		if !ns.IsDir() || csi.ValidateNamespace(ns.Name()) != nil {
			logger.Warn("ignoring unexpected entry in the mounter state directory", "path", nsDir)
			continue
		}
		err = cmp.Or(err, eachFile(nsDir, ".json", logger, &done, func(p, volumeID string, data []byte) error {
			if err := csi.ValidateVolumeID(volumeID); err != nil {
				return &StateError{Path: p, Reason: "the file name is not a valid volume ID", Err: err}
			}
			k := volKey{ns.Name(), volumeID}
			if found[k] != nil {
				return nil // slot files win
			}
			rec, err := readJSONRecord(p, k, data)
			found[k] = rec
			return err
		}))
	}
	return found, done, cmp.Or(err, lerr)
}

func listDir(dir string) ([]os.DirEntry, error) {
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, &StateError{Path: dir, Reason: "cannot list the state directory", Err: err}
	}
	return entries, nil
}

// eachFile calls fn with each regular file in dir named <stem><suffix>
// and adds it to done, as it does leftover temporary files, unread.
func eachFile(dir, suffix string, logger hclog.Logger, done *[]string, fn func(p, stem string, data []byte) error) error {
	entries, err := listDir(dir)
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		stem, ok := strings.CutSuffix(e.Name(), suffix)
		switch {
		case strings.HasSuffix(e.Name(), ".tmp") && e.Type().IsRegular():
			*done = append(*done, p)
		case !ok:
			logger.Warn("ignoring unexpected entry in the mounter state directory", "path", p)
		case !e.Type().IsRegular():
			return &StateError{Path: p, Reason: "is not a regular file"}
		default:
			data, err := os.ReadFile(p)
			if err != nil {
				return &StateError{Path: p, Reason: "cannot read", Err: err}
			}
			if err := fn(p, stem, data); err != nil {
				return err
			}
			*done = append(*done, p)
		}
	}
	return err
}

// newestSlot returns the newest valid slot of a version 3 file.
func newestSlot(data []byte) (gen uint64, record []byte, err error) {
	if len(data) == 0 || len(data)%8192 != 0 {
		return 0, nil, fmt.Errorf("is %d bytes long; a version 3 file is two equal slots of a multiple of 4096 bytes", len(data))
	}
	size, le := len(data)/2, binary.LittleEndian
	for i := range 2 {
		slot := data[i*size : (i+1)*size]
		n := int64(le.Uint32(slot[24:]))
		if string(slot[:8]) != slotMagic || le.Uint32(slot[8:]) != formatVersion || int(le.Uint32(slot[12:])) != size || n > int64(size-32) {
			continue
		}
		r := slot[32 : 32+n]
		sum := crc32.Update(crc32.Checksum(slot[:28], castagnoli), castagnoli, r)
		if g := le.Uint64(slot[16:]); le.Uint32(slot[28:]) == sum && g > gen {
			gen, record = g, r
		}
	}
	if gen == 0 {
		return 0, nil, errors.New("has no valid slot (a torn or damaged write)")
	}
	return gen, record, nil
}

// readJSONRecord reads a version 1 or 2 file, named after volume k.
func readJSONRecord(p string, k volKey, data []byte) (*volumeRecord, error) {
	// The version alone first, so that a file of another format is
	// reported as such rather than as a field this build does not know.
	var head struct{ Version int }
	if err := json.Unmarshal(data, &head); err != nil {
		return nil, &StateError{Path: p, Reason: "is not a valid record", Err: err}
	}
	if head.Version != 1 && head.Version != 2 {
		return nil, &StateError{Path: p, Reason: fmt.Sprintf("has format version %d; this build imports versions 1 and 2 from volumes/<namespace>/<volume>.json files and keeps version %d records in %s (written by another csikit version, or not a mounter state file?)", head.Version, formatVersion, dbName)}
	}
	// Version 1 records have Usages instead of Stages.
	var r struct {
		volumeRecord
		Usages map[Usage]*usageV1
	}
	err := decodeStrict(data, &r)
	if err == nil && (head.Version == 1 && r.Stages != nil || head.Version == 2 && r.Usages != nil) {
		err = errors.New("holds fields of the other version")
	}
	if err != nil {
		return nil, &StateError{Path: p, Reason: fmt.Sprintf("is not a valid version %d record", head.Version), Err: err}
	}
	rec := &r.volumeRecord
	if head.Version == 1 {
		if err := rec.upgrade(r.Usages); err != nil {
			return nil, &StateError{Path: p, Reason: "is a version 1 record that cannot be upgraded", Err: err}
		}
	}
	rec.Version = formatVersion
	if err := rec.check(k.namespace, k.volumeID); err != nil {
		return nil, &StateError{Path: p, Reason: "is not a valid record", Err: err}
	}
	return rec, nil
}

// usageV1 is a usage of a version 1 record: one stage per full usage.
type usageV1 struct {
	Stage       stageState              `json:",omitempty"`
	StagingPath string                  `json:",omitempty"`
	Allocations map[string]*allocRecord `json:",omitempty"`
}

// upgrade sets r's stages from a version 1 record's usages, merging
// those that share a stage usage; it fails if two may both be staged.
func (r *volumeRecord) upgrade(usages map[Usage]*usageV1) error {
	r.Stages = map[StageUsage]*stageRecord{}
	for _, usage := range slices.SortedFunc(maps.Keys(usages), func(a, b Usage) int { return strings.Compare(a.String(), b.String()) }) {
		u, sk := usages[usage], usage.StageUsage()
		if u == nil {
			return fmt.Errorf("usage %s has no record", usage)
		}
		s := r.Stages[sk]
		if s == nil {
			s = &stageRecord{}
			r.Stages[sk] = s
		}
		if u.Stage != stageNone || u.StagingPath != "" {
			if s.Stage != stageNone || s.StagingPath != "" {
				return fmt.Errorf("two usages of stage %s may both be staged, at %s and %s; this version stages a volume at one path per node and cannot take them over: unmount their allocations with the csikit version that wrote the file (or by hand) first",
					sk, s.StagingPath, u.StagingPath)
			}
			s.Stage, s.StagingPath = u.Stage, u.StagingPath
		}
		for id, a := range u.Allocations {
			if a == nil {
				return fmt.Errorf("usage %s: allocation %s has no record", usage, id)
			}
			s.setPub(usage.ClaimMode, id, a)
		}
	}
	return nil
}
