package molens

// Against stand-in nodes (no real node needed): redirects, what counts as never sent, answers that
// are no node's, the client's options and the fields of the answers.

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const aTask = `{"id": "01ARZ3NDEKTSV4RRFFQ69G5FAV", "status": "paused"}`

// standIn is a stand-in node answering with fn; tls: an https one (srv.Client() trusts every one).
func standIn(t *testing.T, tls bool, fn http.HandlerFunc) *httptest.Server {
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fn(w, r)
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	s.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshakes the tests make fail
	if tls {
		s.StartTLS()
	} else {
		s.Start()
	}
	t.Cleanup(s.Close)
	return s
}

// redirectTo answers 307 naming leader, as a follower does.
func redirectTo(leader string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Molens-Leader", leader)
		w.Header().Set("Location", leader+r.URL.RequestURI())
		w.WriteHeader(307)
	}
}

func TestARedirectFromHTTPSToPlainHTTPIsNotFollowedTheNextNodeIsAsked(t *testing.T) {
	// a node behind a TLS proxy names its plain address as leader: following it would send the
	// bearer token unencrypted
	var plainGot int32
	plain := standIn(t, false, func(w http.ResponseWriter, r *http.Request) {
		atomic.AddInt32(&plainGot, 1)
		_, _ = io.WriteString(w, aTask)
	})
	follower := standIn(t, true, redirectTo(plain.URL))
	leader := standIn(t, true, func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, aTask) })
	ctx := context.Background()

	alone := newClient(t, []string{follower.URL}, WithHTTPClient(follower.Client()), WithToken("s3cret"))
	_, err := alone.PauseTask(ctx, "01ARZ3NDEKTSV4RRFFQ69G5FAV")
	if e := mustAPIError(t, err, 307, "redirect", ""); !strings.Contains(e.Message, "plain http") {
		t.Fatalf("message %q", e.Message)
	}

	both := newClient(t, []string{follower.URL, leader.URL}, WithHTTPClient(follower.Client()), WithToken("s3cret"))
	if task, err := both.PauseTask(ctx, "01ARZ3NDEKTSV4RRFFQ69G5FAV"); err != nil || task.Status != "paused" {
		t.Fatalf("got %+v %v", task, err)
	}
	if n := atomic.LoadInt32(&plainGot); n != 0 {
		t.Fatalf("the plain http node got %d requests", n)
	}
}

func TestARedirectLoopIsBackedOffWithinTheRetryBudget(t *testing.T) {
	// nodes name each other as leader while an election settles: after 5 redirects the client
	// waits and asks again rather than failing at once
	var n int32
	var self string
	node := standIn(t, false, func(w http.ResponseWriter, r *http.Request) {
		if atomic.AddInt32(&n, 1) <= 8 {
			redirectTo(self)(w, r)
			return
		}
		_, _ = io.WriteString(w, aTask)
	})
	self = node.URL
	c := newClient(t, []string{node.URL}, WithBackoff(time.Millisecond, time.Millisecond))
	if task, err := c.PauseTask(context.Background(), "01ARZ3NDEKTSV4RRFFQ69G5FAV"); err != nil || task.Status != "paused" {
		t.Fatalf("got %+v %v after %d requests", task, err, atomic.LoadInt32(&n))
	}
	// a loop that outlasts the budget is an error
	atomic.StoreInt32(&n, -1<<30)
	c = newClient(t, []string{node.URL}, WithBackoff(time.Millisecond, time.Millisecond), WithMaxAttempts(2))
	_, err := c.PauseTask(context.Background(), "01ARZ3NDEKTSV4RRFFQ69G5FAV")
	mustAPIError(t, err, 307, "redirect", "")
}

