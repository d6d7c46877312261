package molens

import (
	"context"
	"net/url"
)

// DeadLetterKind says why an occurrence failed for good.
type DeadLetterKind string

const (
	DeadLetterRetriesExhausted DeadLetterKind = "retries_exhausted" // every attempt failed
	DeadLetterNonRetryable     DeadLetterKind = "non_retryable"     // 404, a non_retryable_statuses status, or X-Molens-No-Retry
	DeadLetterAckFailed        DeadLetterKind = "ack_failed"        // the callback got a 2xx, every ACK probe failed
	DeadLetterUnknown          DeadLetterKind = "unknown"           // at_most_once, worker lost: maybe delivered
)

// DeadLetter is an occurrence that failed for good (docs/api.md#dead-letters). Its ID is
// "{FireID}.{attempt}" ("{FireID}.ack{n}" for an ACK phase).
type DeadLetter struct {
	ID           string         `json:"id"`
	TaskID       string         `json:"task_id"`
	FireID       string         `json:"fire_id"`
	Seq          int64          `json:"seq"`
	Kind         DeadLetterKind `json:"kind"`
	Attempts     int64          `json:"attempts"`
	StatusCode   *int64         `json:"status_code"`
	ResponseHead *string        `json:"response_head"` // the last response's first bytes
	At           int64          `json:"at"`            // epoch ms it was written
	Flow         string         `json:"flow"`
	Scene        string         `json:"scene"`
	URL          string         `json:"url"`
	Reliability  string         `json:"reliability"`
	ScheduledAt  int64          `json:"scheduled_at"`
	Result       string         `json:"result"`
	Namespace    string         `json:"namespace"`
	// Set by RedriveDeadLetter for an at_most_once task: the occurrence may already have reached
	// the receiver.
	Warning string `json:"warning,omitempty"`
}

// DeadLetterList is one page of ListDeadLetters.
type DeadLetterList struct {
	Items      []DeadLetter `json:"items"`
	NextCursor *string      `json:"next_cursor"`
}

// DeadLetterOptions filters ListDeadLetters. Zero values are left out.
type DeadLetterOptions struct {
	TaskID string // one task's (newest first, as every list)
	Flow   string
	Kind   DeadLetterKind
	Since  int64 // at >= Since (epoch ms)
	Until  int64 // at <= Until
	Limit  int   // page size 1..1000 (server default 100)
	Cursor string
	// Namespace: that namespace's alone ("": the client's WithNamespace, else every one the key reads).
	Namespace string
}

// DeadLetterFilter selects the dead letters of RedriveDeadLetters and DeleteDeadLetters. Zero
// values are left out; Limit caps the dead letters one request acts on (server default and
// maximum 10,000).
type DeadLetterFilter struct {
	TaskID string         `json:"task_id,omitempty"`
	Flow   string         `json:"flow,omitempty"`
	Kind   DeadLetterKind `json:"kind,omitempty"`
	Since  int64          `json:"since,omitempty"`
	Until  int64          `json:"until,omitempty"`
	Limit  int            `json:"limit,omitempty"`
	// Namespace: that namespace's alone ("": the client's WithNamespace, else every one the key may
	// change). For DeleteDeadLetters a Namespace given here is a filter; the client's is not.
	Namespace string `json:"namespace,omitempty"`
	// DeleteDeadLetters only: with no other filter, delete every dead letter (of the client's
	// namespace with WithNamespace); without it the API refuses an empty filter.
	All bool `json:"-"`
}

// BulkError is one dead letter a bulk request could not act on.
type BulkError struct {
	ID      string `json:"id"`
	Error   string `json:"error"` // the API error code (not_found: gone meanwhile)
	Message string `json:"message"`
}

// BulkInterruption is why a bulk request stopped part-way (BulkResult.Interrupted): the API error
// code (no_leader, unavailable, insufficient_storage, ...) and its message.
type BulkInterruption struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// BulkResult is the answer of RedriveDeadLetters and DeleteDeadLetters. More: some matching
// dead letters were left for another request. Interrupted (nil otherwise): a leader change, or a
// leader that stopped taking writes, cut the request short after some of its entries applied; the
// counts are what applied, More is set, and sending the request again acts on the rest.
type BulkResult struct {
	Matched    int         `json:"matched"`
	Redriven   int         `json:"redriven"`
	Deleted    int         `json:"deleted"`
	ErrorCount int         `json:"error_count"`
	Errors     []BulkError `json:"errors"` // the first 100
	More       bool        `json:"more"`
	AtMostOnce int         `json:"at_most_once"` // redriven at_most_once occurrences (with Warning)
	Warning    string      `json:"warning"`
	// Interrupted: the request stopped part-way (see above); send it again for the rest.
	Interrupted *BulkInterruption `json:"interrupted,omitempty"`
}

