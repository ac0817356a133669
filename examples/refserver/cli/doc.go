// Package cli is the refserver command line: the run modes (demo,
// server, agent) and the client commands against a running server
// (volume register|create|delete|status, plugin status, node status,
// claim, release). Run takes the arguments and the outputs, so tests
// drive every command without starting a process.
//
// Client commands take -address (default $REFSERVER_ADDR, then
// api.DefaultAddress), -json for machine output (the API's JSON), and
// -timeout. Text output is aligned tables (text/tabwriter). Secrets given
// with -secret are sent to the server and never printed; the server
// never returns them.
//
// Exit codes: ExitOK; ExitError when the server refused or failed;
// ExitUsage for bad flags or arguments.
package cli
