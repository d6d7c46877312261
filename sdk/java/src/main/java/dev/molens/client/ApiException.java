package dev.molens.client;

import java.util.Collections;
import java.util.Map;

/**
 * The API answered {@code {"error": {"code", "message", "field", "reason"}}}: 400 {@code invalid_argument}
 * ({@link #getField()} names the culprit, {@link #getReason()} refines some codes), 401 {@code unauthorized}
 * (also to a write, whose answer's body {@link java.net.HttpURLConnection} drops), 403 {@code forbidden}
 * ({@link ForbiddenException}), 404 {@code not_found}
 * ({@link NotFoundException}), 409 {@code illegal_transition} ({@link ConflictException}), 412
 * {@code precondition_failed} ({@link PreconditionFailedException}), 413, 415, 429
 * ({@link TooManyRequestsException}, {@link QuotaExceededException}), or 503 and 507
 * ({@link InsufficientStorageException}) after every retry. A rejected batch (nothing was created) carries
 * {@link #getItemErrors()}: each bad item's error by its index. An answer that is no node's is one too: an
 * unexpected redirect (its status, code {@code http_error}), a redirect the client will not follow (code
 * {@code redirect}), a 2xx whose body is not a JSON object (502 {@code http_error}).
 */
public class ApiException extends MolensException {
    private static final long serialVersionUID = 1L;

    private final int status;
    private final String code;
    private final String field;
    private final Map<Integer, ApiException> itemErrors;
    String reason;

    public ApiException(int status, String code, String message, String field, Map<Integer, ApiException> itemErrors) {
        super(status + " " + code + ": " + message + (field != null ? " (field " + field + ")" : ""));
        this.status = status;
        this.code = code;
        this.field = field;
        this.itemErrors = itemErrors == null ? Collections.<Integer, ApiException>emptyMap() : itemErrors;
    }

    public int getStatus() { return status; }

    public String getCode() { return code; }

    /** The request field (or parameter) at fault, or null. */
    public String getField() { return field; }

    /**
     * What refines {@link #getCode()} where it is too coarse ({@code never_fires}: a cron expression with no fire
     * time; {@code too_many_occurrences}: a backfill range over 10,000), or null.
     */
    public String getReason() { return reason; }

    public Map<Integer, ApiException> getItemErrors() { return itemErrors; }

    public boolean isNotFound() { return status == 404; }

    /**
     * 409, or 412 ({@link #isPreconditionFailed()}): a stale version is a conflict, as {@link PreconditionFailedException}
     * is a {@link ConflictException} (and the Python SDK's PreconditionFailedError a ConflictError).
     */
    public boolean isConflict() { return status == 409 || status == 412; }

    /** 412: {@link MolensClient#update}'s {@code ifVersion} is no longer the task's version. */
    public boolean isPreconditionFailed() { return status == 412; }

    public boolean isBadRequest() { return status == 400 || status == 413 || status == 415; }

    public boolean isUnauthorized() { return status == 401; }

    public boolean isForbidden() { return status == 403; }

    /**
     * 503 (no leader, the cluster is not serving), or 507 ({@link InsufficientStorageException}: the leader's disk is
     * full), after every retry; the Python SDK's InsufficientStorageError is an UnavailableError.
     */
    public boolean isUnavailable() { return status == 503 || status == 507; }
}
