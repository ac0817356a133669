package raftstate

import (
	"errors"
	"fmt"

	"github.com/hashicorp/raft"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state/sealed"
)

// sealEntry returns the bytes of a command entry as the log keeps them:
// sealed with k, or b itself without a keyring or when b is sealed
// already.
func sealEntry(k *sealed.Keyring, b []byte) ([]byte, error) {
	if k == nil || sealed.IsSealed(b) {
		return b, nil
	}
	out, err := k.Seal(b)
	if err != nil {
		return nil, fmt.Errorf("raftstate: seal the command: %w", err)
	}
	return out, nil
}

// openEntry returns the clear bytes of a log entry or snapshot body:
// b itself when it is not sealed (written before the keyring was
// turned on), else b opened with k. The errors match
// csi.ErrInvalidRequest and sealed's (ErrUnknownKey, ErrWrongKey).
func openEntry(k *sealed.Keyring, b []byte) ([]byte, error) {
	if !sealed.IsSealed(b) {
		return b, nil
	}
	if k == nil {
		return nil, fmt.Errorf("%w: raftstate: the data is sealed with key %d and this server has no keyring; give it the cluster's keyring (Config.Keyring)",
			csi.ErrInvalidRequest, sealed.KeyID(b))
	}
	plain, err := k.Open(b)
	if err != nil {
		return nil, fmt.Errorf("%w: raftstate: %w; is this the cluster's keyring?", csi.ErrInvalidRequest, err)
	}
	return plain, nil
}

// maxKeyCheck bounds how many entries from the end of the log Start
// reads to find a sealed command to check the keyring on.
const maxKeyCheck = 64

// checkKeyring opens the newest sealed command among the last entries
// of logs, so that a server given the wrong keyring refuses to start
// instead of skipping every entry it replays. A log with no sealed
// command in reach passes; the snapshot is checked by Restore.
func checkKeyring(k *sealed.Keyring, logs raft.LogStore) error {
	last, err := logs.LastIndex()
	if err != nil {
		return fmt.Errorf("raftstate: read the log's last index: %w", err)
	}
	first, err := logs.FirstIndex()
	if err != nil {
		return fmt.Errorf("raftstate: read the log's first index: %w", err)
	}
	for i := last; i >= first && i > 0 && last-i < maxKeyCheck; i-- {
		var l raft.Log
		if err := logs.GetLog(i, &l); err != nil {
			if errors.Is(err, raft.ErrLogNotFound) {
				continue
			}
			return fmt.Errorf("raftstate: read log entry %d: %w", i, err)
		}
		if l.Type != raft.LogCommand || !sealed.IsSealed(l.Data) {
			continue
		}
		if _, err := openEntry(k, l.Data); err != nil {
			return fmt.Errorf("raftstate: log entry %d cannot be read with this server's keyring: %w", i, err)
		}
		return nil
	}
	return nil
}
