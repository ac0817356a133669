//go:build race

package sim

// raceEnabled is true under the race detector, which makes every step
// several times slower: the default run is then shorter.
const raceEnabled = true
