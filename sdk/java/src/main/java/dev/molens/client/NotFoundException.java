package dev.molens.client;

import java.util.Map;

/** 404 {@code not_found}: no such task, flow or dead letter ({@link #getField()} names which). */
public class NotFoundException extends ApiException {
    private static final long serialVersionUID = 1L;

    public NotFoundException(int status, String code, String message, String field, Map<Integer, ApiException> itemErrors) {
        super(status, code, message, field, itemErrors);
    }
}
