package agent_test

import (
	"fmt"

	"github.com/csikit/csikit/examples/refserver/agent"
)

// The agent's -plugin flag names a plugin already running on the node:
// its ID, its socket and, after a last colon, its type.
func ExampleParsePlugin() {
	for _, flag := range []string{
		"hostpath=unix:///run/csi/hostpath.sock",
		"hostpath=unix:///run/csi/hostpath.sock:node",
		"hostpath",
	} {
		p, err := agent.ParsePlugin(flag)
		if err != nil {
			fmt.Println("error:", err)
			continue
		}
		fmt.Println(p.ID, p.Type, p.Endpoint)
	}
	// Output:
	// hostpath monolith unix:///run/csi/hostpath.sock
	// hostpath node unix:///run/csi/hostpath.sock
	// error: invalid request: plugin "hostpath": want ID=ENDPOINT[:TYPE], for example hostpath=unix:///run/csi.sock:monolith
}
