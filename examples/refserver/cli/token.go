package cli

import (
	"cmp"
	"flag"
	"os"
)

// ClusterTokenEnv is the environment variable the servers and agents
// read the cluster token from when -cluster-token is not given. The
// environment keeps it out of the process list.
const ClusterTokenEnv = "CSIKIT_CLUSTER_TOKEN"

// clusterTokenFlag defines -cluster-token. Its default is empty in the
// help on purpose: a default read from the environment would be printed.
func clusterTokenFlag(fs *flag.FlagSet) *string {
	return fs.String("cluster-token", "", "the secret the servers and agents of a cluster share (default $"+ClusterTokenEnv+"): "+
		"agents refuse node calls without it and servers refuse forwarded writes without it; none leaves both open, for dev on loopback")
}

// clusterToken is the flag's value, or the environment's.
func clusterToken(flagValue string) string { return cmp.Or(flagValue, os.Getenv(ClusterTokenEnv)) }
