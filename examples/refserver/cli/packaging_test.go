package cli_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/csikit/csikit/examples/refserver/cli"
)

// TestPackaging_Flags: every flag the systemd units and the Dockerfile
// pass is one the command defines, so a renamed flag cannot leave them
// starting a binary that refuses its command line.
func TestPackaging_Flags(t *testing.T) {
	files := map[string]*regexp.Regexp{
		"refserver-server.service": regexp.MustCompile(`(?m)^ExecStart=\S+ (.*)$`),
		"refserver-agent.service":  regexp.MustCompile(`(?m)^ExecStart=\S+ (.*)$`),
		"Dockerfile":               regexp.MustCompile(`(?m)^ENTRYPOINT \["[^"]+", (.*)\]$`),
	}
	for name, re := range files {
		b, err := os.ReadFile(filepath.Join("..", "packaging", name))
		must(t, err)
		lines := re.FindAllStringSubmatch(string(b), -1)
		if len(lines) == 0 {
			t.Fatalf("%s: no command line found", name)
		}
		for _, m := range lines {
			args := strings.Fields(strings.NewReplacer(`"`, "", ",", "").Replace(m[1]))
			var help bytes.Buffer
			if code := cli.Run(context.Background(), []string{args[0], "-h"}, &help, &help); code != cli.ExitOK {
				t.Fatalf("%s: refserver %s -h: exit %d", name, args[0], code)
			}
			for _, a := range args[1:] {
				if strings.HasPrefix(a, "-") && !strings.Contains(help.String(), "\n  "+a+" ") && !strings.Contains(help.String(), "\n  "+a+"\n") {
					t.Errorf("%s passes %s, which refserver %s does not define", name, a, args[0])
				}
			}
		}
	}
}
