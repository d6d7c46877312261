package molens

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// APIError is an error answer of the API: {"error": {"code", "message", "field", "reason"}}.
//
//	400 invalid_argument (Field names the culprit), 401 unauthorized, 403 forbidden, 404 not_found,
//	409 illegal_transition, 412 precondition_failed (UpdateTask), 413 payload_too_large/body_too_large,
//	415 unsupported_media_type, 429 quota_exceeded (Quota names it)/too_many_requests (RetryAfter: when to try again),
//	503 no_leader/outcome_unknown/unavailable and 507 insufficient_storage (after every retry).
//
// The SDK makes some itself: Code "redirect" (Status 307/308: a redirect it would not follow, or
// one that kept looping), and Code "http_error" for an answer that is no node's: an unexpected
// 3xx, an error body that is not the API's, or a 2xx whose body is not the JSON object the call
// expects (Status 502, as in the Python SDK).
//
// A rejected batch (400, nothing created) has ItemErrors: the error of each bad item by index
// (an item naming a namespace that does not exist is a 404 not_found, IsNotFound; an invalid one a
// 400). A batch applied without some of its items is a *BatchPartlyCreatedError instead.
type APIError struct {
	Status  int
	Code    string
	Message string
	Field   string
	// Reason refines Code where it is too coarse (never_fires: a cron_expr with no fire time;
	// too_many_occurrences: a backfill range of more than 10,000). Branch on Code and Reason,
	// never on Message (it may be translated).
	Reason     string
	ItemErrors map[int]*APIError
	Quota      string        // 429 quota_exceeded: the namespace's quota that refused the request
	RetryAfter time.Duration // the answer's Retry-After (429, 503, 507; 0 when it had none)
}

func (e *APIError) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("molens: %d %s: %s (field %s)", e.Status, e.Code, e.Message, e.Field)
	}
	return fmt.Sprintf("molens: %d %s: %s", e.Status, e.Code, e.Message)
}

// OutcomeUnknownError: a write may or may not have been applied (its response was lost and a retry
// could not tell). A create returns it when every attempt was sent and went unanswered, or when a
// retry after a lost answer met a refusal the first attempt may have caused (429: the task it
// made fills the quota); IdempotencyKeys are the keys it carried, in order (the SDK's own
// included): create again with them to find out, never making a duplicate. A write whose context
// ends once it may have been sent returns it too, wrapping ctx.Err() (errors.Is(err,
// context.Canceled) holds).
type OutcomeUnknownError struct {
	Op  string
	Err error
	// CreateTask: its key. CreateTasks, CreateTaskIDs: the keys of the batch (at most 1,000) whose
	// outcome is unknown, in order; the tasks (ids) of earlier batches are returned with the error,
	// so that batch starts at the given tasks[len(returned)], and later batches were not sent. A
	// Batcher's Pending: the key of its own task.
	IdempotencyKeys []string
}

func (e *OutcomeUnknownError) Error() string {
	return fmt.Sprintf("molens: %s: outcome unknown, it may have been applied: %v", e.Op, e.Err)
}

func (e *OutcomeUnknownError) Unwrap() error { return e.Err }

// BatchPartlyCreatedError: CreateTasks or CreateTaskIDs sent a batch that was applied without some
// of its items (their namespace was deleted while the batch was in flight; see docs/api.md), so it
// stopped there: later batches were not sent. As with every error of theirs, the tasks of the
// earlier batches are returned with it (that batch starts at rs[len(returned)]).
type BatchPartlyCreatedError struct {
	// Tasks follows the tasks given, in order (len(rs)): each one created, by this batch or an
	// earlier one, or nil (refused, or in a batch never sent). From CreateTaskIDs each holds only
	// its ID.
	Tasks []*Task
	// ItemErrors: the error of each refused task by its index among the tasks given (rs[i]); an
	// item whose namespace no longer exists is a 404 not_found (IsNotFound).
	ItemErrors map[int]*APIError
	// IdempotencyKeys: the key of every task given, in order, the client's own included; creating
	// again with them answers the tasks that exist and never makes a duplicate.
	IdempotencyKeys []string
}

