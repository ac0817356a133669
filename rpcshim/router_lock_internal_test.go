package rpcshim

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// TestKeyedLocks_FIFO checks that waiters get a key in arrival order.
func TestKeyedLocks_FIFO(t *testing.T) {
	var l keyedLocks[string]
	ctx := context.Background()
	unlock, err := l.lock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	order := make(chan int, 3)
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() {
			u, err := l.lock(ctx, "k")
			if err != nil {
				t.Error(err)
				return
			}
			order <- i
			u()
		})
		// Queue the next waiter only once this one waits.
		for {
			if _, waiting := l.stats(); waiting == i+1 {
				break
			}
			runtime.Gosched()
		}
	}
	unlock()
	wg.Wait()
	close(order)
	want := 0
	for got := range order {
		if got != want {
			t.Fatalf("waiter %d got the key in turn %d", got, want)
		}
		want++
	}
	if held, waiting := l.stats(); held != 0 || waiting != 0 || len(l.m) != 0 {
		t.Errorf("after use: %d held, %d waiting, %d keys", held, waiting, len(l.m))
	}
}

// TestKeyedLocks_CancelStress runs many lockers on a few keys, some of
// which give up, and checks mutual exclusion and that no key leaks, in
// particular when a key is handed to a waiter whose ctx ends at once.
func TestKeyedLocks_CancelStress(t *testing.T) {
	var l keyedLocks[int]
	var inside [3]atomic.Int32
	var wg sync.WaitGroup
	for i := range 300 {
		key := i % 3
		wg.Go(func() {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if i%2 == 0 {
				go cancel()
			}
			u, err := l.lock(ctx, key)
			if err != nil {
				return
			}
			if n := inside[key].Add(1); n != 1 {
				t.Errorf("%d holders of key %d", n, key)
			}
			inside[key].Add(-1)
			u()
		})
	}
	wg.Wait()
	if held, waiting := l.stats(); held != 0 || waiting != 0 || len(l.m) != 0 {
		t.Errorf("after use: %d held, %d waiting, %d keys", held, waiting, len(l.m))
	}
}
