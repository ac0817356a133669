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

	"github.com/csikit/csikit/csi"
	"slices"
)

// ErrBadSnapshot is matched by every Restore error caused by the
// snapshot's content: truncated, corrupted, of an unknown format or
// version. The store is unchanged; restore from another snapshot. Final.
var ErrBadSnapshot = errors.New("bad state snapshot")

// The snapshot format, version 1, is JSON lines:
//
//	{"format":"csikit-state","version":1}
//	{"table":"volumes","row":{...}}
//	... one line per stored row ...
//	{"end":true,"rows":N,"crc32":C}
//
// C is the IEEE CRC-32 of every byte before the trailer line. Plugin
// instances are not written: they are rebuilt from the node rows.
const (
	snapshotFormat  = "csikit-state"
	snapshotVersion = 1
)

// Snapshot table names, in the order they are written. The index rows
// come first, sorted by table name; then the rows of each table in
// primary key order.
const (
	snapIndex       = "index"
	snapVolumes     = "volumes"
	snapPlugins     = "plugins"
	snapNodes       = "nodes"
	snapAllocations = "allocations"
)

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

// Snapshot implements Snapshotter. It writes the state published when it
// began, so writes go on meanwhile.
func (s *MemStore) Snapshot(ctx context.Context, w io.Writer) error {
	d := s.read()
	bw := bufio.NewWriter(w)
	sum := crc32.NewIEEE()
	sw := &snapshotWriter{ctx: ctx, body: io.MultiWriter(bw, sum)}
	if err := writeJSONLine(sw.body, snapshotHeader{Format: snapshotFormat, Version: snapshotVersion}); err != nil {
		return err
	}
	tables := Tables()
	slices.Sort(tables)
	for _, t := range tables {
		id, _ := t.id()
		if err := sw.row(snapIndex, &indexRow{Table: t, Index: d.index[id]}); err != nil {
			return err
		}
	}
	d.volumes.scan("", func(r *volRow) bool { return sw.row(snapVolumes, r.full()) == nil })
	writeRows(sw, snapPlugins, &d.plugins)
	writeRows(sw, snapNodes, &d.nodes)
	writeRows(sw, snapAllocations, &d.allocs)
	if sw.err != nil {
		return sw.err
	}
	if err := writeJSONLine(bw, snapshotTrailer{End: true, Rows: sw.rows, CRC32: sum.Sum32()}); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("state: write snapshot: %w", err)
	}
	return nil
}

// snapshotWriter writes row lines and counts them; it keeps the first
// error and writes nothing after it.
type snapshotWriter struct {
	ctx  context.Context
	body io.Writer
	rows int
	err  error
}

func (sw *snapshotWriter) row(table string, row any) error {
	if sw.err != nil {
		return sw.err
	}
	if sw.rows%1024 == 0 {
		if sw.err = sw.ctx.Err(); sw.err != nil {
			return sw.err
		}
	}
	b, err := json.Marshal(row)
	if err != nil {
		sw.err = fmt.Errorf("state: snapshot %s row: %w", table, err)
		return sw.err
	}
	if sw.err = writeJSONLine(sw.body, snapshotLine{Table: table, Row: b}); sw.err != nil {
		return sw.err
	}
	sw.rows++
	return nil
}

