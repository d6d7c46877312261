package molens

// Against a stand-in node (no real node needed): what a write reports when its first answer is lost.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync"
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

// recordingNode drops the connection of its first lose requests unanswered, then answers every
// request with status, the headers h and body; keys are the idempotency keys of every create it
// was sent (one body, or a batch's tasks), in order.
type recordingNode struct {
	*httptest.Server
	mu   sync.Mutex
	keys [][]string
}

// requestKeys are the idempotency keys a create carried: a batch's, in order, or the one task's.
func requestKeys(r *http.Request) []string {
	var req struct {
		IdempotencyKey string `json:"idempotency_key"`
		Tasks          []struct {
			IdempotencyKey string `json:"idempotency_key"`
		} `json:"tasks"`
	}
	_ = json.NewDecoder(r.Body).Decode(&req)
	if req.Tasks == nil {
		return []string{req.IdempotencyKey}
	}
	keys := []string{}
	for _, tk := range req.Tasks {
		keys = append(keys, tk.IdempotencyKey)
	}
	return keys
}

func newRecordingNode(t *testing.T, lose int32, status int, h http.Header, body string) *recordingNode {
	n := &recordingNode{}
	var seen int32
	n.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		keys := requestKeys(r)
		n.mu.Lock()
		n.keys = append(n.keys, keys)
		n.mu.Unlock()
		if atomic.AddInt32(&seen, 1) <= lose {
			if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
				conn.Close()
			}
			return
		}
		for k, vs := range h {
			w.Header()[k] = vs
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(n.Close)
	return n
}

// sent is the keys of every request the node got, each request's once they are all the same.
func (n *recordingNode) sent(t *testing.T) []string {
	t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, k := range n.keys {
		if !reflect.DeepEqual(k, n.keys[0]) {
			t.Fatalf("a retry carried other keys: %q", n.keys)
		}
	}
	return n.keys[0]
}

const quotaFull = `{"error": {"code": "quota_exceeded", "message": "m", "field": "max_pending_tasks", "quota": "max_pending_tasks"}}`

func TestACreateWhoseRetryMeetsAFullQuotaAfterALostAnswerIsAnUnknownOutcomeWithItsKeys(t *testing.T) {
	// the lost first attempt may have made the task that now fills the quota: "nothing was
	// created" would be a lie, and the caller needs the SDK's keys to find out
	for _, batch := range []bool{false, true} {
		node := newRecordingNode(t, 1, 429, http.Header{"Retry-After": {"1"}}, quotaFull)
		c := newClient(t, []string{node.URL}, WithBackoff(time.Millisecond, time.Millisecond))
		var err error
		if batch {
			_, err = c.CreateTaskIDs(context.Background(), []*TaskRequest{far(node.URL, "a"), far(node.URL, "b")})
		} else {
			_, err = c.CreateTask(context.Background(), far(node.URL, "a"))
		}
		var ou *OutcomeUnknownError
		if !errors.As(err, &ou) || IsQuotaExceeded(err) {
			t.Fatalf("batch %v: got %T %v", batch, err, err)
		}
		if sent := node.sent(t); !reflect.DeepEqual(ou.IdempotencyKeys, sent) || len(sent[0]) != 32 {
			t.Fatalf("batch %v: the error carries keys %q, the requests %q", batch, ou.IdempotencyKeys, sent)
		}
	}
	// answered at once, the same 429 is the API's: nothing was created
	node := newRecordingNode(t, 0, 429, nil, quotaFull)
	_, err := newClient(t, []string{node.URL}).CreateTask(context.Background(), far(node.URL, "a"))
	if !IsQuotaExceeded(err) {
		t.Fatalf("got %T %v", err, err)
	}
}