func deadPath(id string) string { return "/api/v1/dead-letters/" + url.PathEscape(id) }

// ListDeadLetters returns one page of dead letters, newest first. A page can hold fewer than
// Limit while NextCursor is set: follow it until nil, or use EachDeadLetter.
func (c *Client) ListDeadLetters(ctx context.Context, o DeadLetterOptions) (*DeadLetterList, error) {
	q := url.Values{}
	setStr(q, "task_id", o.TaskID)
	setStr(q, "flow", o.Flow)
	setStr(q, "kind", string(o.Kind))
	setInt(q, "since", o.Since)
	setInt(q, "until", o.Until)
	setInt(q, "limit", int64(o.Limit))
	setStr(q, "cursor", o.Cursor)
	setStr(q, "namespace", c.ns(o.Namespace))
	return getJSON[DeadLetterList](ctx, c, "/api/v1/dead-letters", q)
}

// EachDeadLetter calls fn for every matching dead letter, following cursors; it stops at the
// first error fn returns and returns it.
func (c *Client) EachDeadLetter(ctx context.Context, o DeadLetterOptions, fn func(*DeadLetter) error) error {
	return eachPage(o.Cursor, func(cursor string) ([]DeadLetter, *string, error) {
		o.Cursor = cursor
		page, err := c.ListDeadLetters(ctx, o)
		if err != nil {
			return nil, nil, err
		}
		return page.Items, page.NextCursor, nil
	}, fn)
}

// GetDeadLetter returns one dead letter (IsNotFound when there is none).
func (c *Client) GetDeadLetter(ctx context.Context, id string) (*DeadLetter, error) {
	return getJSON[DeadLetter](ctx, c, deadPath(id), nil)
}

// RedriveDeadLetter delivers the dead letter's occurrence again through the task's current
// definition (same X-Fire-ID, attempts continuing) and removes the dead letter; it returns the
// dead letter. IsNotFound when it or its task is gone, IsConflict when the task is paused (or a
// delayed task is no longer failed). Not retried after an unknown outcome.
func (c *Client) RedriveDeadLetter(ctx context.Context, id string) (*DeadLetter, error) {
	var d DeadLetter
	if err := c.do(ctx, "POST", deadPath(id)+"/redrive", nil, nil, false, &d); err != nil {
		return nil, err
	}
	return &d, nil
}

// RedriveDeadLetters redrives every dead letter matching f (at most f.Limit); send it again while
// the result has More (also when it was Interrupted). Not retried after an unknown outcome. f.All
// is not used.
func (c *Client) RedriveDeadLetters(ctx context.Context, f DeadLetterFilter) (*BulkResult, error) {
	var r BulkResult
	f.Namespace = c.ns(f.Namespace)
	if err := c.do(ctx, "POST", "/api/v1/dead-letters/redrive", nil, f, false, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// DeleteDeadLetter deletes one dead letter (IsNotFound when there is none).
func (c *Client) DeleteDeadLetter(ctx context.Context, id string) error {
	return c.do(ctx, "DELETE", deadPath(id), nil, nil, true, nil)
}

// DeleteDeadLetters deletes the dead letters matching f (at most f.Limit), or every one with
// f.All; send it again while the result has More (also when it was Interrupted). With a Limit it
// is not sent twice after a lost answer (*OutcomeUnknownError): a second request could delete up
// to Limit more; without one, deleting what still matches again does no harm, and it is retried
// (the result then counts what the retry deleted, not what the lost request did).
// An empty filter without All is refused by the API (IsBadRequest, Field "all"), also on a client
// WithNamespace: its namespace limits a filter, it is not one (so with All, every dead letter of
// that namespace is deleted). A Namespace given in f is a filter, as in the Python SDK.
func (c *Client) DeleteDeadLetters(ctx context.Context, f DeadLetterFilter) (*BulkResult, error) {
	q := url.Values{}
	setStr(q, "task_id", f.TaskID)
	setStr(q, "flow", f.Flow)
	setStr(q, "kind", string(f.Kind))
	setInt(q, "since", f.Since)
	setInt(q, "until", f.Until)
	if len(q) > 0 || f.Namespace != "" || f.All { // the server counts ?namespace= as a filter
		setStr(q, "namespace", c.ns(f.Namespace))
	}
	setInt(q, "limit", int64(f.Limit))
	if f.All {
		q.Set("all", "true")
	}
	var r BulkResult
	if err := c.do(ctx, "DELETE", "/api/v1/dead-letters", q, nil, f.Limit == 0, &r); err != nil {
		return nil, err
	}
	return &r, nil
}
