package plugintest

import "github.com/csikit/csikit/csi/clock"

// SetClock sets the clock that times the fingerprint's wait for Probe
// to say ready.
func SetClock(c *Config, clk clock.Clock) { c.clock = clk }
