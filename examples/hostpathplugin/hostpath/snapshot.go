package hostpath

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// snapshotsDirName holds one directory per snapshot: a copy of its
// source volume's directory when the snapshot was cut.
const snapshotsDirName = "snapshots"

// Snapshot IDs are "snap-" and 32 hex digits from crypto/rand, checked
// like volume IDs before they reach a path.
const snapshotIDPrefix = "snap-"

func newSnapshotID() string { return snapshotIDPrefix + newVolumeID()[len(volumeIDPrefix):] }

func validSnapshotID(id string) bool {
	return len(id) > len(snapshotIDPrefix) && id[:len(snapshotIDPrefix)] == snapshotIDPrefix &&
		validVolumeID(volumeIDPrefix+id[len(snapshotIDPrefix):])
}

// snapshotRecord is one snapshot in controller.json. Ready is false
// from the record's save until its directory is complete, so a crash
// in between is finished by the next CreateSnapshot of the name.
type snapshotRecord struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Source    string    `json:"source_volume_id"`
	SizeBytes int64     `json:"size_bytes"`
	CreatedAt time.Time `json:"created_at"`
	Ready     bool      `json:"ready"`
}

func (s *snapshotRecord) toProto() *csipb.Snapshot {
	return &csipb.Snapshot{SnapshotId: s.ID, SourceVolumeId: s.Source, SizeBytes: s.SizeBytes,
		CreationTime: timestamppb.New(s.CreatedAt), ReadyToUse: s.Ready}
}

func (c *controller) snapshotDir(id string) string {
	return filepath.Join(c.cfg.DataDir, snapshotsDirName, id) // id is checked by validSnapshotID
}

func (c *controller) snapshot(id string) *snapshotRecord {
	if !validSnapshotID(id) {
		return nil
	}
	return c.st.Snapshots[id]
}

// CreateSnapshot copies the source volume's directory. A repeated
// request of the same name and source returns the same snapshot.
func (c *controller) CreateSnapshot(ctx context.Context, req *csipb.CreateSnapshotRequest) (*csipb.CreateSnapshotResponse, error) {
	name, src := req.GetName(), req.GetSourceVolumeId()
	switch {
	case name == "":
		return nil, status.Error(codes.InvalidArgument, "name is required")
	case src == "":
		return nil, status.Error(codes.InvalidArgument, "source_volume_id is required")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var s *snapshotRecord
	for _, o := range c.st.Snapshots {
		if o.Name == name {
			s = o
		}
	}
	if s != nil && s.Source != src {
		return nil, status.Errorf(codes.AlreadyExists, "snapshot %s named %q exists, of volume %s; use another name", s.ID, name, s.Source)
	}
	if s != nil && s.Ready {
		return &csipb.CreateSnapshotResponse{Snapshot: s.toProto()}, nil
	}
	v := c.volume(src)
	if v == nil {
		return nil, notFound(src)
	}
	if s == nil {
		s = &snapshotRecord{ID: newSnapshotID(), Name: name, Source: src, SizeBytes: v.CapacityBytes, CreatedAt: time.Now().UTC()}
		c.st.Snapshots[s.ID] = s
		if err := c.save(func() { delete(c.st.Snapshots, s.ID) }); err != nil {
			return nil, err
		}
	}
	if err := copyTree(c.volumeDir(src), c.snapshotDir(s.ID)); err != nil {
		return nil, internal("snapshot %s of volume %s: %v", s.ID, src, err)
	}
	s.Ready = true
	if err := c.save(func() { s.Ready = false }); err != nil {
		return nil, err
	}
	c.log.Info("snapshot created", "snapshot_id", s.ID, "name", name, "source_volume_id", src)
	return &csipb.CreateSnapshotResponse{Snapshot: s.toProto()}, nil
}

// DeleteSnapshot removes a snapshot; one that does not exist is done.
func (c *controller) DeleteSnapshot(ctx context.Context, req *csipb.DeleteSnapshotRequest) (*csipb.DeleteSnapshotResponse, error) {
	id := req.GetSnapshotId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "snapshot_id is required")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.snapshot(id)
	if s == nil {
		return &csipb.DeleteSnapshotResponse{}, nil
	}
	if err := os.RemoveAll(c.snapshotDir(id)); err != nil {
		return nil, internal("remove the directory of snapshot %s: %v", id, err)
	}
	delete(c.st.Snapshots, id)
	if err := c.save(func() { c.st.Snapshots[id] = s }); err != nil {
		return nil, err
	}
	c.log.Info("snapshot deleted", "snapshot_id", id)
	return &csipb.DeleteSnapshotResponse{}, nil
}

