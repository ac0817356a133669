package rpcshim

import (
	"context"
	"slices"
	"sync"
)

// attachKey is what the router serializes attach and detach calls on:
// one plugin and the CSI node ID of the node the volume is attached to
// or detached from (ControllerPublishRequest.ExternalNodeID, a claim's
// ExternalNodeID). It is the target node, not the controller node that
// serves the call.
//
// Why this key: some cloud plugins pick a device name for a new
// attachment by looking at what is attached to the instance, so two
// attaches to one instance that overlap may pick the same name and one
// fails (or worse, both succeed with the wrong device). Serializing per
// plugin cluster-wide would avoid that too, but would make every attach
// in the cluster wait for the slowest one; per target node keeps
// attaches to different nodes in parallel.
//
// A ControllerUnpublish with no ExternalNodeID (detach from every node)
// uses the key with an empty node: it is serialized with other
// every-node detaches of the plugin only.
type attachKey struct {
	pluginID       string
	externalNodeID string
}

// keyedLocks is a map of mutexes created on demand and dropped when no
// one holds or waits for them, so it holds only the keys in use and
// never grows with the number of keys ever seen. Waiters are served in
// arrival order, and waiting honours ctx. The zero value is ready to use.
type keyedLocks[K comparable] struct {
	mu sync.Mutex
	m  map[K]*keyedLock
}

// keyedLock is one key in use: held by one caller, with the callers
// waiting for it in order. Guarded by keyedLocks.mu.
type keyedLock struct {
	waiters []chan struct{}
}

// lock waits until key is free or ctx ends. On success it returns the
// function that frees the key; call it exactly once. When ctx ends first
// it returns ctx.Err() and holds nothing.
func (l *keyedLocks[K]) lock(ctx context.Context, key K) (unlock func(), err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l.mu.Lock()
	if l.m == nil {
		l.m = make(map[K]*keyedLock)
	}
	e := l.m[key]
	if e == nil {
		l.m[key] = &keyedLock{}
		l.mu.Unlock()
		return func() { l.unlock(key) }, nil
	}
	turn := make(chan struct{})
	e.waiters = append(e.waiters, turn)
	l.mu.Unlock()

	select {
	case <-turn:
		return func() { l.unlock(key) }, nil
	case <-ctx.Done():
	}
	l.mu.Lock()
	if i := slices.Index(e.waiters, turn); i >= 0 {
		e.waiters = slices.Delete(e.waiters, i, i+1)
		l.mu.Unlock()
		return nil, ctx.Err()
	}
	// The key was handed to us as ctx ended: pass it on.
	l.mu.Unlock()
	l.unlock(key)
	return nil, ctx.Err()
}

// unlock hands key to the first waiter, or drops it when none waits.
func (l *keyedLocks[K]) unlock(key K) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.m[key]
	if len(e.waiters) == 0 {
		delete(l.m, key)
		return
	}
	next := e.waiters[0]
	e.waiters = slices.Delete(e.waiters, 0, 1)
	close(next)
}

// stats returns how many keys are held and how many callers wait for
// one.
func (l *keyedLocks[K]) stats() (held, waiting int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.m {
		held++
		waiting += len(e.waiters)
	}
	return held, waiting
}
