package cli

import (
	"cmp"
	"flag"
	"os"

	"github.com/csikit/csikit/examples/refserver/api"
)

// ClusterTokenEnv is the environment variable the servers and agents
// read the cluster token from when -cluster-token is not given. The
// environment keeps it out of the process list.
const ClusterTokenEnv = "CSIKIT_CLUSTER_TOKEN"

// TokenEnv is the environment variable client commands read their ACL
// token from when -token is not given.
const TokenEnv = api.TokenEnv

// tokenFlag defines a client command's -token, empty in the help for
// the same reason as -cluster-token.
func tokenFlag(fs *flag.FlagSet) *string {
	return fs.String("token", "", "ACL token of the caller, for a server with ACLs (default $"+TokenEnv+")")
}

// clusterTokenFlag defines -cluster-token. Its default is empty in the
// help on purpose: a default read from the environment would be printed.
func clusterTokenFlag(fs *flag.FlagSet) *string {
	return fs.String("cluster-token", "", "the secret the servers and agents of a cluster share (default $"+ClusterTokenEnv+"): "+
		"agents refuse node calls without it and servers refuse forwarded writes without it; none leaves both open, for dev on loopback")
}

// clusterToken is the flag's value, or the environment's.
func clusterToken(flagValue string) string { return cmp.Or(flagValue, os.Getenv(ClusterTokenEnv)) }
