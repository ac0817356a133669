package server

import "testing"

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
