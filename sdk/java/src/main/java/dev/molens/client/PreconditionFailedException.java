package dev.molens.client;

import java.util.Map;

/** 412 {@code precondition_failed}: {@link MolensClient#update}'s {@code ifVersion} is no longer the task's version. */
public class PreconditionFailedException extends ConflictException {
    private static final long serialVersionUID = 1L;

    public PreconditionFailedException(int status, String code, String message, String field, Map<Integer, ApiException> itemErrors) {
        super(status, code, message, field, itemErrors);
    }
}