func TestAnUnexpectedRedirectOrAnAnswerThatIsNotAnObjectIsAnError(t *testing.T) {
	// a proxy's login redirect or an HTML page is no node's answer: never a zero Task
	node := standIn(t, false, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/v1/tasks/found":
			w.Header().Set("Location", "https://login.example/")
			w.WriteHeader(302)
		case "/api/v1/tasks/moved":
			w.Header().Set("Location", "https://elsewhere.example/")
			w.WriteHeader(301)
		case "/api/v1/tasks/null":
			_, _ = io.WriteString(w, "null")
		case "/api/v1/tasks/html":
			_, _ = io.WriteString(w, "<html>hello</html>")
		case "/api/v1/tasks/list":
			_, _ = io.WriteString(w, `[1, 2]`)
		case "/api/v1/tasks/empty":
		default:
			_, _ = io.WriteString(w, aTask)
		}
	})
	c := newClient(t, []string{node.URL})
	ctx := context.Background()
	for id, status := range map[string]int{"found": 302, "moved": 301, "null": 502, "html": 502, "list": 502, "empty": 502} {
		task, err := c.GetTask(ctx, id)
		if task != nil {
			t.Fatalf("%s: a task %+v", id, task)
		}
		mustAPIError(t, err, status, "http_error", "")
	}
	if task, err := c.GetTask(ctx, "real"); err != nil || task.Status != "paused" {
		t.Fatalf("got %+v %v", task, err)
	}
}

func TestACertificateOrHandshakeFailureIsNeverSentSoAWriteIsNotOfUnknownOutcome(t *testing.T) {
	// nothing left the client: a trigger (never sent twice) is unreachable, not "maybe applied"
	var got int32
	tlsNode := standIn(t, true, func(w http.ResponseWriter, r *http.Request) { atomic.AddInt32(&got, 1) })
	c := newClient(t, []string{tlsNode.URL}, WithBackoff(time.Millisecond, time.Millisecond), WithMaxAttempts(2))
	var ce *ConnectionError
	if _, err := c.TriggerTask(context.Background(), "01ARZ3NDEKTSV4RRFFQ69G5FAV"); !errors.As(err, &ce) {
		t.Fatalf("an untrusted certificate: got %T %v", err, err)
	}
	if _, err := c.PauseTask(context.Background(), "01ARZ3NDEKTSV4RRFFQ69G5FAV"); !errors.As(err, &ce) || ce.Attempts != 2 {
		t.Fatalf("an untrusted certificate: got %T %v", err, err)
	}
	if n := atomic.LoadInt32(&got); n != 0 {
		t.Fatalf("the node got %d requests", n)
	}

	// a node that hangs up on every connection: over https the handshake fails before the request,
	// over plain http the request was written and its fate is unknown
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			conn.Close()
		}
	}()
	c = newClient(t, []string{"https://" + l.Addr().String()}, WithBackoff(time.Millisecond, time.Millisecond), WithMaxAttempts(2))
	if _, err := c.TriggerTask(context.Background(), "01ARZ3NDEKTSV4RRFFQ69G5FAV"); !errors.As(err, &ce) {
		t.Fatalf("a failed handshake: got %T %v", err, err)
	}
	c = newClient(t, []string{"http://" + l.Addr().String()}, WithBackoff(time.Millisecond, time.Millisecond), WithMaxAttempts(2))
	var ou *OutcomeUnknownError
	if _, err := c.TriggerTask(context.Background(), "01ARZ3NDEKTSV4RRFFQ69G5FAV"); !errors.As(err, &ou) {
		t.Fatalf("a request written, then the connection closed: got %T %v", err, err)
	}
}

func TestATokenThatCannotTravelInAHeaderIsRefusedByNewClient(t *testing.T) {
	for _, token := range []string{"abc\r\nX-Admin: 1", "two words", "caf\u00e9", "tab\there"} {
		if _, err := NewClient([]string{"http://127.0.0.1:9"}, WithToken(token)); err == nil {
			t.Fatalf("a client of token %q", token)
		}
	}
	if _, err := NewClient([]string{"http://127.0.0.1:9"}, WithToken("mk_01ARZ3ND.aZ-9_~+/=")); err != nil {
		t.Fatal(err)
	}
}

