// Command refserver is csikit's reference server, node agent and CLI,
// wired only from csikit's exported API.
//
// With no arguments (or "demo") it runs the all-in-one demo: a server
// and two node agents in one process, each node with the hostpath CSI
// plugin on its own unix socket, talking over csikit's gRPC transport
// (server to agents) and the server's HTTP API (agents and CLI to
// server). It creates a volume, claims it for an allocation, mounts it,
// writes a file through the mount, stops the allocation and lets the
// claim release worker free the claim, printing each step; then it
// serves until interrupted (-exit-after-demo stops it instead).
//
//	go run ./examples/refserver
//	go run ./examples/refserver server -data-dir /tmp/rs    # durable: raft on boltdb
//	go run ./examples/refserver server -dev                 # state in memory only
//	go run ./examples/refserver agent -server http://127.0.0.1:7646 -node-id node-1 \
//		-addr 127.0.0.1:7647 -hostpath-data-dir /tmp/rs-plugin
//	go run ./examples/refserver volume status
//	go run ./examples/refserver server -addr 127.0.0.1:7646 -data-dir /tmp/rs/s1 \
//		-bootstrap-expect 3 -raft-addr 127.0.0.1:7648 -join 127.0.0.1:7656,127.0.0.1:7666
//
// The logic lives in importable packages: server, cluster (cluster mode
// on raft), agent, api (the HTTP API and its client), cli (every
// command), demo and events. See
// README.md for the commands, the modes and the API endpoints.
package main

import (
	"os"

	"github.com/csikit/csikit/examples/refserver/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:]))
}
