package molens

// Against real nodes that tests/integration/test_sdk_go.py starts from molens-node:
//   MOLENS_NODE_URL      one single-node cluster
//   MOLENS_CLUSTER_URLS  a 3-node cluster (comma-separated), MOLENS_CLUSTER_PIDS its "id=pid,..."
// Without them these tests skip (the driver fails on any skip).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func nodeURL(t *testing.T) string {
	u := os.Getenv("MOLENS_NODE_URL")
	if u == "" {
		t.Skip("MOLENS_NODE_URL not set (tests/integration/test_sdk_go.py starts a node and sets it)")
	}
	return u
}

func newClient(t *testing.T, addrs []string, opts ...Option) *Client {
	opts = append([]Option{WithBackoff(10*time.Millisecond, 200*time.Millisecond)}, opts...)
	c, err := NewClient(addrs, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// far is a task that does not fire during the tests.
func far(base, scene string) *TaskRequest {
	return NewTaskRequest("delayed", base+"/api/v1/test/callback").SetIntervalMs(3_600_000).SetScene(scene)
}

func uniqueScene(prefix string) string {
	return fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano())
}

func mustAPIError(t *testing.T, err error, status int, code, field string) *APIError {
	t.Helper()
	var e *APIError
	if !errors.As(err, &e) {
		t.Fatalf("want *APIError %d %s, got %T %v", status, code, err, err)
	}
	if e.Status != status || e.Code != code || e.Field != field {
		t.Fatalf("want %d %s field %q, got %d %s field %q (%s)", status, code, field, e.Status, e.Code, e.Field, e.Message)
	}
	return e
}

func pollUntil(t *testing.T, what string, timeout time.Duration, fn func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var lastErr error
	for {
		ok, err := fn()
		if ok {
			return
		}
		if err != nil {
			lastErr = err
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s (last error: %v)", timeout, what, lastErr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestTaskLifecycle(t *testing.T) {
	base := nodeURL(t)
	c, ctx := newClient(t, []string{base}), ctxT(t)
	req := far(base, uniqueScene("life")).SetPayload(map[string]interface{}{"order_id": 42}).SetMaxRetries(2)
	task, err := c.CreateTask(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if task.Status != "pending" || string(task.Payload) != `{"order_id":42}` || task.MaxRetries != 2 || task.NextRunAt == nil {
		t.Fatalf("created %+v", task)
	}
	if req.IdempotencyKey != nil || task.IdempotencyKey == nil || len(*task.IdempotencyKey) != 32 {
		t.Fatalf("the SDK's key must be on the task, not on the caller's request: %v", task.IdempotencyKey)
	}
	got, err := c.GetTask(ctx, task.ID)
	if err != nil || got.ID != task.ID || got.Scene != *req.Scene {
		t.Fatalf("get: %+v %v", got, err)
	}
	if p, err := c.PauseTask(ctx, task.ID); err != nil || p.Status != "paused" || p.NextRunAt != nil {
		t.Fatalf("pause: %+v %v", p, err)
	}
	_, err = c.PauseTask(ctx, task.ID)
	mustAPIError(t, err, 409, "illegal_transition", "status")
	if !IsConflict(err) {
		t.Fatal("IsConflict")
	}
	if r, err := c.ResumeTask(ctx, task.ID); err != nil || r.Status != "pending" {
		t.Fatalf("resume: %+v %v", r, err)
	}
	u, err := c.UpdateTask(ctx, task.ID, map[string]interface{}{"scene": "updated", "max_retries": nil}, task.Version)
	if err != nil || u.Version != task.Version+1 || u.Scene != "updated" || u.MaxRetries != 3 {
		t.Fatalf("update: %+v %v", u, err)
	}
	_, err = c.UpdateTask(ctx, task.ID, map[string]interface{}{"scene": "stale"}, task.Version)
	mustAPIError(t, err, 412, "precondition_failed", "If-Match")
	if !IsPreconditionFailed(err) {
		t.Fatal("IsPreconditionFailed")
	}
	if u2, err := c.UpdateTask(ctx, task.ID, map[string]interface{}{"scene": "again"}, 0); err != nil || u2.Version != u.Version+1 {
		t.Fatalf("update without a version: %+v %v", u2, err)
	}
	if d, err := c.DeleteTask(ctx, task.ID); err != nil || d.ID != task.ID {
		t.Fatalf("delete: %+v %v", d, err)
	}
	_, err = c.GetTask(ctx, task.ID)
	mustAPIError(t, err, 404, "not_found", "task_id")
	if !IsNotFound(err) {
		t.Fatal("IsNotFound")
	}
}

func TestSameIdempotencyKeyReturnsTheFirstTask(t *testing.T) {
	base := nodeURL(t)
	c, ctx := newClient(t, []string{base}), ctxT(t)
	key := NewIdempotencyKey()
	a, err := c.CreateTask(ctx, far(base, "idem").SetIdempotencyKey(key))
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.CreateTask(ctx, far(base, "idem").SetIdempotencyKey(key).SetPayload("other"))
	if err != nil || b.ID != a.ID || *b.IdempotencyKey != key {
		t.Fatalf("second create with the same key: %+v %v (first %s)", b, err, a.ID)
	}
}

func TestValidationErrorsCarryCodeAndField(t *testing.T) {
	base := nodeURL(t)
	c, ctx := newClient(t, []string{base}), ctxT(t)
	_, err := c.CreateTask(ctx, NewTaskRequest("delayed", base+"/cb"))
	mustAPIError(t, err, 400, "invalid_argument", "interval_ms")
	_, err = c.CreateTask(ctx, NewTaskRequest("delayed", "http://169.254.169.254/").SetIntervalMs(1000))
	mustAPIError(t, err, 400, "invalid_argument", "callback_url")
	if !IsBadRequest(err) {
		t.Fatal("IsBadRequest")
	}
	_, err = c.ListTasks(ctx, ListOptions{Limit: 5000})
	mustAPIError(t, err, 400, "invalid_argument", "limit")
}

func TestBatchCreateAndARejectedBatchNamesEachBadItem(t *testing.T) {
	base := nodeURL(t)
	c, ctx := newClient(t, []string{base}), ctxT(t)
	scene := uniqueScene("batch")
	var reqs []*TaskRequest
	for i := 0; i < 1203; i++ { // two requests: 1000 + 203
		reqs = append(reqs, far(base, scene).SetPayload(map[string]int{"i": i}))
	}
	made, err := c.CreateTasks(ctx, reqs)
	if err != nil || len(made) != 1203 {
		t.Fatalf("created %d: %v", len(made), err)
	}
	for i, m := range made {
		if string(m.Payload) != fmt.Sprintf(`{"i":%d}`, i) {
			t.Fatalf("item %d is %s", i, m.Payload)
		}
	}
	bad := []*TaskRequest{far(base, scene), NewTaskRequest("delayed", base+"/cb"), far(base, scene).SetScene("bad scene!")}
	_, err = c.CreateTasks(ctx, bad)
	e := mustAPIError(t, err, 400, "invalid_argument", "tasks[1].interval_ms")
	if len(e.ItemErrors) != 2 || e.ItemErrors[1].Field != "interval_ms" || e.ItemErrors[2].Field != "scene" {
		t.Fatalf("item errors %+v", e.ItemErrors)
	}
	n := 0
	if err := c.EachTask(ctx, ListOptions{Scene: scene}, func(*Task) error { n++; return nil }); err != nil || n != 1203 {
		t.Fatalf("listed %d (nothing of the rejected batch may exist): %v", n, err)
	}
}

func TestCreateTaskIDsAnswersIDsAloneAndKeysMakeItIdempotent(t *testing.T) {
	base := nodeURL(t)
	c, ctx := newClient(t, []string{base}), ctxT(t)
	scene := uniqueScene("ids")
	var reqs []*TaskRequest
	for i := 0; i < 1200; i++ { // two requests: 1000 + 200
		reqs = append(reqs, far(base, scene).SetIdempotencyKey(fmt.Sprintf("%s-%d", scene, i)).SetPayload(map[string]int{"i": i}))
	}
	ids, err := c.CreateTaskIDs(ctx, reqs)
	if err != nil || len(ids) != 1200 {
		t.Fatalf("created %d: %v", len(ids), err)
	}
	seen := map[string]bool{}
	for _, id := range ids {
		if id == "" || seen[id] {
			t.Fatalf("id %q empty or repeated", id)
		}
		seen[id] = true
	}
	got, err := c.GetTask(ctx, ids[1100])
	if err != nil || string(got.Payload) != `{"i":1100}` || got.Scene != scene {
		t.Fatalf("GET of item 1100: %+v %v", got, err)
	}
	again, err := c.CreateTaskIDs(ctx, reqs)
	if err != nil || !reflect.DeepEqual(again, ids) {
		t.Fatalf("the same keys again: %v (%d ids, same: %v)", err, len(again), reflect.DeepEqual(again, ids))
	}
	bad := []*TaskRequest{far(base, scene), NewTaskRequest("delayed", base+"/cb")}
	made, err := c.CreateTaskIDs(ctx, bad)
	e := mustAPIError(t, err, 400, "invalid_argument", "tasks[1].interval_ms")
	if len(made) != 0 || len(e.ItemErrors) != 1 || e.ItemErrors[1].Field != "interval_ms" {
		t.Fatalf("made %v, item errors %+v", made, e.ItemErrors)
	}
	n := 0
	if err := c.EachTask(ctx, ListOptions{Scene: scene}, func(*Task) error { n++; return nil }); err != nil || n != 1200 {
		t.Fatalf("listed %d (nothing of the rejected batch may exist): %v", n, err)
	}
}

func TestCreateTaskIDsSendsPreferReturnMinimalAndCreateTasksDoesNot(t *testing.T) {
	var prefer []string
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		prefer = append(prefer, r.Header.Get("Prefer"))
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"items": [{"id": "01ARZ3NDEKTSV4RRFFQ69G5FAV"}], "errors": []}`)
	}))
	t.Cleanup(s.Close)
	c := newClient(t, []string{s.URL})
	ids, err := c.CreateTaskIDs(context.Background(), []*TaskRequest{far(s.URL, "x")})
	if err != nil || len(ids) != 1 || ids[0] != "01ARZ3NDEKTSV4RRFFQ69G5FAV" {
		t.Fatalf("%v %v", ids, err)
	}
	if _, err := c.CreateTasks(context.Background(), []*TaskRequest{far(s.URL, "x")}); err != nil {
		t.Fatal(err)
	}
	if len(prefer) != 2 || prefer[0] != "return=minimal" || prefer[1] != "" {
		t.Fatalf("Prefer headers sent: %q", prefer)
	}
}

func TestListFiltersAndFollowsCursors(t *testing.T) {
	base := nodeURL(t)
	c, ctx := newClient(t, []string{base}), ctxT(t)
	scene := uniqueScene("list")
	var ids []string
	for i := 0; i < 7; i++ {
		task, err := c.CreateTask(ctx, far(base, scene))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, task.ID)
	}
	if _, err := c.PauseTask(ctx, ids[3]); err != nil {
		t.Fatal(err)
	}
	page, err := c.ListTasks(ctx, ListOptions{Scene: scene, Limit: 3})
	if err != nil || len(page.Items) != 3 || page.NextCursor == nil || page.Items[0].ID != ids[0] {
		t.Fatalf("first page %+v %v", page, err)
	}
	var all []string
	if err := c.EachTask(ctx, ListOptions{Scene: scene, Limit: 2}, func(t *Task) error { all = append(all, t.ID); return nil }); err != nil {
		t.Fatal(err)
	}
	if strings.Join(all, ",") != strings.Join(ids, ",") {
		t.Fatalf("every page in creation order: got %v want %v", all, ids)
	}
	var paused []string
	err = c.EachTask(ctx, ListOptions{Scene: scene, Status: []string{"paused", "done"}, Type: "delayed", URL: "TEST/CALLBACK"},
		func(t *Task) error { paused = append(paused, t.ID); return nil })
	if err != nil || len(paused) != 1 || paused[0] != ids[3] {
		t.Fatalf("filtered: %v %v", paused, err)
	}
	stop := errors.New("stop")
	n := 0
	if err := c.EachTask(ctx, ListOptions{Scene: scene}, func(*Task) error { n++; return stop }); err != stop || n != 1 {
		t.Fatalf("fn's error ends the walk: %v after %d", err, n)
	}
}

func TestTriggeredTaskHasExecutions(t *testing.T) {
	base := nodeURL(t)
	c, ctx := newClient(t, []string{base}), ctxT(t)
	task, err := c.CreateTask(ctx, far(base, uniqueScene("exec")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TriggerTask(ctx, task.ID); err != nil {
		t.Fatal(err)
	}
	var got []Execution
	pollUntil(t, "the triggered fire's execution record", 30*time.Second, func() (bool, error) {
		page, err := c.TaskExecutions(ctx, task.ID, ExecutionOptions{Limit: 10})
		if err != nil {
			return false, err
		}
		got = page.Items
		return len(got) > 0, nil
	})
	e := got[0]
	if e.TaskID != task.ID || e.Kind != "callback" || e.Result != "success" || e.StatusCode == nil || *e.StatusCode != 200 ||
		e.FireID != task.ID+"-1" {
		t.Fatalf("execution %+v", e)
	}
	all, err := c.Executions(ctx, ExecutionOptions{TaskID: task.ID, Result: "success", Since: e.FinishedAt, Until: e.FinishedAt + 1})
	if err != nil || len(all.Items) != 1 || all.Items[0].ID != e.ID {
		t.Fatalf("executions filtered: %+v %v", all, err)
	}
	n := 0
	if err := c.EachExecution(ctx, ExecutionOptions{TaskID: task.ID, Limit: 1}, func(*Execution) error { n++; return nil }); err != nil || n != len(got) {
		t.Fatalf("each execution: %d of %d, %v", n, len(got), err)
	}
	_, err = c.TaskExecutions(ctx, "01ARZ3NDEKTSV4RRFFQ69G5FAV", ExecutionOptions{})
	mustAPIError(t, err, 404, "not_found", "task_id")
}

func TestBackfillFiresTheOccurrencesOfAPastRange(t *testing.T) {
	base := nodeURL(t)
	c, ctx := newClient(t, []string{base}), ctxT(t)
	r := NewTaskRequest("periodic", base+"/api/v1/test/callback").SetCronExpr("0 * * * *").SetScene(uniqueScene("backfill"))
	task, err := c.CreateTask(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	const hour = int64(3_600_000)
	end := time.Now().UnixMilli() / hour * hour
	b, err := c.BackfillTask(ctx, task.ID, end-3*hour, end)
	if err != nil {
		t.Fatal(err)
	}
	if b.Occurrences != 3 || b.First == nil || *b.First != end-3*hour || b.Last == nil || *b.Last != end-hour || b.Task.ID != task.ID {
		t.Fatalf("backfill %+v", b)
	}
	pollUntil(t, "three backfilled callbacks", 30*time.Second, func() (bool, error) {
		page, err := c.TaskExecutions(ctx, task.ID, ExecutionOptions{Result: "success", Limit: 10})
		if err != nil {
			return false, err
		}
		return len(page.Items) == 3, nil
	})
	_, err = c.BackfillTask(ctx, task.ID, end, end+hour)
	mustAPIError(t, err, 400, "invalid_argument", "end") // the future is not backfilled
}

func TestScheduleRetryAndFlowFieldsRoundTripThroughCreateGetAndUpdate(t *testing.T) {
	base := nodeURL(t)
	c, ctx := newClient(t, []string{base}), ctxT(t)
	const day = int64(86_400_000)
	start := time.Now().UnixMilli() + day
	r := NewTaskRequest("periodic", base+"/api/v1/test/callback").SetIntervalMs(3_600_000).SetScene(uniqueScene("fields")).
		SetRetry(NewRetryRequest().SetMaxRetries(5).SetBackoff(BackoffFixed).SetInitialMs(250).SetMaxMs(10_000).
			SetJitter(RetryJitterFull).SetNonRetryableStatuses(410, 422).SetMaxThrottleMs(60_000)).
		SetOverlap(OverlapBufferOne).SetCatchup(CatchupNone).SetCatchupWindowMs(600_000).SetJitterMs(5_000).
		SetStartAt(start).SetEndAt(start + 30*day).SetMaxRuns(10).SetFlowKey("sdk-go.fields").
		SetNotifyURL(base + "/api/v1/test/callback")
	created, err := c.CreateTask(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	want := RetryPolicy{MaxRetries: 5, Backoff: BackoffFixed, InitialMs: 250, Factor: 2, MaxMs: 10_000, Jitter: RetryJitterFull,
		NonRetryableStatuses: []int{410, 422}, MaxThrottleMs: 60_000}
	for _, task := range []*Task{created, must(c.GetTask(ctx, created.ID))(t)} {
		if !reflect.DeepEqual(task.Retry, want) || task.MaxRetries != 5 {
			t.Fatalf("retry %+v (max_retries %d), want %+v", task.Retry, task.MaxRetries, want)
		}
		if task.Overlap != OverlapBufferOne || task.Catchup != CatchupNone || task.CatchupWindowMs != 600_000 || task.JitterMs != 5_000 {
			t.Fatalf("overlap %q catchup %q window %d jitter %d", task.Overlap, task.Catchup, task.CatchupWindowMs, task.JitterMs)
		}
		if task.StartAt == nil || *task.StartAt != start || task.EndAt == nil || *task.EndAt != start+30*day ||
			task.MaxRuns == nil || *task.MaxRuns != 10 {
			t.Fatalf("bounds %v %v %v", task.StartAt, task.EndAt, task.MaxRuns)
		}
		if task.FlowKey == nil || *task.FlowKey != "sdk-go.fields" || task.NotifyURL == nil || *task.NotifyURL != *r.NotifyURL {
			t.Fatalf("flow_key %v notify_url %v", task.FlowKey, task.NotifyURL)
		}
		// the first occurrence is start_at plus this task's fixed offset in [0, jitter_ms)
		if task.NextRunAt == nil || *task.NextRunAt < start || *task.NextRunAt >= start+5_000 {
			t.Fatalf("next_run_at %v, start_at %d", task.NextRunAt, start)
		}
	}
	plain, err := c.CreateTask(ctx, far(base, uniqueScene("defaults")))
	if err != nil {
		t.Fatal(err)
	}
	if plain.Overlap != OverlapSkip || plain.Catchup != CatchupOne || plain.JitterMs != 0 || plain.StartAt != nil ||
		plain.FlowKey != nil || plain.Retry.MaxRetries != 3 || plain.Retry.Backoff != BackoffExponential || plain.Retry.InitialMs != 1000 {
		t.Fatalf("defaults %+v", plain)
	}

	// a patch giving retry replaces the whole policy; the version moves on
	u, err := c.UpdateTask(ctx, created.ID, map[string]interface{}{
		"retry": NewRetryRequest().SetMaxRetries(1), "overlap": OverlapSkip, "catchup": CatchupAll, "flow_key": nil,
	}, created.Version)
	if err != nil {
		t.Fatal(err)
	}
	if u.Version != created.Version+1 || u.Retry.MaxRetries != 1 || u.Retry.Backoff != BackoffExponential || u.Overlap != OverlapSkip ||
		u.Catchup != CatchupAll || u.FlowKey != nil {
		t.Fatalf("updated %+v", u)
	}
	_, err = c.UpdateTask(ctx, created.ID, map[string]interface{}{"max_runs": 3}, created.Version)
	mustAPIError(t, err, 412, "precondition_failed", "If-Match")
	if !IsPreconditionFailed(err) {
		t.Fatal("IsPreconditionFailed")
	}
	if got := must(c.GetTask(ctx, created.ID))(t); got.Version != u.Version || *got.MaxRuns != 10 {
		t.Fatalf("a stale update changed the task: %+v", got)
	}

	// resume_from
	if _, err := c.PauseTask(ctx, created.ID); err != nil {
		t.Fatal(err)
	}
	_, err = c.ResumeTaskFrom(ctx, created.ID, "yesterday")
	mustAPIError(t, err, 400, "invalid_argument", "resume_from")
	res, err := c.ResumeTaskFrom(ctx, created.ID, ResumeFromSchedule)
	if err != nil || res.Status != "pending" || res.NextRunAt == nil || *res.NextRunAt < start {
		t.Fatalf("resume from schedule: %+v %v", res, err)
	}
	if _, err := c.ResumeTaskFrom(ctx, created.ID, ResumeFromNow); !IsConflict(err) {
		t.Fatalf("resuming a pending task: %v", err)
	}
	_, err = c.CreateTask(ctx, far(base, "bad").SetFlowKey("no spaces"))
	mustAPIError(t, err, 400, "invalid_argument", "flow_key")
}

func must[T any](v T, err error) func(*testing.T) T {
	return func(t *testing.T) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func TestFlowsSetPauseResumeListDelete(t *testing.T) {
	base := nodeURL(t)
	c, ctx := newClient(t, []string{base}), ctxT(t)
	key := fmt.Sprintf("[::1]:%d", time.Now().UnixNano()%60000+1024) // brackets and a colon go through the path
	f, err := c.SetFlow(ctx, key, *(&FlowLimits{}).SetRatePerS(20).SetConcurrency(3))
	if err != nil {
		t.Fatal(err)
	}
	if f.Key != key || !f.Configured || f.RatePerS == nil || *f.RatePerS != 20 || f.Concurrency == nil || *f.Concurrency != 3 ||
		f.Burst != nil || f.Paused || f.UpdatedAt == nil || !f.Live || f.InFlight == nil || f.Queued == nil {
		t.Fatalf("set: %+v", f)
	}
	if p, err := c.PauseFlow(ctx, key); err != nil || !p.Paused || *p.RatePerS != 20 || *p.Concurrency != 3 {
		t.Fatalf("pause: %+v %v", p, err)
	}
	if g, err := c.GetFlow(ctx, key); err != nil || !g.Paused {
		t.Fatalf("get: %+v %v", g, err)
	}
	flows, err := c.ListFlows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var listed *Flow
	for i := range flows {
		if flows[i].Key == key {
			listed = &flows[i]
		}
	}
	if listed == nil || !listed.Paused || *listed.RatePerS != 20 {
		t.Fatalf("%s not listed as paused: %+v", key, flows)
	}
	if r, err := c.ResumeFlow(ctx, key); err != nil || r.Paused || *r.RatePerS != 20 {
		t.Fatalf("resume: %+v %v", r, err)
	}
	_, err = c.SetFlow(ctx, key, *(&FlowLimits{}).SetBurst(3))
	mustAPIError(t, err, 400, "invalid_argument", "burst")
	if r, err := c.SetFlow(ctx, key, *(&FlowLimits{}).SetConcurrency(1)); err != nil || r.RatePerS != nil || *r.Concurrency != 1 {
		t.Fatalf("limits are replaced whole: %+v %v", r, err)
	}
	if d, err := c.DeleteFlow(ctx, key); err != nil || d.Configured {
		t.Fatalf("delete: %+v %v", d, err)
	}
	_, err = c.GetFlow(ctx, key)
	mustAPIError(t, err, 404, "not_found", "key")
	if !IsNotFound(err) {
		t.Fatal("IsNotFound")
	}
	_, err = c.DeleteFlow(ctx, key)
	mustAPIError(t, err, 404, "not_found", "key")
	_, err = c.SetFlow(ctx, "no spaces", FlowLimits{})
	mustAPIError(t, err, 400, "invalid_argument", "key")
}

// receiver answers callbacks with its current status and records their X-Fire-ID.
type receiver struct {
	*httptest.Server
	mu     sync.Mutex
	status int
	fires  []string
}

func newReceiver(t *testing.T, status int) *receiver {
	r := &receiver{status: status}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, _ = io.Copy(io.Discard, req.Body)
		r.mu.Lock()
		r.fires = append(r.fires, req.Header.Get("X-Fire-ID"))
		st := r.status
		r.mu.Unlock()
		w.WriteHeader(st)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) setStatus(s int) { r.mu.Lock(); r.status = s; r.mu.Unlock() }

func (r *receiver) firesOf(fireID string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, f := range r.fires {
		if f == fireID {
			n++
		}
	}
	return n
}

func TestDeadLettersListGetRedriveAndDelete(t *testing.T) {
	base := nodeURL(t)
	c, ctx := newClient(t, []string{base}), ctxT(t)
	rcv := newReceiver(t, 500)
	u, _ := url.Parse(rcv.URL)
	flow := u.Host // the flow of a task without flow_key: its callback URL's host:port
	var tasks []*Task
	for i := 0; i < 4; i++ { // a delayed task that fails at once: one attempt, answered 500
		task, err := c.CreateTask(ctx, NewTaskRequest("delayed", rcv.URL+"/hook").SetIntervalMs(100).
			SetScene(uniqueScene("dead")).SetRetry(NewRetryRequest().SetMaxRetries(0)))
		if err != nil {
			t.Fatal(err)
		}
		tasks = append(tasks, task)
	}
	byTask := map[string]DeadLetter{}
	pollUntil(t, "a dead letter of each task", 30*time.Second, func() (bool, error) {
		byTask = map[string]DeadLetter{}
		err := c.EachDeadLetter(ctx, DeadLetterOptions{Flow: flow, Limit: 1}, func(d *DeadLetter) error {
			byTask[d.TaskID] = *d
			return nil
		})
		return len(byTask) == len(tasks), err
	})
	a := byTask[tasks[0].ID]
	if a.ID != tasks[0].ID+"-1.1" || a.FireID != tasks[0].ID+"-1" || a.Kind != DeadLetterRetriesExhausted || a.Attempts != 1 ||
		a.StatusCode == nil || *a.StatusCode != 500 || a.Flow != flow || a.URL != rcv.URL+"/hook" || a.Reliability != "at_least_once" ||
		a.Seq != 1 || a.At == 0 || a.ScheduledAt == 0 {
		t.Fatalf("dead letter %+v", a)
	}
	if got, err := c.GetDeadLetter(ctx, a.ID); err != nil || !reflect.DeepEqual(*got, a) {
		t.Fatalf("get: %+v %v, listed %+v", got, err, a)
	}
	page, err := c.ListDeadLetters(ctx, DeadLetterOptions{Flow: flow, Limit: 2})
	if err != nil || len(page.Items) != 2 || page.NextCursor == nil {
		t.Fatalf("a page of 2: %+v %v", page, err)
	}
	if page, err := c.ListDeadLetters(ctx, DeadLetterOptions{TaskID: tasks[1].ID}); err != nil || len(page.Items) != 1 ||
		page.Items[0].TaskID != tasks[1].ID {
		t.Fatalf("by task: %+v %v", page, err)
	}
	if page, err := c.ListDeadLetters(ctx, DeadLetterOptions{Flow: flow, Kind: DeadLetterNonRetryable}); err != nil || len(page.Items) != 0 {
		t.Fatalf("by kind: %+v %v", page, err)
	}
	_, err = c.ListDeadLetters(ctx, DeadLetterOptions{Kind: "bogus"})
	mustAPIError(t, err, 400, "invalid_argument", "kind")
	if task := must(c.GetTask(ctx, tasks[0].ID))(t); task.Status != "failed" {
		t.Fatalf("a delayed task whose occurrence failed for good is failed, not %s", task.Status)
	}

	// redrive one: delivered again with the same fire id, and the dead letter is gone
	rcv.setStatus(200)
	rd, err := c.RedriveDeadLetter(ctx, a.ID)
	if err != nil || rd.ID != a.ID || rd.Warning != "" {
		t.Fatalf("redrive: %+v %v", rd, err)
	}
	pollUntil(t, "the redriven occurrence to succeed", 30*time.Second, func() (bool, error) {
		task, err := c.GetTask(ctx, tasks[0].ID)
		return err == nil && task.Status == "done", err
	})
	if n := rcv.firesOf(a.FireID); n != 2 {
		t.Fatalf("%s reached the receiver %d times, want 2 (the failure and the redrive)", a.FireID, n)
	}
	_, err = c.GetDeadLetter(ctx, a.ID)
	mustAPIError(t, err, 404, "not_found", "id")
	_, err = c.RedriveDeadLetter(ctx, a.ID)
	if !IsNotFound(err) {
		t.Fatalf("redriving a dead letter that is gone: %v", err)
	}

	// redrive by filter
	bulk, err := c.RedriveDeadLetters(ctx, DeadLetterFilter{TaskID: tasks[1].ID})
	if err != nil || bulk.Matched != 1 || bulk.Redriven != 1 || bulk.ErrorCount != 0 || bulk.More {
		t.Fatalf("redrive by filter: %+v %v", bulk, err)
	}
	pollUntil(t, "the bulk-redriven occurrence to succeed", 30*time.Second, func() (bool, error) {
		task, err := c.GetTask(ctx, tasks[1].ID)
		return err == nil && task.Status == "done", err
	})
	_, err = c.RedriveDeadLetters(ctx, DeadLetterFilter{Kind: "bogus"})
	mustAPIError(t, err, 400, "invalid_argument", "kind")

	// delete one, then delete by filter
	if err := c.DeleteDeadLetter(ctx, byTask[tasks[2].ID].ID); err != nil {
		t.Fatal(err)
	}
	err = c.DeleteDeadLetter(ctx, byTask[tasks[2].ID].ID)
	mustAPIError(t, err, 404, "not_found", "id")
	_, err = c.DeleteDeadLetters(ctx, DeadLetterFilter{})
	mustAPIError(t, err, 400, "invalid_argument", "all")
	del, err := c.DeleteDeadLetters(ctx, DeadLetterFilter{Flow: flow})
	if err != nil || del.Matched != 1 || del.Deleted != 1 || del.More {
		t.Fatalf("delete by filter: %+v %v", del, err)
	}
	if page, err := c.ListDeadLetters(ctx, DeadLetterOptions{Flow: flow}); err != nil || len(page.Items) != 0 {
		t.Fatalf("left after deleting: %+v %v", page, err)
	}
}

func TestClusterStatsAndMetaEndpoints(t *testing.T) {
	base := nodeURL(t)
	c, ctx := newClient(t, []string{base}), ctxT(t)
	st, err := c.ClusterStatus(ctx)
	if err != nil || st.Role != "leader" || st.LeaderID == nil || *st.LeaderID != st.NodeID || len(st.Nodes) != 1 {
		t.Fatalf("cluster status %+v %v", st, err)
	}
	li, err := c.ClusterLeader(ctx)
	if err != nil || li.LeaderID == nil || *li.LeaderID != st.NodeID || li.Role != "leader" || li.Term < 1 {
		t.Fatalf("leader %+v %v", li, err)
	}
	s, err := c.Stats(ctx, StatsOptions{Local: true})
	if err != nil || s.NodeID != st.NodeID || s.TasksTotal < 1 || len(s.Tasks) < 7 || len(s.Raw) == 0 {
		t.Fatalf("stats %+v %v", s, err)
	}
	if _, err := c.Stats(ctx, StatsOptions{NodeID: "nope"}); !IsNotFound(err) {
		t.Fatalf("stats of an unknown member: %v", err)
	}
	cs, err := c.ClusterStats(ctx)
	if err != nil || len(cs.Nodes) != 1 || cs.Nodes[0].NodeID != st.NodeID || cs.Nodes[0].Lag == nil {
		t.Fatalf("cluster stats %+v %v", cs, err)
	}
	p, err := c.SchedulePreview(ctx, PreviewRequest{CronExpr: "30 2 * * *", Timezone: "Europe/Berlin", After: 1774738800000, Count: 3})
	if err != nil || fmt.Sprint(p.Items) != "[1774746000000 1774830600000 1774917000000]" || p.Local[0] != "2026-03-29T03:00:00.000+02:00" {
		t.Fatalf("preview %+v %v", p, err)
	}
	_, err = c.SchedulePreview(ctx, PreviewRequest{CronExpr: "not cron"})
	mustAPIError(t, err, 400, "invalid_argument", "cron_expr")
	if u, err := c.URLStats(ctx, URLStatsOptions{}); err != nil || u.Until <= u.Since {
		t.Fatalf("url stats %+v %v", u, err)
	}
	if w, err := c.WheelDistribution(ctx); err != nil || len(w.Levels) == 0 || w.TickMs <= 0 {
		t.Fatalf("wheel %+v %v", w, err)
	}
	png, err := c.WheelDistributionPNG(ctx, 1, 400)
	if err != nil || len(png) < 8 || string(png[1:4]) != "PNG" {
		t.Fatalf("png %d bytes %v", len(png), err)
	}
	m, err := c.Metrics(ctx)
	if err != nil || !strings.Contains(m, "molens_raft_term") {
		t.Fatalf("metrics: %v", err)
	}
	if h, err := c.Healthz(ctx); err != nil || !h.OK || h.NodeID != st.NodeID {
		t.Fatalf("healthz %+v %v", h, err)
	}
	if r, err := c.Readyz(ctx); err != nil || !r.Ready {
		t.Fatalf("readyz %+v %v", r, err)
	}
}

func TestCancelledContextStopsACall(t *testing.T) {
	base := nodeURL(t)
	c := newClient(t, []string{base})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.GetTask(ctx, "x"); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v", err)
	}
}

func TestUnreachableNodesFailAfterBoundedAttempts(t *testing.T) {
	c := newClient(t, []string{"http://127.0.0.1:9", "http://127.0.0.1:7"}, WithMaxAttempts(3))
	_, err := c.CreateTask(ctxT(t), far("http://127.0.0.1:9", "x"))
	var ce *ConnectionError
	if !errors.As(err, &ce) || ce.Attempts != 3 {
		t.Fatalf("got %T %v", err, err)
	}
	_, err = c.PauseTask(ctxT(t), "01ARZ3NDEKTSV4RRFFQ69G5FAV")
	if !errors.As(err, &ce) {
		t.Fatalf("a pause that never connected is not of unknown outcome: %T %v", err, err)
	}
}

func TestADeadNodeIsSkipped(t *testing.T) {
	base := nodeURL(t)
	c := newClient(t, []string{"http://127.0.0.1:9", base})
	if _, err := c.CreateTask(ctxT(t), far(base, "skip")); err != nil {
		t.Fatal(err)
	}
}

func TestBatcherFlushesByCountIntervalAndClose(t *testing.T) {
	base := nodeURL(t)
	c, ctx := newClient(t, []string{base}), ctxT(t)

	// by count: a full batch goes at once, the interval is far away
	b := c.NewBatcher(BatcherOptions{MaxBatch: 10, FlushInterval: time.Hour})
	var ps []*Pending
	for i := 0; i < 10; i++ {
		p, err := b.Submit(ctx, far(base, "batcher").SetPayload(i))
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	for i, p := range ps {
		task, err := p.Wait(ctx)
		if err != nil || string(task.Payload) != strconv.Itoa(i) {
			t.Fatalf("item %d: %+v %v", i, task, err)
		}
	}
	// by close: three queued, interval an hour away
	ps = ps[:0]
	for i := 0; i < 3; i++ {
		p, _ := b.Submit(ctx, far(base, "batcher"))
		ps = append(ps, p)
	}
	select {
	case <-ps[0].Done():
		t.Fatal("a partial batch went before its interval or close")
	default:
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		select {
		case <-p.Done():
		default:
			t.Fatal("Close returned before every task was answered")
		}
		if _, err := p.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Submit(ctx, far(base, "batcher")); err != ErrBatcherClosed {
		t.Fatalf("submit after close: %v", err)
	}

	// by interval: one task, no close, no flush
	b = c.NewBatcher(BatcherOptions{MaxBatch: 1000, FlushInterval: 20 * time.Millisecond})
	defer b.Close()
	p, _ := b.Submit(ctx, far(base, "batcher"))
	if task, err := p.Wait(ctx); err != nil || task.Status != "pending" {
		t.Fatalf("by interval: %+v %v", task, err)
	}

	// Flush, and an invalid task fails only itself
	b2 := c.NewBatcher(BatcherOptions{MaxBatch: 1000, FlushInterval: time.Hour, Senders: 2})
	defer b2.Close()
	good, _ := b2.Submit(ctx, far(base, "batcher"))
	bad, _ := b2.Submit(ctx, NewTaskRequest("delayed", base+"/cb"))
	good2, _ := b2.Submit(ctx, far(base, "batcher"))
	if err := b2.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for _, g := range []*Pending{good, good2} {
		if _, err := g.Wait(ctx); err != nil {
			t.Fatalf("a valid task in a batch with a bad one: %v", err)
		}
	}
	_, err := bad.Wait(ctx)
	mustAPIError(t, err, 400, "invalid_argument", "interval_ms")
}

func TestBatcherIDsOnlyResolvesTasksHoldingOnlyTheirIDs(t *testing.T) {
	base := nodeURL(t)
	c, ctx := newClient(t, []string{base}), ctxT(t)
	scene := uniqueScene("batcher-ids")
	b := c.NewBatcher(BatcherOptions{MaxBatch: 100, FlushInterval: 5 * time.Millisecond, Senders: 2, IDsOnly: true})
	const n, badAt = 250, 137
	ps := make([]*Pending, n)
	for i := range ps {
		r := far(base, scene).SetPayload(map[string]int{"i": i})
		if i == badAt {
			r = NewTaskRequest("delayed", base+"/cb").SetScene(scene) // no interval: invalid
		}
		p, err := b.Submit(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		ps[i] = p
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for i, p := range ps {
		task, err := p.Wait(ctx)
		if i == badAt {
			mustAPIError(t, err, 400, "invalid_argument", "interval_ms")
			if task != nil {
				t.Fatalf("the invalid task resolved with %+v", task)
			}
			continue
		}
		if err != nil || task == nil {
			t.Fatalf("item %d (a valid task in a stream with a bad one): %+v %v", i, task, err)
		}
		if task.ID == "" {
			t.Fatalf("item %d: empty id", i)
		}
		if j, dup := seen[task.ID]; dup {
			t.Fatalf("items %d and %d share id %s", j, i, task.ID)
		}
		seen[task.ID] = i
		if !reflect.DeepEqual(*task, Task{ID: task.ID}) || task.CallbackURL != "" {
			t.Fatalf("item %d: more than the id set: %+v", i, task)
		}
	}
	if len(seen) != n-1 {
		t.Fatalf("%d ids for %d valid tasks", len(seen), n-1)
	}
	task, _ := ps[200].Wait(ctx)
	got, err := c.GetTask(ctx, task.ID)
	if err != nil || string(got.Payload) != `{"i":200}` || got.Scene != scene || got.Status != "pending" {
		t.Fatalf("GET of item 200: %+v %v", got, err)
	}
	listed := 0
	if err := c.EachTask(ctx, ListOptions{Scene: scene}, func(*Task) error { listed++; return nil }); err != nil || listed != n-1 {
		t.Fatalf("listed %d, want %d (each valid task exactly once, the invalid one never): %v", listed, n-1, err)
	}
}

func TestBatcherSendsPreferReturnMinimalOnlyWithIDsOnly(t *testing.T) {
	var mu sync.Mutex
	var prefer []string
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		prefer = append(prefer, r.Header.Get("Prefer"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if r.Header.Get("Prefer") == "return=minimal" {
			_, _ = io.WriteString(w, `{"items": [{"id": "01ARZ3NDEKTSV4RRFFQ69G5FAV"}], "errors": []}`)
			return
		}
		_, _ = io.WriteString(w, `{"items": [{"id": "01ARZ3NDEKTSV4RRFFQ69G5FAW", "status": "pending"}], "errors": []}`)
	}))
	t.Cleanup(s.Close)
	c := newClient(t, []string{s.URL})
	ctx := context.Background()
	for _, idsOnly := range []bool{true, false} {
		b := c.NewBatcher(BatcherOptions{IDsOnly: idsOnly})
		p, err := b.Submit(ctx, far(s.URL, "x"))
		if err != nil {
			t.Fatal(err)
		}
		task, err := p.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		b.Close()
		if idsOnly && !reflect.DeepEqual(*task, Task{ID: "01ARZ3NDEKTSV4RRFFQ69G5FAV"}) ||
			!idsOnly && (task.ID != "01ARZ3NDEKTSV4RRFFQ69G5FAW" || task.Status != "pending") {
			t.Fatalf("IDsOnly %v: %+v", idsOnly, task)
		}
	}
	if len(prefer) != 2 || prefer[0] != "return=minimal" || prefer[1] != "" {
		t.Fatalf("Prefer headers sent: %q", prefer)
	}
}

// ------------------------------------------------------------------------------------ 3 nodes

func clusterURLs(t *testing.T) []string {
	u := os.Getenv("MOLENS_CLUSTER_URLS")
	if u == "" {
		t.Skip("MOLENS_CLUSTER_URLS not set (tests/integration/test_sdk_go.py starts a cluster and sets it)")
	}
	return strings.Split(u, ",")
}

func leaderOf(t *testing.T, ctx context.Context, c *Client) (string, string) {
	var id, url string
	pollUntil(t, "a leader", 30*time.Second, func() (bool, error) {
		li, err := c.ClusterLeader(ctx)
		if err != nil || li.LeaderID == nil {
			return false, err
		}
		st, err := c.ClusterStatus(ctx)
		if err != nil {
			return false, err
		}
		id = *li.LeaderID
		if li.LeaderURL != nil {
			url = *li.LeaderURL
		} else if st.NodeID == id {
			url = c.currentTarget()
		}
		return url != "", nil
	})
	return id, url
}

func TestAFollowerRedirectsWritesToTheLeader(t *testing.T) {
	urls := clusterURLs(t)
	ctx := ctxT(t)
	probe := newClient(t, urls)
	leaderID, leaderURL := leaderOf(t, ctx, probe)
	var follower string
	for _, u := range urls {
		if u != leaderURL {
			follower = u
		}
	}
	c := newClient(t, []string{follower})
	task, err := c.CreateTask(ctx, far(follower, uniqueScene("redirect")))
	if err != nil {
		t.Fatal(err)
	}
	if c.currentTarget() != leaderURL {
		t.Fatalf("the client did not move to the leader %s (%s): at %s", leaderID, leaderURL, c.currentTarget())
	}
	if p, err := c.PauseTask(ctx, task.ID); err != nil || p.Status != "paused" {
		t.Fatalf("pause via the leader: %+v %v", p, err)
	}
}

func TestKillingTheLeaderMidBatchLosesAndDuplicatesNothing(t *testing.T) {
	urls := clusterURLs(t)
	pids := map[string]int{}
	for _, kv := range strings.Split(os.Getenv("MOLENS_CLUSTER_PIDS"), ",") {
		id, pid, _ := strings.Cut(kv, "=")
		pids[id], _ = strconv.Atoi(pid)
	}
	ctx := ctxT(t)
	c := newClient(t, urls, WithMaxAttempts(40), WithRetryDeadline(60*time.Second), WithBackoff(20*time.Millisecond, 500*time.Millisecond))
	leaderID, _ := leaderOf(t, ctx, c)
	if pids[leaderID] == 0 {
		t.Fatalf("no pid for leader %s in MOLENS_CLUSTER_PIDS", leaderID)
	}
	const n = 6000
	scene := uniqueScene("failover")
	b := c.NewBatcher(BatcherOptions{MaxBatch: 100, FlushInterval: 5 * time.Millisecond, Senders: 2})
	ps := make([]*Pending, n)
	watch := make(chan *Pending, 1)
	var done sync.WaitGroup
	done.Add(1)
	go func() { // kill -9 the leader once a sixth of the tasks are created, the rest still in flight or queued
		defer done.Done()
		<-(<-watch).Done()
		if err := syscall.Kill(pids[leaderID], syscall.SIGKILL); err != nil {
			t.Errorf("kill %s: %v", leaderID, err)
		}
	}()
	for i := 0; i < n; i++ {
		p, err := b.Submit(ctx, far(urls[0], scene).SetPayload(map[string]int{"i": i}))
		if err != nil {
			t.Fatal(err)
		}
		ps[i] = p
		if i == n/6 {
			watch <- p
		}
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	done.Wait()
	ids := map[string]bool{}
	for i, p := range ps {
		task, err := p.Wait(ctx)
		if err != nil {
			t.Fatalf("task %d failed across the failover: %v", i, err)
		}
		ids[task.ID] = true
	}
	newLeader, _ := leaderOf(t, ctx, c)
	if newLeader == leaderID {
		t.Fatalf("%s still leads after kill -9", leaderID)
	}
	seen := make([]int, n)
	total := 0
	err := c.EachTask(ctx, ListOptions{Scene: scene, Limit: 1000}, func(task *Task) error {
		var p struct{ I int }
		if err := json.Unmarshal(task.Payload, &p); err != nil {
			return err
		}
		seen[p.I]++
		total++
		if !ids[task.ID] {
			return fmt.Errorf("task %s (i=%d) exists but no Pending returned it: a duplicate", task.ID, p.I)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, k := range seen {
		if k != 1 {
			t.Fatalf("task i=%d exists %d times (total %d of %d)", i, k, total, n)
		}
	}
	t.Logf("killed leader %s mid-batch; %s took over; %d tasks, each exactly once", leaderID, newLeader, total)
}

// Runs after the failover test (one node already dead): kill -9 a second node, and the survivor has
// no quorum. Its 503 no_leader (with Retry-After) is retried, then reported with the API's code.
func TestNoLeaderIsRetriedThenReportedWithItsCode(t *testing.T) {
	urls := clusterURLs(t)
	pids := map[string]int{}
	for _, kv := range strings.Split(os.Getenv("MOLENS_CLUSTER_PIDS"), ",") {
		id, pid, _ := strings.Cut(kv, "=")
		pids[id], _ = strconv.Atoi(pid)
	}
	ctx := ctxT(t)
	var alive []string
	var aliveIDs []string
	for _, u := range urls {
		c := newClient(t, []string{u}, WithMaxAttempts(1))
		if st, err := c.ClusterStatus(ctx); err == nil {
			alive = append(alive, u)
			aliveIDs = append(aliveIDs, st.NodeID)
		}
	}
	if len(alive) != 2 {
		t.Fatalf("want the 2 nodes the failover test left, found %v", aliveIDs)
	}
	if err := syscall.Kill(pids[aliveIDs[0]], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	survivor := alive[1]
	pollUntil(t, "the survivor to know it has no leader", 30*time.Second, func() (bool, error) {
		resp, err := http.Get(survivor + "/readyz")
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		return resp.StatusCode == 503, nil
	})
	c := newClient(t, []string{survivor}, WithMaxAttempts(4), WithBackoff(10*time.Millisecond, 50*time.Millisecond))
	_, err := c.CreateTask(ctx, far(survivor, "no-leader"))
	e := mustAPIError(t, err, 503, "no_leader", "")
	if !IsUnavailable(e) {
		t.Fatal("IsUnavailable")
	}
}
