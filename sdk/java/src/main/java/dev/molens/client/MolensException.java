package dev.molens.client;

/**
 * Base of every error the SDK throws (unchecked). {@link ApiException}: the API answered an error;
 * {@link OutcomeUnknownException}: a write may or may not have been applied;
 * {@link ConnectionFailedException}: no node answered within the retry budget.
 */
public class MolensException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    transient java.util.List<Task> created = java.util.Collections.emptyList();

    /**
     * Thrown by {@link MolensClient#createAll} or {@link MolensClient#createAllIds}: the tasks the batches before
     * the failing one created, in the order given (they are the first {@code getCreated().size()} tasks; with
     * {@code createAllIds} each holds only its id). Empty for every other call.
     */
    public java.util.List<Task> getCreated() {
        return created;
    }

    public MolensException(String message) {
        super(message);
    }

    public MolensException(String message, Throwable cause) {
        super(message, cause);
    }
}
