package dev.molens.client;

/** A schedule to preview ({@link MolensClient#schedulePreview}); unset parameters take the server's defaults. */
public final class PreviewRequest {
    String type;
    String cronExpr;
    String timezone;
    Long intervalMs;
    Long runAt;
    Integer count;
    Long after;

    public PreviewRequest setType(String v) { type = v; return this; }
    public PreviewRequest setCronExpr(String v) { cronExpr = v; return this; }
    public PreviewRequest setTimezone(String v) { timezone = v; return this; }
    public PreviewRequest setIntervalMs(Long v) { intervalMs = v; return this; }
    public PreviewRequest setRunAt(Long v) { runAt = v; return this; }
    public PreviewRequest setCount(Integer v) { count = v; return this; }
    public PreviewRequest setAfter(Long v) { after = v; return this; }
}
