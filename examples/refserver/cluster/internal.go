package cluster

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/refserver/api"
)

// maxCommand bounds a forwarded command's size.
const maxCommand = 16 << 20

// internal is the handler of the server-to-server endpoints, served by
// the reference server under api.InternalPrefix.
func (s *Server) internal() http.Handler {
	m := http.NewServeMux()
	m.HandleFunc("GET "+api.StatusPath, s.status)
	m.HandleFunc("POST "+api.ApplyPath, s.serversOnly(s.apply))
	m.HandleFunc(api.InternalPrefix, func(w http.ResponseWriter, r *http.Request) {
		writeError(w, fmt.Errorf("%w: no endpoint %s %s; the internal endpoints are GET %s and POST %s",
			csi.ErrInvalidRequest, r.Method, r.URL.Path, api.StatusPath, api.ApplyPath))
	})
	return m
}

// serversOnly lets through only requests that carry the cluster token,
// when the server has one: a forwarded write comes from another server,
// never from a client. The status stays readable (the CLI's cluster
// status reads it); it holds no secret.
func (s *Server) serversOnly(h http.HandlerFunc) http.HandlerFunc {
	if s.cfg.ClusterToken == "" {
		return h
	}
	token := []byte(s.cfg.ClusterToken)
	return func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get(api.ClusterTokenHeader)), token) != 1 {
			s.cfg.Events.Printf("server", "refused %s %s from %s: not another server of the cluster (no cluster token)", r.Method, r.URL.Path, r.RemoteAddr)
			writeError(w, fmt.Errorf("%w: %s %s is for the servers of the cluster only; send the cluster token", csi.ErrPermissionDenied, r.Method, r.URL.Path))
			return
		}
		h(w, r)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, err error) {
	writeJSON(w, api.StatusOf(err), api.ErrorBody(err))
}

// status answers api.ServerStatus, after waiting for a leader to be
// known if the query asks (?wait-leader=D).
func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	rs := s.Raft()
	if q := r.URL.Query().Get("wait-leader"); q != "" {
		d, err := time.ParseDuration(q)
		if err != nil || d < 0 {
			writeError(w, fmt.Errorf("%w: wait-leader %q is not a duration such as 30s", csi.ErrInvalidRequest, q))
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), min(d, api.MaxWait))
		_, _, _ = rs.WaitLeader(ctx) // on timeout, answer with what is known
		cancel()
	}
	leaderAddr, leaderID := rs.Leader()
	unreachable := ""
	if leaderID != "" && leaderID != s.id && !s.reachable(r.Context(), leaderID) {
		unreachable, leaderID, leaderAddr = leaderID, "", ""
	}
	st := api.ServerStatus{
		ID: s.id, RaftAddress: rs.Self().Addr, APIAddress: s.apiAddress(),
		Leader: s.leading.Load(), LeaderID: leaderID, LeaderRaftAddress: leaderAddr, UnreachableLeaderID: unreachable,
		BootstrapExpect: s.cfg.BootstrapExpect, AppliedIndex: rs.FSM().AppliedIndex(),
	}
	servers, err := rs.Servers()
	if err != nil {
		writeError(w, fmt.Errorf("%w: %w", csi.ErrUnavailable, err))
		return
	}
	for _, p := range servers {
		cs := api.ClusterServer{ID: p.ID, RaftAddress: p.Addr}
		if p.ID == s.id {
			cs.APIAddress = s.apiAddress()
		} else if pe := s.peerAPI(p.ID); pe != nil {
			cs.APIAddress = pe.address
		}
		st.Servers = append(st.Servers, cs)
	}
	writeJSON(w, http.StatusOK, st)
}

// leaderProbeTimeout bounds the status call that checks whether the
// leader raft names still answers.
const leaderProbeTimeout = time.Second

// reachable reports whether the API of server id answers a status
// call. A server whose API address is not known yet counts as
// reachable: there is nothing to check it with.
func (s *Server) reachable(ctx context.Context, id string) bool {
	p := s.peerAPI(id)
	if p == nil {
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, leaderProbeTimeout)
	defer cancel()
	_, err := p.client.Status(ctx)
	var ae *api.Error
	return err == nil || errors.As(err, &ae)
}

func (s *Server) apiAddress() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.apiAddr
}

// apply is the leader's end of raftstate's Forward: it applies a
// command a follower forwarded. On a server that no longer leads,
// ApplyForwarded refuses (Retryable) and never forwards again.
func (s *Server) apply(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxCommand))
	if err != nil {
		writeError(w, fmt.Errorf("%w: POST %s: read the command: %v", csi.ErrInvalidRequest, api.ApplyPath, err))
		return
	}
	res, err := s.Raft().ApplyForwarded(r.Context(), body)
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set(api.IndexHeader, strconv.FormatUint(res.Index, 10))
	writeJSON(w, http.StatusOK, api.ApplyResponse{Result: res})
}
