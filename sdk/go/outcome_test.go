package molens

// Against a stand-in node (no real node needed): what a write reports when its first answer is lost.

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// lossyNode drops the connection of its first request unanswered, then answers every request with
// status and an API error of code.
func lossyNode(t *testing.T, status int, code string) *httptest.Server {
	var n int32
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if atomic.AddInt32(&n, 1) == 1 {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, `{"error": {"code": "`+code+`", "message": "m", "field": "If-Match"}}`)
	}))
	t.Cleanup(s.Close)
	return s
}

func TestAStaleVersionAfterALostResponseIsAnUnknownOutcome(t *testing.T) {
	// the first attempt may have applied the update (so the version moved on): its retry's 412
	// must not read as "someone else changed the task"
	node := lossyNode(t, 412, "precondition_failed")
	c := newClient(t, []string{node.URL}, WithBackoff(time.Millisecond, time.Millisecond))
	_, err := c.UpdateTask(context.Background(), "01ARZ3NDEKTSV4RRFFQ69G5FAV", map[string]interface{}{"scene": "x"}, 3)
	var ou *OutcomeUnknownError
	if !errors.As(err, &ou) || IsPreconditionFailed(err) {
		t.Fatalf("got %T %v", err, err)
	}
	// answered at once, the same 412 is the API's
	_, err = c.UpdateTask(context.Background(), "01ARZ3NDEKTSV4RRFFQ69G5FAV", map[string]interface{}{"scene": "x"}, 3)
	if !IsPreconditionFailed(err) {
		t.Fatalf("got %T %v", err, err)
	}
}

func TestATriggerWhoseAnswerIsLostIsNeverSentTwice(t *testing.T) {
	// a second trigger would fire the task again (a second backfill of a range, again): the first
	// lost answer is an unknown outcome, not a reason to resend
	var n int32
	node := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		atomic.AddInt32(&n, 1)
		if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
			conn.Close()
		}
	}))
	t.Cleanup(node.Close)
	c := newClient(t, []string{node.URL}, WithBackoff(time.Millisecond, time.Millisecond))
	_, err := c.TriggerTask(context.Background(), "01ARZ3NDEKTSV4RRFFQ69G5FAV")
	var ou *OutcomeUnknownError
	if !errors.As(err, &ou) {
		t.Fatalf("got %T %v", err, err)
	}
	if got := atomic.LoadInt32(&n); got != 1 {
		t.Fatalf("sent %d times", got)
	}
	// a keyed create is sent again (the key makes that safe); every answer lost: unknown, not "never left"
	atomic.StoreInt32(&n, 0)
	_, err = c.CreateTask(context.Background(), NewTaskRequest("delayed", "http://127.0.0.1:9/").SetIntervalMs(1000))
	if !errors.As(err, &ou) || atomic.LoadInt32(&n) < 2 {
		t.Fatalf("got %T %v after %d sends", err, err, atomic.LoadInt32(&n))
	}
}

func TestNoLeaderFromOneNodeAndADeadOtherIsUnavailableNotUnreachable(t *testing.T) {
	// which error a caller gets must not depend on which node the last attempt went to
	node := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(503)
		_, _ = io.WriteString(w, `{"error": {"code": "no_leader", "message": "no leader"}}`)
	}))
	t.Cleanup(node.Close)
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()
	c := newClient(t, []string{node.URL, deadURL}, WithBackoff(time.Millisecond, time.Millisecond), WithMaxAttempts(4))
	_, err := c.GetTask(context.Background(), "01ARZ3NDEKTSV4RRFFQ69G5FAV")
	if !IsUnavailable(err) {
		t.Fatalf("got %T %v", err, err)
	}
}
