package dev.molens.client;

import java.util.Map;

/**
 * 429: slowed down (too many bad keys from this address), or over a namespace's quota
 * ({@link QuotaExceededException}). Not retried by the client: {@link #getRetryAfterSeconds()} says
 * when to try again.
 */
public class TooManyRequestsException extends ApiException {
    private static final long serialVersionUID = 1L;

    Integer retryAfterSeconds;

    public TooManyRequestsException(int status, String code, String message, String field, Map<Integer, ApiException> itemErrors) {
        super(status, code, message, field, itemErrors);
    }

    /** The answer's {@code Retry-After} in seconds, or null when it had none. */
    public Integer getRetryAfterSeconds() { return retryAfterSeconds; }
}
