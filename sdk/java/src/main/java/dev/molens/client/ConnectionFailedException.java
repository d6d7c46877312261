package dev.molens.client;

/** No node could be reached within the retry budget (attempts and deadline). */
public class ConnectionFailedException extends MolensException {
    private static final long serialVersionUID = 1L;

    public ConnectionFailedException(String message, Throwable cause) {
        super(message, cause);
    }
}
