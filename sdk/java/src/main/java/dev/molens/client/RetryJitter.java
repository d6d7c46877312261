package dev.molens.client;

import com.fasterxml.jackson.annotation.JsonValue;

/** Whether the wait before a retry is spread ({@link RetryPolicy}). */
public enum RetryJitter {
    NONE("none"),
    /** The wait is drawn from [0, wait). */
    FULL("full");

    private final String wire;

    RetryJitter(String wire) { this.wire = wire; }

    /** The value as the API spells it. */
    @JsonValue
    public String wire() { return wire; }

    @Override
    public String toString() { return wire; }
}
