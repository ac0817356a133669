package api_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/refserver/api"
)

// A refusal crosses the API with its csi sentinel and class, so the
// caller branches on it with errors.Is as it would in-process.
func ExampleClient() {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		err := fmt.Errorf("delete volume default/db: allocation web-1 still claims it: %w", csi.ErrVolumeInUse)
		w.WriteHeader(api.StatusOf(err))
		_ = json.NewEncoder(w).Encode(api.ErrorBody(err))
	}))
	defer hs.Close()

	c, err := api.NewClient(hs.URL, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	_, err = c.DeleteVolume(context.Background(), "default", "db")
	fmt.Println(err)
	fmt.Println(errors.Is(err, csi.ErrVolumeInUse), csi.Classify(err))
	// Output:
	// delete volume default/db: allocation web-1 still claims it: volume in use
	// true retryable
}

// A server that serves TLS is called with NewTLSClient: an address
// without a scheme is dialed with https, and the server's certificate
// is verified against RootCAs (tlsconf.LoadCA of -tls-ca in the CLI).
func ExampleNewTLSClient() {
	hs := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode([]*csi.Volume{{ID: "db", Namespace: "default"}})
	}))
	defer hs.Close()
	pool := x509.NewCertPool()
	pool.AddCert(hs.Certificate())

	c, err := api.NewTLSClient(strings.TrimPrefix(hs.URL, "https://"), &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	vols, _, err := c.Volumes(context.Background(), "", "", nil)
	fmt.Println(strings.HasPrefix(c.Address(), "https://"), len(vols), err)
	// Output:
	// true 1 <nil>
}