func TestWithHTTPClientIsCopiedWithTimeoutInEitherOrderAndNilKeepsTheDefault(t *testing.T) {
	mine := &http.Client{Timeout: 7 * time.Second}
	for _, opts := range [][]Option{
		{WithHTTPClient(mine), WithTimeout(time.Second)},
		{WithTimeout(time.Second), WithHTTPClient(mine)},
	} {
		c := newClient(t, []string{"http://127.0.0.1:9"}, opts...)
		if c.hc == mine || c.attemptTimeout != time.Second || c.hc.Timeout != 0 || c.hc.CheckRedirect == nil {
			t.Fatalf("the client's http.Client: %+v, attempt timeout %v", c.hc, c.attemptTimeout)
		}
	}
	if mine.Timeout != 7*time.Second || mine.CheckRedirect != nil {
		t.Fatalf("the caller's http.Client was changed: %+v", mine)
	}
	if c := newClient(t, []string{"http://127.0.0.1:9"}, WithHTTPClient(mine)); c.attemptTimeout != 7*time.Second {
		t.Fatalf("the caller's timeout is kept without WithTimeout: %v", c.attemptTimeout)
	}
	if c := newClient(t, []string{"http://127.0.0.1:9"}, WithHTTPClient(nil)); c.attemptTimeout != 10*time.Second || c.hc.Transport == nil {
		t.Fatalf("WithHTTPClient(nil): %+v, attempt timeout %v", c.hc, c.attemptTimeout)
	}
}

// attemptRecorder is a RoundTripper noting each attempt's context deadline and when it was sent,
// then answering with answer (nil: an error, as a connection that failed).
type attemptRecorder struct {
	answer func(*http.Request) *http.Response

	mu        sync.Mutex
	sent      []time.Time
	deadlines []time.Time // zero: the attempt had no deadline
}

func (a *attemptRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	d, _ := req.Context().Deadline()
	a.mu.Lock()
	a.sent, a.deadlines = append(a.sent, time.Now()), append(a.deadlines, d)
	a.mu.Unlock()
	if a.answer == nil {
		return nil, errors.New("refused by the test")
	}
	return a.answer(req), nil
}

func TestAnAttemptsTimeoutIsCutToWhatIsLeftOfTheRetryDeadline(t *testing.T) {
	for _, tc := range []struct {
		name           string
		timeout, retry time.Duration
		callerDeadline time.Duration // 0: none
		bound          func(sent, called, returned time.Time) time.Time
	}{
		{"the retry deadline is nearer", time.Hour, time.Minute, 0,
			func(sent, called, returned time.Time) time.Time { return returned.Add(time.Minute) }},
		{"the attempt timeout is nearer", 2 * time.Second, time.Hour, 0,
			func(sent, called, returned time.Time) time.Time { return sent.Add(2 * time.Second) }},
		{"the caller's deadline is nearer", time.Hour, time.Hour, time.Minute,
			func(sent, called, returned time.Time) time.Time { return called.Add(time.Minute) }},
	} {
		rec := &attemptRecorder{}
		c := newClient(t, []string{"http://127.0.0.1:9"}, WithHTTPClient(&http.Client{Transport: rec}),
			WithTimeout(tc.timeout), WithRetryDeadline(tc.retry), WithMaxAttempts(3), WithBackoff(time.Millisecond, time.Millisecond))
		ctx := context.Background()
		called := time.Now()
		if tc.callerDeadline > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, called.Add(tc.callerDeadline))
			defer cancel()
		}
		_, err := c.GetTask(ctx, "a")
		returned := time.Now()
		var ce *ConnectionError
		if !errors.As(err, &ce) || len(rec.sent) != 3 {
			t.Fatalf("%s: %T %v after %d attempts", tc.name, err, err, len(rec.sent))
		}
		for i, d := range rec.deadlines {
			if bound := tc.bound(rec.sent[i], called, returned); d.IsZero() || d.After(bound) {
				t.Fatalf("%s: attempt %d's deadline is %v, after %v", tc.name, i+1, d, bound)
			}
		}
	}
}

