package dev.molens.client;

/**
 * A write may or may not have been applied: its response was lost and a retry could not tell. Creates
 * never throw it (their idempotency key makes the retry safe); pause, resume, trigger and delete can.
 */
public class OutcomeUnknownException extends MolensException {
    private static final long serialVersionUID = 1L;

    public OutcomeUnknownException(String message, Throwable cause) {
        super(message, cause);
    }
}
