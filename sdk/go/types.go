package molens

import "encoding/json"

// TaskRequest is the body of a create (TaskCreate in openapi.json). Nil fields are left out, so the
// server applies its defaults. Build one with NewTaskRequest and the Set methods, or as a literal.
type TaskRequest struct {
	Type           string        `json:"type"`
	CallbackURL    string        `json:"callback_url"`
	IntervalMs     *int64        `json:"interval_ms,omitempty"`
	RunAt          *int64        `json:"run_at,omitempty"`
	CronExpr       *string       `json:"cron_expr,omitempty"`
	Timezone       *string       `json:"timezone,omitempty"`
	AckURL         *string       `json:"ack_url,omitempty"`
	AckDelayMs     *int64        `json:"ack_delay_ms,omitempty"`
	Payload        interface{}   `json:"payload,omitempty"`
	Scene          *string       `json:"scene,omitempty"`
	TimeoutMs      *int64        `json:"timeout_ms,omitempty"`
	MaxRetries     *int64        `json:"max_retries,omitempty"`
	MaxFails       *int64        `json:"max_fails,omitempty"`
	Reliability    *string       `json:"reliability,omitempty"`
	IdempotencyKey *string       `json:"idempotency_key,omitempty"`
	NotifyURL      *string       `json:"notify_url,omitempty"`
	FlowKey        *string       `json:"flow_key,omitempty"`
	Retry          *RetryRequest `json:"retry,omitempty"`
	JitterMs       *int64        `json:"jitter_ms,omitempty"`
	// W3C trace context (00-<32 hex>-<16 hex>-<2 hex>) the task's callbacks, ACK probes and
	// notifications join; nil: the create request's traceparent header, if any.
	Traceparent *string `json:"traceparent,omitempty"`
	// Periodic only.
	StartAt         *int64   `json:"start_at,omitempty"`
	EndAt           *int64   `json:"end_at,omitempty"`
	MaxRuns         *int64   `json:"max_runs,omitempty"`
	Catchup         *Catchup `json:"catchup,omitempty"`
	CatchupWindowMs *int64   `json:"catchup_window_ms,omitempty"`
	Overlap         *Overlap `json:"overlap,omitempty"`
	// The task's namespace ("": the client's WithNamespace, else the server's "default").
	Namespace string `json:"namespace,omitempty"`
}

// NewTaskRequest starts a request of type "delayed" or "periodic" calling callbackURL.
func NewTaskRequest(taskType, callbackURL string) *TaskRequest {
	return &TaskRequest{Type: taskType, CallbackURL: callbackURL}
}

func (r *TaskRequest) SetIntervalMs(v int64) *TaskRequest      { r.IntervalMs = &v; return r }
func (r *TaskRequest) SetRunAt(v int64) *TaskRequest           { r.RunAt = &v; return r }
func (r *TaskRequest) SetCronExpr(v string) *TaskRequest       { r.CronExpr = &v; return r }
func (r *TaskRequest) SetTimezone(v string) *TaskRequest       { r.Timezone = &v; return r }
func (r *TaskRequest) SetAckURL(v string) *TaskRequest         { r.AckURL = &v; return r }
func (r *TaskRequest) SetAckDelayMs(v int64) *TaskRequest      { r.AckDelayMs = &v; return r }
func (r *TaskRequest) SetPayload(v interface{}) *TaskRequest   { r.Payload = v; return r }
func (r *TaskRequest) SetScene(v string) *TaskRequest          { r.Scene = &v; return r }
func (r *TaskRequest) SetNamespace(v string) *TaskRequest      { r.Namespace = v; return r }
func (r *TaskRequest) SetTimeoutMs(v int64) *TaskRequest       { r.TimeoutMs = &v; return r }
func (r *TaskRequest) SetMaxRetries(v int64) *TaskRequest      { r.MaxRetries = &v; return r }
func (r *TaskRequest) SetMaxFails(v int64) *TaskRequest        { r.MaxFails = &v; return r }
func (r *TaskRequest) SetReliability(v string) *TaskRequest    { r.Reliability = &v; return r }
func (r *TaskRequest) SetIdempotencyKey(v string) *TaskRequest { r.IdempotencyKey = &v; return r }
func (r *TaskRequest) SetNotifyURL(v string) *TaskRequest      { r.NotifyURL = &v; return r }
func (r *TaskRequest) SetFlowKey(v string) *TaskRequest        { r.FlowKey = &v; return r }
func (r *TaskRequest) SetRetry(v *RetryRequest) *TaskRequest   { r.Retry = v; return r }
func (r *TaskRequest) SetJitterMs(v int64) *TaskRequest        { r.JitterMs = &v; return r }
func (r *TaskRequest) SetStartAt(v int64) *TaskRequest         { r.StartAt = &v; return r }
func (r *TaskRequest) SetEndAt(v int64) *TaskRequest           { r.EndAt = &v; return r }
func (r *TaskRequest) SetMaxRuns(v int64) *TaskRequest         { r.MaxRuns = &v; return r }
func (r *TaskRequest) SetCatchup(v Catchup) *TaskRequest       { r.Catchup = &v; return r }
func (r *TaskRequest) SetCatchupWindowMs(v int64) *TaskRequest { r.CatchupWindowMs = &v; return r }
func (r *TaskRequest) SetOverlap(v Overlap) *TaskRequest       { r.Overlap = &v; return r }
func (r *TaskRequest) SetTraceparent(v string) *TaskRequest    { r.Traceparent = &v; return r }

