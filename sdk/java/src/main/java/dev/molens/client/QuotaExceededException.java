package dev.molens.client;

import java.util.Map;

/**
 * 429 {@code quota_exceeded}: a namespace's quota refused the request whole (nothing was created);
 * {@link #getQuota()} names it ({@code creates_per_s}, {@code max_pending_tasks}, {@code max_payload_bytes}).
 */
public class QuotaExceededException extends TooManyRequestsException {
    private static final long serialVersionUID = 1L;

    String quota;

    public QuotaExceededException(int status, String code, String message, String field, Map<Integer, ApiException> itemErrors) {
        super(status, code, message, field, itemErrors);
    }

    /** The quota that refused the request. */
    public String getQuota() { return quota != null ? quota : getField(); }
}
