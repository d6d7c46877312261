package dev.molens.client;

import com.fasterxml.jackson.databind.JsonNode;

/** A task as the API returns it ({@code Task} in openapi.json). Nullable fields are boxed. */
public final class Task {
    public String id;
    public String type;
    public String status;
    public Long intervalMs;
    public Long runAt;
    public String cronExpr;
    public String timezone;
    public String callbackUrl;
    public String ackUrl;
    public long ackDelayMs;
    public JsonNode payload;
    public String scene;
    public long timeoutMs;
    public int maxRetries;
    public int maxFails;
    public String reliability;
    public String idempotencyKey;
    public String notifyUrl;
    /** null: the callback URL's host:port. */
    public String flowKey;
    /** The retry policy in force. */
    public RetryPolicy retry;
    public long jitterMs;
    public Long startAt;
    public Long endAt;
    public Integer maxRuns;
    /** null only for a value this SDK does not know (a newer server's). */
    public Catchup catchup;
    public long catchupWindowMs;
    /** null only for a value this SDK does not know (a newer server's). */
    public Overlap overlap;
    public long createdAt;
    public long updatedAt;
    public Long nextRunAt;
    public long seq;
    public int attempt;
    public int ackAttempt;
    public int failCount;
    /** Outcome of the last attempt: success, failed, not_found, ... */
    public String lastOutcome;
    public Integer lastStatusCode;
    /** The latest callback response: its first 512 bytes. */
    public String lastExecutionResult;
    public Long lastFireAt;
    /** Version of the definition: 1 at create, one more at each update that changes it. */
    public long version;
    /** The namespace it belongs to (never changes). */
    public String namespace;
    /** The W3C trace context its requests join, or null. */
    public String traceparent;
}
