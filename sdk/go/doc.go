// Package molens is the Go SDK of the Molens REST API (docs/api.md): delayed, periodic and cron
// HTTP callbacks on a Raft-replicated scheduler. Standard library only.
//
//	c, err := molens.NewClient([]string{"http://127.0.0.1:18081", "http://127.0.0.1:18082"})
//	t, err := c.CreateTask(ctx, molens.NewTaskRequest("delayed", "http://127.0.0.1:18081/api/v1/test/callback").
//		SetIntervalMs(5000).SetPayload(map[string]any{"order_id": 42}))
//	t, err = c.PauseTask(ctx, t.ID)
//
// Behaviour, as in the Python SDK (molens/client.py):
//
//   - Leader discovery. Requests go to the node believed to lead (first the first address). A
//     follower answers writes with 307; the client re-sends the same request (body included) to the
//     leader named by X-Molens-Leader (or Location) and remembers it. On a connection error it moves
//     to the next address. A redirect from an https node to a plain http address is not followed
//     (the token would go unencrypted): the next address is asked instead. After 5 redirects in a
//     row (nodes naming each other while an election settles) it backs off and asks again. Any
//     other 3xx, and a 2xx whose body is not the JSON object the call expects, is an *APIError
//     (Code "http_error"): no node answers so.
//   - Retries with exponential backoff and full jitter (a random delay in [0, min(max, base*2^(n-1))] before retry n),
//     bounded by WithMaxAttempts and WithRetryDeadline (each attempt's WithTimeout is cut to what is
//     left of it; a retry goes only with at least MinAttempt, 100 ms, of it left, and a backoff
//     ends that long before it): on connection errors, on 503 (no leader,
//     outcome unknown, unavailable) and on 507 (the leader's disk is full; nothing applied),
//     waiting at least Retry-After once a few attempts have failed. A 502 or 504 comes from a
//     proxy whose node did not answer (no node answers so) and is taken as a lost answer: a
//     write's outcome is unknown, and the next address is tried as after a connection error;
//     a GET whose budget ends so returns that *APIError. Other errors are returned at
//     once as *APIError, carrying the API's code, field and reason.
//   - Idempotency. CreateTask, CreateTasks and CreateTaskIDs give every task without an IdempotencyKey a fresh,
//     time-ordered one (NewIdempotencyKey), so a retry after a lost response returns the task the
//     first attempt created instead of creating a duplicate; an *OutcomeUnknownError of a create
//     carries the keys in IdempotencyKeys. Pause, resume and delete are retried too (a trigger is
//     never sent twice); when a retry after an unknown outcome meets 404/409/412/429, or the retry
//     budget ends in 503/507, *OutcomeUnknownError is returned rather than a misleading
//     not-found, conflict, stale version or full quota. A request that certainly never left the
//     client (no connection, a failed TLS handshake) is not an unknown outcome; a write whose
//     context ends once it may have been sent is one (wrapping ctx.Err()).
//   - Reads go to the same node as writes, so a client reads its own writes.
//
// A Client is safe for concurrent use. Batcher collects single creates into batch requests.
// VerifySignature checks the X-Molens-Signature header of a callback a receiver got.
package molens