// Catchup is what a periodic task does with occurrences it missed (docs/api.md, catchup).
type Catchup string

const (
	CatchupOne  Catchup = "one"  // one fire at once stands for all of them (the default)
	CatchupNone Catchup = "none" // skipped; the schedule goes on at its next instant
	CatchupAll  Catchup = "all"  // each fired, oldest first, back to CatchupWindowMs
)

// Overlap is what a periodic task does with instants that come due while an occurrence still runs.
type Overlap string

const (
	OverlapSkip      Overlap = "skip"       // not fired (the default)
	OverlapBufferOne Overlap = "buffer_one" // the first fires as soon as the occurrence ended
	OverlapAllow     Overlap = "allow"      // occurrences may run concurrently (needs a server that supports it)
)

// ResumeFrom is where ResumeTaskFrom takes a periodic task's schedule up.
type ResumeFrom string

const (
	ResumeFromNow      ResumeFrom = "now"      // drop what was missed while paused (ResumeTask)
	ResumeFromSchedule ResumeFrom = "schedule" // the instant it was waiting for; Catchup applies to the rest
)

// Backoff is how the wait before a retry grows.
type Backoff string

const (
	BackoffExponential Backoff = "exponential" // InitialMs * Factor^(n-1), at most MaxMs
	BackoffFixed       Backoff = "fixed"       // InitialMs every time
)

// RetryJitter spreads the wait before a retry.
type RetryJitter string

const (
	RetryJitterNone RetryJitter = "none"
	RetryJitterFull RetryJitter = "full" // the wait is drawn from [0, wait)
)

// RetryRequest is TaskRequest.Retry, an at_least_once task's retry policy. Nil fields take the
// node's default (scheduler.retry). In an UpdateTask patch it replaces the whole policy.
type RetryRequest struct {
	MaxRetries           *int64       `json:"max_retries,omitempty"`
	Backoff              *Backoff     `json:"backoff,omitempty"`
	InitialMs            *int64       `json:"initial_ms,omitempty"`
	Factor               *int64       `json:"factor,omitempty"`
	MaxMs                *int64       `json:"max_ms,omitempty"`
	Jitter               *RetryJitter `json:"jitter,omitempty"`
	NonRetryableStatuses []int        `json:"non_retryable_statuses,omitempty"` // 300..599; 404 always ends an occurrence
	MaxThrottleMs        *int64       `json:"max_throttle_ms,omitempty"`
}

// NewRetryRequest starts a retry policy; every field left unset takes the node's default.
func NewRetryRequest() *RetryRequest { return &RetryRequest{} }

