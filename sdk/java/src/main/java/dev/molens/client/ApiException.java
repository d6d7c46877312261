package dev.molens.client;

import java.util.Collections;
import java.util.Map;

/**
 * The API answered {@code {"error": {"code", "message", "field"}}}: 400 {@code invalid_argument}
 * ({@link #getField()} names the culprit), 401 {@code unauthorized}, 403 {@code forbidden}
 * ({@link ForbiddenException}), 404 {@code not_found}
 * ({@link NotFoundException}), 409 {@code illegal_transition} ({@link ConflictException}), 412
 * {@code precondition_failed} ({@link PreconditionFailedException}), 413, 415, 429
 * ({@link TooManyRequestsException}, {@link QuotaExceededException}), or 503 after every
 * retry. A rejected batch (nothing was created) carries {@link #getItemErrors()}: each bad item's
 * error by its index.
 */
public class ApiException extends MolensException {
    private static final long serialVersionUID = 1L;

    private final int status;
    private final String code;
    private final String field;
    private final Map<Integer, ApiException> itemErrors;

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

    public Map<Integer, ApiException> getItemErrors() { return itemErrors; }

    public boolean isNotFound() { return status == 404; }

    public boolean isConflict() { return status == 409; }

    /** 412: {@link MolensClient#update}'s {@code ifVersion} is no longer the task's version. */
    public boolean isPreconditionFailed() { return status == 412; }

    public boolean isBadRequest() { return status == 400 || status == 413 || status == 415; }

    public boolean isUnauthorized() { return status == 401; }

    public boolean isForbidden() { return status == 403; }

    public boolean isUnavailable() { return status == 503; }
}
