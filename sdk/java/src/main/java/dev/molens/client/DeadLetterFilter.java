package dev.molens.client;

/**
 * The dead letters {@link MolensClient#redriveDeadLetters} and {@link MolensClient#deleteDeadLetters}
 * act on; unset fields are left out. {@code limit} caps one request (server default and maximum 10,000).
 */
public final class DeadLetterFilter {
    String taskId;
    String flow;
    DeadLetterKind kind;
    Long since;
    Long until;
    Integer limit;
    boolean all;
    String namespace;

    public DeadLetterFilter setTaskId(String v) { taskId = v; return this; }
    public DeadLetterFilter setFlow(String v) { flow = v; return this; }
    public DeadLetterFilter setKind(DeadLetterKind v) { kind = v; return this; }
    public DeadLetterFilter setSince(Long v) { since = v; return this; }
    public DeadLetterFilter setUntil(Long v) { until = v; return this; }
    public DeadLetterFilter setLimit(Integer v) { limit = v; return this; }
    /**
     * {@link MolensClient#deleteDeadLetters} only: with no other filter, every dead letter (of the client's
     * {@link MolensClient.Builder#namespace} when it has one). Without it an empty filter is refused (400, field
     * {@code all}), whatever the client's namespace.
     */
    public DeadLetterFilter setAll(boolean v) { all = v; return this; }
    /** That namespace's alone (unset: the client's {@link MolensClient.Builder#namespace}, else every one the key may change). */
    public DeadLetterFilter setNamespace(String v) { namespace = v; return this; }
}