func (r *RetryRequest) SetMaxRetries(v int64) *RetryRequest    { r.MaxRetries = &v; return r }
func (r *RetryRequest) SetBackoff(v Backoff) *RetryRequest     { r.Backoff = &v; return r }
func (r *RetryRequest) SetInitialMs(v int64) *RetryRequest     { r.InitialMs = &v; return r }
func (r *RetryRequest) SetFactor(v int64) *RetryRequest        { r.Factor = &v; return r }
func (r *RetryRequest) SetMaxMs(v int64) *RetryRequest         { r.MaxMs = &v; return r }
func (r *RetryRequest) SetJitter(v RetryJitter) *RetryRequest  { r.Jitter = &v; return r }
func (r *RetryRequest) SetMaxThrottleMs(v int64) *RetryRequest { r.MaxThrottleMs = &v; return r }
func (r *RetryRequest) SetNonRetryableStatuses(v ...int) *RetryRequest {
	r.NonRetryableStatuses = v
	return r
}

// RetryPolicy is the retry policy in force, as Task.Retry shows it.
type RetryPolicy struct {
	MaxRetries           int64       `json:"max_retries"`
	Backoff              Backoff     `json:"backoff"`
	InitialMs            int64       `json:"initial_ms"`
	Factor               int64       `json:"factor"`
	MaxMs                int64       `json:"max_ms"`
	Jitter               RetryJitter `json:"jitter"`
	NonRetryableStatuses []int       `json:"non_retryable_statuses"`
	MaxThrottleMs        int64       `json:"max_throttle_ms"`
}

// Task is a task as the API returns it (Task in openapi.json). Nullable fields are pointers.
type Task struct {
	ID                  string          `json:"id"`
	Type                string          `json:"type"`
	Status              string          `json:"status"`
	IntervalMs          *int64          `json:"interval_ms"`
	RunAt               *int64          `json:"run_at"`
	CronExpr            *string         `json:"cron_expr"`
	Timezone            string          `json:"timezone"`
	CallbackURL         string          `json:"callback_url"`
	AckURL              *string         `json:"ack_url"`
	AckDelayMs          int64           `json:"ack_delay_ms"`
	Payload             json.RawMessage `json:"payload"`
	Scene               string          `json:"scene"`
	TimeoutMs           int64           `json:"timeout_ms"`
	MaxRetries          int64           `json:"max_retries"`
	MaxFails            int64           `json:"max_fails"`
	Reliability         string          `json:"reliability"`
	IdempotencyKey      *string         `json:"idempotency_key"`
	NotifyURL           *string         `json:"notify_url"`
	FlowKey             *string         `json:"flow_key"` // nil: the callback URL's host:port
	Retry               RetryPolicy     `json:"retry"`
	JitterMs            int64           `json:"jitter_ms"`
	StartAt             *int64          `json:"start_at"`
	EndAt               *int64          `json:"end_at"`
	MaxRuns             *int64          `json:"max_runs"`
	Catchup             Catchup         `json:"catchup"`
	CatchupWindowMs     int64           `json:"catchup_window_ms"`
	Overlap             Overlap         `json:"overlap"`
	CreatedAt           int64           `json:"created_at"`
	UpdatedAt           int64           `json:"updated_at"`
	NextRunAt           *int64          `json:"next_run_at"`
	Seq                 int64           `json:"seq"`
	Attempt             int64           `json:"attempt"`
	AckAttempt          int64           `json:"ack_attempt"`
	FailCount           int64           `json:"fail_count"`
	LastOutcome         *string         `json:"last_outcome"` // success, failed, not_found, ...
	LastStatusCode      *int64          `json:"last_status_code"`
	LastExecutionResult *string         `json:"last_execution_result"` // the latest response's first 512 bytes
	LastFireAt          *int64          `json:"last_fire_at"`
	Version             int64           `json:"version"`
	Namespace           string          `json:"namespace"`
	Traceparent         *string         `json:"traceparent"` // the trace its requests join
}

// Backfill is the answer of BackfillTask: how many occurrences the backfill fires, the first and
// last one's instants (epoch ms; nil when none), and the task after the request.
type Backfill struct {
	Occurrences int    `json:"occurrences"`
	First       *int64 `json:"first"`
	Last        *int64 `json:"last"`
	Task        Task   `json:"task"`
}

// TaskList is one page of ListTasks; pass NextCursor back as Cursor until it is nil. Scanned is
// how many tasks the request examined (of those the key may see): a page can hold fewer than its
// limit while NextCursor is set.
type TaskList struct {
	Items      []Task  `json:"items"`
	NextCursor *string `json:"next_cursor"`
	Scanned    int64   `json:"scanned"`
}

