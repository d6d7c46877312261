package dev.molens.client;

/**
 * A flow as the API shows it: its settings and, when {@link #live}, the leader's figures (null
 * otherwise: no leader answered).
 */
public final class Flow {
    public String key;
    /** The flow has settings; else it is unlimited. */
    public boolean configured;
    public Double ratePerS;
    public Integer burst;
    public Integer concurrency;
    public boolean paused;
    public boolean adaptive;
    /** Epoch ms of the last change of the settings. */
    public Long updatedAt;
    public boolean live;
    /** Fires the leader let go in the last second. */
    public Integer rate;
    /** Fires sent and not yet answered. */
    public Integer inFlight;
    /** Due fires held back by the limits or the pause. */
    public Integer queued;
    /** Epoch ms a receiver's Retry-After holds the flow until; 0: not held. */
    public Long throttledUntil;
    /** The rate enforced now (an adaptive flow's backed-off rate). */
    public Double effectiveRatePerS;
}
