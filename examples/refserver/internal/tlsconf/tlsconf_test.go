package tlsconf_test

import (
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/refserver/internal/tlsconf"
)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func initDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tls")
	must(t, tlsconf.Init(dir, nil))
	return dir
}

func leaf(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	must(t, err)
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("%s: no PEM block", path)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	must(t, err)
	return c
}

// TestInit_OutputLoadsAndVerifies: every part's files load, its
// certificate chains to the CA for the uses it needs on loopback, and
// the keys are 0600.
func TestInit_OutputLoadsAndVerifies(t *testing.T) {
	dir := initDir(t)
	pool, err := tlsconf.LoadCA(filepath.Join(dir, tlsconf.CAFile))
	must(t, err)
	for _, tt := range []struct {
		part  string
		usage []x509.ExtKeyUsage
		host  string
	}{
		{"server", []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, "127.0.0.1"},
		{"agent", []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, "localhost"},
		{"client", []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, ""},
	} {
		f := tlsconf.Paths(dir, tt.part)
		if _, err := tlsconf.Load(f); err != nil {
			t.Fatalf("%s: %v", tt.part, err)
		}
		c := leaf(t, f.Cert)
		if _, ok := c.PublicKey.(*ecdsa.PublicKey); !ok || c.PublicKeyAlgorithm != x509.ECDSA {
			t.Errorf("%s: public key %T", tt.part, c.PublicKey)
		}
		for _, u := range tt.usage {
			if _, err := c.Verify(x509.VerifyOptions{Roots: pool, DNSName: tt.host, KeyUsages: []x509.ExtKeyUsage{u}}); err != nil {
				t.Errorf("%s: verify for %v: %v", tt.part, u, err)
			}
		}
		st, err := os.Stat(f.Key)
		must(t, err)
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s: key mode %v, want 0600", f.Key, st.Mode().Perm())
		}
	}
	st, err := os.Stat(filepath.Join(dir, tlsconf.CAKeyFile))
	must(t, err)
	if st.Mode().Perm() != 0o600 {
		t.Errorf("CA key mode %v, want 0600", st.Mode().Perm())
	}
	if c := leaf(t, filepath.Join(dir, tlsconf.ClientFile)); len(c.IPAddresses)+len(c.DNSNames) != 0 {
		t.Errorf("client certificate names hosts: %v %v", c.IPAddresses, c.DNSNames)
	}
	if err := tlsconf.Init(dir, nil); !errors.Is(err, csi.ErrInvalidRequest) {
		t.Errorf("second Init in the same dir: %v, want ErrInvalidRequest", err)
	}
}

func TestLoad_Missing(t *testing.T) {
	dir := initDir(t)
	f := tlsconf.Paths(dir, "server")
	for _, bad := range []tlsconf.Files{{Cert: f.Cert, Key: f.Key}, {Cert: f.Cert, Key: f.Key, CA: f.Cert + ".none"}, {Cert: f.Cert, Key: f.Cert, CA: f.CA}} {
		if _, err := tlsconf.Load(bad); !errors.Is(err, csi.ErrInvalidRequest) {
			t.Errorf("Load(%+v) = %v, want ErrInvalidRequest", bad, err)
		}
	}
}

// TestStreamLayer_MutualTLS: two servers of one CA talk; a peer with a
// certificate of another CA is refused on both sides.
func TestStreamLayer_MutualTLS(t *testing.T) {
	good, other := initDir(t), initDir(t)
	a, err := tlsconf.Load(tlsconf.Paths(good, "server"))
	must(t, err)
	b, err := tlsconf.Load(tlsconf.Paths(good, "agent"))
	must(t, err)
	x, err := tlsconf.Load(tlsconf.Paths(other, "server"))
	must(t, err)
	sl, err := tlsconf.NewStreamLayer("127.0.0.1:0", nil, a.MutualServer(), a.Client())
	must(t, err)
	defer sl.Close()
	accepted := make(chan error, 4)
	go func() {
		for {
			c, err := sl.Accept()
			if err != nil {
				return
			}
			go func() {
				buf := make([]byte, 1)
				_, err := c.Read(buf)
				if err == nil {
					_, err = c.Write(buf)
				}
				accepted <- err
				c.Close()
			}()
		}
	}()
	if _, err := tlsconf.NewStreamLayer("127.0.0.1:0", nil, a.APIServer(), a.Client()); !errors.Is(err, csi.ErrInvalidRequest) {
		t.Fatalf("a raft listener that does not require client certificates: %v, want ErrInvalidRequest", err)
	}
	peer, err := tlsconf.NewStreamLayer("127.0.0.1:0", nil, b.MutualServer(), b.Client())
	must(t, err)
	defer peer.Close()
	c, err := peer.Dial("127.0.0.1:0", time.Second) // nothing there
	if err == nil {
		c.Close()
		t.Fatal("dial of a closed port succeeded")
	}
	c, err = peer.Dial(rafAddr(sl), 5*time.Second)
	must(t, err)
	_, err = c.Write([]byte{1})
	must(t, err)
	buf := make([]byte, 1)
	_, err = c.Read(buf)
	must(t, err)
	c.Close()
	must(t, waitErr(t, accepted))

	// A server of another CA: the dialer refuses the listener's
	// certificate, and the listener refuses the dialer's.
	xl, err := tlsconf.NewStreamLayer("127.0.0.1:0", nil, x.MutualServer(), x.Client())
	must(t, err)
	defer xl.Close()
	if c, err := xl.Dial(rafAddr(sl), 5*time.Second); err == nil {
		c.Close()
		t.Fatal("a server of another CA completed a handshake")
	}
	if err := waitErr(t, accepted); err == nil {
		t.Fatal("the listener read from a server of another CA")
	}
	conf := x.Client()
	conf.InsecureSkipVerify = true // trust anything: still refused by the listener
	raw, err := tls.Dial("tcp", string(rafAddr(sl)), conf)
	if err == nil {
		_, _ = raw.Write([]byte{1})
		_, err = raw.Read(buf)
		raw.Close()
	}
	if err == nil {
		t.Fatal("a client certificate of another CA was answered")
	}
	if err := waitErr(t, accepted); err == nil {
		t.Fatal("the listener read from a client of another CA")
	}
}

func rafAddr(sl *tlsconf.StreamLayer) raftAddress { return raftAddress(sl.Addr().String()) }

func waitErr(t *testing.T, ch chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("no connection handled in 10s")
		return nil
	}
}

type raftAddress = raft.ServerAddress
