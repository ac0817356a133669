package state

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"slices"
	"strings"

	"github.com/hashicorp/go-memdb"

	"github.com/csikit/csikit/csi"
)

// ErrBadSnapshot is matched by every Restore error caused by the
// snapshot's content: truncated, corrupted, of an unknown format or
// version. The store is unchanged; restore from another snapshot. Final.
var ErrBadSnapshot = errors.New("bad state snapshot")

// The snapshot format, version 2, is JSON lines:
//
//	{"format":"csikit-state","version":2}
//	{"table":"volumes","row":{...}}
//	... one line per stored row ...
//	{"end":true,"rows":N,"crc32":C}
//
// C is the IEEE CRC-32 of every byte before the trailer line. Plugin
// instances are not written: they are rebuilt from the node rows.
//
// Version 2 added attachment records (csi.Volume.Attachments), and later
// capacity rows (table "capacity"), snapshot records (table
// "snapshots"), health rows (table "health") and ACL tokens (table
// "acl_tokens", by hash: no secret), which older version 2 snapshots
// simply lack. Version 1
// kept the publish context on each claim; it still restores, with the
// attachments derived from the claims (see upgradeVolumeV1).
const (
	snapshotFormat  = "csikit-state"
	snapshotVersion = 2
)

// snapshotTables are the tables whose rows are written, in order, after
// the table indexes (table "index", one row per Table, ordered by name).
func snapshotTables() []string {
	return []string{tVolumes, tPlugins, tNodes, tAllocations, tCapacity, tSnapshots, tHealth, tACLTokens}
}

type snapshotHeader struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
}

type snapshotLine struct {
	Table string          `json:"table"`
	Row   json.RawMessage `json:"row"`
}

type snapshotTrailer struct {
	End   bool   `json:"end"`
	Rows  int    `json:"rows"`
	CRC32 uint32 `json:"crc32"`
}

// Snapshot implements Snapshotter. It writes one consistent state, read
// from a memdb snapshot, so writes go on meanwhile.
func (s *MemStore) Snapshot(ctx context.Context, w io.Writer) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	// The table indexes live beside the database: read both under the
	// write lock, which Apply holds from its commit to its new marks.
	s.writeMu.Lock()
	gen := s.gen.Load()
	txn := gen.db.Txn(false)
	var indexes []indexRow
	for _, t := range Tables() {
		indexes = append(indexes, indexRow{Table: t, Index: gen.marks[tableSlot(t)].Load().index})
	}
	s.writeMu.Unlock()
	slices.SortFunc(indexes, func(a, b indexRow) int { return strings.Compare(string(a.Table), string(b.Table)) })

	bw := bufio.NewWriter(w)
	sum := crc32.NewIEEE()
	body := io.MultiWriter(bw, sum)
	if err := writeJSONLine(body, snapshotHeader{Format: snapshotFormat, Version: snapshotVersion}); err != nil {
		return err
	}
	rows := 0
	for _, r := range indexes {
		row, err := json.Marshal(r)
		if err != nil {
			return fmt.Errorf("state: snapshot index row: %w", err)
		}
		if err := writeJSONLine(body, snapshotLine{Table: tIndex, Row: row}); err != nil {
			return err
		}
		rows++
	}
	for _, table := range snapshotTables() {
		it, err := txn.Get(table, iID)
		if err != nil {
			return dbErr("snapshot "+table, err)
		}
		for raw := it.Next(); raw != nil; raw = it.Next() {
			if rows%1024 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			row, err := json.Marshal(raw)
			if err != nil {
				return fmt.Errorf("state: snapshot %s row: %w", table, err)
			}
			if err := writeJSONLine(body, snapshotLine{Table: table, Row: row}); err != nil {
				return err
			}
			rows++
		}
	}
	if err := writeJSONLine(bw, snapshotTrailer{End: true, Rows: rows, CRC32: sum.Sum32()}); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("state: write snapshot: %w", err)
	}
	return nil
}

