package dev.molens.client;

import com.fasterxml.jackson.annotation.JsonValue;

/** Why an occurrence failed for good ({@link DeadLetter#kind}). */
public enum DeadLetterKind {
    /** Every attempt failed (an at_most_once fire has one). */
    RETRIES_EXHAUSTED("retries_exhausted"),
    /** The receiver ended it: 404, a status in the policy's non-retryable ones, or X-Molens-No-Retry. */
    NON_RETRYABLE("non_retryable"),
    /** The callback was answered 2xx, but every ACK probe failed. */
    ACK_FAILED("ack_failed"),
    /** An at_most_once fire whose worker was lost: maybe delivered, never sent again. */
    UNKNOWN("unknown");

    private final String wire;

    DeadLetterKind(String wire) { this.wire = wire; }

    /** The value as the API spells it. */
    @JsonValue
    public String wire() { return wire; }

    @Override
    public String toString() { return wire; }
}
