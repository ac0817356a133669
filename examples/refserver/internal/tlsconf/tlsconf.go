// Package tlsconf loads the reference server's TLS files (-tls-cert,
// -tls-key, -tls-ca) into crypto/tls configurations, and writes a CA
// and certificates for a loopback cluster (refserver tls init).
//
// One CA signs every part: servers, agents and CLI clients. Every
// connection between servers and agents is mutual TLS: both sides
// present a certificate that the CA signed. The HTTP API verifies a
// client certificate when one is given and otherwise relies on ACL
// tokens.
package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"github.com/csikit/csikit/csi"
)

// Files names the PEM files of one part.
type Files struct {
	// Cert and Key are this part's certificate and private key.
	Cert, Key string
	// CA is the certificate of the CA that signs the other parts.
	CA string
}

// Enabled reports whether any file is set: then all must be.
func (f Files) Enabled() bool { return f.Cert != "" || f.Key != "" || f.CA != "" }

// Bundle is one part's loaded certificate and the CA pool it trusts.
type Bundle struct {
	cert tls.Certificate
	pool *x509.CertPool
}

// Load reads the files. It returns a csi.ErrInvalidRequest error that
// names the flag of a missing or unreadable file.
func Load(f Files) (*Bundle, error) {
	switch {
	case f.Cert == "" || f.Key == "" || f.CA == "":
		return nil, fmt.Errorf("%w: TLS needs all of -tls-cert, -tls-key and -tls-ca (refserver tls init writes them)", csi.ErrInvalidRequest)
	}
	pool, err := LoadCA(f.CA)
	if err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, fmt.Errorf("%w: -tls-cert %s / -tls-key %s: %v", csi.ErrInvalidRequest, f.Cert, f.Key, err)
	}
	return &Bundle{cert: cert, pool: pool}, nil
}

// LoadCA reads a PEM file of CA certificates into a pool.
func LoadCA(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: -tls-ca %s: %v", csi.ErrInvalidRequest, path, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%w: -tls-ca %s: %v", csi.ErrInvalidRequest, path, errors.New("no PEM certificate in it"))
	}
	return pool, nil
}

// Pool returns the CA pool the bundle trusts.
func (b *Bundle) Pool() *x509.CertPool { return b.pool }

// APIServer is the configuration of the HTTP API's listener: it
// presents the certificate, and verifies a client certificate when
// one is given.
func (b *Bundle) APIServer() *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{b.cert}, ClientCAs: b.pool,
		ClientAuth: tls.VerifyClientCertIfGiven, MinVersion: tls.VersionTLS12,
	}
}

// MutualServer is the configuration of a listener that accepts only
// peers with a certificate the CA signed: raft, the agent's node
// service.
func (b *Bundle) MutualServer() *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{b.cert}, ClientCAs: b.pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12,
	}
}

// Client is the configuration of a dialer: it verifies the peer
// against the CA and presents the certificate.
func (b *Bundle) Client() *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{b.cert}, RootCAs: b.pool, MinVersion: tls.VersionTLS12}
}