func writeJSONLine(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("state: encode snapshot line: %w", err)
	}
	if _, err := w.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("state: write snapshot: %w", err)
	}
	return nil
}

// Restore implements Snapshotter. It builds a new database from the whole
// snapshot, checks the trailer, and only then swaps it in; blocked Wait
// calls return.
func (s *MemStore) Restore(ctx context.Context, r io.Reader) error {
	db, indexes, err := readSnapshot(ctx, r)
	if err != nil {
		return err
	}
	var last uint64
	for _, idx := range indexes {
		last = max(last, idx)
	}
	s.writeMu.Lock()
	// Which volumes' past claims the restore changed is not known: the
	// restored volume table's index stands for all of them.
	old := s.gen.Swap(newGeneration(db, indexes, indexes[TableVolumes]))
	s.last = last
	s.writeMu.Unlock()
	close(old.replaced)
	s.logger.Info("restored state from snapshot", "last_index", last)
	return nil
}

func badSnapshot(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadSnapshot, fmt.Sprintf(format, args...))
}

func strictUnmarshal(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

// readLine returns one line with its newline; a line cut short by the
// end of the stream means the snapshot is truncated.
func readLine(br *bufio.Reader, rows int) ([]byte, error) {
	line, err := br.ReadBytes('\n')
	if err == io.EOF {
		return nil, badSnapshot("truncated after %d rows, before the trailer line", rows)
	}
	if err != nil {
		return nil, fmt.Errorf("state: read snapshot: %w", err)
	}
	return line, nil
}

// readSnapshot returns the database of a snapshot and its table
// indexes.
func readSnapshot(ctx context.Context, r io.Reader) (*memdb.MemDB, map[Table]uint64, error) {
	br := bufio.NewReader(r)
	sum := crc32.NewIEEE()
	line, err := readLine(br, 0)
	if err != nil {
		return nil, nil, err
	}
	var h snapshotHeader
	if err := strictUnmarshal(line, &h); err != nil {
		return nil, nil, badSnapshot("header: %v", err)
	}
	if h.Format != snapshotFormat || h.Version < 1 || h.Version > snapshotVersion {
		return nil, nil, badSnapshot("format %q version %d; this store reads %q versions 1 to %d",
			h.Format, h.Version, snapshotFormat, snapshotVersion)
	}
	sum.Write(line)

	db, err := memdb.NewMemDB(schema())
	if err != nil {
		return nil, nil, fmt.Errorf("state: build schema: %w", err)
	}
	db = quiet(db)
	txn := db.Txn(true)
	defer txn.Abort()
	indexes := map[Table]uint64{}
	rows := 0
	for {
		if rows%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, nil, err
			}
		}
		line, err := readLine(br, rows)
		if err != nil {
			return nil, nil, err
		}
		if bytes.HasPrefix(line, []byte(`{"end"`)) {
			if err := checkTrailer(br, line, rows, sum); err != nil {
				return nil, nil, err
			}
			break
		}
		sum.Write(line)
		if err := restoreRow(txn, line, h.Version, indexes); err != nil {
			return nil, nil, badSnapshot("row %d: %v", rows+1, err)
		}
		rows++
	}
	if err := rebuildInstances(txn); err != nil {
		return nil, nil, badSnapshot("%v", err)
	}
	txn.Commit()
	return db, indexes, nil
}

func checkTrailer(br *bufio.Reader, line []byte, rows int, sum hash.Hash32) error {
	var t snapshotTrailer
	if err := strictUnmarshal(line, &t); err != nil {
		return badSnapshot("trailer: %v", err)
	}
	if !t.End || t.Rows != rows {
		return badSnapshot("trailer counts %d rows, the snapshot holds %d", t.Rows, rows)
	}
	if got := sum.Sum32(); got != t.CRC32 {
		return badSnapshot("checksum %08x does not match the trailer's %08x", got, t.CRC32)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		return badSnapshot("data after the trailer line")
	}
	return nil
}