func TestARetryAfterABackoffCutToTheRetryDeadlineGetsMinAttemptAndTheLastAnswerIsReturned(t *testing.T) {
	// from the third attempt on the backoff waits Retry-After (60 s), cut to end MinAttempt before
	// the retry deadline: the fourth attempt goes with about MinAttempt left, still within the
	// deadline, and is the last (as in the Python and Java SDKs). The window is widened to 400 ms
	// so that a timer waking late on a loaded machine does not eat it
	widenMinAttempt(t, 400*time.Millisecond)
	rec := &attemptRecorder{answer: func(req *http.Request) *http.Response {
		return &http.Response{StatusCode: 503, Request: req, Header: http.Header{"Retry-After": {"60"}},
			Body: io.NopCloser(strings.NewReader(`{"error": {"code": "unavailable", "message": "not serving"}}`))}
	}}
	c := newClient(t, []string{"http://127.0.0.1:9"}, WithHTTPClient(&http.Client{Transport: rec}),
		WithRetryDeadline(time.Second), WithMaxAttempts(10), WithBackoff(time.Millisecond, time.Millisecond))
	_, err := c.GetTask(context.Background(), "a")
	if e := mustAPIError(t, err, 503, "unavailable", ""); !IsUnavailable(err) || e.RetryAfter != time.Minute || len(rec.sent) != 4 {
		t.Fatalf("got %v after %d attempts", err, len(rec.sent))
	}
	if waited := rec.sent[3].Sub(rec.sent[2]); waited < 500*time.Millisecond {
		t.Fatalf("the backoff honouring Retry-After waited %v only", waited)
	}
	d := rec.deadlines[3]
	if d.IsZero() || d.Sub(rec.sent[3]) < 200*time.Millisecond {
		t.Fatalf("the last retry had until %v, sent at %v (%v)", d, rec.sent[3], d.Sub(rec.sent[3]))
	}
	// still cut to the retry deadline (the attempt timeout is the default 10 s)
	if bound := rec.sent[0].Add(time.Second + 50*time.Millisecond); d.After(bound) {
		t.Fatalf("the last retry had until %v, after the retry deadline (about %v)", d, bound)
	}
}

// widenMinAttempt sets the least time a retry is sent with to d for one test.
func widenMinAttempt(t *testing.T, d time.Duration) {
	old := minAttempt
	minAttempt = d
	t.Cleanup(func() { minAttempt = old })
}

// noLeader answers as a node that knows of no leader.
func noLeader(req *http.Request) *http.Response {
	return &http.Response{StatusCode: 503, Request: req, Header: http.Header{},
		Body: io.NopCloser(strings.NewReader(`{"error": {"code": "no_leader", "message": "no leader"}}`))}
}

func TestEveryRetryIsSentWithAtLeastMinAttemptOfTheRetryDeadlineLeft(t *testing.T) {
	// a backoff of an hour is cut to end MinAttempt before the deadline, not at it: the retry after
	// it has time to be answered, and no retry follows it (the window widened to 1 s of 3 s: a
	// timer waking late on a loaded machine does not eat it)
	widenMinAttempt(t, time.Second)
	rec := &attemptRecorder{answer: noLeader}
	c := newClient(t, []string{"http://127.0.0.1:9"}, WithHTTPClient(&http.Client{Transport: rec}),
		WithRetryDeadline(3*time.Second), WithMaxAttempts(100), WithBackoff(time.Hour, time.Hour))
	_, err := c.GetTask(context.Background(), "a")
	mustAPIError(t, err, 503, "no_leader", "")
	if len(rec.sent) != 2 {
		t.Fatalf("%d attempts, want the first and one retry", len(rec.sent))
	}
	for i := 1; i < len(rec.sent); i++ {
		if d := rec.deadlines[i]; d.IsZero() || d.Sub(rec.sent[i]) < 500*time.Millisecond {
			t.Fatalf("attempt %d was sent with %v left", i+1, d.Sub(rec.sent[i]))
		}
	}
}

