package molens

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Client is a client of one Molens cluster (see the package doc for routing and retries).
type Client struct {
	addrs          []string
	hc             *http.Client // without a Timeout: attemptTimeout bounds each attempt instead
	stock          bool         // hc's transport is net/http's own (see notSent)
	token          string
	attemptTimeout time.Duration // 0: none but the retry deadline
	maxAttempts    int
	retryDeadline  time.Duration
	backoffBase    time.Duration
	backoffMax     time.Duration
	namespace      string
	maxAnswer      int64

	given   *http.Client   // WithHTTPClient's, copied by NewClient (never changed)
	timeout *time.Duration // WithTimeout's: replaces the copy's Timeout, then attemptTimeout

	mu     sync.Mutex
	target string
}

// Option configures NewClient.
type Option func(*Client)

// WithToken sends "Authorization: Bearer <token>" (the nodes' http.auth_token, or an API key's
// secret). NewClient refuses a token that is not printable ASCII without spaces, as the Python
// SDK does: it could not travel in a header unchanged.
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// WithNamespace is the namespace of every create whose request names none, and the one lists
// (tasks, executions, dead letters) and bulk dead-letter actions are limited to when their options
// name none. Without it creates go to the server's "default" and lists show every namespace the
// key may read.
func WithNamespace(ns string) Option { return func(c *Client) { c.namespace = ns } }

// WithHTTPClient makes the client's requests with a copy of hc (hc itself is never changed; nil
// keeps the default). The copy's CheckRedirect is replaced (the SDK follows 307 itself), and its
// Timeout becomes the per-attempt timeout (WithTimeout, in any order, replaces it).
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.given = hc } }

// WithTimeout is the per-attempt timeout (default 10 s; with WithHTTPClient, that client's own
// Timeout unless this is given; 0: none but the retry deadline). It covers the whole attempt,
// answer body included, and is cut to what is left of WithRetryDeadline, as the Python and Java
// SDKs cut their read timeout: an attempt never outlasts the call's retry deadline.
func WithTimeout(d time.Duration) Option { return func(c *Client) { c.timeout = &d } }

// WithMaxAttempts bounds the attempts of one call (default 8; redirects to the leader do not count).
func WithMaxAttempts(n int) Option { return func(c *Client) { c.maxAttempts = n } }

// WithRetryDeadline bounds the time one call spends, retries included (default 30 s; it must be
// positive). An attempt's timeout is cut to what is left of it. The first attempt always goes; a
// retry goes only while at least MinAttempt (100 ms) of it is left (the backoff before it ends that
// long before the deadline), so a deadline under MinAttempt allows no retry.
func WithRetryDeadline(d time.Duration) Option { return func(c *Client) { c.retryDeadline = d } }

// WithBackoff sets the backoff: attempt n waits a random time in [0, min(max, base*2^(n-1))]
// (defaults 50 ms and 2 s), cut to end MinAttempt before the retry deadline.
func WithBackoff(base, max time.Duration) Option {
	return func(c *Client) { c.backoffBase, c.backoffMax = base, max }
}

// DefaultMaxResponseBytes bounds the body of one answer the client reads (WithMaxResponseBytes).
//
// The largest answer of a node at its default limits is a page of 1,000 tasks
// (ListTasks, or a batch create's echo) each holding the largest payload, 64 KiB encoded
// (namespaces.max_payload_bytes), and at most ~12 KiB of other fields (three URLs of up to 2,048
// characters, the 512-byte response head JSON-escaped, the cron expression, the keys): ~76 MiB.
// 256 MiB leaves room for a node whose payload bound was raised to ~240 KiB; /metrics, the
// wheel PNG and every other answer are far smaller.
const DefaultMaxResponseBytes = 256 << 20

// WithMaxResponseBytes bounds the body of one answer (default DefaultMaxResponseBytes); a 2xx
// answer beyond it is an error. Raise it for nodes whose max_payload_bytes allow larger pages.
func WithMaxResponseBytes(n int64) Option { return func(c *Client) { c.maxAnswer = n } }