// restoreRow inserts one snapshot row, or, for a table index row,
// records it in indexes.
func restoreRow(txn *memdb.Txn, line []byte, version int, indexes map[Table]uint64) error {
	var l snapshotLine
	if err := strictUnmarshal(line, &l); err != nil {
		return err
	}
	var obj any
	var err error
	switch l.Table {
	case tIndex:
		obj, err = decodeRow[indexRow](l.Row)
	case tVolumes:
		if version == 1 {
			obj, err = decodeVolumeV1(l.Row)
		} else {
			obj, err = decodeRow[csi.Volume](l.Row)
		}
	case tPlugins:
		obj, err = decodeRow[csi.Plugin](l.Row)
	case tNodes:
		obj, err = decodeRow[Node](l.Row)
	case tAllocations:
		obj, err = decodeRow[csi.Allocation](l.Row)
	case tCapacity:
		obj, err = decodeRow[capacityRow](l.Row)
	case tSnapshots:
		obj, err = decodeRow[csi.Snapshot](l.Row)
	case tHealth:
		obj, err = decodeRow[VolumeHealth](l.Row)
	case tACLTokens:
		obj, err = decodeRow[ACLToken](l.Row)
	default:
		return fmt.Errorf("unknown table %q", l.Table)
	}
	if err == nil {
		err = checkRow(obj)
	}
	if err != nil {
		return fmt.Errorf("%s: %v", l.Table, err)
	}
	if r, ok := obj.(*indexRow); ok {
		indexes[r.Table] = r.Index
		return nil
	}
	if err := put(txn, l.Table, obj); err != nil {
		return fmt.Errorf("%s: %v", l.Table, err)
	}
	return nil
}

// checkRow refuses a decoded row that the store's indexes and readers
// cannot hold: a null where a claim or a plugin instance must be (which
// the indexers would dereference), or the index of a table the store
// does not have. The store never writes such rows; a snapshot that
// holds one was written by something else or edited.
func checkRow(obj any) error {
	nullClaim := func(ms ...map[string]*csi.Claim) error {
		for _, m := range ms {
			for alloc, c := range m {
				if c == nil {
					return fmt.Errorf("null claim for allocation %q", alloc)
				}
			}
		}
		return nil
	}
	nullInstance := func(where string, ms ...map[string]*csi.PluginInfo) error {
		for _, m := range ms {
			for node, in := range m {
				if in == nil {
					return fmt.Errorf("%s: null plugin instance on node %q", where, node)
				}
			}
		}
		return nil
	}
	switch r := obj.(type) {
	case *indexRow:
		return validTable(r.Table)
	case *csi.Volume:
		if err := nullClaim(r.ReadClaims, r.WriteClaims, r.PastClaims); err != nil {
			return fmt.Errorf("volume %s/%s: %v", r.Namespace, r.ID, err)
		}
		for node, a := range r.Attachments {
			if a == nil || a.NodeID != node || !a.State.Valid() {
				return fmt.Errorf("volume %s/%s: bad attachment to node %q", r.Namespace, r.ID, node)
			}
		}
	case *csi.Plugin:
		return nullInstance("plugin "+r.ID, r.Controllers, r.Nodes)
	case *Node:
		if slices.Contains(r.Plugins, nil) {
			return fmt.Errorf("node %s: null plugin instance", r.ID)
		}
	case *capacityRow:
		return checkCapacityRow(r)
	case *csi.Snapshot:
		return checkSnapshotRow(r)
	case *VolumeHealth:
		return checkHealthRow(r)
	case *ACLToken:
		return validateACLToken(*r)
	}
	return nil
}

// claimV1 is a claim as version 1 wrote it, with its publish context.
type claimV1 struct {
	csi.Claim
	PublishContext map[string]string `json:",omitempty"`
}