func TestAKeyedCreateThatMeetsNoLeaderUntilTheRetryDeadlineIsUnavailableNotAnUnknownOutcome(t *testing.T) {
	// every node answered 503 no_leader: nothing was applied. A retry sent with a millisecond left
	// would time out after it was written, and the create would end as "maybe applied" (the window
	// widened to 1 s of 3 s, so that the retry is answered on a loaded machine too)
	widenMinAttempt(t, time.Second)
	var mu sync.Mutex
	var keys []string
	node := standIn(t, false, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, requestKeys(r)...)
		mu.Unlock()
		time.Sleep(10 * time.Millisecond) // a node takes a moment to answer
		w.WriteHeader(503)
		_, _ = io.WriteString(w, `{"error": {"code": "no_leader", "message": "no leader"}}`)
	})
	c := newClient(t, []string{node.URL}, WithRetryDeadline(3*time.Second), WithMaxAttempts(100), WithBackoff(time.Hour, time.Hour))
	_, err := c.CreateTask(context.Background(), NewTaskRequest("delayed", "http://127.0.0.1:9/").SetIntervalMs(1000))
	var ou *OutcomeUnknownError
	if errors.As(err, &ou) {
		t.Fatalf("an unknown outcome where every attempt was answered 503: %v", err)
	}
	if mustAPIError(t, err, 503, "no_leader", ""); !IsUnavailable(err) {
		t.Fatalf("got %v", err)
	}
	mu.Lock()
	sent := keys
	mu.Unlock()
	if len(sent) != 2 || sent[0] == "" || sent[1] != sent[0] {
		t.Fatalf("sent keys %q, want the first attempt and one retry with the same key", sent)
	}
}

func TestARetryDeadlineUnderMinAttemptAllowsTheFirstAttemptOnly(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer func(*http.Request) *http.Response
	}{{"no leader", noLeader}, {"a connection error", nil}} {
		rec := &attemptRecorder{answer: tc.answer}
		c := newClient(t, []string{"http://127.0.0.1:9"}, WithHTTPClient(&http.Client{Transport: rec}),
			WithRetryDeadline(50*time.Millisecond), WithMaxAttempts(100), WithBackoff(time.Millisecond, time.Millisecond))
		_, err := c.GetTask(context.Background(), "a")
		var ce *ConnectionError
		if tc.answer != nil {
			mustAPIError(t, err, 503, "no_leader", "")
		} else if !errors.As(err, &ce) || ce.Attempts != 1 {
			t.Fatalf("%s: got %T %v", tc.name, err, err)
		}
		if len(rec.sent) != 1 {
			t.Fatalf("%s: %d attempts, want 1", tc.name, len(rec.sent))
		}
		if d := rec.deadlines[0]; d.IsZero() || d.After(rec.sent[0].Add(50*time.Millisecond)) {
			t.Fatalf("%s: the first attempt had until %v, sent at %v", tc.name, d, rec.sent[0])
		}
	}
}