// Execution is one HTTP attempt (a callback or an ACK probe).
type Execution struct {
	ID              int64   `json:"id"`
	TaskID          string  `json:"task_id"`
	FireID          string  `json:"fire_id"`
	Seq             int64   `json:"seq"`
	Attempt         int64   `json:"attempt"`
	Kind            string  `json:"kind"`
	Result          string  `json:"result"`
	StatusCode      *int64  `json:"status_code"`
	LatencyMs       *int64  `json:"latency_ms"`
	Worker          string  `json:"worker"`
	URL             string  `json:"url"`
	Scene           string  `json:"scene"`
	FiredAt         int64   `json:"fired_at"`
	FinishedAt      int64   `json:"finished_at"`
	ExecutionResult *string `json:"execution_result"` // the response's first 512 bytes
}

// ExecutionList is one page of executions, newest first.
type ExecutionList struct {
	Items      []Execution `json:"items"`
	NextCursor *string     `json:"next_cursor"`
}

// ListOptions filters ListTasks. Zero values are left out.
type ListOptions struct {
	Status []string // any of these statuses
	Type   string
	Scene  string // exact
	URL    string // case-insensitive substring of callback_url
	Limit  int    // page size 1..1000 (server default 100)
	Cursor string
	// Namespace: that namespace's tasks alone ("": the client's WithNamespace, else every one the key reads).
	Namespace string
}

// ExecutionOptions filters Executions and TaskExecutions. Zero values are left out.
type ExecutionOptions struct {
	TaskID string // Executions only: one task's
	Result string
	Since  int64 // finished_at >= Since (epoch ms)
	Until  int64 // finished_at < Until
	Limit  int
	Cursor string
	// Executions only: that namespace's alone ("": the client's WithNamespace, else every one the key reads).
	Namespace string
}

// LeaderInfo is GET /api/v1/cluster/leader.
type LeaderInfo struct {
	LeaderID  *string `json:"leader_id"`
	LeaderURL *string `json:"leader_url"`
	Term      int64   `json:"term"`
	Role      string  `json:"role"`
}

// ClusterNode is one member in ClusterStatus.
type ClusterNode struct {
	ID            string  `json:"id"`
	Role          string  `json:"role"`
	Suffrage      string  `json:"suffrage"`
	HTTPURL       *string `json:"http_url"`
	MatchIndex    *int64  `json:"match_index"`
	LastContactMs *int64  `json:"last_contact_ms"`
}

// ClusterStatus is GET /api/v1/cluster/status: this node's view of the cluster.
type ClusterStatus struct {
	NodeID       string        `json:"node_id"`
	Role         string        `json:"role"`
	Term         int64         `json:"term"`
	LeaderID     *string       `json:"leader_id"`
	LeaderURL    *string       `json:"leader_url"`
	CommitIndex  int64         `json:"commit_index"`
	AppliedIndex int64         `json:"applied_index"`
	Nodes        []ClusterNode `json:"nodes"`
}

// Stats is GET /api/v1/stats (one node). Raw holds the whole answer, keys not typed here included.
type Stats struct {
	NodeID        string                 `json:"node_id"`
	Role          string                 `json:"role"`
	LeaderID      *string                `json:"leader_id"`
	Term          int64                  `json:"term"`
	Tasks         map[string]int64       `json:"tasks"`
	TasksTotal    int64                  `json:"tasks_total"`
	TimeMs        int64                  `json:"time_ms"`
	CommitIndex   *int64                 `json:"commit_index"`
	AppliedIndex  int64                  `json:"applied_index"`
	FiresPerS     float64                `json:"fires_per_s"`
	SuccessRate   *float64               `json:"success_rate"`
	WindowMs      int64                  `json:"window_ms"`
	ByResult      map[string]int64       `json:"by_result"`
	FiresTotal    int64                  `json:"fires_total"`
	LatenessP99Ms *float64               `json:"lateness_p99_ms"`
	QPS           float64                `json:"qps"`
	RSSBytes      *int64                 `json:"rss_bytes"`
	Disk          map[string]int64       `json:"disk"`
	Cleanup       map[string]interface{} `json:"cleanup"`
	// Set in ClusterStats entries.
	Lag     *int64          `json:"lag"`
	HTTPURL *string         `json:"http_url"`
	Error   *string         `json:"error"` // the member did not answer: only NodeID, HTTPURL and Error are set
	Raw     json.RawMessage `json:"-"`
}