func TestACreateWhoseEveryAnswerIsLostCarriesItsKeysAndSoDoesEachBatcherPending(t *testing.T) {
	node := newRecordingNode(t, 1<<30, 200, nil, "")
	c := newClient(t, []string{node.URL}, WithBackoff(time.Millisecond, time.Millisecond), WithMaxAttempts(2))
	mine := NewIdempotencyKey()
	_, err := c.CreateTasks(context.Background(), []*TaskRequest{far(node.URL, "a"), far(node.URL, "b").SetIdempotencyKey(mine)})
	var ou *OutcomeUnknownError
	if !errors.As(err, &ou) || len(ou.IdempotencyKeys) != 2 || ou.IdempotencyKeys[1] != mine ||
		!reflect.DeepEqual(ou.IdempotencyKeys, node.sent(t)) {
		t.Fatalf("got %T %v, keys %q, sent %q", err, err, ou.IdempotencyKeys, node.sent(t))
	}

	node = newRecordingNode(t, 1<<30, 200, nil, "")
	c = newClient(t, []string{node.URL}, WithBackoff(time.Millisecond, time.Millisecond), WithMaxAttempts(2))
	b := c.NewBatcher(BatcherOptions{MaxBatch: 2, FlushInterval: time.Hour})
	defer b.Close()
	var ps []*Pending
	for _, scene := range []string{"a", "b"} {
		p, err := b.Submit(context.Background(), far(node.URL, scene))
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	sent := []string{}
	for i, p := range ps {
		_, err := p.Wait(ctxT(t))
		if !errors.As(err, &ou) || len(ou.IdempotencyKeys) != 1 {
			t.Fatalf("pending %d: got %T %v", i, err, err)
		}
		sent = append(sent, ou.IdempotencyKeys[0])
	}
	if !reflect.DeepEqual(sent, node.sent(t)) {
		t.Fatalf("the pendings carry keys %q, the batch %q", sent, node.sent(t))
	}
}

const diskFull = `{"error": {"code": "insufficient_storage", "message": "storage full"}}`

func TestInsufficientStorageIsRetriedAndReportedAfterTheBudget(t *testing.T) {
	// the leader's disk is full: nothing was applied, and it takes writes again by itself
	var n int32
	node := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		if atomic.AddInt32(&n, 1) <= 2 {
			w.WriteHeader(507)
			_, _ = io.WriteString(w, diskFull)
			return
		}
		_, _ = io.WriteString(w, `{"id": "01ARZ3NDEKTSV4RRFFQ69G5FAV", "status": "pending"}`)
	}))
	t.Cleanup(node.Close)
	c := newClient(t, []string{node.URL}, WithBackoff(time.Millisecond, time.Millisecond))
	if task, err := c.CreateTask(context.Background(), far(node.URL, "a")); err != nil || task.Status != "pending" || atomic.LoadInt32(&n) != 3 {
		t.Fatalf("got %+v %v after %d requests", task, err, atomic.LoadInt32(&n))
	}

	full := newRecordingNode(t, 0, 507, http.Header{"Retry-After": {"1"}}, diskFull)
	c = newClient(t, []string{full.URL}, WithBackoff(time.Millisecond, time.Millisecond), WithMaxAttempts(2))
	_, err := c.PauseTask(context.Background(), "01ARZ3NDEKTSV4RRFFQ69G5FAV")
	e := mustAPIError(t, err, 507, "insufficient_storage", "")
	if !IsInsufficientStorage(err) || !IsUnavailable(err) || e.RetryAfter != time.Second || len(full.keys) != 2 {
		t.Fatalf("got %+v after %d requests", e, len(full.keys))
	}

	// an earlier attempt was lost: it may have been applied before the disk filled
	lost := newRecordingNode(t, 1, 507, nil, diskFull)
	c = newClient(t, []string{lost.URL}, WithBackoff(time.Millisecond, time.Millisecond), WithMaxAttempts(3))
	_, err = c.CreateTask(context.Background(), far(lost.URL, "a"))
	var ou *OutcomeUnknownError
	if !errors.As(err, &ou) || !reflect.DeepEqual(ou.IdempotencyKeys, lost.sent(t)) {
		t.Fatalf("got %T %v", err, err)
	}
}

func TestADeadLetterDeleteWithALimitIsNeverSentTwiceWithoutOneItIsRetried(t *testing.T) {
	// sent again after a lost answer, a delete with a limit could delete up to limit more
	for _, limit := range []int{50, 0} {
		var n int32
		node := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if atomic.AddInt32(&n, 1) == 1 {
				if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
					conn.Close()
				}
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"matched": 3, "deleted": 3, "error_count": 0, "errors": [], "more": false}`)
		}))
		t.Cleanup(node.Close)
		c := newClient(t, []string{node.URL}, WithBackoff(time.Millisecond, time.Millisecond))
		r, err := c.DeleteDeadLetters(context.Background(), DeadLetterFilter{Kind: DeadLetterAckFailed, Limit: limit})
		var ou *OutcomeUnknownError
		if limit > 0 && (!errors.As(err, &ou) || atomic.LoadInt32(&n) != 1) {
			t.Fatalf("limit %d: got %+v %T %v after %d requests", limit, r, err, err, atomic.LoadInt32(&n))
		}
		if limit == 0 && (err != nil || r.Deleted != 3 || atomic.LoadInt32(&n) != 2) {
			t.Fatalf("no limit: got %+v %v after %d requests", r, err, atomic.LoadInt32(&n))
		}
	}
}

func TestABulkDeadLetterActionInterruptedPartWayShowsItAndWhatApplied(t *testing.T) {
	const answer = `{"matched": 1200, "%s": 500, "error_count": 0, "errors": [], "more": true,
		"interrupted": {"code": "no_leader", "message": "leadership moved"}}`
	node := standIn(t, false, func(w http.ResponseWriter, r *http.Request) {
		field := "deleted"
		if r.Method == "POST" {
			field = "redriven"
		}
		_, _ = io.WriteString(w, fmt.Sprintf(answer, field))
	})
	c := newClient(t, []string{node.URL})
	red, err := c.RedriveDeadLetters(context.Background(), DeadLetterFilter{Flow: "f"})
	if err != nil || red.Redriven != 500 || !red.More || red.Interrupted == nil ||
		*red.Interrupted != (BulkInterruption{Code: "no_leader", Message: "leadership moved"}) {
		t.Fatalf("redrive: %+v %v", red, err)
	}
	del, err := c.DeleteDeadLetters(context.Background(), DeadLetterFilter{Flow: "f", Limit: 1200})
	if err != nil || del.Deleted != 500 || !del.More || del.Interrupted == nil || del.Interrupted.Code != "no_leader" {
		t.Fatalf("delete: %+v %v", del, err)
	}
	node = standIn(t, false, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"matched": 1, "deleted": 1, "error_count": 0, "errors": [], "more": false}`)
	})
	if del, err := newClient(t, []string{node.URL}).DeleteDeadLetters(context.Background(), DeadLetterFilter{All: true}); err != nil || del.Interrupted != nil {
		t.Fatalf("not interrupted: %+v %v", del, err)
	}
}

