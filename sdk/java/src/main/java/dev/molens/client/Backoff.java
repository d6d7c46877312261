package dev.molens.client;

import com.fasterxml.jackson.annotation.JsonValue;

/** How the wait before a retry grows ({@link RetryPolicy}). */
public enum Backoff {
    /** initialMs * factor^(n-1), at most maxMs. */
    EXPONENTIAL("exponential"),
    /** initialMs before every retry. */
    FIXED("fixed");

    private final String wire;

    Backoff(String wire) { this.wire = wire; }

    /** The value as the API spells it. */
    @JsonValue
    public String wire() { return wire; }

    @Override
    public String toString() { return wire; }
}
