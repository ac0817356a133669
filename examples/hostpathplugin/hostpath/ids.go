package hostpath

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
)

// Volume IDs are "vol-" and 32 lower-case hex digits from crypto/rand.
// They never derive from the CO's volume name (which may hold '/' or
// ".."), and every ID received from a caller is checked against this
// format before it is used in a path.
const (
	volumeIDPrefix = "vol-"
	volumeIDHexLen = 32
)

func newVolumeID() string {
	var b [volumeIDHexLen / 2]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go ≥ 1.24)
	return volumeIDPrefix + hex.EncodeToString(b[:])
}

// validVolumeID reports whether id has the format newVolumeID makes: only
// such an ID is ever joined to a path.
func validVolumeID(id string) bool {
	if len(id) != len(volumeIDPrefix)+volumeIDHexLen || id[:len(volumeIDPrefix)] != volumeIDPrefix {
		return false
	}
	for i := len(volumeIDPrefix); i < len(id); i++ {
		c := id[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// nodeFileStem names a node's state files. Node IDs are free-form strings
// of up to 256 bytes, so the name uses a digest of the ID, never the ID.
func nodeFileStem(nodeID string) string {
	sum := sha256.Sum256([]byte(nodeID))
	return "node-" + hex.EncodeToString(sum[:16])
}