func TestAStalledNodeEndsTheCallAtTheRetryDeadlineNotTheAttemptTimeout(t *testing.T) {
	// the attempt timeout is the default 10 s; the retry deadline of 1 s cuts it
	release := make(chan struct{})
	var asked int32
	node := standIn(t, false, func(w http.ResponseWriter, r *http.Request) {
		atomic.AddInt32(&asked, 1)
		select {
		case <-r.Context().Done(): // the client gave up and closed the connection
		case <-release:
		}
	})
	t.Cleanup(func() { close(release) }) // before the node's Close, which waits for its handlers
	c := newClient(t, []string{node.URL}, WithRetryDeadline(time.Second))
	ctx := context.Background()

	t0 := time.Now()
	_, err := c.GetTask(ctx, "a")
	var ce *ConnectionError
	if took := time.Since(t0); !errors.As(err, &ce) || took > 5*time.Second || atomic.LoadInt32(&asked) != 1 {
		t.Fatalf("a read: %T %v after %v and %d requests", err, err, took, atomic.LoadInt32(&asked))
	}

	t0 = time.Now()
	_, err = c.PauseTask(ctx, "a") // sent, never answered: it may have been applied
	var ou *OutcomeUnknownError
	if took := time.Since(t0); !errors.As(err, &ou) || took > 5*time.Second {
		t.Fatalf("a write: %T %v after %v", err, err, took)
	}
}

func TestNewClientRefusesARetryDeadlineThatIsNotPositive(t *testing.T) {
	// as the Python SDK's retry_deadline_s: every attempt would be cut to nothing
	for _, d := range []time.Duration{0, -time.Second} {
		if _, err := NewClient([]string{"http://127.0.0.1:9"}, WithRetryDeadline(d)); err == nil {
			t.Fatalf("a client of retry deadline %v", d)
		}
	}
}

func TestAnAnswerLargerThanTheBoundIsAnErrorNotReadWhole(t *testing.T) {
	big := `{"id": "01ARZ3NDEKTSV4RRFFQ69G5FAV", "status": "paused", "scene": "` + strings.Repeat("x", 2000) + `"}`
	node := standIn(t, false, func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, big) })
	_, err := newClient(t, []string{node.URL}, WithMaxResponseBytes(1024)).GetTask(context.Background(), "a")
	if err == nil || !strings.Contains(err.Error(), "WithMaxResponseBytes") {
		t.Fatalf("got %v", err)
	}
	if task, err := newClient(t, []string{node.URL}, WithMaxResponseBytes(int64(len(big)))).GetTask(context.Background(), "a"); err != nil || len(task.Scene) != 2000 {
		t.Fatalf("an answer of exactly the bound: %v", err)
	}
	if _, err := NewClient([]string{node.URL}, WithMaxResponseBytes(0)); err == nil {
		t.Fatal("a client that can read no answer")
	}
	if DefaultMaxResponseBytes < 1000*(64<<10+12<<10) {
		t.Fatal("the default bound cuts a page of 1,000 tasks of the largest payload")
	}
}

func TestAnEmptyDeadLetterFilterIsRefusedOnANamespacedClientToo(t *testing.T) {
	// the server counts ?namespace= as a filter: the client's own namespace must not turn an
	// empty filter into "delete every dead letter of the namespace"
	var mu sync.Mutex
	var queries []string
	node := standIn(t, false, func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		mu.Lock()
		queries = append(queries, r.URL.RawQuery)
		mu.Unlock()
		filtered := false
		for _, k := range []string{"task_id", "flow", "kind", "since", "until", "namespace"} {
			filtered = filtered || q.Has(k)
		}
		if !filtered && q.Get("all") != "true" { // molens/web/dead_letters.py delete_matching
			w.WriteHeader(400)
			_, _ = io.WriteString(w, `{"error": {"code": "invalid_argument", "message": "give a filter", "field": "all"}}`)
			return
		}
		_, _ = io.WriteString(w, `{"matched": 3, "deleted": 3, "error_count": 0, "errors": [], "more": false}`)
	})
	c := newClient(t, []string{node.URL}, WithNamespace("payments"))
	ctx := context.Background()
	_, err := c.DeleteDeadLetters(ctx, DeadLetterFilter{})
	mustAPIError(t, err, 400, "invalid_argument", "all")
	_, err = c.DeleteDeadLetters(ctx, DeadLetterFilter{Limit: 10})
	mustAPIError(t, err, 400, "invalid_argument", "all")
	for _, f := range []DeadLetterFilter{{All: true}, {Kind: DeadLetterAckFailed}, {Namespace: "other"}} {
		if r, err := c.DeleteDeadLetters(ctx, f); err != nil || r.Deleted != 3 {
			t.Fatalf("%+v: %+v %v", f, r, err)
		}
	}
	want := []string{"", "limit=10", "all=true&namespace=payments", "kind=ack_failed&namespace=payments", "namespace=other"}
	if !reflect.DeepEqual(queries, want) {
		t.Fatalf("queries %q, want %q", queries, want)
	}
}

