package dev.molens.client;

/**
 * The body of {@link MolensClient#setFlow}: a flow's limits, replaced whole (unset: unlimited / false).
 * {@code burst} and {@code adaptive} need {@code ratePerS}.
 */
public final class FlowLimits {
    Double ratePerS;
    Integer burst;
    Integer concurrency;
    boolean paused;
    boolean adaptive;

    /** Fires per second (a token bucket), > 0 and at most 1,000,000. */
    public FlowLimits setRatePerS(Double v) { ratePerS = v; return this; }
    /** Fires at once after an idle spell (server default 1: evenly spaced). */
    public FlowLimits setBurst(Integer v) { burst = v; return this; }
    /** Fires in flight at once, across all workers. */
    public FlowLimits setConcurrency(Integer v) { concurrency = v; return this; }
    /** Hold every fire of the flow until resumed. */
    public FlowLimits setPaused(boolean v) { paused = v; return this; }
    /** Back the rate off on 429/503/timeouts and ramp it back (AIMD). */
    public FlowLimits setAdaptive(boolean v) { adaptive = v; return this; }
}
