package server

import (
	"context"
	"testing"
	"time"
)

// The health monitor runs only while the server leads and Run runs, and
// a new term starts a new monitor.
func TestHealthRunner_LeaderOnly(t *testing.T) {
	s, err := New(Config{Follower: true})
	if err != nil {
		t.Fatal(err)
	}
	h := s.health
	h.open()
	if h.active() {
		t.Fatal("a follower runs the health monitor")
	}
	s.SetLeader(true)
	if !h.active() {
		t.Fatal("the leader does not run the health monitor")
	}
	s.SetLeader(false)
	if h.active() {
		t.Fatal("the monitor kept running after leadership was lost")
	}
	s.SetLeader(true)
	if !h.active() {
		t.Fatal("a second term did not start a monitor")
	}
	h.close()
	if h.active() {
		t.Fatal("the monitor runs after Run ended")
	}
	s.SetLeader(true)
	if h.active() {
		t.Fatal("SetLeader after Run started a monitor")
	}
}

// Each term this server leads starts by resuming the volume changes an
// earlier leader left pending; a follower resumes nothing.
func TestHealthRunner_ResumesEachTerm(t *testing.T) {
	s, err := New(Config{Follower: true})
	if err != nil {
		t.Fatal(err)
	}
	h := s.health
	resumed := make(chan struct{}, 4)
	h.resume = func(context.Context) { resumed <- struct{}{} }
	waitResume := func(term string) {
		t.Helper()
		select {
		case <-resumed:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no resume within 10 s", term)
		}
	}
	h.open()
	s.SetLeader(true)
	waitResume("first term")
	s.SetLeader(false)
	s.SetLeader(true)
	waitResume("second term")
	h.close()
	if n := len(resumed); n != 0 {
		t.Fatalf("%d resumes more than the two terms", n)
	}
}
