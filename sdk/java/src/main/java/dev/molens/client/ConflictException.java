package dev.molens.client;

import java.util.Map;

/**
 * 409 {@code illegal_transition}: the operation is illegal in the task's (or dead letter's task's)
 * current status; also the base of {@link PreconditionFailedException}, as in the Python SDK.
 */
public class ConflictException extends ApiException {
    private static final long serialVersionUID = 1L;

    public ConflictException(int status, String code, String message, String field, Map<Integer, ApiException> itemErrors) {
        super(status, code, message, field, itemErrors);
    }
}