func TestAnswersKeepTheFieldsTheServerSends(t *testing.T) {
	var sent map[string]map[string]interface{}
	node := standIn(t, false, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/v1/tasks":
			_, _ = io.WriteString(w, `{"items": [{"id": "a", "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}], "next_cursor": "c", "scanned": 5000}`)
		case "/api/v1/dead-letters/f.1":
			_, _ = io.WriteString(w, `{"id": "f.1", "namespace": "payments", "status_code": null}`)
		case "/api/v1/schedule/preview":
			_, _ = io.WriteString(w, `{"items": [1], "local": ["x"], "timezone": "UTC", "after": 0, "description": {"en": "At 02:30", "zh": "在 02:30"}}`)
		case "/api/v1/namespaces/payments":
			_ = json.NewDecoder(r.Body).Decode(&sent)
			_, _ = io.WriteString(w, `{"name": "payments", "quotas": {"fires_per_s": 5.5}, "created_at": 1, "updated_at": 2}`)
		case "/api/v1/tasks/preview":
			w.WriteHeader(400)
			_, _ = io.WriteString(w, `{"error": {"code": "invalid_argument", "message": "m", "field": "cron_expr", "reason": "never_fires"}}`)
		}
	})
	c := newClient(t, []string{node.URL})
	ctx := context.Background()
	page, err := c.ListTasks(ctx, ListOptions{})
	if err != nil || page.Scanned != 5000 || page.Items[0].Traceparent == nil || !strings.HasPrefix(*page.Items[0].Traceparent, "00-0af7") {
		t.Fatalf("task list %+v %v", page, err)
	}
	if d, err := c.GetDeadLetter(ctx, "f.1"); err != nil || d.Namespace != "payments" {
		t.Fatalf("dead letter %+v %v", d, err)
	}
	if p, err := c.SchedulePreview(ctx, PreviewRequest{CronExpr: "30 2 * * *"}); err != nil || p.Description["en"] != "At 02:30" {
		t.Fatalf("preview %+v %v", p, err)
	}
	rate := 5.5
	ns, err := c.UpdateNamespace(ctx, "payments", Quotas{FiresPerS: &rate})
	if err != nil || ns.Quotas.FiresPerS == nil || *ns.Quotas.FiresPerS != 5.5 || sent["quotas"]["fires_per_s"] != 5.5 {
		t.Fatalf("namespace %+v %v, sent %v", ns, err, sent)
	}
	_, err = c.GetTask(ctx, "preview")
	if e := mustAPIError(t, err, 400, "invalid_argument", "cron_expr"); e.Reason != "never_fires" {
		t.Fatalf("reason %q", e.Reason)
	}
}

// TestARedirectsPasswordIsNeverQuotedInAnError: a Location is the server's text; a user:password@
// in it is shown as ***@ (as the Python and Java SDKs do).
func TestARedirectsPasswordIsNeverQuotedInAnError(t *testing.T) {
	node := standIn(t, false, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/v1/tasks/bad" {
			w.Header().Set("Location", "ftp://alice:s3cret@elsewhere.example/x")
			w.WriteHeader(307)
			return
		}
		w.Header().Set("Location", "https://alice:s3cret@login.example/")
		w.WriteHeader(302)
	})
	c := newClient(t, []string{node.URL}, WithMaxAttempts(1))
	for _, id := range []string{"bad", "proxy"} {
		_, err := c.GetTask(context.Background(), id)
		if err == nil || strings.Contains(err.Error(), "s3cret") {
			t.Fatalf("%s: %v", id, err)
		}
		if !strings.Contains(err.Error(), "***@") {
			t.Fatalf("%s: the address is not shown redacted: %v", id, err)
		}
	}
	if _, err := NewClient([]string{"http://bob:s3cret@[::1"}); err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("NewClient: %v", err)
	}
}

