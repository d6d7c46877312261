package dev.molens.client;

import com.fasterxml.jackson.annotation.JsonValue;

/** What a periodic task does with occurrences it missed (the cluster was down, or it resumed from its schedule). */
public enum Catchup {
    /** One fire at once stands for all of them (the default). */
    ONE("one"),
    /** They are skipped; the schedule goes on at its next instant. */
    NONE("none"),
    /** Each fires, oldest first, back to the task's catchup window. */
    ALL("all");

    private final String wire;

    Catchup(String wire) { this.wire = wire; }

    /** The value as the API spells it. */
    @JsonValue
    public String wire() { return wire; }

    @Override
    public String toString() { return wire; }
}
