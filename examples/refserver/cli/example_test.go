package cli_test

import (
	"context"
	"fmt"
	"os"

	"github.com/csikit/csikit/examples/refserver/cli"
)

// Run is the whole command line: pass the arguments and the outputs.
// A command missing its required flags exits with ExitUsage and says
// what to give.
func ExampleRun() {
	code := cli.Run(context.Background(), []string{"claim", "-volume", "demo-vol"}, os.Stdout, os.Stdout)
	fmt.Println("exit", code)
	// Output:
	// refserver claim: invalid request: -volume, -alloc and -node are required
	// exit 2
}
