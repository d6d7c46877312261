package dev.molens.client;

/**
 * An occurrence that failed for good (docs/api.md#dead-letters). Its {@link #id} is
 * {@code {fireId}.{attempt}} ({@code {fireId}.ack{n}} for an ACK phase).
 */
public final class DeadLetter {
    public String id;
    public String taskId;
    public String fireId;
    public long seq;
    public DeadLetterKind kind;
    public int attempts;
    public Integer statusCode;
    /** The last response's first bytes. */
    public String responseHead;
    /** Epoch ms it was written. */
    public long at;
    public String flow;
    public String scene;
    public String url;
    public String reliability;
    public long scheduledAt;
    public String result;
    /** The namespace of its task. */
    public String namespace;
    /**
     * Set by {@link MolensClient#redriveDeadLetter} for an at_most_once task: the occurrence may already
     * have reached the receiver.
     */
    public String warning;
}
