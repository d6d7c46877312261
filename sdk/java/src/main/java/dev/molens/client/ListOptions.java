package dev.molens.client;

import java.util.Arrays;
import java.util.List;

/** Filters of {@link MolensClient#listTasks}; unset ones are left out. */
public final class ListOptions {
    List<String> status;
    String type;
    String scene;
    String url;
    Integer limit;
    String cursor;
    String namespace;

    /** Any of these statuses. */
    public ListOptions setStatus(String... v) { status = Arrays.asList(v); return this; }
    public ListOptions setType(String v) { type = v; return this; }
    /** Exact scene. */
    public ListOptions setScene(String v) { scene = v; return this; }
    /** Case-insensitive substring of callback_url. */
    public ListOptions setUrl(String v) { url = v; return this; }
    /** Page size 1..1000 (server default 100). */
    public ListOptions setLimit(Integer v) { limit = v; return this; }
    public ListOptions setCursor(String v) { cursor = v; return this; }
    /** That namespace's alone (unset: the client's {@link MolensClient.Builder#namespace}, else every one the key reads). */
    public ListOptions setNamespace(String v) { namespace = v; return this; }
}
