package mounter

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"github.com/csikit/csikit/csi"
)

// store persists volume records, one file per volume:
//
//	<StateDir>/volumes/<namespace>/<volume>.json
//
// A file is replaced atomically (write a temporary file, fsync it,
// rename it over the old one, fsync the directory), so a crash leaves
// either the old or the new record, never a torn one. One file per
// volume means a write touches only its own volume: operations on
// different volumes never wait for each other's writes.
type store struct {
	dir    string // <StateDir>/volumes
	sync   bool
	logger hclog.Logger

	fileSyncs atomic.Uint64
	dirSyncs  atomic.Uint64

	nsMu    sync.Mutex
	nsReady map[string]bool // namespace directories known to exist durably
}

const (
	recordExt = ".json"
	tempExt   = ".tmp"
)

func newStore(stateDir string, sync bool, logger hclog.Logger) (*store, error) {
	s := &store{dir: filepath.Join(stateDir, "volumes"), sync: sync, logger: logger, nsReady: map[string]bool{}}
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

// save writes rec atomically and durably.
func (s *store) save(rec *volumeRecord) error {
	nsDir := filepath.Join(s.dir, rec.Namespace)
	final := s.path(rec.Namespace, rec.VolumeID)
	if err := s.ensureNamespace(rec.Namespace, nsDir); err != nil {
		return &persistError{path: final, err: err}
	}
	rec.Version = formatVersion
	data, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return &persistError{path: final, err: err}
	}
	data = append(data, '\n')
	tmp := final + tempExt
	if err := s.writeFile(tmp, data); err != nil {
		_ = os.Remove(tmp)
		return &persistError{path: final, err: err}
	}
	// rename(2) straight: os.Rename first lstats the target, to refuse
	// a directory there, which rename(2) refuses by itself.
	if err := syscall.Rename(tmp, final); err != nil {
		_ = os.Remove(tmp)
		return &persistError{path: final, err: &os.LinkError{Op: "rename", Old: tmp, New: final, Err: err}}
	}
	if err := s.syncDir(nsDir); err != nil {
		return &persistError{path: final, err: err}
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
	p := s.path(namespace, volumeID)
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return &persistError{path: p, err: err}
	}
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
// temporary files (a write interrupted by a crash, whose rename never
// happened) are removed.
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
		files, err := os.ReadDir(nsDir)
		if err != nil {
			return nil, &StateError{Path: nsDir, Reason: "cannot list the namespace directory", Err: err}
		}
		for _, f := range files {
			p := filepath.Join(nsDir, f.Name())
			name := f.Name()
			switch {
			case strings.HasSuffix(name, tempExt) && f.Type().IsRegular():
				s.logger.Debug("removing an interrupted state write", "path", p)
				if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return nil, &StateError{Path: p, Reason: "cannot remove a leftover temporary file", Err: err}
				}
				continue
			case !strings.HasSuffix(name, recordExt):
				s.logger.Warn("ignoring unexpected entry in the mounter state directory", "path", p)
				continue
			}
			volumeID := strings.TrimSuffix(name, recordExt)
			if err := csi.ValidateVolumeID(volumeID); err != nil {
				return nil, &StateError{Path: p, Reason: "the file name is not a valid volume ID", Err: err}
			}
			if !f.Type().IsRegular() {
				return nil, &StateError{Path: p, Reason: "is not a regular file"}
			}
			rec, err := s.readRecord(p, ns.Name(), volumeID)
			if err != nil {
				return nil, err
			}
			out[volKey{ns.Name(), volumeID}] = rec
		}
	}
	return out, nil
}

func (s *store) readRecord(p, namespace, volumeID string) (*volumeRecord, error) {
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
		s.logger.Info("read a version 1 mount state file; the volume's next change rewrites it as version 2", "path", p)
	case formatVersion:
		rec = new(volumeRecord)
		if err := decodeStrict(data, rec); err != nil {
			return nil, &StateError{Path: p, Reason: "is not a valid record", Err: err}
		}
	default:
		return nil, &StateError{Path: p, Reason: fmt.Sprintf("has format version %d; this build reads versions 1 and %d (written by another csikit version, or not a mounter state file?)", head.Version, formatVersion)}
	}
	if err := rec.check(namespace, volumeID); err != nil {
		return nil, &StateError{Path: p, Reason: "is not a valid record", Err: err}
	}
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
