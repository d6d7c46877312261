package molens

import (
	"fmt"
	"testing"
)

// TestPredicatesFollowThePythonExceptionTree: each predicate holds for the statuses whose Python
// SDK error is that class or a subclass of it (molens/client.py): PreconditionFailedError (412) is
// a ConflictError, QuotaExceededError a TooManyRequestsError (IsTooManyRequests: any 429), InsufficientStorageError (507) an
// UnavailableError, and BadRequestError covers 400, 413 and 415.
func TestPredicatesFollowThePythonExceptionTree(t *testing.T) {
	predicates := map[string]func(error) bool{
		"IsBadRequest": IsBadRequest, "IsUnauthorized": IsUnauthorized, "IsForbidden": IsForbidden,
		"IsNotFound": IsNotFound, "IsConflict": IsConflict, "IsPreconditionFailed": IsPreconditionFailed,
		"IsTooManyRequests": IsTooManyRequests, "IsQuotaExceeded": IsQuotaExceeded, "IsUnavailable": IsUnavailable, "IsInsufficientStorage": IsInsufficientStorage,
	}
	for _, tc := range []struct {
		status int
		code   string
		holds  []string
	}{
		{400, "invalid_argument", []string{"IsBadRequest"}},
		{413, "payload_too_large", []string{"IsBadRequest"}},
		{415, "unsupported_media_type", []string{"IsBadRequest"}},
		{401, "unauthorized", []string{"IsUnauthorized"}},
		{403, "forbidden", []string{"IsForbidden"}},
		{404, "not_found", []string{"IsNotFound"}},
		{409, "illegal_transition", []string{"IsConflict"}},
		{412, "precondition_failed", []string{"IsConflict", "IsPreconditionFailed"}},
		{429, "too_many_requests", []string{"IsTooManyRequests"}},
		{429, "quota_exceeded", []string{"IsTooManyRequests", "IsQuotaExceeded"}},
		{503, "no_leader", []string{"IsUnavailable"}},
		{507, "insufficient_storage", []string{"IsUnavailable", "IsInsufficientStorage"}},
		{500, "internal", nil},
	} {
		err := fmt.Errorf("wrapped: %w", &APIError{Status: tc.status, Code: tc.code})
		want := map[string]bool{}
		for _, name := range tc.holds {
			want[name] = true
		}
		for name, is := range predicates {
			if is(err) != want[name] {
				t.Errorf("%d %s: %s is %v", tc.status, tc.code, name, is(err))
			}
		}
	}
}