// NewClient makes a client of the nodes at addrs (HTTP base URLs, any subset of the cluster: the
// leader is discovered).
func NewClient(addrs []string, opts ...Option) (*Client, error) {
	if len(addrs) == 0 {
		return nil, errors.New("molens: give at least one node address")
	}
	c := &Client{
		maxAttempts:   8,
		retryDeadline: 30 * time.Second,
		backoffBase:   50 * time.Millisecond,
		backoffMax:    2 * time.Second,
		maxAnswer:     DefaultMaxResponseBytes,
	}
	for _, a := range addrs {
		b, err := baseURL(a)
		if err != nil {
			return nil, err
		}
		c.addrs = append(c.addrs, b)
	}
	c.target = c.addrs[0]
	for _, o := range opts {
		o(c)
	}
	if c.namespace != "" && !namespaceName.MatchString(c.namespace) {
		return nil, fmt.Errorf("molens: namespace must match %s, got %q", namespaceName, c.namespace)
	}
	if c.maxAnswer < 1 {
		return nil, fmt.Errorf("molens: WithMaxResponseBytes must be at least 1, got %d", c.maxAnswer)
	}
	if c.retryDeadline <= 0 { // every attempt would be cut to nothing
		return nil, fmt.Errorf("molens: WithRetryDeadline must be positive, got %v", c.retryDeadline)
	}
	for _, r := range c.token {
		if r <= ' ' || r > '~' { // printable ASCII: no header injection, no mangling
			return nil, errors.New("molens: the token must be printable ASCII without spaces")
		}
	}
	var hc http.Client
	if c.given != nil {
		hc = *c.given
	} else {
		hc = http.Client{
			Timeout: 10 * time.Second,
			Transport: &http.Transport{
				Proxy:               nil, // nodes are addressed directly
				DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
				MaxIdleConns:        64,
				MaxIdleConnsPerHost: 16,
				IdleConnTimeout:     90 * time.Second,
			},
		}
	}
	if c.timeout != nil {
		hc.Timeout = *c.timeout
	}
	// the attempt's context bounds it instead (exchange), cut to what is left of the retry deadline
	c.attemptTimeout, hc.Timeout = hc.Timeout, 0
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	_, isTransport := hc.Transport.(*http.Transport)
	c.stock = hc.Transport == nil || isTransport
	c.hc = &hc
	return c, nil
}

// Close releases idle connections.
func (c *Client) Close() error {
	c.hc.CloseIdleConnections()
	return nil
}

// NewIdempotencyKey is 32 hex digits: the wall-clock ms (48 bits) then 80 random bits, like the
// Python SDK's. Keys that sort by time keep the server's idempotency index writes local; the random
// bits keep keys unique across clients and within a millisecond.
func NewIdempotencyKey() string {
	var r [10]byte
	if _, err := rand.Read(r[:]); err != nil {
		panic("molens: crypto/rand failed: " + err.Error())
	}
	return fmt.Sprintf("%012x%s", time.Now().UnixMilli()&0xffffffffffff, hex.EncodeToString(r[:]))
}

// keyed is a copy of r with an idempotency key, and the client's namespace when r names none.
func (c *Client) keyed(r *TaskRequest) *TaskRequest {
	cp := *r
	if cp.IdempotencyKey == nil {
		k := NewIdempotencyKey()
		cp.IdempotencyKey = &k
	}
	if cp.Namespace == "" {
		cp.Namespace = c.namespace
	}
	return &cp
}

// ns is the namespace a call acts in: its own, else the client's ("": the server decides).
func (c *Client) ns(given string) string {
	if given != "" {
		return given
	}
	return c.namespace
}

// ------------------------------------------------------------------------------------------ tasks

// CreateTask creates one task and returns it. An idempotency key is added when r has none (r is
// not modified), so retries never create a duplicate; when the key matched an existing task, that
// task is returned. An *OutcomeUnknownError carries the key in IdempotencyKeys.
func (c *Client) CreateTask(ctx context.Context, r *TaskRequest) (*Task, error) {
	var t Task
	body := c.keyed(r)
	if err := c.do(ctx, "POST", "/api/v1/tasks", nil, body, true, &t); err != nil {
		return nil, withKeys(err, []*TaskRequest{body})
	}
	return &t, nil
}

// withKeys is err with the idempotency keys of bodies when it is an *OutcomeUnknownError.
func withKeys(err error, bodies []*TaskRequest) error {
	var ou *OutcomeUnknownError
	if !errors.As(err, &ou) {
		return err
	}
	keys := make([]string, len(bodies))
	for i, b := range bodies {
		keys[i] = *b.IdempotencyKey
	}
	ou.IdempotencyKeys = keys
	return err
}

// CreateTasks creates tasks in batches of at most 1,000 (each one replicated entry) and returns them in
// order. On an error the tasks of earlier batches are returned with it, so the failing batch starts
// at rs[len(tasks)], and later batches are not sent. A batch holding an invalid task is rejected
// whole: the *APIError has ItemErrors by index within that batch. A batch applied without some of
// its items (their namespace deleted meanwhile) is a *BatchPartlyCreatedError: its Tasks has every
// task created, this batch's too, at its position in rs, and its ItemErrors are by index in rs. An
// *OutcomeUnknownError carries the keys of the failing batch in IdempotencyKeys, in order, the ones
// the client made up included: IdempotencyKeys[k] is the key of rs[len(tasks)+k]; call again with
// the tasks from there on, given those keys, to create each once.
func (c *Client) CreateTasks(ctx context.Context, rs []*TaskRequest) ([]*Task, error) {
	return c.createAll(ctx, rs, false)
}

// CreateTaskIDs is CreateTasks answered with the tasks' ids alone ("Prefer: return=minimal"): the
// server spares the echo of every task and the client the decoding of it. Same batches, keys and
// errors as CreateTasks; the ids of earlier batches are returned with an error (a
// *BatchPartlyCreatedError's Tasks hold only their ID).
func (c *Client) CreateTaskIDs(ctx context.Context, rs []*TaskRequest) ([]string, error) {
	made, err := c.createAll(ctx, rs, true)
	ids := make([]string, len(made))
	for i, t := range made {
		ids[i] = t.ID
	}
	return ids, err
}

