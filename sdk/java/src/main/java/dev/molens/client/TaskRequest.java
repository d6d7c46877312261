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

    public TaskRequest() {}

    /** A copy (the SDK adds its idempotency key to a copy, never to the caller's request). */
    public TaskRequest copy() {
        TaskRequest r = new TaskRequest();
        r.type = type; r.callbackUrl = callbackUrl; r.intervalMs = intervalMs; r.runAt = runAt;
        r.cronExpr = cronExpr; r.timezone = timezone; r.ackUrl = ackUrl; r.ackDelayMs = ackDelayMs;
        r.payload = payload; r.scene = scene; r.timeoutMs = timeoutMs; r.maxRetries = maxRetries;
        r.maxFails = maxFails; r.reliability = reliability; r.idempotencyKey = idempotencyKey;
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
    public TaskRequest setTimeoutMs(Long v) { timeoutMs = v; return this; }
    public TaskRequest setMaxRetries(Integer v) { maxRetries = v; return this; }
    public TaskRequest setMaxFails(Integer v) { maxFails = v; return this; }
    /** {@code at_least_once} (default) or {@code at_most_once}. */
    public TaskRequest setReliability(String v) { reliability = v; return this; }
    /** The same key again returns the first task; the SDK sets a time-ordered one when unset. */
    public TaskRequest setIdempotencyKey(String v) { idempotencyKey = v; return this; }

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
    public Long getTimeoutMs() { return timeoutMs; }
    public Integer getMaxRetries() { return maxRetries; }
    public Integer getMaxFails() { return maxFails; }
    public String getReliability() { return reliability; }
    public String getIdempotencyKey() { return idempotencyKey; }
}
