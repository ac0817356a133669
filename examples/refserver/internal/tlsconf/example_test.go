package tlsconf_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/csikit/csikit/examples/refserver/internal/tlsconf"
)

// Init writes the files a loopback cluster's -tls-* flags name; Load
// turns a part's files into its TLS configurations.
func ExampleInit() {
	dir, err := os.MkdirTemp("", "tlsconf")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	if err := tlsconf.Init(filepath.Join(dir, "tls"), nil); err != nil {
		fmt.Println(err)
		return
	}
	b, err := tlsconf.Load(tlsconf.Paths(filepath.Join(dir, "tls"), "server"))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(b.MutualServer().ClientAuth, b.APIServer().ClientAuth)
	// Output:
	// RequireAndVerifyClientCert VerifyClientCertIfGiven
}