func writeRows[T comparable](sw *snapshotWriter, name string, t *table[T]) {
	t.scan("", func(row T) bool { return sw.row(name, row) == nil })
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

// Restore implements Snapshotter. It builds a new state from the whole
// snapshot, checks the trailer, and only then swaps it in; blocked Wait
// calls return.
func (s *MemStore) Restore(ctx context.Context, r io.Reader) error {
	d, last, err := readSnapshot(ctx, r)
	if err != nil {
		return err
	}
	s.writeMu.Lock()
	old := s.root.Swap(d)
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

func readSnapshot(ctx context.Context, r io.Reader) (*db, uint64, error) {
	br := bufio.NewReader(r)
	sum := crc32.NewIEEE()
	line, err := readLine(br, 0)
	if err != nil {
		return nil, 0, err
	}
	var h snapshotHeader
	if err := strictUnmarshal(line, &h); err != nil {
		return nil, 0, badSnapshot("header: %v", err)
	}
	if h.Format != snapshotFormat || h.Version != snapshotVersion {
		return nil, 0, badSnapshot("format %q version %d; this store reads %q version %d",
			h.Format, h.Version, snapshotFormat, snapshotVersion)
	}
	sum.Write(line)

	w := &writer{o: new(owner), d: emptyDB()}
	rows := 0
	for {
		if rows%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, 0, err
			}
		}
		line, err := readLine(br, rows)
		if err != nil {
			return nil, 0, err
		}
		if bytes.HasPrefix(line, []byte(`{"end"`)) {
			if err := checkTrailer(br, line, rows, sum); err != nil {
				return nil, 0, err
			}
			break
		}
		sum.Write(line)
		if err := restoreRow(w, line); err != nil {
			return nil, 0, badSnapshot("row %d: %v", rows+1, err)
		}
		rows++
	}
	rebuildInstances(w)
	var last uint64
	for _, idx := range w.d.index {
		last = max(last, idx)
	}
	return w.d, last, nil
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

// restoreRow stores one snapshot line's row in the state w builds. A
// row that the store could not hold (a null claim or plugin instance) is
// refused rather than stored.
func restoreRow(w *writer, line []byte) error {
	var l snapshotLine
	if err := strictUnmarshal(line, &l); err != nil {
		return err
	}
	var err error
	switch l.Table {
	case snapIndex:
		var r *indexRow
		if r, err = decodeRow[indexRow](l.Row); err == nil {
			id, ok := r.Table.id()
			if !ok {
				return fmt.Errorf("index of unknown table %q", r.Table)
			}
			w.d.index[id] = r.Index
		}
	case snapVolumes:
		var v *csi.Volume
		if v, err = decodeRow[csi.Volume](l.Row); err == nil {
			if err = checkRestoredVolume(v); err == nil {
				// A snapshot holds no empty attribute map (they are
				// omitted), but a row stores none either way.
				v.Parameters, v.Context = nilIfEmpty(v.Parameters), nilIfEmpty(v.Context)
				v.Secrets = nilIfEmpty(v.Secrets)
				w.d.volumes.put(w.o, volumeSpec, newVolRow(v))
			}
		}
	case snapPlugins:
		var p *csi.Plugin
		if p, err = decodeRow[csi.Plugin](l.Row); err == nil {
			w.d.plugins.put(w.o, pluginSpec, p)
		}
	case snapNodes:
		var n *Node
		if n, err = decodeRow[Node](l.Row); err == nil {
			if slices.Contains(n.Plugins, nil) {
				err = fmt.Errorf("node %s lists a null plugin instance", n.ID)
			} else {
				w.d.nodes.put(w.o, nodeSpec, n)
			}
		}
	case snapAllocations:
		var a *csi.Allocation
		if a, err = decodeRow[csi.Allocation](l.Row); err == nil {
			w.d.allocs.put(w.o, allocationSpec, a)
		}
	default:
		return fmt.Errorf("unknown table %q", l.Table)
	}
	if err != nil {
		return fmt.Errorf("%s: %v", l.Table, err)
	}
	return nil
}

func checkRestoredVolume(v *csi.Volume) error {
	for _, m := range []map[string]*csi.Claim{v.ReadClaims, v.WriteClaims, v.PastClaims} {
		for id, c := range m {
			if c == nil {
				return fmt.Errorf("volume %s holds a null claim for allocation %s", volName(v.Namespace, v.ID), id)
			}
		}
	}
	return nil
}

func decodeRow[T any](b []byte) (*T, error) {
	v := new(T)
	if err := strictUnmarshal(b, v); err != nil {
		return nil, err
	}
	return v, nil
}

// rebuildInstances derives the instances table from the node rows.
func rebuildInstances(w *writer) {
	w.d.nodes.scan("", func(n *Node) bool {
		for k, info := range expand(n.Plugins) {
			w.d.instances.put(w.o, instanceSpec, &instance{PluginID: k.plugin, Role: k.role, NodeID: n.ID, Info: info})
		}
		return true
	})
}
