// Package sealed encrypts csikit's replicated state at rest with a
// keyring of AES-256-GCM keys held by the servers.
//
// Volume, claim and snapshot secrets travel inside state commands and
// store snapshots. A replicated store (state/raftstate) writes those
// bytes to its log and snapshot files; with a Keyring it seals them
// first, so the files never hold a secret in clear while the in-memory
// store, which the plugin calls read, keeps clear values.
//
// # Format
//
// A sealed value is a header, a random 96-bit nonce and the GCM
// ciphertext with its tag:
//
//	"CSKS" 0x01 | key ID (uint32, big endian) | nonce (12 bytes) | ciphertext
//
// The header is authenticated too. Bytes that do not start with the
// header are not sealed (IsSealed reports false), which lets a store
// that turned its keyring on later still read what it wrote before.
//
// # Keys on disk
//
// Load reads a keyring from a directory of key files named
// key-XXXXXXXX (the key ID in hex), each holding exactly KeySize random
// bytes with mode 0600. On first use it creates the directory (0700)
// and key 1. A key file readable by group or others, or of another
// length, is refused with an error matching ErrKeyFile: the server does
// not start rather than run with a key that may have leaked or been
// truncated.
//
// Every server that replicates the same log must hold the same keys:
// followers open what the leader sealed. Create the keyring on one
// server (its first start, or Load on an empty directory) and copy the
// directory to the others before they first start.
//
// # Rotation
//
// The key with the highest ID is the primary: Seal always uses it, and
// Open uses whichever key the value names. To rotate:
//
//  1. Run Rotate on one server's keyring directory: it adds key N+1.
//  2. Copy the new key file to every other server's keyring directory
//     (0600), and restart the servers one at a time. Until all hold it,
//     a leader that seals with the new key writes entries that a
//     follower without it cannot open, so distribute first, restart
//     after.
//  3. Keep the old key files: log entries and snapshots written before
//     the rotation are still sealed with them. Once every server has
//     taken a snapshot after the rotation and truncated its log past it
//     (raft does this on its own after SnapshotThreshold entries), no
//     value sealed with an old key is left and its file may be removed.
//
// Random nonces bound how much one key may seal: rotate well before
// 2^32 values (raft log entries and snapshots) were sealed with it.
package sealed