func TestAWriteWhoseContextEndsOnceSentIsAnUnknownOutcomeWithItsKeys(t *testing.T) {
	// the caller's deadline cut the wait for the answer, not the write: the task may exist, and a
	// create made again without the SDK's keys would duplicate it
	node := newRecordingNode(t, 0, 200, nil, `{"id": "01ARZ3NDEKTSV4RRFFQ69G5FAV"}`)
	slow := standIn(t, false, func(w http.ResponseWriter, r *http.Request) {
		node.Config.Handler.ServeHTTP(httptest.NewRecorder(), r) // records the keys
		<-r.Context().Done()
	})
	c := newClient(t, []string{slow.URL})
	short := func() context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		t.Cleanup(cancel)
		return ctx
	}
	_, err := c.CreateTask(short(), far(slow.URL, "a"))
	var ou *OutcomeUnknownError
	if !errors.As(err, &ou) || !errors.Is(err, context.DeadlineExceeded) || !reflect.DeepEqual(ou.IdempotencyKeys, node.sent(t)) {
		t.Fatalf("create: got %T %v", err, err)
	}
	node.mu.Lock()
	node.keys = nil
	node.mu.Unlock()
	_, err = c.CreateTaskIDs(short(), []*TaskRequest{far(slow.URL, "a"), far(slow.URL, "b")})
	if !errors.As(err, &ou) || !errors.Is(err, context.DeadlineExceeded) || len(ou.IdempotencyKeys) != 2 ||
		!reflect.DeepEqual(ou.IdempotencyKeys, node.sent(t)) {
		t.Fatalf("batch: got %T %v", err, err)
	}
	if _, err = c.TriggerTask(short(), "01ARZ3NDEKTSV4RRFFQ69G5FAV"); !errors.As(err, &ou) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("trigger: got %T %v", err, err)
	}
	// a read is no write, and a call cancelled before it was sent applied nothing
	if _, err = c.GetTask(short(), "01ARZ3NDEKTSV4RRFFQ69G5FAV"); errors.As(err, &ou) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("get: got %T %v", err, err)
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err = c.CreateTask(done, far(slow.URL, "a")); errors.As(err, &ou) || !errors.Is(err, context.Canceled) {
		t.Fatalf("create cancelled before it was sent: got %T %v", err, err)
	}
}

func TestCreateTasksNamesTheFailingBatchByWhereItStartsAndItsKeysInOrder(t *testing.T) {
	// the first batch of 1,000 is answered, the second's every answer is lost
	var mu sync.Mutex
	var sent [][]string
	node := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		keys := requestKeys(r)
		mu.Lock()
		sent = append(sent, keys)
		mu.Unlock()
		if len(keys) != 1000 {
			if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
				conn.Close()
			}
			return
		}
		items := make([]map[string]string, len(keys))
		for i := range items {
			items[i] = map[string]string{"id": fmt.Sprintf("t%d", i)}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]interface{}{"items": items, "errors": []interface{}{}})
	}))
	t.Cleanup(node.Close)
	c := newClient(t, []string{node.URL}, WithBackoff(time.Millisecond, time.Millisecond), WithMaxAttempts(2))
	rs := make([]*TaskRequest, 1003)
	for i := range rs {
		rs[i] = far(node.URL, "a")
	}
	mine := NewIdempotencyKey()
	rs[1001].SetIdempotencyKey(mine)
	ids, err := c.CreateTaskIDs(context.Background(), rs)
	var ou *OutcomeUnknownError
	if !errors.As(err, &ou) || len(ids) != 1000 || ids[999] != "t999" {
		t.Fatalf("got %d ids, %T %v", len(ids), err, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sent) != 3 || !reflect.DeepEqual(sent[1], sent[2]) || !reflect.DeepEqual(ou.IdempotencyKeys, sent[1]) ||
		len(ou.IdempotencyKeys) != 3 || ou.IdempotencyKeys[1001-len(ids)] != mine {
		t.Fatalf("the error carries keys %q; sent %d requests", ou.IdempotencyKeys, len(sent))
	}
	for _, k := range ou.IdempotencyKeys {
		if len(k) != 32 {
			t.Fatalf("key %q", k)
		}
	}
}
