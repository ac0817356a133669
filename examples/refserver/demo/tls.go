package demo

import (
	"crypto/tls"
	"path/filepath"

	"github.com/csikit/csikit/examples/refserver/internal/tlsconf"
)

// clusterTLS is a Cluster's TLS configurations; the zero value is
// plain TCP.
type clusterTLS struct {
	// caFile is the CA certificate clients verify the server with.
	caFile string
	// api serves the server's API; node is the server's client of the
	// agents; agent serves an agent's node service; client is the API
	// client of the demo and its agents.
	api, node, agent, client *tls.Config
}

// scheme is the API URL's scheme.
func (t clusterTLS) scheme() string {
	if t.api == nil {
		return "http://"
	}
	return "https://"
}

// initTLS writes a CA and certificates into dir/tls (tlsconf.Init) and
// loads them.
func initTLS(dir string) (clusterTLS, error) {
	tdir := filepath.Join(dir, "tls")
	if err := tlsconf.Init(tdir, nil); err != nil {
		return clusterTLS{}, err
	}
	var b [3]*tlsconf.Bundle
	for i, part := range []string{"server", "agent", "client"} {
		var err error
		if b[i], err = tlsconf.Load(tlsconf.Paths(tdir, part)); err != nil {
			return clusterTLS{}, err
		}
	}
	return clusterTLS{
		caFile: filepath.Join(tdir, tlsconf.CAFile),
		api:    b[0].APIServer(), node: b[0].Client(), agent: b[1].MutualServer(), client: b[2].Client(),
	}, nil
}

// CAFile is the CA certificate of a Cluster with TLS (for -tls-ca), or
// "" without.
func (c *Cluster) CAFile() string { return c.tls.caFile }
