// Package cli is the refserver command line: the run modes (demo,
// server, agent) and the client commands against a running server
// (volume register|create|delete|status, plugin status, node status,
// claim, release, version, completion). Run takes the arguments and
// the outputs, so tests drive every command without starting a
// process; Main is Run as the program runs it (signals, os.Stdout).
//
// The server mode runs package cluster: without -bootstrap-expect, a
// one-voter raft cluster on boltdb in -data-dir (durable), or with -dev
// in memory; with -bootstrap-expect 3, one server of a cluster.
//
// Client commands take -address (default $REFSERVER_ADDR, then
// api.DefaultAddress), -json for machine output (the API's JSON), and
// -timeout. A write the server refuses with 503 (no leader, leader
// unreachable) is retried with backoff within -timeout, said once on
// stderr. On a terminal, release -wait and volume create show what they
// wait for on one line. Every command answers -h and --help with its
// flags and an example (golden files in testdata/). IDs are checked
// before a request is built. Text output is aligned tables
// (text/tabwriter). Secrets given
// with -secret are sent to the server and never printed; the server
// never returns them.
//
// Exit codes: ExitOK; ExitError when the server refused or failed;
// ExitUsage for bad flags or arguments.
package cli
