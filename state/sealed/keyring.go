package sealed

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
)

// KeySize is the length of a key: AES-256.
const KeySize = 32

const (
	magic      = "CSKS\x01"
	headerSize = len(magic) + 4
	nonceSize  = 12
)

var (
	// ErrUnknownKey is matched by Open of a value sealed with a key the
	// keyring does not hold: copy the missing key file from a server
	// that has it.
	ErrUnknownKey = errors.New("sealed: the value is sealed with a key this keyring does not hold")
	// ErrWrongKey is matched by Open of a value that the named key does
	// not authenticate: the keyring holds another key under that ID, or
	// the value was altered.
	ErrWrongKey = errors.New("sealed: the keyring's key does not open the value (another key under the same ID, or altered data)")
	// ErrNotSealed is matched by Open of bytes that are not a sealed
	// value.
	ErrNotSealed = errors.New("sealed: the bytes are not a sealed value")
	// ErrKeyFile is matched by Load and New when a key is unusable: a
	// file with group or other permissions, a key of the wrong length.
	ErrKeyFile = errors.New("sealed: unusable key")
)

// Keyring seals with its primary key and opens with any of its keys.
// Its methods are safe for concurrent use; it does not change after New
// or Load.
type Keyring struct {
	aeads   map[uint32]cipher.AEAD
	primary uint32
}

// New returns a keyring of keys by ID; the highest ID is the primary.
// Each key must be KeySize bytes; the keys are not retained.
func New(keys map[uint32][]byte) (*Keyring, error) {
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: the keyring has no key", ErrKeyFile)
	}
	k := &Keyring{aeads: make(map[uint32]cipher.AEAD, len(keys))}
	for _, id := range slices.Sorted(maps.Keys(keys)) {
		key := keys[id]
		if id == 0 {
			return nil, fmt.Errorf("%w: key ID 0 is reserved; number keys from 1", ErrKeyFile)
		}
		if len(key) != KeySize {
			return nil, fmt.Errorf("%w: key %d is %d bytes long; a key is %d random bytes", ErrKeyFile, id, len(key), KeySize)
		}
		block, err := aes.NewCipher(key)
		if err != nil {
			return nil, fmt.Errorf("%w: key %d: %v", ErrKeyFile, id, err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("%w: key %d: %v", ErrKeyFile, id, err)
		}
		k.aeads[id] = aead
		k.primary = id
	}
	return k, nil
}

// PrimaryID returns the ID of the key Seal uses.
func (k *Keyring) PrimaryID() uint32 { return k.primary }

// KeyIDs returns the IDs of the keys the keyring holds, in order.
func (k *Keyring) KeyIDs() []uint32 { return slices.Sorted(maps.Keys(k.aeads)) }

// Seal returns plain sealed with the primary key under a new random
// nonce. plain is not changed.
func (k *Keyring) Seal(plain []byte) ([]byte, error) {
	out := make([]byte, headerSize+nonceSize, headerSize+nonceSize+len(plain)+k.aeads[k.primary].Overhead())
	copy(out, magic)
	binary.BigEndian.PutUint32(out[len(magic):], k.primary)
	if _, err := rand.Read(out[headerSize:]); err != nil {
		return nil, fmt.Errorf("sealed: draw a nonce: %w", err)
	}
	return k.aeads[k.primary].Seal(out, out[headerSize:], plain, out[:headerSize]), nil
}

// Open returns the clear bytes of a value Seal returned, with any key
// of the keyring. Errors match ErrNotSealed, ErrUnknownKey or
// ErrWrongKey, and name the key.
func (k *Keyring) Open(b []byte) ([]byte, error) {
	if !IsSealed(b) {
		return nil, ErrNotSealed
	}
	id := KeyID(b)
	aead, ok := k.aeads[id]
	if !ok {
		return nil, fmt.Errorf("%w: key %d (this keyring holds %v); copy key-%08x from a server that has it", ErrUnknownKey, id, k.KeyIDs(), id)
	}
	if len(b) < headerSize+nonceSize+aead.Overhead() {
		return nil, fmt.Errorf("%w: a value sealed with key %d is truncated", ErrWrongKey, id)
	}
	plain, err := aead.Open(nil, b[headerSize:headerSize+nonceSize], b[headerSize+nonceSize:], b[:headerSize])
	if err != nil {
		return nil, fmt.Errorf("%w: key %d: %v", ErrWrongKey, id, err)
	}
	return plain, nil
}

// IsSealed reports whether b starts with a sealed value's header.
func IsSealed(b []byte) bool {
	return len(b) >= headerSize && bytes.HasPrefix(b, []byte(magic))
}

// KeyID returns the ID of the key b was sealed with, or 0 when b is not
// sealed.
func KeyID(b []byte) uint32 {
	if !IsSealed(b) {
		return 0
	}
	return binary.BigEndian.Uint32(b[len(magic):])
}
