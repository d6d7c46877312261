package dev.molens.client;

/** One HTTP attempt: a callback or an ACK probe. */
public final class Execution {
    public long id;
    public String taskId;
    public String fireId;
    public long seq;
    public int attempt;
    public String kind;
    public String result;
    public Integer statusCode;
    public Long latencyMs;
    public String worker;
    public String url;
    public String scene;
    public long firedAt;
    public long finishedAt;
    /** The response's first 512 bytes. */
    public String executionResult;
}
