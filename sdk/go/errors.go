package molens

import (
	"errors"
	"fmt"
	"time"
)

// APIError is an error answer of the API: {"error": {"code", "message", "field"}}.
//
//	400 invalid_argument (Field names the culprit), 401 unauthorized, 403 forbidden, 404 not_found,
//	409 illegal_transition, 412 precondition_failed (UpdateTask), 413 payload_too_large/body_too_large,
//	415 unsupported_media_type, 429 quota_exceeded (Quota names it)/too_many_requests (RetryAfter: when to try again),
//	503 no_leader/outcome_unknown/unavailable (after every retry).
//
// A rejected batch (400, nothing created) has ItemErrors: the error of each bad item by index.
type APIError struct {
	Status     int
	Code       string
	Message    string
	Field      string
	ItemErrors map[int]*APIError
	Quota      string        // 429 quota_exceeded: the namespace's quota that refused the request
	RetryAfter time.Duration // 429: the answer's Retry-After (0 when it had none)
}

func (e *APIError) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("molens: %d %s: %s (field %s)", e.Status, e.Code, e.Message, e.Field)
	}
	return fmt.Sprintf("molens: %d %s: %s", e.Status, e.Code, e.Message)
}

// OutcomeUnknownError: a write may or may not have been applied (its response was lost and a retry
// could not tell). A create returns it only when every attempt was sent and went unanswered (create
// again with the same idempotency key to find out).
type OutcomeUnknownError struct {
	Op  string
	Err error
}

func (e *OutcomeUnknownError) Error() string {
	return fmt.Sprintf("molens: %s: outcome unknown, it may have been applied: %v", e.Op, e.Err)
}

func (e *OutcomeUnknownError) Unwrap() error { return e.Err }

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

// IsConflict reports a 409 (illegal transition for the task's status).
func IsConflict(err error) bool { return hasStatus(err, 409) }

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

// IsQuotaExceeded reports a 429 quota_exceeded: a namespace's quota refused the request whole
// (nothing was created); the *APIError's Quota names it and RetryAfter says when to try again.
func IsQuotaExceeded(err error) bool {
	var e *APIError
	return errors.As(err, &e) && e.Status == 429 && e.Code == "quota_exceeded"
}

// IsUnavailable reports a 503 that outlasted every retry.
func IsUnavailable(err error) bool { return hasStatus(err, 503) }

type errorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field"`
	Quota   string `json:"quota"`
}

type errorEnvelope struct {
	Error  *errorBody       `json:"error"`
	Errors []batchItemError `json:"errors"`
}

func (b errorBody) apiError(status int) *APIError {
	return &APIError{Status: status, Code: b.Code, Message: b.Message, Field: b.Field, Quota: b.Quota}
}
