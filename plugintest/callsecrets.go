package plugintest

import "github.com/csikit/csikit/csi"

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