// ListSnapshots pages through the snapshots in ID order, filtered by
// snapshot ID or source volume; the token is the ID a page starts at.
func (c *controller) ListSnapshots(ctx context.Context, req *csipb.ListSnapshotsRequest) (*csipb.ListSnapshotsResponse, error) {
	if req.GetMaxEntries() < 0 {
		return nil, status.Errorf(codes.InvalidArgument, "max_entries is %d; it must not be negative", req.GetMaxEntries())
	}
	tok := req.GetStartingToken()
	if tok != "" && !validSnapshotID(tok) {
		return nil, status.Errorf(codes.Aborted, "starting_token %q was not issued by this plugin; start again with an empty token", tok)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var ids []string
	for _, id := range slices.Sorted(maps.Keys(c.st.Snapshots)) {
		s := c.st.Snapshots[id]
		if (req.GetSnapshotId() == "" || id == req.GetSnapshotId()) && (req.GetSourceVolumeId() == "" || s.Source == req.GetSourceVolumeId()) {
			ids = append(ids, id)
		}
	}
	start := sort.SearchStrings(ids, tok)
	end := len(ids)
	if n := int(req.GetMaxEntries()); n > 0 && start+n < end {
		end = start + n
	}
	resp := &csipb.ListSnapshotsResponse{}
	for _, id := range ids[start:end] {
		resp.Entries = append(resp.Entries, &csipb.ListSnapshotsResponse_Entry{Snapshot: c.st.Snapshots[id].toProto()})
	}
	if end < len(ids) {
		resp.NextToken = ids[end]
	}
	return resp, nil
}

// sourceRecord is the content source a volume was created from.
type sourceRecord struct {
	SnapshotID string `json:"snapshot_id,omitempty"`
	VolumeID   string `json:"volume_id,omitempty"`
}

func sourceFromProto(s *csipb.VolumeContentSource) *sourceRecord {
	switch {
	case s.GetSnapshot() != nil:
		return &sourceRecord{SnapshotID: s.GetSnapshot().GetSnapshotId()}
	case s.GetVolume() != nil:
		return &sourceRecord{VolumeID: s.GetVolume().GetVolumeId()}
	}
	return nil
}

func (s *sourceRecord) toProto() *csipb.VolumeContentSource {
	switch {
	case s == nil:
		return nil
	case s.SnapshotID != "":
		return &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Snapshot{Snapshot: &csipb.VolumeContentSource_SnapshotSource{SnapshotId: s.SnapshotID}}}
	}
	return &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Volume{Volume: &csipb.VolumeContentSource_VolumeSource{VolumeId: s.VolumeID}}}
}

func (s *sourceRecord) equal(o *sourceRecord) bool {
	return (s == nil) == (o == nil) && (s == nil || *s == *o)
}

// sourceDir checks a CreateVolume's content source and returns the
// directory to copy and the source's size; "" for none. c.mu is held.
func (c *controller) sourceDir(src *sourceRecord, r *csipb.CapacityRange) (string, int64, error) {
	var dir string
	var size int64
	switch {
	case src == nil:
		return "", 0, nil
	case src.SnapshotID != "":
		s := c.snapshot(src.SnapshotID)
		if s == nil {
			return "", 0, status.Errorf(codes.NotFound, "source snapshot %q does not exist", src.SnapshotID)
		}
		if !s.Ready {
			return "", 0, status.Errorf(codes.Unavailable, "source snapshot %s is not ready yet; retry", s.ID)
		}
		dir, size = c.snapshotDir(s.ID), s.SizeBytes
	case src.VolumeID != "":
		v := c.volume(src.VolumeID)
		if v == nil {
			return "", 0, status.Errorf(codes.NotFound, "source volume %q does not exist", src.VolumeID)
		}
		dir, size = c.volumeDir(v.ID), v.CapacityBytes
	default:
		return "", 0, status.Error(codes.InvalidArgument, "volume_content_source names neither a snapshot nor a volume")
	}
	if lim := r.GetLimitBytes(); lim > 0 && lim < size {
		return "", 0, status.Errorf(codes.OutOfRange, "the source holds %d bytes, more than limit_bytes %d", size, lim)
	}
	return dir, size, nil
}

// copyTree copies the directory src to dst, which must not exist yet
// or be a complete earlier copy: it copies into a temporary directory
// beside dst and renames it, so a crash never leaves half a copy at
// dst. Regular files, directories and symbolic links (as links, never
// followed) are copied; other kinds of file are skipped.
func copyTree(src, dst string) error {
	if _, err := os.Lstat(dst); err == nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return err
	}
	tmp := dst + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		return copyEntry(path, filepath.Join(tmp, rel), d)
	})
	if err != nil {
		_ = os.RemoveAll(tmp)
		return fmt.Errorf("copy %s: %w", filepath.Base(src), err)
	}
	return os.Rename(tmp, dst)
}

func copyEntry(from, to string, d fs.DirEntry) error {
	info, err := d.Info()
	if err != nil {
		return err
	}
	switch {
	case d.IsDir():
		if err := os.Mkdir(to, info.Mode().Perm()); err != nil {
			return err
		}
		return os.Chmod(to, info.Mode().Perm()) // undo the umask
	case d.Type()&fs.ModeSymlink != 0:
		target, err := os.Readlink(from)
		if err != nil {
			return err
		}
		return os.Symlink(target, to)
	case !d.Type().IsRegular():
		return nil
	}
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, info.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	return errors.Join(out.Sync(), out.Close())
}
