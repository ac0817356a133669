//go:build unix

package mounter

import (
	"errors"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// A FIFO in the way, or a link to one, is refused without being opened:
// an open would block until a writer came.
func TestTree_MkdirAll_FIFO(t *testing.T) {
	for _, viaLink := range []bool{false, true} {
		resolvers(t, func(t *testing.T, tr *tree, _ string) {
			fifo := filepath.Join(tr.root, stagingDir, "fifo")
			if err := syscall.Mkfifo(fifo, 0o600); err != nil {
				t.Fatal(err)
			}
			p := fifo
			if viaLink {
				p = filepath.Join(tr.root, stagingDir, "ns")
				mustSymlink(t, "fifo", p)
			}
			done := make(chan error, 1)
			go func() { done <- tr.mkdirAll(filepath.Join(p, "vol"), false) }()
			select {
			case err := <-done:
				if viaLink {
					requireLinkError(t, err, p)
				} else if !errors.Is(err, syscall.ENOTDIR) {
					t.Errorf("error %v, want ENOTDIR", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("mkdirAll blocked on the FIFO")
			}
		})
	}
}
