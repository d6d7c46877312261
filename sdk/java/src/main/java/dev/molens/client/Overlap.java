package dev.molens.client;

import com.fasterxml.jackson.annotation.JsonValue;

/** What a periodic task does with instants that come due while an occurrence still runs. */
public enum Overlap {
    /** They are not fired; the task waits for its next instant (the default). */
    SKIP("skip"),
    /** The first of them fires as soon as the occurrence has ended; the rest are skipped. */
    BUFFER_ONE("buffer_one"),
    /** Occurrences may run concurrently (needs a server that supports it). */
    ALLOW("allow");

    private final String wire;

    Overlap(String wire) { this.wire = wire; }

    /** The value as the API spells it. */
    @JsonValue
    public String wire() { return wire; }

    @Override
    public String toString() { return wire; }
}
