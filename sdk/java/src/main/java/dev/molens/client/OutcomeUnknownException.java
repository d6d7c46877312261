package dev.molens.client;

import java.util.Collections;
import java.util.List;

/**
 * A write may or may not have been applied: its answer was lost and a retry could not tell. A trigger,
 * backfill, redrive, flow deletion, API key creation or versioned update throws it at its first lost
 * answer (it is never sent twice); a retried pause, resume or delete when its retry meets 404/409/412/429;
 * a create (single, batch or {@link BatchingClient}) when every attempt went unanswered or its retry met
 * 404/409/412/429 (a quota the first attempt filled refuses the retry), 503/507 or a redirect it will not follow
 * (its {@link ApiException} is the cause); any write answered with a body longer than
 * {@link MolensClient.Builder#maxResponseBytes}. A create's exception carries its
 * {@link #getIdempotencyKeys()}: creating again with them returns the tasks that exist and creates the
 * others, never a duplicate. A {@link BatchingClient} future's carries its own task's key alone.
 */
public class OutcomeUnknownException extends MolensException {
    private static final long serialVersionUID = 1L;

    List<String> idempotencyKeys = Collections.emptyList();

    public OutcomeUnknownException(String message, Throwable cause) {
        super(message, cause);
    }

    /** The idempotency keys the create carried (those the client made up included), in order; empty for other writes. */
    public List<String> getIdempotencyKeys() { return idempotencyKeys; }
}
