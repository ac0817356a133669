package api

import (
	"crypto/tls"
	"net/http"
	"strings"
)

// NewTLSClient returns a client of the server at address over TLS with
// conf (its RootCAs verify the server; its Certificates, if any, are
// presented). An address without a scheme, or with http://, is dialed
// with https://. A nil conf means NewClient(address, nil).
func NewTLSClient(address string, conf *tls.Config) (*Client, error) {
	if conf == nil {
		return NewClient(address, nil)
	}
	if address == "" {
		address = DefaultAddress
	}
	switch {
	case strings.HasPrefix(address, "http://"):
		address = "https://" + strings.TrimPrefix(address, "http://")
	case !strings.Contains(address, "://"):
		address = "https://" + address
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = conf.Clone()
	return NewClient(address, &http.Client{Transport: tr})
}