// volumeV1 is a volume as version 1 wrote it: no attachments.
type volumeV1 struct {
	csi.Volume
	ReadClaims  map[string]*claimV1 `json:",omitempty"`
	WriteClaims map[string]*claimV1 `json:",omitempty"`
	PastClaims  map[string]*claimV1 `json:",omitempty"`
}

// decodeVolumeV1 decodes a version 1 volume row and derives its
// attachments (upgradeVolumeV1).
func decodeVolumeV1(b []byte) (*csi.Volume, error) {
	old, err := decodeRow[volumeV1](b)
	if err != nil {
		return nil, err
	}
	v := &old.Volume
	if v.Attachments != nil {
		return nil, errors.New("a version 1 volume has no attachments")
	}
	v.Attachments = upgradeVolumeV1(old)
	return v, nil
}

// upgradeVolumeV1 moves a version 1 volume's claims into v and derives
// one attachment per node that a claim, live or past but not yet
// ControllerDetached, is on. Version 1 told an attached volume by a
// non-empty publish context on a claim there: such a node is Attached
// with that context (live claims first, then by allocation ID). The
// others are Attaching, which is safe whatever the truth was: a claim
// there publishes again (ControllerPublishVolume is idempotent) and a
// release detaches.
func upgradeVolumeV1(old *volumeV1) map[string]*csi.Attachment {
	v := &old.Volume
	type held struct {
		c    *claimV1
		live bool
	}
	var all []held
	move := func(from map[string]*claimV1, live bool) map[string]*csi.Claim {
		if from == nil {
			return nil
		}
		to := make(map[string]*csi.Claim, len(from))
		for id, c := range from {
			if c == nil {
				to[id] = nil // refused by checkRow
				continue
			}
			to[id] = &c.Claim
			all = append(all, held{c, live})
		}
		return to
	}
	v.ReadClaims = move(old.ReadClaims, true)
	v.WriteClaims = move(old.WriteClaims, true)
	v.PastClaims = move(old.PastClaims, false)
	slices.SortFunc(all, func(a, b held) int {
		if a.live != b.live {
			if a.live {
				return -1
			}
			return 1
		}
		return strings.Compare(a.c.AllocationID, b.c.AllocationID)
	})
	var out map[string]*csi.Attachment
	for _, h := range all {
		c := h.c
		if !h.live && c.State >= csi.ClaimControllerDetached {
			continue
		}
		if out == nil {
			out = map[string]*csi.Attachment{}
		}
		a := out[c.NodeID]
		if a == nil {
			a = &csi.Attachment{NodeID: c.NodeID, ExternalNodeID: c.ExternalNodeID, State: csi.AttachmentAttaching,
				CreateIndex: v.ModifyIndex, ModifyIndex: v.ModifyIndex}
			out[c.NodeID] = a
		}
		if a.State == csi.AttachmentAttaching && len(c.PublishContext) > 0 {
			a.State, a.PublishContext = csi.AttachmentAttached, c.PublishContext
		}
	}
	return out
}

func decodeRow[T any](b []byte) (*T, error) {
	v := new(T)
	if err := strictUnmarshal(b, v); err != nil {
		return nil, err
	}
	return v, nil
}

// rebuildInstances derives the instances table from the node rows.
func rebuildInstances(txn *memdb.Txn) error {
	it, err := txn.Get(tNodes, iID)
	if err != nil {
		return err
	}
	var nodes []*Node
	for raw := it.Next(); raw != nil; raw = it.Next() {
		nodes = append(nodes, raw.(*Node))
	}
	for _, n := range nodes {
		for k, info := range expand(n.Plugins) {
			if err := txn.Insert(tInstances, &instance{PluginID: k.plugin, Role: k.role, NodeID: n.ID, Info: info}); err != nil {
				return fmt.Errorf("node %s: %v", n.ID, err)
			}
		}
	}
	return nil
}
