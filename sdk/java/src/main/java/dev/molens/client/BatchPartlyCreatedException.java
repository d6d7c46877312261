package dev.molens.client;

import java.util.Collections;
import java.util.List;
import java.util.Map;

/**
 * {@link MolensClient#createAll} or {@link MolensClient#createAllIds} sent a batch that was applied without some of
 * its items (their namespace was deleted while the batch was in flight: docs/api.md), so it stopped there: later
 * batches were not sent. {@link #getTasks()} follows the tasks given, in order: each one created (by that batch or
 * an earlier one), or null (refused, or in a batch never sent); {@link #getItemErrors()} holds the error of each
 * refused one by its index among the tasks given. {@link #getCreated()} is, as for every exception of
 * {@code createAll}, the tasks the batches before the failing one created (the failing batch starts at their
 * count).
 */
public class BatchPartlyCreatedException extends MolensException {
    private static final long serialVersionUID = 1L;

    private final transient List<Task> tasks;
    private final transient Map<Integer, ApiException> itemErrors;
    private final List<String> idempotencyKeys;

    BatchPartlyCreatedException(List<Task> tasks, Map<Integer, ApiException> itemErrors, List<String> idempotencyKeys) {
        super(message(tasks, itemErrors));
        this.tasks = Collections.unmodifiableList(tasks);
        this.itemErrors = Collections.unmodifiableMap(itemErrors);
        this.idempotencyKeys = Collections.unmodifiableList(idempotencyKeys);
    }

    private static String message(List<Task> tasks, Map<Integer, ApiException> itemErrors) {
        int made = 0;
        for (Task t : tasks) {
            if (t != null) {
                made++;
            }
        }
        int first = Collections.min(itemErrors.keySet());
        return made + " of " + tasks.size() + " tasks created; task " + first + " was not: " + itemErrors.get(first).getMessage();
    }

    /**
     * One entry per task given, in order: the task created (with {@code createAllIds} holding only its id), or null
     * where none was (refused, or in a batch never sent).
     */
    public List<Task> getTasks() { return tasks; }

    /**
     * The error of each refused task by its index among the tasks given; one whose namespace no longer exists is a
     * {@link NotFoundException} (404 {@code not_found}, field {@code namespace}).
     */
    public Map<Integer, ApiException> getItemErrors() { return itemErrors; }

    /**
     * The idempotency key of every task given, in order (those the client made up included): creating again with
     * them answers the tasks that exist and never makes a duplicate.
     */
    public List<String> getIdempotencyKeys() { return idempotencyKeys; }
}
