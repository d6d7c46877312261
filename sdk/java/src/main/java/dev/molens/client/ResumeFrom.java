package dev.molens.client;

import com.fasterxml.jackson.annotation.JsonValue;

/** Where {@link MolensClient#resume(String, ResumeFrom)} takes a periodic task's schedule up. */
public enum ResumeFrom {
    /** Drop what was missed while paused (the default). */
    NOW("now"),
    /** The instant it was waiting for; the task's catchup applies to what it missed. */
    SCHEDULE("schedule");

    private final String wire;

    ResumeFrom(String wire) { this.wire = wire; }

    /** The value as the API spells it. */
    @JsonValue
    public String wire() { return wire; }

    @Override
    public String toString() { return wire; }
}
