package dev.molens.client;

/**
 * Base of every error the SDK throws (unchecked). {@link ApiException}: the API answered an error;
 * {@link OutcomeUnknownException}: a write may or may not have been applied;
 * {@link ConnectionFailedException}: no node answered within the retry budget.
 */
public class MolensException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    public MolensException(String message) {
        super(message);
    }

    public MolensException(String message, Throwable cause) {
        super(message, cause);
    }
}
