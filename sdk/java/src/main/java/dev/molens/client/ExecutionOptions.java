package dev.molens.client;

/** Filters of {@link MolensClient#executions} and {@link MolensClient#taskExecutions}. */
public final class ExecutionOptions {
    String taskId;
    String result;
    Long since;
    Long until;
    Integer limit;
    String cursor;
    String namespace;

    /** {@link MolensClient#executions} only: one task's. */
    public ExecutionOptions setTaskId(String v) { taskId = v; return this; }
    public ExecutionOptions setResult(String v) { result = v; return this; }
    /** finished_at >= since, epoch ms. */
    public ExecutionOptions setSince(Long v) { since = v; return this; }
    /** finished_at < until, epoch ms. */
    public ExecutionOptions setUntil(Long v) { until = v; return this; }
    public ExecutionOptions setLimit(Integer v) { limit = v; return this; }
    public ExecutionOptions setCursor(String v) { cursor = v; return this; }
    /** {@link MolensClient#executions} only: that namespace's alone (unset: the client's, else every one the key reads). */
    public ExecutionOptions setNamespace(String v) { namespace = v; return this; }
}