const proxyPage = "<html><body>upstream did not answer</body></html>"

// A 502 or 504 is a proxy's (no node answers so): the node behind it did not answer and may have
// had the request, so it is a lost answer, retried on the next node only when resending is safe.

func TestAGETAnsweredByAProxys502IsRetriedAndEndsInThatAnswer(t *testing.T) {
	ctx := context.Background()
	fast := WithBackoff(time.Millisecond, time.Millisecond)
	var gets int32
	node := standIn(t, false, func(w http.ResponseWriter, r *http.Request) {
		if atomic.AddInt32(&gets, 1) == 1 || r.URL.Path == "/api/v1/tasks/gone" {
			w.WriteHeader(502)
			_, _ = io.WriteString(w, proxyPage)
			return
		}
		_, _ = io.WriteString(w, aTask)
	})
	c := newClient(t, []string{node.URL}, fast)
	if task, err := c.GetTask(ctx, "01ARZ3NDEKTSV4RRFFQ69G5FAV"); err != nil || task.Status != "paused" {
		t.Fatalf("a GET answered 502 then 200: got %+v %v", task, err)
	}
	if n := atomic.LoadInt32(&gets); n != 2 {
		t.Fatalf("a GET answered 502 then 200 was sent %d times", n)
	}
	c = newClient(t, []string{node.URL}, fast, WithMaxAttempts(2))
	mustAPIError(t, func() error { _, err := c.GetTask(ctx, "gone"); return err }(), 502, "http_error", "")
}

func TestAKeyedCreateAnsweredByAProxys504IsRetriedThenAnUnknownOutcomeWithItsKey(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	var keys []string
	node := standIn(t, false, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, requestKeys(r)...)
		mu.Unlock()
		w.WriteHeader(504)
		_, _ = io.WriteString(w, proxyPage)
	})
	c := newClient(t, []string{node.URL}, WithBackoff(time.Millisecond, time.Millisecond), WithMaxAttempts(3))
	_, err := c.CreateTask(ctx, NewTaskRequest("delayed", "http://127.0.0.1:9/").SetIntervalMs(1000))
	var ou *OutcomeUnknownError
	if !errors.As(err, &ou) || len(ou.IdempotencyKeys) != 1 {
		t.Fatalf("a keyed create answered 504 every time: got %T %v", err, err)
	}
	mu.Lock()
	sent := keys
	mu.Unlock()
	if len(sent) != 3 || sent[0] != ou.IdempotencyKeys[0] || sent[1] != sent[0] || sent[2] != sent[0] {
		t.Fatalf("sent keys %q, the error carries %q", sent, ou.IdempotencyKeys)
	}
}

func TestATriggerAnsweredByAProxys502IsAnUnknownOutcomeNeverSentTwice(t *testing.T) {
	var triggers int32
	node := standIn(t, false, func(w http.ResponseWriter, r *http.Request) {
		atomic.AddInt32(&triggers, 1)
		w.WriteHeader(502)
		_, _ = io.WriteString(w, proxyPage)
	})
	c := newClient(t, []string{node.URL}, WithBackoff(time.Millisecond, time.Millisecond))
	_, err := c.TriggerTask(context.Background(), "01ARZ3NDEKTSV4RRFFQ69G5FAV")
	var ou *OutcomeUnknownError
	if !errors.As(err, &ou) {
		t.Fatalf("a trigger answered 502: got %T %v", err, err)
	}
	if n := atomic.LoadInt32(&triggers); n != 1 {
		t.Fatalf("a trigger answered 502 was sent %d times", n)
	}
}
