package tlsconf

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/csikit/csikit/csi"
)

// DefaultHosts are the names and addresses the server and agent
// certificates are valid for when Init is given none: loopback.
var DefaultHosts = []string{"localhost", "127.0.0.1", "::1"}

// File names Init writes in its directory.
const (
	CAFile     = "ca.pem"
	CAKeyFile  = "ca-key.pem"
	ServerFile = "server.pem"
	ServerKey  = "server-key.pem"
	AgentFile  = "agent.pem"
	AgentKey   = "agent-key.pem"
	ClientFile = "client.pem"
	ClientKey  = "client-key.pem"
)

// Validity is how long Init's certificates are valid.
const Validity = 365 * 24 * time.Hour

// Paths returns the Files of a part ("server", "agent" or "client")
// that Init wrote in dir.
func Paths(dir, part string) Files {
	return Files{
		Cert: filepath.Join(dir, part+".pem"), Key: filepath.Join(dir, part+"-key.pem"), CA: filepath.Join(dir, CAFile),
	}
}

// Init writes in dir a new CA (ECDSA P-256) and the server, agent and
// client certificates it signs. The server and agent certificates are
// valid for hosts (DefaultHosts when empty) both as TLS servers and as
// TLS clients, since they dial each other. Keys are written 0600.
// Init refuses to overwrite an existing CA.
func Init(dir string, hosts []string) error {
	if dir == "" {
		return fmt.Errorf("%w: tls init: give -dir", csi.ErrInvalidRequest)
	}
	if len(hosts) == 0 {
		hosts = DefaultHosts
	}
	if _, err := os.Stat(filepath.Join(dir, CAFile)); err == nil {
		return fmt.Errorf("%w: tls init: %s exists; remove it or give another -dir", csi.ErrInvalidRequest, filepath.Join(dir, CAFile))
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("tls init: %w", err)
	}
	now := time.Now()
	caKey, caDER, err := makeCert(&x509.Certificate{
		Subject: pkix.Name{CommonName: "refserver CA"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign, NotBefore: now.Add(-time.Minute), NotAfter: now.Add(Validity),
	}, nil, nil)
	if err != nil {
		return err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return fmt.Errorf("tls init: %w", err)
	}
	if err := writePair(dir, "ca", caDER, caKey); err != nil {
		return err
	}
	both := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	for _, p := range []struct {
		name  string
		usage []x509.ExtKeyUsage
		hosts []string
	}{{"server", both, hosts}, {"agent", both, hosts}, {"client", []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, nil}} {
		tmpl := &x509.Certificate{
			Subject: pkix.Name{CommonName: "refserver " + p.name}, KeyUsage: x509.KeyUsageDigitalSignature,
			ExtKeyUsage: p.usage, NotBefore: now.Add(-time.Minute), NotAfter: now.Add(Validity),
		}
		for _, h := range p.hosts {
			if ip := net.ParseIP(h); ip != nil {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			} else {
				tmpl.DNSNames = append(tmpl.DNSNames, h)
			}
		}
		key, der, err := makeCert(tmpl, ca, caKey)
		if err != nil {
			return err
		}
		if err := writePair(dir, p.name, der, key); err != nil {
			return err
		}
	}
	return nil
}

// makeCert makes a key and a certificate of tmpl signed by parent
// (self-signed when parent is nil).
func makeCert(tmpl, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*ecdsa.PrivateKey, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("tls init: key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, fmt.Errorf("tls init: serial: %w", err)
	}
	tmpl.SerialNumber = serial
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		return nil, nil, fmt.Errorf("tls init: certificate %s: %w", tmpl.Subject.CommonName, err)
	}
	return key, der, nil
}

// writePair writes NAME.pem (0644) and NAME-key.pem (0600).
func writePair(dir, name string, der []byte, key *ecdsa.PrivateKey) error {
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("tls init: %w", err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
	return errors.Join(
		writeFile(filepath.Join(dir, name+"-key.pem"), keyPEM, 0o600),
		writeFile(filepath.Join(dir, name+".pem"), certPEM, 0o644),
	)
}

// writeFile writes a new file with perm, refusing to follow or replace
// an existing one.
func writeFile(path string, b []byte, perm os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return fmt.Errorf("tls init: %w", err)
	}
	_, err = f.Write(b)
	return errors.Join(err, f.Close())
}
