package dev.molens.client;

/** Filters of {@link MolensClient#listDeadLetters}; unset ones are left out. */
public final class DeadLetterOptions {
    String taskId;
    String flow;
    DeadLetterKind kind;
    Long since;
    Long until;
    Integer limit;
    String cursor;
    String namespace;

    /** One task's (in id order rather than newest first). */
    public DeadLetterOptions setTaskId(String v) { taskId = v; return this; }
    public DeadLetterOptions setFlow(String v) { flow = v; return this; }
    public DeadLetterOptions setKind(DeadLetterKind v) { kind = v; return this; }
    /** at >= since, epoch ms. */
    public DeadLetterOptions setSince(Long v) { since = v; return this; }
    /** at <= until, epoch ms. */
    public DeadLetterOptions setUntil(Long v) { until = v; return this; }
    /** Page size 1..1000 (server default 100). */
    public DeadLetterOptions setLimit(Integer v) { limit = v; return this; }
    public DeadLetterOptions setCursor(String v) { cursor = v; return this; }
    /** That namespace's alone (unset: the client's {@link MolensClient.Builder#namespace}, else every one the key reads). */
    public DeadLetterOptions setNamespace(String v) { namespace = v; return this; }
}