func (e *BatchPartlyCreatedError) Error() string {
	made, first := 0, -1
	for _, t := range e.Tasks {
		if t != nil {
			made++
		}
	}
	for i := range e.ItemErrors {
		if first < 0 || i < first {
			first = i
		}
	}
	if first < 0 {
		return fmt.Sprintf("molens: %d of %d tasks created", made, len(e.Tasks))
	}
	return fmt.Sprintf("molens: %d of %d tasks created; task %d was not: %s", made, len(e.Tasks), first,
		strings.TrimPrefix(e.ItemErrors[first].Error(), "molens: "))
}

// ConnectionError: no node answered within the retry budget.
type ConnectionError struct {
	Op       string
	Attempts int
	Err      error
}

func (e *ConnectionError) Error() string {
	return fmt.Sprintf("molens: %s: no node answered after %d attempts: %v", e.Op, e.Attempts, e.Err)
}

func (e *ConnectionError) Unwrap() error { return e.Err }

// ErrBatcherClosed is returned by Batcher.Submit after Close.
var ErrBatcherClosed = errors.New("molens: the batcher is closed")

func hasStatus(err error, status int) bool {
	var e *APIError
	return errors.As(err, &e) && e.Status == status
}

// IsNotFound reports a 404 (unknown task).
func IsNotFound(err error) bool { return hasStatus(err, 404) }

// IsConflict reports a 409 (illegal transition for the task's status) or a 412
// (IsPreconditionFailed): a stale version is a conflict, as in the Python SDK, whose
// PreconditionFailedError is a ConflictError.
func IsConflict(err error) bool { return hasStatus(err, 409) || hasStatus(err, 412) }

// IsPreconditionFailed reports a 412 (UpdateTask's ifVersion is no longer the task's version).
func IsPreconditionFailed(err error) bool { return hasStatus(err, 412) }

// IsBadRequest reports a 400, 413 or 415.
func IsBadRequest(err error) bool {
	return hasStatus(err, 400) || hasStatus(err, 413) || hasStatus(err, 415)
}

// IsUnauthorized reports a 401 (missing or wrong token).
func IsUnauthorized(err error) bool { return hasStatus(err, 401) }

// IsForbidden reports a 403: the key's role may not do this (a reader's write, an admin route), or
// the request names a namespace outside the key's.
func IsForbidden(err error) bool { return hasStatus(err, 403) }

// IsTooManyRequests reports any 429 (not retried by the client): a namespace's quota
// (IsQuotaExceeded), or a node's limit of connections from one address or of bad keys; the
// *APIError's RetryAfter says when to try again. Python's TooManyRequestsError, Java's
// TooManyRequestsException.
func IsTooManyRequests(err error) bool { return hasStatus(err, 429) }

// IsQuotaExceeded reports a 429 quota_exceeded: a namespace's quota refused the request whole (that
// request created nothing; a retry after a lost answer that meets a full quota is an
// *OutcomeUnknownError instead, since the lost attempt may have made the task). The *APIError's
// Quota names the quota and RetryAfter says when to try again.
func IsQuotaExceeded(err error) bool {
	var e *APIError
	return errors.As(err, &e) && e.Status == 429 && e.Code == "quota_exceeded"
}

// IsUnavailable reports a 503 (no leader, the cluster is not serving) or a 507
// (IsInsufficientStorage) that outlasted every retry.
func IsUnavailable(err error) bool { return hasStatus(err, 503) || hasStatus(err, 507) }

// IsInsufficientStorage reports a 507 insufficient_storage that outlasted every retry: the leader
// cannot write its disk (nothing was applied); it takes writes again by itself once space returns.
// RetryAfter is the node's Retry-After.
func IsInsufficientStorage(err error) bool { return hasStatus(err, 507) }

type errorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field"`
	Reason  string `json:"reason"`
	Quota   string `json:"quota"`
}

type errorEnvelope struct {
	Error  *errorBody       `json:"error"`
	Errors []batchItemError `json:"errors"`
}

// itemError is one item's error in a batch answer, with the status the server gives its code: an
// item refused because its namespace does not exist is not_found (404), one the state machine
// failed internal (500), an invalid one invalid_argument (400; any other code too).
func (b errorBody) itemError() *APIError {
	switch b.Code {
	case "not_found":
		return b.apiError(404)
	case "internal":
		return b.apiError(500)
	}
	return b.apiError(400)
}

func (b errorBody) apiError(status int) *APIError {
	return &APIError{Status: status, Code: b.Code, Message: b.Message, Field: b.Field, Reason: b.Reason, Quota: b.Quota}
}
