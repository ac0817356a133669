// Package clock lets csikit's timed logic (retries, backoff, intervals)
// take its time from an injected source, so tests drive time explicitly
// and never sleep waiting for a timer.
//
// Real is the wall clock. Fake is a manual clock for tests: timers fire
// only when Advance moves time past their deadline, and BlockUntil lets a
// test wait until the code under test is parked on a timer.
//
// It is public so a host can pass its own Clock (or a Fake in its tests)
// to every csikit Config that takes one: csi/plugin, csitest, fingerprint,
// claimgc, rpcshim.
package clock
