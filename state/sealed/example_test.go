package sealed_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/csikit/csikit/state/sealed"
)

// Load creates the keyring on first use; Rotate adds a key that seals
// from the next Load on, while the old one still opens older values.
func Example() {
	dir, _ := os.MkdirTemp("", "keyring")
	defer os.RemoveAll(dir)
	dir = filepath.Join(dir, "keyring")

	k, err := sealed.Load(dir)
	if err != nil {
		fmt.Println(err)
		return
	}
	old, _ := k.Seal([]byte("password=hunter2"))

	if _, err := sealed.Rotate(dir); err != nil {
		fmt.Println(err)
		return
	}
	k, _ = sealed.Load(dir)
	plain, err := k.Open(old)
	fmt.Println(string(plain), err, k.KeyIDs(), k.PrimaryID())
	// Output: password=hunter2 <nil> [1 2] 2
}
