package agent

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// NodeSecretFile is the file in the agent's DataDir that holds the
// node's secret: made at random (0600) on the first start, read on
// every later one. The servers keep its hash and refuse node calls for
// this node without it, so keep the file with the node's data.
const NodeSecretFile = "node-secret"

// loadNodeSecret reads the node secret in dir, making it first if there
// is none.
func loadNodeSecret(dir string) (string, error) {
	path := filepath.Join(dir, NodeSecretFile)
	b, err := os.ReadFile(path)
	if err == nil {
		s := strings.TrimSpace(string(b))
		if len(s) < 32 {
			return "", fmt.Errorf("node secret %s is shorter than 32 characters; delete it to make a new one (then have the node deleted on the servers)", path)
		}
		return s, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("read node secret: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("make node data dir: %w", err)
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", fmt.Errorf("make node secret: %w", err)
	}
	s := hex.EncodeToString(raw)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", fmt.Errorf("write node secret: %w", err)
	}
	_, werr := f.WriteString(s + "\n")
	if err := errors.Join(werr, f.Sync(), f.Close()); err != nil {
		_ = os.Remove(path)
		return "", fmt.Errorf("write node secret %s: %w", path, err)
	}
	return s, nil
}
