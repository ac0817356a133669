package plugintest

import (
	"fmt"
	"slices"
	"strings"

	"github.com/csikit/csikit/csi"
)

// perCallSecrets are the calls Config.CallSecrets may name.
var perCallSecrets = []string{methodCreateSnapshot, methodDeleteSnapshot, methodListSnapshots}

// secretsFor is the set of secrets for a call: its Config.CallSecrets
// entry, else Config.Secrets.
func (l *run) secretsFor(method string) csi.Secrets {
	if s, ok := l.cfg.CallSecrets[method]; ok {
		return s
	}
	return l.cfg.Secrets
}

// checkCallSecrets refuses a Config.CallSecrets key for a call that
// csikit sends with the volume's one set.
func (c Config) checkCallSecrets() error {
	for m := range c.CallSecrets {
		if !slices.Contains(perCallSecrets, m) {
			return fmt.Errorf("Config.CallSecrets has %q; csikit passes a set of its own only to %s, and Config.Secrets (one set per volume) to every other call",
				m, strings.Join(perCallSecrets, ", "))
		}
	}
	return nil
}