// createAll sends rs, keyed, in batches of at most 1,000 (createBatchAs); the tasks of the batches
// before a failing one are returned with its error. A batch answered with per-item errors stops it:
// a *BatchPartlyCreatedError with every task created so far, at its position in rs.
func (c *Client) createAll(ctx context.Context, rs []*TaskRequest, minimal bool) ([]*Task, error) {
	bodies := make([]*TaskRequest, len(rs))
	for i, r := range rs {
		bodies[i] = c.keyed(r)
	}
	out := make([]*Task, 0, len(rs))
	for i := 0; i < len(bodies); i += 1000 {
		j := i + 1000
		if j > len(bodies) {
			j = len(bodies)
		}
		items, errs, err := c.createBatchAs(ctx, bodies[i:j], minimal)
		if err != nil {
			return out, err
		}
		var refused map[int]*APIError
		for k, e := range errs {
			if e != nil {
				if refused == nil {
					refused = map[int]*APIError{}
				}
				refused[i+k] = e
			}
		}
		if refused != nil {
			tasks := make([]*Task, len(bodies))
			copy(tasks, out)
			for k, t := range items {
				if errs[k] == nil {
					tasks[i+k] = t
				}
			}
			keys := make([]string, len(bodies))
			for k, b := range bodies {
				keys[k] = *b.IdempotencyKey
			}
			return out, &BatchPartlyCreatedError{Tasks: tasks, ItemErrors: refused, IdempotencyKeys: keys}
		}
		out = append(out, items...)
	}
	return out, nil
}

// createBatch sends one batch; per item the task, or the error the state machine gave it.
func (c *Client) createBatch(ctx context.Context, bodies []*TaskRequest) ([]*Task, []*APIError, error) {
	var resp batchResponse
	if err := c.do(ctx, "POST", "/api/v1/tasks/batch", nil, batchRequest{Tasks: bodies}, true, &resp); err != nil {
		return nil, nil, withKeys(err, bodies)
	}
	errs, err := batchErrors(len(bodies), len(resp.Items), func(i int) bool { return resp.Items[i] == nil }, resp.Errors)
	if err != nil {
		return nil, nil, err
	}
	return resp.Items, errs, nil
}

// createBatchAs is createBatch, or with minimal the same batch sent with "Prefer: return=minimal"
// and answered per item with a task holding only its ID (or the error).
func (c *Client) createBatchAs(ctx context.Context, bodies []*TaskRequest, minimal bool) ([]*Task, []*APIError, error) {
	if !minimal {
		return c.createBatch(ctx, bodies)
	}
	var resp batchIDsResponse
	prefer := http.Header{"Prefer": {"return=minimal"}}
	if err := c.doWith(ctx, "POST", "/api/v1/tasks/batch", nil, batchRequest{Tasks: bodies}, true, &resp, prefer); err != nil {
		return nil, nil, withKeys(err, bodies)
	}
	errs, err := batchErrors(len(bodies), len(resp.Items), func(i int) bool { return resp.Items[i] == nil }, resp.Errors)
	if err != nil {
		return nil, nil, err
	}
	tasks := make([]*Task, len(resp.Items))
	for i, it := range resp.Items {
		if it != nil && errs[i] == nil {
			tasks[i] = &Task{ID: it.ID}
		}
	}
	return tasks, errs, nil
}

// batchErrors: per item of a batch of n, the error the answer lists for it (its status by its code:
// a 404 for not_found), or a 500 for an item answered with neither a task nor an error
// (missing(i)); an error when it answered another count.
func batchErrors(n, answered int, missing func(int) bool, listed []batchItemError) ([]*APIError, error) {
	errs := make([]*APIError, n)
	for _, e := range listed {
		if e.Index >= 0 && e.Index < len(errs) {
			errs[e.Index] = e.Error.itemError()
		}
	}
	if answered != n {
		return nil, fmt.Errorf("molens: batch of %d answered %d items", n, answered)
	}
	for i := range errs {
		if errs[i] == nil && missing(i) {
			errs[i] = &APIError{Status: 500, Code: "internal", Message: "the server returned no task for this item"}
		}
	}
	return errs, nil
}

// GetTask returns the task (an *APIError with Status 404 when there is none).
func (c *Client) GetTask(ctx context.Context, id string) (*Task, error) {
	return c.taskCall(ctx, "GET", "/api/v1/tasks/"+url.PathEscape(id), true)
}

// DeleteTask deletes the task and its history; returns it as it was.
func (c *Client) DeleteTask(ctx context.Context, id string) (*Task, error) {
	return c.taskCall(ctx, "DELETE", "/api/v1/tasks/"+url.PathEscape(id), true)
}

// PauseTask takes a pending, firing or awaiting_ack task off the schedule (409 otherwise).
func (c *Client) PauseTask(ctx context.Context, id string) (*Task, error) {
	return c.taskCall(ctx, "POST", "/api/v1/tasks/"+url.PathEscape(id)+"/pause", true)
}

// ResumeTask puts a paused (or inactive periodic) task back on the schedule; a periodic task
// drops what it missed while paused (ResumeFromNow).
func (c *Client) ResumeTask(ctx context.Context, id string) (*Task, error) {
	return c.taskCall(ctx, "POST", "/api/v1/tasks/"+url.PathEscape(id)+"/resume", true)
}

