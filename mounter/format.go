package mounter

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// A version 3 state file (a file of the store's pool) holds two slots
// of S bytes each, slot 0 at offset 0 and slot 1 at offset S, so the
// file is 2·S bytes long. S is a power of two of at least minSlotSize
// (a multiple of a 4 KiB page: with such pages a slot write never
// shares a page with the other slot) and is written in every slot
// header, so that a reader checks it against the file's size rather
// than guessing it.
//
// A slot is a 32-byte header, the record, and whatever older bytes
// follow it up to the end of the slot (never read):
//
//	offset  size  field
//	0       8     magic "csikitMS"
//	8       4     format version (3), little-endian
//	12      4     slot size S
//	16      8     generation, at least 1
//	24      4     record length L (32+L <= S)
//	28      4     CRC-32C (Castagnoli) of bytes 0-27, then of the record
//	32      L     the record: a volumeRecord in JSON, or nothing (L = 0)
//	              for a file that holds no volume (free)
//
// Each write of a record takes the next generation and goes to the slot
// that does not hold the newest record sure to have been written
// (store.writeSlot), so a write cut short by a crash spoils at most the
// slot it was writing; its checksum gives it away. A reader takes the
// valid slot with the higher generation (slotted). A file with no valid
// slot is corrupt: it is never created that way (a new file is written
// whole to a temporary name, synced, then renamed into place).
const (
	slotMagic      = "csikitMS"
	slotHeaderSize = 32
	minSlotSize    = 4096
)

// castagnoli is the CRC-32C table; read-only once built.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// slotSizeFor returns the slot size for a record of n bytes: the
// smallest power of two, at least minSlotSize, that holds its header
// and the record. Doubling leaves a grown record room for more
// allocations before the file must be rewritten again.
func slotSizeFor(n int) int {
	size := minSlotSize
	for size < slotHeaderSize+n {
		size *= 2
	}
	return size
}

// encodeSlot returns the header and record for one slot write.
func encodeSlot(slotSize int, gen uint64, record []byte) []byte {
	b := make([]byte, slotHeaderSize+len(record))
	copy(b, slotMagic)
	binary.LittleEndian.PutUint32(b[8:], formatVersion)
	binary.LittleEndian.PutUint32(b[12:], uint32(slotSize))
	binary.LittleEndian.PutUint64(b[16:], gen)
	binary.LittleEndian.PutUint32(b[24:], uint32(len(record)))
	copy(b[slotHeaderSize:], record)
	binary.LittleEndian.PutUint32(b[28:], slotChecksum(b[:28], record))
	return b
}

func slotChecksum(head, record []byte) uint32 {
	return crc32.Update(crc32.Checksum(head, castagnoli), castagnoli, record)
}

// decodeSlot checks one slot of a file with slots of len(slot) bytes and
// returns its generation and record, or why the slot holds none.
func decodeSlot(slot []byte) (uint64, []byte, error) {
	if string(slot[:len(slotMagic)]) != slotMagic {
		return 0, nil, errors.New("no slot header")
	}
	if v := binary.LittleEndian.Uint32(slot[8:]); v != formatVersion {
		return 0, nil, fmt.Errorf("format version %d; this build reads version %d slots", v, formatVersion)
	}
	if size := binary.LittleEndian.Uint32(slot[12:]); int64(size) != int64(len(slot)) {
		return 0, nil, fmt.Errorf("written for %d-byte slots, but the file's size makes them %d bytes", size, len(slot))
	}
	gen := binary.LittleEndian.Uint64(slot[16:])
	if gen == 0 {
		return 0, nil, errors.New("generation 0")
	}
	n := binary.LittleEndian.Uint32(slot[24:])
	if int64(n) > int64(len(slot)-slotHeaderSize) {
		return 0, nil, fmt.Errorf("record length %d overflows the slot", n)
	}
	record := slot[slotHeaderSize : slotHeaderSize+int(n)]
	if binary.LittleEndian.Uint32(slot[28:]) != slotChecksum(slot[:28], record) {
		return 0, nil, errors.New("checksum mismatch (a torn or damaged write)")
	}
	return gen, record, nil
}

// slotted picks the record of a version 3 file: the valid slot with the
// higher generation. It returns the slot size, the slot and generation
// of that record, and the record.
func slotted(data []byte) (slotSize int, slot int, gen uint64, record []byte, err error) {
	n := len(data)
	if n < 2*minSlotSize || n%(2*minSlotSize) != 0 {
		return 0, 0, 0, nil, fmt.Errorf("is %d bytes long; a version 3 file is two equal slots of a multiple of %d bytes", n, minSlotSize)
	}
	slotSize = n / 2
	var gens [2]uint64
	var recs [2][]byte
	var errs [2]error
	for i := range 2 {
		gens[i], recs[i], errs[i] = decodeSlot(data[i*slotSize : (i+1)*slotSize])
	}
	switch {
	case errs[0] != nil && errs[1] != nil:
		return 0, 0, 0, nil, fmt.Errorf("has no valid slot (slot 0: %v; slot 1: %v)", errs[0], errs[1])
	case errs[1] != nil:
		slot = 0
	case errs[0] != nil:
		slot = 1
	case gens[0] == gens[1]:
		return 0, 0, 0, nil, fmt.Errorf("has two records of generation %d", gens[0])
	case gens[1] > gens[0]:
		slot = 1
	}
	return slotSize, slot, gens[slot], recs[slot], nil
}
