package dev.molens.client;

/**
 * The body of a create ({@code TaskCreate} in openapi.json), built with chained setters:
 * {@code new TaskRequest().setType("delayed").setIntervalMs(5000L).setCallbackUrl(url)}. Unset
 * (null) fields are left out, so the server applies its defaults.
 */
public final class TaskRequest {
    private String type;
    private String callbackUrl;
    private Long intervalMs;
    private Long runAt;
    private String cronExpr;
    private String timezone;
    private String ackUrl;
    private Long ackDelayMs;
    private Object payload;
    private String scene;
    private Long timeoutMs;
    private Integer maxRetries;
    private Integer maxFails;
    private String reliability;
    private String idempotencyKey;
    private String notifyUrl;
    private String flowKey;
    private RetryPolicy retry;
    private Long jitterMs;
    private Long startAt;
    private Long endAt;
    private Integer maxRuns;
    private Catchup catchup;
    private Long catchupWindowMs;
    private Overlap overlap;
    private String namespace;
    private String traceparent;

    public TaskRequest() {}

    /** A copy (the SDK adds its idempotency key to a copy, never to the caller's request). */
    public TaskRequest copy() {
        TaskRequest r = new TaskRequest();
        r.type = type; r.callbackUrl = callbackUrl; r.intervalMs = intervalMs; r.runAt = runAt;
        r.cronExpr = cronExpr; r.timezone = timezone; r.ackUrl = ackUrl; r.ackDelayMs = ackDelayMs;
        r.payload = payload; r.scene = scene; r.timeoutMs = timeoutMs; r.maxRetries = maxRetries;
        r.maxFails = maxFails; r.reliability = reliability; r.idempotencyKey = idempotencyKey;
        r.notifyUrl = notifyUrl; r.flowKey = flowKey; r.retry = retry; r.jitterMs = jitterMs; r.startAt = startAt;
        r.endAt = endAt; r.maxRuns = maxRuns; r.catchup = catchup; r.catchupWindowMs = catchupWindowMs; r.overlap = overlap;
        r.namespace = namespace; r.traceparent = traceparent;
        return r;
    }

    /** {@code delayed} or {@code periodic}. */
    public TaskRequest setType(String v) { type = v; return this; }
    public TaskRequest setCallbackUrl(String v) { callbackUrl = v; return this; }
    /** delayed: delay from creation; periodic: the period (>= 1000). */
    public TaskRequest setIntervalMs(Long v) { intervalMs = v; return this; }
    /** delayed only: the absolute fire time, epoch ms. */
    public TaskRequest setRunAt(Long v) { runAt = v; return this; }
    /** periodic only: 5 fields, or 6 with seconds first. */
    public TaskRequest setCronExpr(String v) { cronExpr = v; return this; }
    public TaskRequest setTimezone(String v) { timezone = v; return this; }
    public TaskRequest setAckUrl(String v) { ackUrl = v; return this; }
    public TaskRequest setAckDelayMs(Long v) { ackDelayMs = v; return this; }
    /** Any JSON value: a Map, List, String, Number, Boolean or Jackson JsonNode. */
    public TaskRequest setPayload(Object v) { payload = v; return this; }
    public TaskRequest setScene(String v) { scene = v; return this; }
    /** The task's namespace (unset: the client's {@link MolensClient.Builder#namespace}, else {@code default}). */
    public TaskRequest setNamespace(String v) { namespace = v; return this; }
    public TaskRequest setTimeoutMs(Long v) { timeoutMs = v; return this; }
    public TaskRequest setMaxRetries(Integer v) { maxRetries = v; return this; }
    public TaskRequest setMaxFails(Integer v) { maxFails = v; return this; }
    /** {@code at_least_once} (default) or {@code at_most_once}. */
    public TaskRequest setReliability(String v) { reliability = v; return this; }
    /** The same key again returns the first task; the SDK sets a time-ordered one when unset. */
    public TaskRequest setIdempotencyKey(String v) { idempotencyKey = v; return this; }
    /** Where failure notifications of this task go (default: the node's notifications.url). */
    public TaskRequest setNotifyUrl(String v) { notifyUrl = v; return this; }
    /** The flow the task's fires count against (default: the callback URL's host:port). */
    public TaskRequest setFlowKey(String v) { flowKey = v; return this; }
    /** at_least_once: the retry policy; unset fields take the node's default. */
    public TaskRequest setRetry(RetryPolicy v) { retry = v; return this; }
    /** Each occurrence fires up to this much after its instant, by an offset fixed per task and occurrence. */
    public TaskRequest setJitterMs(Long v) { jitterMs = v; return this; }
    /** periodic only: no occurrence before this epoch ms. */
    public TaskRequest setStartAt(Long v) { startAt = v; return this; }
    /** periodic only: no occurrence at or after this epoch ms (then done). */
    public TaskRequest setEndAt(Long v) { endAt = v; return this; }
    /** periodic only: done after this many occurrences. */
    public TaskRequest setMaxRuns(Integer v) { maxRuns = v; return this; }
    /** periodic only: what to do with missed occurrences. */
    public TaskRequest setCatchup(Catchup v) { catchup = v; return this; }
    /** periodic, {@link Catchup#ALL}: how far back missed occurrences are still fired. */
    public TaskRequest setCatchupWindowMs(Long v) { catchupWindowMs = v; return this; }
    /** periodic only: what to do with instants that come due while an occurrence runs. */
    public TaskRequest setOverlap(Overlap v) { overlap = v; return this; }
    /**
     * W3C trace context ({@code 00-<32 hex>-<16 hex>-<2 hex>}) the task's callbacks, ACK probes and
     * notifications join (docs/observability.md#traces); unset: none.
     */
    public TaskRequest setTraceparent(String v) { traceparent = v; return this; }

    public String getType() { return type; }
    public String getCallbackUrl() { return callbackUrl; }
    public Long getIntervalMs() { return intervalMs; }
    public Long getRunAt() { return runAt; }
    public String getCronExpr() { return cronExpr; }
    public String getTimezone() { return timezone; }
    public String getAckUrl() { return ackUrl; }
    public Long getAckDelayMs() { return ackDelayMs; }
    public Object getPayload() { return payload; }
    public String getScene() { return scene; }
    public String getNamespace() { return namespace; }
    public Long getTimeoutMs() { return timeoutMs; }
    public Integer getMaxRetries() { return maxRetries; }
    public Integer getMaxFails() { return maxFails; }
    public String getReliability() { return reliability; }
    public String getIdempotencyKey() { return idempotencyKey; }
    public String getNotifyUrl() { return notifyUrl; }
    public String getFlowKey() { return flowKey; }
    public RetryPolicy getRetry() { return retry; }
    public Long getJitterMs() { return jitterMs; }
    public Long getStartAt() { return startAt; }
    public Long getEndAt() { return endAt; }
    public Integer getMaxRuns() { return maxRuns; }
    public Catchup getCatchup() { return catchup; }
    public Long getCatchupWindowMs() { return catchupWindowMs; }
    public Overlap getOverlap() { return overlap; }
    public String getTraceparent() { return traceparent; }
}
