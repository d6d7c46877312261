package dev.molens.client;

import java.util.Map;

/**
 * 507 {@code insufficient_storage} after every retry: the leader cannot write its disk, and nothing of the
 * request was applied (unless an earlier attempt's answer was lost: then {@link OutcomeUnknownException}).
 * The node takes writes again by itself once space returns; {@link #getRetryAfterSeconds()} says when to ask.
 */
public class InsufficientStorageException extends ApiException {
    private static final long serialVersionUID = 1L;

    Integer retryAfterSeconds;

    public InsufficientStorageException(int status, String code, String message, String field,
            Map<Integer, ApiException> itemErrors) {
        super(status, code, message, field, itemErrors);
    }

    /** The answer's {@code Retry-After} in seconds, or null when it had none. */
    public Integer getRetryAfterSeconds() { return retryAfterSeconds; }
}
