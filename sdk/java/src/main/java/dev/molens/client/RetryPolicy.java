package dev.molens.client;

import com.fasterxml.jackson.annotation.JsonInclude;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Objects;

/**
 * An at_least_once task's retry policy: in a request ({@link TaskRequest#setRetry}, or the
 * {@code retry} of an {@link MolensClient#update} patch, which replaces the whole policy) unset
 * fields take the node's default ({@code scheduler.retry}); in {@link Task#retry} every field is
 * the one in force.
 *
 * <pre>{@code
 * new RetryPolicy().setMaxRetries(5).setBackoff(Backoff.FIXED).setInitialMs(250L).setNonRetryableStatuses(410, 422)
 * }</pre>
 */
@JsonInclude(JsonInclude.Include.NON_NULL)
public final class RetryPolicy {
    private Integer maxRetries;
    private Backoff backoff;
    private Long initialMs;
    private Integer factor;
    private Long maxMs;
    private RetryJitter jitter;
    private List<Integer> nonRetryableStatuses;
    private Long maxThrottleMs;

    /** Retries of one occurrence (the task's top-level maxRetries is an alias). */
    public RetryPolicy setMaxRetries(Integer v) { maxRetries = v; return this; }
    public RetryPolicy setBackoff(Backoff v) { backoff = v; return this; }
    /** Wait before the first retry. */
    public RetryPolicy setInitialMs(Long v) { initialMs = v; return this; }
    /** Exponential backoff: growth of the wait per retry (1..10). */
    public RetryPolicy setFactor(Integer v) { factor = v; return this; }
    /** Longest wait before a retry. */
    public RetryPolicy setMaxMs(Long v) { maxMs = v; return this; }
    public RetryPolicy setJitter(RetryJitter v) { jitter = v; return this; }
    /** Statuses (300..599) that end the occurrence at once; a 404 always does. */
    public RetryPolicy setNonRetryableStatuses(Integer... v) { nonRetryableStatuses = new ArrayList<Integer>(Arrays.asList(v)); return this; }
    /** A 429/503 with Retry-After does not use up maxRetries until the occurrence has been throttled this long. */
    public RetryPolicy setMaxThrottleMs(Long v) { maxThrottleMs = v; return this; }

    public Integer getMaxRetries() { return maxRetries; }
    public Backoff getBackoff() { return backoff; }
    public Long getInitialMs() { return initialMs; }
    public Integer getFactor() { return factor; }
    public Long getMaxMs() { return maxMs; }
    public RetryJitter getJitter() { return jitter; }
    public List<Integer> getNonRetryableStatuses() { return nonRetryableStatuses; }
    public Long getMaxThrottleMs() { return maxThrottleMs; }

    @Override
    public boolean equals(Object o) {
        if (!(o instanceof RetryPolicy)) {
            return false;
        }
        RetryPolicy p = (RetryPolicy) o;
        return Objects.equals(maxRetries, p.maxRetries) && backoff == p.backoff && Objects.equals(initialMs, p.initialMs)
                && Objects.equals(factor, p.factor) && Objects.equals(maxMs, p.maxMs) && jitter == p.jitter
                && Objects.equals(nonRetryableStatuses, p.nonRetryableStatuses) && Objects.equals(maxThrottleMs, p.maxThrottleMs);
    }

    @Override
    public int hashCode() {
        return Objects.hash(maxRetries, backoff, initialMs, factor, maxMs, jitter, nonRetryableStatuses, maxThrottleMs);
    }

    @Override
    public String toString() {
        return "RetryPolicy{maxRetries=" + maxRetries + ", backoff=" + backoff + ", initialMs=" + initialMs + ", factor=" + factor
                + ", maxMs=" + maxMs + ", jitter=" + jitter + ", nonRetryableStatuses=" + nonRetryableStatuses
                + ", maxThrottleMs=" + maxThrottleMs + "}";
    }
}