// ResumeTaskFrom is ResumeTask with the resume_from body: ResumeFromSchedule takes the periodic
// task up at the instant it was waiting for and applies its Catchup to what it missed.
func (c *Client) ResumeTaskFrom(ctx context.Context, id string, from ResumeFrom) (*Task, error) {
	var t Task
	body := map[string]ResumeFrom{"resume_from": from}
	if err := c.do(ctx, "POST", "/api/v1/tasks/"+url.PathEscape(id)+"/resume", nil, body, false, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// TriggerTask runs the task's upcoming occurrence now.
func (c *Client) TriggerTask(ctx context.Context, id string) (*Task, error) {
	return c.taskCall(ctx, "POST", "/api/v1/tasks/"+url.PathEscape(id)+"/trigger", false)
}

// BackfillTask fires the periodic task's occurrences scheduled in [start, end) (epoch ms, end not
// after now) now, oldest first, each its own occurrence, then resumes its schedule (at most
// 10,000; docs/api.md#backfill). It is not retried after an unknown outcome: a second backfill
// would fire the range again, or be refused while the first runs.
func (c *Client) BackfillTask(ctx context.Context, id string, start, end int64) (*Backfill, error) {
	var b Backfill
	body := map[string]int64{"start": start, "end": end}
	if err := c.do(ctx, "POST", "/api/v1/tasks/"+url.PathEscape(id)+"/backfill", nil, body, false, &b); err != nil {
		return nil, err
	}
	return &b, nil
}

// UpdateTask changes the task's definition in place (PATCH, a JSON merge patch): a field given
// replaces the stored one, a nil value resets it to its default, a field left out is kept. With
// ifVersion > 0 the change applies only while the task is still at that version (Task.Version);
// otherwise the error satisfies IsPreconditionFailed and nothing changed. Without it the change is
// merged into the current version (and retried safely after a lost answer).
func (c *Client) UpdateTask(ctx context.Context, id string, patch map[string]interface{}, ifVersion int64) (*Task, error) {
	var h http.Header
	if ifVersion > 0 {
		h = http.Header{"If-Match": {fmt.Sprintf("%q", fmt.Sprint(ifVersion))}}
	}
	var t Task
	if err := c.doWith(ctx, "PATCH", "/api/v1/tasks/"+url.PathEscape(id), nil, patch, ifVersion == 0, &t, h); err != nil {
		return nil, err
	}
	return &t, nil
}

func (c *Client) taskCall(ctx context.Context, method, path string, safe bool) (*Task, error) {
	var t Task
	if err := c.do(ctx, method, path, nil, nil, safe, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// ListTasks returns one page of tasks in creation order. A page can hold fewer than Limit items
// while NextCursor is set (one request examines a bounded number of tasks): follow it until nil,
// or use EachTask.
func (c *Client) ListTasks(ctx context.Context, o ListOptions) (*TaskList, error) {
	q := url.Values{}
	if len(o.Status) > 0 {
		q.Set("status", strings.Join(o.Status, ","))
	}
	setStr(q, "type", o.Type)
	setStr(q, "scene", o.Scene)
	setStr(q, "url", o.URL)
	setStr(q, "namespace", c.ns(o.Namespace))
	setInt(q, "limit", int64(o.Limit))
	setStr(q, "cursor", o.Cursor)
	var page TaskList
	if err := c.do(ctx, "GET", "/api/v1/tasks", q, nil, true, &page); err != nil {
		return nil, err
	}
	return &page, nil
}

// EachTask calls fn for every matching task in creation order, following cursors; it stops at the
// first error fn returns and returns it.
func (c *Client) EachTask(ctx context.Context, o ListOptions, fn func(*Task) error) error {
	return eachPage(o.Cursor, func(cursor string) ([]Task, *string, error) {
		o.Cursor = cursor
		page, err := c.ListTasks(ctx, o)
		if err != nil {
			return nil, nil, err
		}
		return page.Items, page.NextCursor, nil
	}, fn)
}

// eachPage calls fn for every item of every page that page returns, from cursor on, following
// next cursors until there is none; it stops at the first error.
func eachPage[T any](cursor string, page func(cursor string) ([]T, *string, error), fn func(*T) error) error {
	for {
		items, next, err := page(cursor)
		if err != nil {
			return err
		}
		for i := range items {
			if err := fn(&items[i]); err != nil {
				return err
			}
		}
		if next == nil || *next == "" {
			return nil
		}
		cursor = *next
	}
}

// ------------------------------------------------------------------------------------- executions

// TaskExecutions returns one page of a task's executions, newest first.
func (c *Client) TaskExecutions(ctx context.Context, taskID string, o ExecutionOptions) (*ExecutionList, error) {
	o.TaskID, o.Namespace = "", ""
	return c.executions(ctx, "/api/v1/tasks/"+url.PathEscape(taskID)+"/executions", o, false)
}

// Executions returns one page of every execution on the answering node's replica, newest first
// (only one task's with TaskID).
func (c *Client) Executions(ctx context.Context, o ExecutionOptions) (*ExecutionList, error) {
	return c.executions(ctx, "/api/v1/executions", o, true)
}

// EachExecution calls fn for every matching execution (of o.TaskID's task when set), following cursors.
func (c *Client) EachExecution(ctx context.Context, o ExecutionOptions, fn func(*Execution) error) error {
	return eachPage(o.Cursor, func(cursor string) ([]Execution, *string, error) {
		o.Cursor = cursor
		page, err := c.Executions(ctx, o)
		if err != nil {
			return nil, nil, err
		}
		return page.Items, page.NextCursor, nil
	}, fn)
}

// executions is a page of executions; namespaced: of the call's (else the client's) namespace
// (a task's executions are its own namespace's).
func (c *Client) executions(ctx context.Context, path string, o ExecutionOptions, namespaced bool) (*ExecutionList, error) {
	q := url.Values{}
	setStr(q, "task_id", o.TaskID)
	if namespaced {
		setStr(q, "namespace", c.ns(o.Namespace))
	}
	setStr(q, "result", o.Result)
	setInt(q, "since", o.Since)
	setInt(q, "until", o.Until)
	setInt(q, "limit", int64(o.Limit))
	setStr(q, "cursor", o.Cursor)
	var page ExecutionList
	if err := c.do(ctx, "GET", path, q, nil, true, &page); err != nil {
		return nil, err
	}
	return &page, nil
}

// ---------------------------------------------------------------------------- cluster and stats

// ClusterStatus is the answering node's view of the cluster.
func (c *Client) ClusterStatus(ctx context.Context) (*ClusterStatus, error) {
	return getJSON[ClusterStatus](ctx, c, "/api/v1/cluster/status", nil)
}

// ClusterLeader is who leads, as the answering node sees it.
func (c *Client) ClusterLeader(ctx context.Context) (*LeaderInfo, error) {
	return getJSON[LeaderInfo](ctx, c, "/api/v1/cluster/leader", nil)
}

// ClusterStats is every member's Stats, leader first.
func (c *Client) ClusterStats(ctx context.Context) (*ClusterStats, error) {
	return getJSON[ClusterStats](ctx, c, "/api/v1/cluster/stats", nil)
}

// Stats is one node's statistics and task counts.
func (c *Client) Stats(ctx context.Context, o StatsOptions) (*Stats, error) {
	q := url.Values{}
	setStr(q, "node_id", o.NodeID)
	if o.Local {
		q.Set("local", "1")
	}
	return getJSON[Stats](ctx, c, "/api/v1/stats", q)
}

// URLStats is callback latency per URL over a window.
func (c *Client) URLStats(ctx context.Context, o URLStatsOptions) (*URLStatsList, error) {
	q := url.Values{}
	setInt(q, "since", o.Since)
	setInt(q, "until", o.Until)
	setStr(q, "url", o.URL)
	setInt(q, "bucket_ms", o.BucketMs)
	setInt(q, "limit", int64(o.Limit))
	return getJSON[URLStatsList](ctx, c, "/api/v1/stats/urls", q)
}

// WheelDistribution is how the leader's time wheel is filled.
func (c *Client) WheelDistribution(ctx context.Context) (*WheelDistribution, error) {
	return getJSON[WheelDistribution](ctx, c, "/api/v1/timewheel/distribution", nil)
}

// WheelDistributionPNG is the same as a PNG heatmap (level < 0: every level; width 0: default).
func (c *Client) WheelDistributionPNG(ctx context.Context, level, width int) ([]byte, error) {
	q := url.Values{}
	if level >= 0 {
		q.Set("level", strconv.Itoa(level))
	}
	setInt(q, "width", int64(width))
	var raw []byte
	if err := c.do(ctx, "GET", "/api/v1/timewheel/distribution.png", q, nil, true, &raw); err != nil {
		return nil, err
	}
	return raw, nil
}

// SchedulePreview is the next fire times of a schedule, validated like a create.
func (c *Client) SchedulePreview(ctx context.Context, p PreviewRequest) (*SchedulePreview, error) {
	q := url.Values{}
	setStr(q, "type", p.Type)
	setStr(q, "cron_expr", p.CronExpr)
	setStr(q, "timezone", p.Timezone)
	setInt(q, "interval_ms", p.IntervalMs)
	setInt(q, "run_at", p.RunAt)
	setInt(q, "count", int64(p.Count))
	setInt(q, "after", p.After)
	return getJSON[SchedulePreview](ctx, c, "/api/v1/schedule/preview", q)
}

// Metrics is the answering node's Prometheus text.
func (c *Client) Metrics(ctx context.Context) (string, error) {
	var raw []byte
	if err := c.do(ctx, "GET", "/metrics", nil, nil, true, &raw); err != nil {
		return "", err
	}
	return string(raw), nil
}

// Healthz is liveness of the answering node.
func (c *Client) Healthz(ctx context.Context) (*Health, error) {
	return getJSON[Health](ctx, c, "/healthz", nil)
}

// Readyz is readiness (a leader is known) of the answering node; 503 is retried like any call.
func (c *Client) Readyz(ctx context.Context) (*Ready, error) {
	return getJSON[Ready](ctx, c, "/readyz", nil)
}

// -------------------------------------------------------------------------------------- transport

func getJSON[T any](ctx context.Context, c *Client, path string, q url.Values) (*T, error) {
	var v T
	if err := c.do(ctx, "GET", path, q, nil, true, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// listItems is the items of a list the API answers whole ({"items": [...], "next_cursor": null}).
func listItems[T any](ctx context.Context, c *Client, path string) ([]T, error) {
	l, err := getJSON[struct {
		Items []T `json:"items"`
	}](ctx, c, path, nil)
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

func setStr(q url.Values, k, v string) {
	if v != "" {
		q.Set(k, v)
	}
}

func setInt(q url.Values, k string, v int64) {
	if v != 0 {
		q.Set(k, strconv.FormatInt(v, 10))
	}
}

func baseURL(raw string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("molens: %q is not an http(s) URL", shownURL(raw))
	}
	return u.Scheme + "://" + u.Host, nil
}

// userinfo is a URL's "user:password@", which an error never echoes.
var userinfo = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9+.-]*://)[^/?#]*@`)

// shownURL is raw as an error may quote it: its user info (a password) as ***, at most 200 bytes.
func shownURL(raw string) string {
	s := userinfo.ReplaceAllString(raw, "${1}***@")
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}

func (c *Client) currentTarget() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.target
}

func (c *Client) setTarget(t string) {
	c.mu.Lock()
	c.target = t
	c.mu.Unlock()
}

func (c *Client) nextNode(failed string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := -1
	for k, a := range c.addrs {
		if a == failed {
			i = k
		}
	}
	c.target = c.addrs[(i+1)%len(c.addrs)]
	return c.target
}

// MinAttempt is the least time a retry is sent with: a retry goes only while at least this much of
// the retry deadline is left, and the backoff before it ends this long before the deadline (as in
// the Python and Java SDKs). An attempt cut to a few milliseconds could not get an answer, and a
// write sent so could turn a clean failure (every node answered 503, nothing applied) into an
// unknown outcome. The first attempt always goes, however short the retry deadline.
const MinAttempt = 100 * time.Millisecond

// minAttempt is MinAttempt, a variable so that the tests can widen it (a loaded machine's timers
// wake late; a wider window keeps their checks about the rule, not about the scheduler).
var minAttempt = MinAttempt

// backoff waits a full-jitter delay for attempt n (at least floor), within ctx and ending at least
// MinAttempt before the deadline, so that the retry after it has MinAttempt (see spent in doWith).
func (c *Client) backoff(ctx context.Context, n int, floor time.Duration, deadline time.Time) error {
	ceil := c.backoffBase << uint(n-1)
	if ceil > c.backoffMax || ceil <= 0 {
		ceil = c.backoffMax
	}
	var d time.Duration
	if ceil > 0 {
		r, err := rand.Int(rand.Reader, big.NewInt(int64(ceil)+1))
		if err == nil {
			d = time.Duration(r.Int64())
		}
	}
	if d < floor {
		d = floor
	}
	if left := time.Until(deadline) - minAttempt; d > left {
		d = left // left < 0 (the caller checked spent just before): no wait
	}
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// notSent: the request certainly never left the client, so sending it again cannot apply it twice.
//
// Sure are: a failed dial (no connection); a failed check of the node's certificate (the TLS
// handshake comes before any byte of a request, and Go's TLS sends no early data); and, with
// net/http's own Transport, any error before the transport reported a connection (gotConn):
// that Transport reports GotConn before it writes on a connection (HTTP/1 in getConn, HTTP/2
// before its RoundTrip on the client connection), so a TLS handshake that failed or timed out,
// or a header value it refuses, happened with no connection to write on. A RoundTripper of the
// caller's (WithHTTPClient) may never report a connection, so only the first two count for it.
func notSent(err error, gotConn, stockTransport bool) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var unknownCA x509.UnknownAuthorityError
	var badHost x509.HostnameError
	var badCert x509.CertificateInvalidError
	if errors.As(err, &unknownCA) || errors.As(err, &badHost) || errors.As(err, &badCert) {
		return true
	}
	return stockTransport && !gotConn
}

// maxRedirects is how many consecutive redirects are followed before the client takes them for a
// loop (nodes naming each other as leader while an election settles) and backs off before asking
// again, as after a failed attempt.
const maxRedirects = 5

// do sends with redirects, retries and backoff and decodes a 2xx answer into out (a *[]byte takes
// the raw body). safe: retrying after an unknown outcome cannot do harm (reads, keyed creates).
func (c *Client) do(ctx context.Context, method, path string, q url.Values, body interface{}, safe bool, out interface{}) error {
	return c.doWith(ctx, method, path, q, body, safe, out, nil)
}

// retryAfter is the answer's Retry-After in seconds (0 when it has none or it is a date).
func retryAfter(resp *http.Response) time.Duration {
	if s, err := strconv.Atoi(strings.TrimSpace(resp.Header.Get("Retry-After"))); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	return 0
}

// exchange is one attempt: it sends req and reads the answer (resp's Body read into raw and
// closed; tooBig: raw is the first maxAnswer bytes of a longer body) within req's context and the
// attempt timeout cut to what is left of the retry deadline. A retry is sent only with at least
// MinAttempt left (spent in doWith, and backoff ends that long before the deadline); a deadline
// already spent (the first attempt of a call whose ctx stalled it, say, or a retry whose backoff
// woke late) still gets a millisecond, as in the Python and Java SDKs.
// gotConn: net/http's Transport had a connection for it (see notSent).
func (c *Client) exchange(req *http.Request, deadline time.Time) (resp *http.Response, raw []byte, tooBig, gotConn bool, err error) {
	within := time.Until(deadline)
	if c.attemptTimeout > 0 && c.attemptTimeout < within {
		within = c.attemptTimeout
	}
	if within < time.Millisecond {
		within = time.Millisecond
	}
	ctx := req.Context()
	actx, cancel := context.WithTimeout(ctx, within)
	defer cancel() // only once the body is read: the attempt's time bounds the reading too
	var got int32
	trace := &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { atomic.StoreInt32(&got, 1) }}
	resp, err = c.hc.Do(req.WithContext(httptrace.WithClientTrace(actx, trace)))
	if err == nil {
		raw, err = io.ReadAll(io.LimitReader(resp.Body, c.maxAnswer+1))
		resp.Body.Close()
		if int64(len(raw)) > c.maxAnswer {
			raw, tooBig = raw[:c.maxAnswer], true
		}
	}
	if err != nil && ctx.Err() == nil && actx.Err() != nil { // the attempt's time ran out, not the caller's
		err = fmt.Errorf("no answer within %v (the attempt's timeout, cut to the retry deadline): %w", within, err)
	}
	return resp, raw, tooBig, atomic.LoadInt32(&got) == 1, err
}

// doWith is do with extra request headers (If-Match, Prefer).
func (c *Client) doWith(ctx context.Context, method, path string, q url.Values, body interface{}, safe bool, out interface{}, extra http.Header) error {
	var data []byte
	if body != nil {
		var err error
		if data, err = json.Marshal(body); err != nil {
			return fmt.Errorf("molens: encoding the request: %w", err)
		}
	}
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	op := method + " " + path
	deadline := time.Now().Add(c.retryDeadline)
	target := c.currentTarget()
	attempt, redirects := 0, 0
	unknown := false // an earlier attempt may have been applied
	var lastErr error
	var answered *APIError // a node's last 503/507: the cluster is there, not serving
	// giveUp is e, or an unknown outcome when an earlier attempt may have been applied
	giveUp := func(e error) error {
		if unknown {
			return &OutcomeUnknownError{Op: op, Err: e}
		}
		return e
	}
	// spent: no retry may follow (every place that would retry asks it first). A retry goes only
	// with at least MinAttempt of the deadline left: one cut to less could not get an answer, and a
	// write sent so could only turn a clean failure into an unknown outcome. The first attempt
	// always goes; a redirect to the leader is part of the attempt it answered, not a retry.
	spent := func() bool { return attempt >= c.maxAttempts || time.Until(deadline) < minAttempt }
	for {
		attempt++
		if err := ctx.Err(); err != nil {
			return giveUp(err) // after a lost answer the call ends in an unknown outcome, whatever ends it
		}
		var rd io.Reader
		if data != nil {
			rd = bytes.NewReader(data)
		}
		req, err := http.NewRequestWithContext(ctx, method, target+path, rd)
		if err != nil {
			return err
		}
		req.Header.Set("Accept", "application/json")
		for k, vs := range extra {
			for _, v := range vs {
				req.Header.Add(k, v)
			}
		}
		if data != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		resp, raw, tooBig, gotConn, err := c.exchange(req, deadline)
		var proxied *APIError // a proxy's 502/504: no node answers so; the node behind it did not answer
		if err == nil && (resp.StatusCode == 502 || resp.StatusCode == 504) {
			proxied = parseError(resp.StatusCode, raw)
			err = proxied // as a lost answer: the request may have reached the node
		}
		if err != nil {
			unknown = unknown || ((proxied != nil || !notSent(err, gotConn, c.stock)) && method != "GET")
			if ctx.Err() != nil { // a write cancelled once it may have been sent may have been applied
				return giveUp(ctx.Err())
			}
			lastErr = err
			if unknown && !safe { // sending it again could apply it twice (a backfill fires twice)
				return &OutcomeUnknownError{Op: op, Err: err}
			}
			if spent() {
				if unknown { // a keyed create: sent, maybe applied; the same key finds out
					return &OutcomeUnknownError{Op: op, Err: err}
				}
				if proxied != nil { // the last answer was the proxy's: say that, not "unreachable"
					return proxied
				}
				if answered != nil { // some node answered "no leader": say that, not "unreachable"
					return answered
				}
				return &ConnectionError{Op: op, Attempts: attempt, Err: err}
			}
			target = c.nextNode(target)
			redirects = 0 // loop detection counts consecutive redirects only (a dead leader is not a loop)
			if err := c.backoff(ctx, attempt, 0, deadline); err != nil {
				return giveUp(err)
			}
			continue
		}
		status := resp.StatusCode
		if status == 307 || status == 308 {
			next := ""
			if l := resp.Header.Get("X-Molens-Leader"); l != "" {
				next, _ = baseURL(l)
			}
			if next == "" {
				next, _ = baseURL(resp.Header.Get("Location"))
			}
			if next == "" {
				return giveUp(&APIError{Status: status, Code: "redirect", Message: fmt.Sprintf("%s: bad redirect to %q", op, shownURL(resp.Header.Get("Location")))})
			}
			if strings.HasPrefix(target, "https://") && strings.HasPrefix(next, "http://") {
				// the bearer token would go unencrypted (a node behind a TLS proxy names its plain
				// address): ask the next configured node instead, as after a failed attempt
				if len(c.addrs) == 1 || spent() {
					return giveUp(&APIError{Status: status, Code: "redirect", Message: fmt.Sprintf(
						"%s: the leader's address %s is plain http; not following it from https (give the client every node's https URL)", op, next)})
				}
				target = c.nextNode(target)
				if err := c.backoff(ctx, attempt, 0, deadline); err != nil {
					return giveUp(err)
				}
				continue
			}
			if redirects >= maxRedirects {
				if spent() {
					return giveUp(&APIError{Status: status, Code: "redirect", Message: fmt.Sprintf("%s: looping redirect to %q", op, next)})
				}
				redirects = 0
				if err := c.backoff(ctx, attempt, 0, deadline); err != nil {
					return giveUp(err)
				}
				continue
			}
			redirects++
			attempt-- // following the leader is not a failure
			target = next
			c.setTarget(target)
			continue
		}
		if status >= 300 && status < 400 { // not a node's answer: a proxy's or another server's redirect
			loc := shownURL(resp.Header.Get("Location"))
			return giveUp(&APIError{Status: status, Code: "http_error", Message: fmt.Sprintf("%s: unexpected redirect %d to %q; is this a molens node?", op, status, loc)})
		}
		if status == 503 || status == 507 { // 507: the leader's disk is full, nothing applied; it recovers by itself
			e := parseError(status, raw)
			e.RetryAfter = retryAfter(resp)
			answered = e
			unknown = unknown || e.Code == "outcome_unknown"
			if unknown && !safe {
				return &OutcomeUnknownError{Op: op, Err: e}
			}
			if spent() {
				return giveUp(e)
			}
			if e.Code == "no_leader" && len(c.addrs) > 1 {
				target = c.nextNode(target)
			}
			var floor time.Duration
			if attempt > 2 {
				floor = e.RetryAfter
			}
			if err := c.backoff(ctx, attempt, floor, deadline); err != nil {
				return giveUp(err)
			}
			continue
		}
		if status >= 400 {
			e := parseError(status, raw)
			e.RetryAfter = retryAfter(resp)
			// after a lost answer a refusal cannot tell whether the first attempt applied: a keyed
			// create's retry meets a full quota (429) even when the first one made the task
			if unknown && (status == 404 || status == 409 || status == 412 || status == 429) && method != "GET" {
				// e is in the message only: this is not the API's refusal (IsQuotaExceeded must not hold)
				return &OutcomeUnknownError{Op: op, Err: fmt.Errorf("answered %d after a lost response (%v); the first attempt may have been applied: %v", status, lastErr, e)}
			}
			return e
		}
		c.setTarget(target)
		if tooBig {
			return fmt.Errorf("molens: %s: answered %d with more than %d bytes (WithMaxResponseBytes)", op, status, c.maxAnswer)
		}
		if p, ok := out.(*[]byte); ok {
			*p = raw
			return nil
		}
		if out == nil {
			return nil
		}
		// every answer the SDK decodes is a JSON object: anything else (empty, null, HTML) is no
		// node's answer, and decoding it would hand back a zero value as if it were one
		if t := bytes.TrimLeft(raw, " \t\r\n"); len(t) == 0 || t[0] != '{' {
			return &APIError{Status: 502, Code: "http_error", Message: fmt.Sprintf("%s: answered %d with %s where a JSON object was expected", op, status, snippet(raw))}
		}
		if err := json.Unmarshal(raw, out); err != nil {
			return &APIError{Status: 502, Code: "http_error", Message: fmt.Sprintf("%s: answered %d with a body that is not the expected JSON (%v)", op, status, err)}
		}
		return nil
	}
}

// snippet is the start of an answer's body for an error message.
func snippet(raw []byte) string {
	if len(raw) == 0 {
		return "an empty body"
	}
	if len(raw) > 200 {
		raw = raw[:200]
	}
	return strconv.Quote(string(raw))
}

func parseError(status int, raw []byte) *APIError {
	var env errorEnvelope
	if err := json.Unmarshal(raw, &env); err != nil || env.Error == nil {
		msg := string(raw)
		if len(msg) > 200 {
			msg = msg[:200]
		}
		return &APIError{Status: status, Code: "http_error", Message: fmt.Sprintf("HTTP %d: %s", status, msg)}
	}
	e := env.Error.apiError(status)
	if len(env.Errors) > 0 {
		e.ItemErrors = map[int]*APIError{}
		for _, it := range env.Errors {
			e.ItemErrors[it.Index] = it.Error.itemError()
		}
	}
	return e
}
