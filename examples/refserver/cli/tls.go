package cli

import (
	"cmp"
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"os"

	"github.com/csikit/csikit/examples/refserver/cluster"
	"github.com/csikit/csikit/examples/refserver/internal/tlsconf"
)

// TLSCAEnv is the environment variable client commands read the CA
// file from when -tls-ca is not given: with it they call the server
// over https and verify its certificate.
const TLSCAEnv = "REFSERVER_TLS_CA"

// tlsFlags are a server's or an agent's -tls-cert, -tls-key, -tls-ca.
type tlsFlags struct{ cert, key, ca *string }

func addTLSFlags(fs *flag.FlagSet, part, serves string) *tlsFlags {
	return &tlsFlags{
		cert: fs.String("tls-cert", "", "TLS: this "+part+"'s certificate, PEM (refserver tls init writes one); with -tls-key and -tls-ca it serves "+serves+" over TLS"),
		key:  fs.String("tls-key", "", "TLS: the private key of -tls-cert, PEM"),
		ca:   fs.String("tls-ca", "", "TLS: the CA certificate that signs the servers' and agents' certificates, PEM"),
	}
}

// load returns the loaded files, or nil when no -tls flag is set.
func (f *tlsFlags) load() (*tlsconf.Bundle, error) {
	files := tlsconf.Files{Cert: *f.cert, Key: *f.key, CA: *f.ca}
	if !files.Enabled() {
		return nil, nil
	}
	return tlsconf.Load(files)
}

// clientCAFlag defines a client command's -tls-ca.
func clientCAFlag(fs *flag.FlagSet) *string {
	return fs.String("tls-ca", "", "CA certificate, PEM, of a server that serves TLS: the client uses https and verifies the server (default $"+TLSCAEnv+")")
}

// clientTLS is the TLS configuration of a client command: nil without
// a CA file.
func clientTLS(flagValue string) (*tls.Config, error) {
	ca := cmp.Or(flagValue, os.Getenv(TLSCAEnv))
	if ca == "" {
		return nil, nil
	}
	pool, err := tlsconf.LoadCA(ca)
	if err != nil {
		return nil, err
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

func (e *env) tlsInit(_ context.Context, args []string) int {
	fs := e.modeFlags("tls init", "Writes a new CA and the certificates it signs into -dir, for a cluster on this host: "+
		tlsconf.ServerFile+" (servers), "+tlsconf.AgentFile+" (agents), "+tlsconf.ClientFile+" (CLI clients), each with its -key.pem (mode 0600), "+
		"and "+tlsconf.CAFile+". ECDSA P-256, valid one year. Keep "+tlsconf.CAKeyFile+" away from the cluster.",
		"refserver tls init -dir /etc/refserver/tls\n  refserver server -tls-cert /etc/refserver/tls/server.pem -tls-key /etc/refserver/tls/server-key.pem -tls-ca /etc/refserver/tls/ca.pem")
	dir := fs.String("dir", "", "directory to write the files in (required; it must not hold a CA yet)")
	var hosts listFlag
	fs.Var(&hosts, "hosts", "names and IP addresses the server and agent certificates are valid for, comma-separated or repeated (default localhost,127.0.0.1,::1)")
	code := ExitOK
	if !e.parseMode(fs, args, &code) {
		return code
	}
	if err := tlsconf.Init(*dir, hosts); err != nil {
		return e.modeFail("tls init", err)
	}
	fmt.Fprintf(e.stdout, "wrote a CA and server, agent and client certificates in %s\n", *dir)
	return ExitOK
}

// server sets cfg's TLS configurations from the flags, if set.
func (f *tlsFlags) server(cfg *cluster.Config) error {
	b, err := f.load()
	if err != nil || b == nil {
		return err
	}
	cfg.TLS, cfg.PeerTLS, cfg.ClientTLS = b.APIServer(), b.MutualServer(), b.Client()
	return nil
}

// agentTLS is an agent's loaded TLS files, if any.
type agentTLS struct{ b *tlsconf.Bundle }

// agent is the node service's configuration: nil without TLS.
func (a agentTLS) agent() *tls.Config {
	if a.b == nil {
		return nil
	}
	return a.b.MutualServer()
}
