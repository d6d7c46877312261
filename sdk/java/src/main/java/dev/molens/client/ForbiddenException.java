package dev.molens.client;

import java.util.Map;

/**
 * 403 {@code forbidden}: the key's role may not do this (a reader's write, an admin route without an
 * admin key), or the request names a namespace outside the key's.
 */
public class ForbiddenException extends ApiException {
    private static final long serialVersionUID = 1L;

    public ForbiddenException(int status, String code, String message, String field, Map<Integer, ApiException> itemErrors) {
        super(status, code, message, field, itemErrors);
    }
}