func (s *Stats) UnmarshalJSON(b []byte) error {
	type plain Stats
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*s = Stats(p)
	s.Raw = append(json.RawMessage(nil), b...)
	return nil
}

// StatsOptions selects the node GET /api/v1/stats answers for.
type StatsOptions struct {
	NodeID string // another member, asked over its HTTP API
	Local  bool   // never ask anyone else
}

// ClusterStats is GET /api/v1/cluster/stats: every member's Stats, leader first.
type ClusterStats struct {
	TimeMs int64   `json:"time_ms"`
	Nodes  []Stats `json:"nodes"`
}

// Percentiles of callback latency.
type TrendPoint struct {
	BucketMs int64 `json:"bucket_ms"`
	Count    int64 `json:"count"`
	P50Ms    int64 `json:"p50_ms"`
	P90Ms    int64 `json:"p90_ms"`
	P99Ms    int64 `json:"p99_ms"`
}

// URLStats is one callback URL's latency over the window of URLStatsList.
type URLStats struct {
	URL   string       `json:"url"`
	Count int64        `json:"count"`
	P50Ms int64        `json:"p50_ms"`
	P90Ms int64        `json:"p90_ms"`
	P99Ms int64        `json:"p99_ms"`
	Trend []TrendPoint `json:"trend"`
}

// URLStatsList is GET /api/v1/stats/urls.
type URLStatsList struct {
	Since    int64      `json:"since"`
	Until    int64      `json:"until"`
	BucketMs int64      `json:"bucket_ms"`
	Items    []URLStats `json:"items"`
}

// URLStatsOptions filters URLStats. Zero values are left out.
type URLStatsOptions struct {
	Since, Until int64
	URL          string
	BucketMs     int64
	Limit        int
}

// WheelLevel is one level of the leader's time wheel.
type WheelLevel struct {
	Level   int64   `json:"level"`
	StartMs int64   `json:"start_ms"`
	SpanMs  int64   `json:"span_ms"`
	Total   int64   `json:"total"`
	Counts  []int64 `json:"counts"`
}

// WheelDistribution is GET /api/v1/timewheel/distribution.
type WheelDistribution struct {
	TimeMs    int64        `json:"time_ms"`
	TickMs    int64        `json:"tick_ms"`
	WheelSize int64        `json:"wheel_size"`
	Timers    int64        `json:"timers"`
	Overflow  int64        `json:"overflow"`
	Levels    []WheelLevel `json:"levels"`
}

// PreviewRequest asks for the next fire times of a schedule (GET /api/v1/schedule/preview).
// Zero values are left out (Type defaults to periodic, Timezone to UTC, Count to 5, After to now).
type PreviewRequest struct {
	Type       string
	CronExpr   string
	Timezone   string
	IntervalMs int64
	RunAt      int64
	Count      int
	After      int64
}

// SchedulePreview lists fire times (epoch ms) and the same instants in Timezone (ISO 8601).
// Description is a periodic schedule in words by language ("en", "zh"); nil for a delayed task.
type SchedulePreview struct {
	Items       []int64           `json:"items"`
	Local       []string          `json:"local"`
	Timezone    string            `json:"timezone"`
	After       int64             `json:"after"`
	Description map[string]string `json:"description"`
}

// Health is GET /healthz.
type Health struct {
	OK     bool   `json:"ok"`
	NodeID string `json:"node_id"`
}

// Ready is GET /readyz.
type Ready struct {
	Ready    bool    `json:"ready"`
	NodeID   string  `json:"node_id"`
	Role     string  `json:"role"`
	LeaderID *string `json:"leader_id"`
}

type batchRequest struct {
	Tasks []*TaskRequest `json:"tasks"`
}

type batchItemError struct {
	Index int       `json:"index"`
	Error errorBody `json:"error"`
}

type batchResponse struct {
	Items  []*Task          `json:"items"`
	Errors []batchItemError `json:"errors"`
}

// batchIDsResponse is a batch's answer to "Prefer: return=minimal": items are {"id": ...} (or null).
type batchIDsResponse struct {
	Items []*struct {
		ID string `json:"id"`
	} `json:"items"`
	Errors []batchItemError `json:"errors"`
}
