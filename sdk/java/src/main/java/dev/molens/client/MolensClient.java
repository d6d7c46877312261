package dev.molens.client;

import com.fasterxml.jackson.annotation.JsonAutoDetect;
import com.fasterxml.jackson.annotation.JsonInclude;
import com.fasterxml.jackson.annotation.PropertyAccessor;
import com.fasterxml.jackson.core.JsonParseException;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JavaType;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.PropertyNamingStrategies;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.ConnectException;
import java.net.HttpURLConnection;
import java.net.URL;
import java.net.URLEncoder;
import java.security.SecureRandom;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ThreadLocalRandom;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * A client of one Molens cluster over {@link HttpURLConnection} (JDK 8 and later). Thread-safe.
 *
 * <pre>{@code
 * MolensClient c = MolensClient.builder("http://127.0.0.1:18081", "http://127.0.0.1:18082").build();
 * Task t = c.create(new TaskRequest().setType("delayed").setIntervalMs(5000L)
 *         .setCallbackUrl("http://127.0.0.1:18081/api/v1/test/callback"));
 * c.pause(t.id);
 * }</pre>
 *
 * <p>Behaviour, as in the Python SDK (molens/client.py):
 * <ul>
 * <li><b>Leader discovery.</b> Requests go to the node believed to lead (first the first address). A
 * follower answers writes with 307; the client re-sends the same request (body included) to the leader
 * named by {@code X-Molens-Leader} (or {@code Location}) and remembers it. After 5 redirects in a row
 * (nodes naming each other while an election settles) it backs off and asks again, within its attempts.
 * A redirect from an {@code https://} node to a plain {@code http://} address (any case) is not followed (the
 * token would go unencrypted): the next configured node is asked. On a connection error it moves to the next
 * address.</li>
 * <li><b>Retries</b> with exponential backoff and full jitter (a random delay in
 * [0, min(max, base * 2^n)]), bounded by attempts and a deadline (an attempt's connect and read timeouts
 * are cut to what is left of it). The first attempt always goes; a retry only when at least 100 ms of the
 * deadline are left, and the backoff before it ends that long before the deadline: with less left the call
 * gives up as when the deadline is spent (a retry sent with a millisecond could not succeed, and would turn a
 * write's clean refusal into an unknown outcome). Retried: on connection errors, on a proxy's 502/504 (as a
 * lost answer: no node answers these), on 503 and on 507 (the leader's disk is full; nothing was applied),
 * waiting at least {@code Retry-After} once a few attempts have failed. Other errors are thrown at once as
 * {@link ApiException} with the API's code, field and reason; so is an answer that is no node's (an unexpected
 * 3xx, a 2xx whose body is not one JSON object, a body longer than {@link Builder#maxResponseBytes}).</li>
 * <li><b>Idempotency.</b> {@link #create}, {@link #createAll} and {@link #createAllIds} give every task without an
 * idempotency key a fresh, time-ordered one ({@link #newIdempotencyKey()}), so a retry after a lost
 * response returns the task the first attempt created; when every attempt of a create was sent and went
 * unanswered, or its retry met 404/409/412/429 or a redirect it will not follow, {@link OutcomeUnknownException} says so and carries the
 * keys ({@link OutcomeUnknownException#getIdempotencyKeys()}: create again with them to find out). A trigger,
 * backfill, redrive, flow deletion or versioned update is never sent twice: its first lost answer throws
 * {@link OutcomeUnknownException}. When a retried pause/resume/delete meets 404/409/412/429 after an unknown
 * outcome, {@link OutcomeUnknownException} is thrown instead. A request that never left (the connection,
 * name lookup or TLS handshake failed) is not a lost answer: it is sent again, to the next node.</li>
 * <li>Reads go to the same node as writes, so a client reads its own writes.</li>
 * </ul>
 */
public final class MolensClient implements AutoCloseable {
    static final ObjectMapper JSON = new ObjectMapper()
            .setPropertyNamingStrategy(PropertyNamingStrategies.SNAKE_CASE)
            .setVisibility(PropertyAccessor.ALL, JsonAutoDetect.Visibility.NONE)
            .setVisibility(PropertyAccessor.FIELD, JsonAutoDetect.Visibility.ANY)
            .setSerializationInclusion(JsonInclude.Include.NON_NULL)
            .configure(DeserializationFeature.FAIL_ON_UNKNOWN_PROPERTIES, false)
            .configure(DeserializationFeature.READ_UNKNOWN_ENUM_VALUES_AS_NULL, true); // a newer server's value
    /** {@link #JSON} keeping a patch's null values: they reset a field ({@link RetryPolicy} still leaves its nulls out). */
    private static final ObjectMapper PATCH_JSON = JSON.copy().setSerializationInclusion(JsonInclude.Include.ALWAYS);
    private static final SecureRandom RANDOM = new SecureRandom();
    /** RFC 7240: a batch create answers each item with the task's id alone. */
    private static final Map<String, String> PREFER_MINIMAL = Collections.singletonMap("Prefer", "return=minimal");
    private static final char[] HEX = "0123456789abcdef".toCharArray();
    /**
     * Consecutive redirects followed before the client takes them for a loop (nodes naming each other as
     * leader while an election settles) and backs off before asking again.
     */
    static final int MAX_REDIRECTS = 5;
    /**
     * The least time of the retry deadline a retry (attempt 2 and later) is sent with: with less left the call gives
     * up, and the backoff before a retry ends this long before the deadline. The Python SDK's {@code MIN_ATTEMPT_S}, the Go
     * SDK's {@code MinAttempt}.
     */
    public static final long MIN_ATTEMPT_MS = 100;

    /**
     * {@link #MIN_ATTEMPT_MS}, a field so that the tests can widen it (a loaded machine's timers wake late; a wider
     * window keeps their checks about the rule, not about the scheduler).
     */
    static volatile long minAttemptMs = MIN_ATTEMPT_MS;
    /**
     * The longest answer body the client reads ({@link Builder#maxResponseBytes}), as the Go and Python SDKs': a
     * page of 1,000 tasks of the largest default payload is about 76 MiB; a longer one is no node's answer.
     */
    public static final int DEFAULT_MAX_RESPONSE_BYTES = 256 << 20;
    /** The most {@link Builder#maxResponseBytes} takes: one more byte is read, and a Java array holds a little under 2^31. */
    static final int MAX_RESPONSE_BYTES_LIMIT = Integer.MAX_VALUE - 16;

    private final List<String> addrs;
    private final String token;
    private final int connectTimeoutMs;
    private final int readTimeoutMs;
    private final int maxAttempts;
    private final long retryDeadlineMs;
    private final long backoffBaseMs;
    private final long backoffMaxMs;
    private final int maxResponseBytes;
    private final String namespace;
    private volatile String target;

    /** Options of a client; {@link #build()} makes it. */
    public static final class Builder {
        private final List<String> addrs;
        private String token;
        private int connectTimeoutMs = 5000;
        private int readTimeoutMs = 10000;
        private int maxAttempts = 8;
        private long retryDeadlineMs = 30000;
        private long backoffBaseMs = 50;
        private long backoffMaxMs = 2000;
        private int maxResponseBytes = DEFAULT_MAX_RESPONSE_BYTES;
        private String namespace;

        Builder(List<String> addrs) { this.addrs = addrs; }

        /**
         * The namespace of every create whose request names none, and the one lists (tasks, executions,
         * dead letters) and bulk dead-letter actions are limited to when their options name none. Unset:
         * creates go to the server's {@code default}, lists show every namespace the key may read.
         */
        public Builder namespace(String v) { namespace = v; return this; }

        /** Sends {@code Authorization: Bearer <token>} (the nodes' http.auth_token). */
        public Builder token(String v) { token = v; return this; }
        /** Per-attempt TCP connect (and TLS handshake) timeout (default 5 s), cut to what is left of {@link #retryDeadlineMs}. */
        public Builder connectTimeoutMs(int v) { connectTimeoutMs = v; return this; }
        /** Per-request read timeout (default 10 s), cut to what is left of {@link #retryDeadlineMs}. */
        public Builder readTimeoutMs(int v) { readTimeoutMs = v; return this; }
        /**
         * Attempts of one call (default 8). Following a redirect to the leader does not count; asking again after
         * 5 redirects in a row, or another node after one to plain http, does.
         */
        public Builder maxAttempts(int v) { maxAttempts = v; return this; }
        /**
         * Time one call spends retrying (default 30 s). The first attempt always goes, however short this is; a
         * retry only with at least 100 ms of it left (with less, the call gives up as when it is spent), and the
         * backoff before a retry ends 100 ms before it.
         */
        public Builder retryDeadlineMs(long v) { retryDeadlineMs = v; return this; }
        /**
         * Attempt n waits a random time in [0, min(max, base * 2^(n-1))] (defaults 50 ms, 2 s), at most until
         * 100 ms before the retry deadline (a retry gets at least that long).
         */
        public Builder backoffMs(long base, long max) { backoffBaseMs = base; backoffMaxMs = max; return this; }
        /**
         * The longest answer body read (default {@link #DEFAULT_MAX_RESPONSE_BYTES}, 256 MiB; at most 2^31 - 17). A
         * longer answer is not read further: for a GET an {@link ApiException} 502 {@code http_error}, for a write an
         * {@link OutcomeUnknownException} (it was answered, so it may have been applied; a create's carries its keys).
         */
        public Builder maxResponseBytes(int v) { maxResponseBytes = v; return this; }

        public MolensClient build() { return new MolensClient(this); }
    }

    /** A builder for the nodes at these HTTP base URLs (any subset of the cluster). */
    public static Builder builder(String... addrs) { return new Builder(Arrays.asList(addrs)); }

    public static Builder builder(List<String> addrs) { return new Builder(new ArrayList<String>(addrs)); }

    private MolensClient(Builder b) {
        if (b.addrs.isEmpty()) {
            throw new IllegalArgumentException("give at least one node address");
        }
        List<String> bases = new ArrayList<String>();
        for (String a : b.addrs) {
            bases.add(base(a));
        }
        // as the Python SDK: a bound that is not positive would fail (or never end) every call
        positive("connectTimeoutMs", b.connectTimeoutMs);
        positive("readTimeoutMs", b.readTimeoutMs);
        positive("retryDeadlineMs", b.retryDeadlineMs);
        positive("backoffMs base", b.backoffBaseMs);
        positive("backoffMs max", b.backoffMaxMs);
        positive("maxAttempts", b.maxAttempts);
        positive("maxResponseBytes", b.maxResponseBytes);
        if (b.maxResponseBytes > MAX_RESPONSE_BYTES_LIMIT) {
            throw new IllegalArgumentException("maxResponseBytes must be at most " + MAX_RESPONSE_BYTES_LIMIT + ", got "
                    + b.maxResponseBytes);
        }
        addrs = Collections.unmodifiableList(bases);
        target = addrs.get(0);
        token = b.token;
        connectTimeoutMs = b.connectTimeoutMs;
        readTimeoutMs = b.readTimeoutMs;
        maxAttempts = b.maxAttempts;
        retryDeadlineMs = b.retryDeadlineMs;
        backoffBaseMs = b.backoffBaseMs;
        backoffMaxMs = b.backoffMaxMs;
        maxResponseBytes = b.maxResponseBytes;
        namespace = b.namespace == null ? null : Tenancy.checkedName("namespace", b.namespace);
    }

    private static void positive(String name, long v) {
        if (v <= 0) {
            throw new IllegalArgumentException(name + " must be positive, got " + v);
        }
    }

    /** The node requests go to now (the leader, once discovered). */
    public String currentNode() { return target; }

    /**
     * 32 hex digits: the wall-clock ms (48 bits) then 80 random bits, like the Python SDK's. Keys that
     * sort by time keep the server's idempotency index writes local.
     */
    public static String newIdempotencyKey() {
        byte[] r = new byte[10];
        RANDOM.nextBytes(r);
        StringBuilder sb = new StringBuilder(32);
        String ms = Long.toHexString(System.currentTimeMillis() & 0xffffffffffffL);
        for (int i = ms.length(); i < 12; i++) {
            sb.append('0');
        }
        sb.append(ms);
        for (byte x : r) {
            sb.append(HEX[(x >> 4) & 0xf]).append(HEX[x & 0xf]);
        }
        return sb.toString();
    }

    /** A copy of r with an idempotency key, and the client's namespace when r names none. */
    TaskRequest keyed(TaskRequest r) {
        TaskRequest c = r.copy();
        if (c.getIdempotencyKey() == null) {
            c.setIdempotencyKey(newIdempotencyKey());
        }
        if (c.getNamespace() == null) {
            c.setNamespace(namespace);
        }
        return c;
    }

    /** The namespace a call acts in: its own, else the client's (null: the server decides). */
    private String ns(String given) { return given != null ? given : namespace; }

    // ------------------------------------------------------------------------------------- tasks

    /**
     * Creates one task (an idempotency key is added to a copy when unset); the existing task when the key is known.
     * {@link OutcomeUnknownException} carries the key when the outcome could not be learnt: create again with it.
     */
    public Task create(TaskRequest r) {
        TaskRequest body = keyed(r);
        try {
            return call("POST", "/api/v1/tasks", body, true, type(Task.class));
        } catch (OutcomeUnknownException e) {
            e.idempotencyKeys = Collections.singletonList(body.getIdempotencyKey());
            throw e;
        }
    }

    /**
     * Creates tasks in batches of at most 1,000 (each one replicated entry) and returns them in order. A batch
     * holding an invalid task is rejected whole: {@link ApiException#getItemErrors()} by index within that batch;
     * earlier batches stay created, and every exception it throws names them ({@link MolensException#getCreated()}:
     * the failing batch starts at their count); later batches are not sent. A batch applied without some of its
     * items (their namespace deleted meanwhile) throws {@link BatchPartlyCreatedException}: every task created, that
     * batch's too, at its position among the tasks given, and the errors by that index.
     * {@link OutcomeUnknownException} carries the keys of the batch whose outcome could not be learnt, in order.
     */
    public List<Task> createAll(List<TaskRequest> rs) {
        return createAll(rs, false);
    }

    /**
     * {@link #createAll} answered with the tasks' ids alone ({@code Prefer: return=minimal}): the server
     * spares the echo of every task and the client the decoding of it. Same batches, keys and errors (the tasks of
     * {@link MolensException#getCreated()} and {@link BatchPartlyCreatedException#getTasks()} hold only their id).
     */
    public List<String> createAllIds(List<TaskRequest> rs) {
        List<String> ids = new ArrayList<String>(rs.size());
        for (Task t : createAll(rs, true)) {
            ids.add(t.id);
        }
        return ids;
    }

    private List<Task> createAll(List<TaskRequest> rs, boolean minimal) {
        List<TaskRequest> bodies = new ArrayList<TaskRequest>(rs.size());
        for (TaskRequest r : rs) {
            bodies.add(keyed(r));
        }
        List<Task> out = new ArrayList<Task>(rs.size());
        try {
            for (int i = 0; i < bodies.size(); i += 1000) {
                BatchResult res = createBatch(bodies.subList(i, Math.min(bodies.size(), i + 1000)), minimal);
                Map<Integer, ApiException> refused = new TreeMap<Integer, ApiException>();
                for (int k = 0; k < res.errors.size(); k++) {
                    if (res.errors.get(k) != null) {
                        refused.put(i + k, res.errors.get(k));
                    }
                }
                if (!refused.isEmpty()) { // applied without some items: report what it created, and stop
                    List<Task> tasks = new ArrayList<Task>(out);
                    for (int k = 0; k < res.tasks.size(); k++) {
                        tasks.add(res.errors.get(k) == null ? res.tasks.get(k) : null);
                    }
                    while (tasks.size() < bodies.size()) {
                        tasks.add(null);
                    }
                    List<String> keys = new ArrayList<String>(bodies.size());
                    for (TaskRequest b : bodies) {
                        keys.add(b.getIdempotencyKey());
                    }
                    throw new BatchPartlyCreatedException(tasks, refused, keys);
                }
                out.addAll(res.tasks);
            }
        } catch (MolensException e) { // how far it got: the failing batch starts at getCreated().size()
            e.created = Collections.unmodifiableList(new ArrayList<Task>(out));
            throw e;
        }
        return out;
    }

    static final class BatchResult {
        final List<Task> tasks;
        final List<ApiException> errors;

        BatchResult(List<Task> tasks, List<ApiException> errors) {
            this.tasks = tasks;
            this.errors = errors;
        }
    }

    /**
     * One batch request: per item the task, or the error the state machine gave it. {@link OutcomeUnknownException}
     * carries the batch's idempotency keys, in order.
     */
    BatchResult createBatch(List<TaskRequest> bodies) { return createBatch(bodies, false); }

    /**
     * {@link #createBatch(List)}; with {@code minimal} it asks for {@code Prefer: return=minimal} and each
     * task holds only its id.
     */
    BatchResult createBatch(List<TaskRequest> bodies, boolean minimal) {
        JsonNode out;
        try {
            out = postBatch(bodies, minimal ? PREFER_MINIMAL : Collections.<String, String>emptyMap());
        } catch (OutcomeUnknownException e) {
            List<String> keys = new ArrayList<String>(bodies.size());
            for (TaskRequest b : bodies) {
                keys.add(b.getIdempotencyKey());
            }
            e.idempotencyKeys = Collections.unmodifiableList(keys);
            throw e;
        }
        List<ApiException> errors = batchErrors(bodies.size(), out);
        List<Task> tasks = new ArrayList<Task>();
        for (JsonNode it : out.path("items")) {
            Task t = null;
            if (!it.isNull() && minimal) {
                t = new Task();
                t.id = it.path("id").asText();
            } else if (!it.isNull()) {
                t = JSON.convertValue(it, Task.class);
            }
            tasks.add(t);
        }
        return new BatchResult(tasks, errors);
    }

    private JsonNode postBatch(List<TaskRequest> bodies, Map<String, String> extra) {
        Map<String, Object> body = new HashMap<String, Object>();
        body.put("tasks", bodies);
        return call("POST", "/api/v1/tasks/batch", body, true, type(JsonNode.class), extra);
    }

    /**
     * Per item of a batch of {@code n}, the error the answer gave it (its status by its code: {@link #itemStatus}),
     * a 500 for an item answered with nothing, or null.
     */
    private static List<ApiException> batchErrors(int n, JsonNode out) {
        List<ApiException> errors = new ArrayList<ApiException>();
        JsonNode items = out.path("items");
        if (items.size() != n) {
            throw new MolensException("a batch of " + n + " answered " + items.size() + " items");
        }
        for (JsonNode it : items) {
            errors.add(it.isNull() ? new ApiException(500, "internal", "the server returned no task for this item", null, null) : null);
        }
        for (JsonNode e : out.path("errors")) {
            int i = e.path("index").asInt(-1);
            if (i >= 0 && i < errors.size()) {
                errors.set(i, itemError(e));
            }
        }
        return errors;
    }

    /** The task; {@link ApiException} 404 when there is none. */
    public Task get(String id) { return call("GET", "/api/v1/tasks/" + enc(id), null, true, type(Task.class)); }

    /**
     * Changes the task's definition in place ({@code PATCH}, a JSON merge patch): a field given
     * replaces the stored one, a {@code null} value resets it to its default, a field left out is
     * kept. With {@code ifVersion} (a task's {@link Task#version}) the change applies only while the
     * task is still at that version, else {@link PreconditionFailedException} (412);
     * with {@code null}, to the current version (and retried safely after a lost answer).
     * Sent as {@code POST} with {@code X-HTTP-Method-Override: PATCH}: {@link HttpURLConnection}
     * cannot send {@code PATCH}.
     */
    public Task update(String id, Map<String, ?> changes, Long ifVersion) {
        Map<String, String> h = new LinkedHashMap<String, String>();
        h.put("X-HTTP-Method-Override", "PATCH");
        if (ifVersion != null) {
            h.put("If-Match", "\"" + ifVersion + "\"");
        }
        byte[] body;
        try {
            body = PATCH_JSON.writeValueAsBytes(changes);
        } catch (IOException e) {
            throw new MolensException("encoding the request: " + e.getMessage(), e);
        }
        return call("POST", "/api/v1/tasks/" + enc(id), body, ifVersion == null, type(Task.class), h);
    }

    /** Deletes the task and its history; returns it as it was. */
    public Task delete(String id) { return call("DELETE", "/api/v1/tasks/" + enc(id), null, true, type(Task.class)); }

    /** Takes a pending, firing or awaiting_ack task off the schedule (409 otherwise). */
    public Task pause(String id) { return action(id, "pause"); }

    /** Puts a paused (or inactive periodic) task back on the schedule; a periodic task drops what it missed while paused. */
    public Task resume(String id) { return action(id, "resume"); }

    /**
     * {@link #resume(String)} with {@code resume_from}: {@link ResumeFrom#SCHEDULE} takes a periodic task up at the
     * instant it was waiting for and applies its catchup to what it missed.
     */
    public Task resume(String id, ResumeFrom from) {
        return call("POST", "/api/v1/tasks/" + enc(id) + "/resume", Collections.singletonMap("resume_from", from), true,
                type(Task.class));
    }

    /** Runs the task's upcoming occurrence now. */
    public Task trigger(String id) {
        return call("POST", "/api/v1/tasks/" + enc(id) + "/trigger", null, false, type(Task.class)); // never sent twice
    }

    /**
     * Fires the periodic task's occurrences scheduled in [start, end) (epoch ms, end not after now) now,
     * oldest first, each its own occurrence, then resumes its schedule (at most 10,000; docs/api.md#backfill).
     * Not re-sent after an unknown outcome: a second backfill would fire the range again, or be refused
     * while the first runs.
     */
    public Backfill backfill(String id, long start, long end) {
        Map<String, Long> body = new LinkedHashMap<String, Long>();
        body.put("start", start);
        body.put("end", end);
        return call("POST", "/api/v1/tasks/" + enc(id) + "/backfill", body, false, type(Backfill.class));
    }

    /** Pause or resume: sent again after a lost answer (a repeat is refused with 409, which then says so). */
    private Task action(String id, String what) {
        return call("POST", "/api/v1/tasks/" + enc(id) + "/" + what, null, true, type(Task.class));
    }

    /**
     * One page of tasks in creation order. A page can hold fewer than the limit while nextCursor is set:
     * follow it until null, or use {@link #listAllTasks}.
     */
    public Page<Task> listTasks(ListOptions o) {
        Map<String, Object> q = new LinkedHashMap<String, Object>();
        if (o.status != null && !o.status.isEmpty()) {
            q.put("status", join(o.status));
        }
        q.put("type", o.type);
        q.put("scene", o.scene);
        q.put("url", o.url);
        q.put("namespace", ns(o.namespace));
        q.put("limit", o.limit);
        q.put("cursor", o.cursor);
        return call("GET", "/api/v1/tasks" + query(q), null, true, pageOf(Task.class));
    }

    /** Every matching task in creation order, following cursors. */
    public List<Task> listAllTasks(ListOptions o) {
        List<Task> out = new ArrayList<Task>();
        ListOptions cur = copy(o);
        while (true) {
            Page<Task> p = listTasks(cur);
            out.addAll(p.items);
            if (p.nextCursor == null || p.nextCursor.isEmpty()) {
                return out;
            }
            cur.cursor = p.nextCursor;
        }
    }

    private static ListOptions copy(ListOptions o) {
        ListOptions c = new ListOptions();
        c.status = o.status; c.type = o.type; c.scene = o.scene; c.url = o.url; c.limit = o.limit; c.cursor = o.cursor;
        c.namespace = o.namespace;
        return c;
    }

    // -------------------------------------------------------------------------------- executions

    /** One page of a task's executions, newest first. */
    public Page<Execution> taskExecutions(String taskId, ExecutionOptions o) {
        return executionsAt("/api/v1/tasks/" + enc(taskId) + "/executions", o, false);
    }

    /** One page of every execution on the answering node's replica (one task's with taskId), newest first. */
    public Page<Execution> executions(ExecutionOptions o) {
        return executionsAt("/api/v1/executions", o, true);
    }

    private Page<Execution> executionsAt(String path, ExecutionOptions o, boolean withTask) {
        Map<String, Object> q = new LinkedHashMap<String, Object>();
        if (withTask) {
            q.put("task_id", o.taskId);
            q.put("namespace", ns(o.namespace));
        }
        q.put("result", o.result);
        q.put("since", o.since);
        q.put("until", o.until);
        q.put("limit", o.limit);
        q.put("cursor", o.cursor);
        return call("GET", path + query(q), null, true, pageOf(Execution.class));
    }

    // ------------------------------------------------------------------------------------- flows

    /** Every flow with settings and every flow the leader let a fire go for in the last minute (or holds fires of), by key. */
    public List<Flow> listFlows() {
        JsonNode out = get("/api/v1/flows", JsonNode.class);
        return JSON.convertValue(out.path("items"), JSON.getTypeFactory().constructCollectionType(List.class, Flow.class));
    }

    /** One flow; {@link NotFoundException} when it has no settings and nothing in flight, held or throttled. */
    public Flow getFlow(String key) { return get(flowPath(key), Flow.class); }

    /** Replaces the flow's limits whole (replicated through Raft); the flow as {@link #getFlow} shows it. */
    public Flow setFlow(String key, FlowLimits limits) { return call("PUT", flowPath(key), limits, true, type(Flow.class)); }

    /**
     * Forgets the flow's settings: its fires go unlimited ({@link NotFoundException} when it has none). Not re-sent
     * after an unknown outcome: the retry would answer 404.
     */
    public Flow deleteFlow(String key) { return call("DELETE", flowPath(key), null, false, type(Flow.class)); }

    /** Holds every fire of the flow until {@link #resumeFlow}; only the paused flag changes (a flow without settings gets some). */
    public Flow pauseFlow(String key) { return call("POST", flowPath(key) + "/pause", null, true, type(Flow.class)); }

    /** Lets the flow's held fires go, in order, within its limits. */
    public Flow resumeFlow(String key) { return call("POST", flowPath(key) + "/resume", null, true, type(Flow.class)); }

    private static String flowPath(String key) { return "/api/v1/flows/" + enc(key); }

    // ------------------------------------------------------------------------------ dead letters

    /**
     * One page of dead letters, newest first (one task's: in id order). A page can hold fewer than the limit
     * while nextCursor is set: follow it until null, or use {@link #listAllDeadLetters}.
     */
    public Page<DeadLetter> listDeadLetters(DeadLetterOptions o) {
        Map<String, Object> q = new LinkedHashMap<String, Object>();
        q.put("task_id", o.taskId);
        q.put("flow", o.flow);
        q.put("kind", o.kind);
        q.put("since", o.since);
        q.put("until", o.until);
        q.put("limit", o.limit);
        q.put("cursor", o.cursor);
        q.put("namespace", ns(o.namespace));
        return call("GET", "/api/v1/dead-letters" + query(q), null, true, pageOf(DeadLetter.class));
    }

    /** Every matching dead letter, following cursors. */
    public List<DeadLetter> listAllDeadLetters(DeadLetterOptions o) {
        List<DeadLetter> out = new ArrayList<DeadLetter>();
        DeadLetterOptions cur = new DeadLetterOptions().setTaskId(o.taskId).setFlow(o.flow).setKind(o.kind).setSince(o.since)
                .setUntil(o.until).setLimit(o.limit).setCursor(o.cursor).setNamespace(o.namespace);
        while (true) {
            Page<DeadLetter> p = listDeadLetters(cur);
            out.addAll(p.items);
            if (p.nextCursor == null || p.nextCursor.isEmpty()) {
                return out;
            }
            cur.cursor = p.nextCursor;
        }
    }

    /** One dead letter; {@link NotFoundException} when there is none. */
    public DeadLetter getDeadLetter(String id) { return get(deadPath(id), DeadLetter.class); }

    /**
     * Delivers the dead letter's occurrence again through the task's current definition (the same
     * {@code X-Fire-ID}, attempts continuing) and removes the dead letter; returns it (with a
     * {@link DeadLetter#warning} for an at_most_once task). {@link NotFoundException} when it or its task is
     * gone, {@link ConflictException} when the task is paused or a delayed task is no longer failed. Not
     * re-sent after an unknown outcome.
     */
    public DeadLetter redriveDeadLetter(String id) {
        return call("POST", deadPath(id) + "/redrive", null, false, type(DeadLetter.class));
    }

    /** Redrives every dead letter matching the filter (at most its limit); send it again while {@link BulkResult#more}. */
    public BulkResult redriveDeadLetters(DeadLetterFilter f) {
        Map<String, Object> body = new LinkedHashMap<String, Object>();
        body.put("task_id", f.taskId);
        body.put("flow", f.flow);
        body.put("kind", f.kind);
        body.put("since", f.since);
        body.put("until", f.until);
        body.put("limit", f.limit);
        body.put("namespace", ns(f.namespace));
        body.values().removeAll(Collections.singleton(null));
        return call("POST", "/api/v1/dead-letters/redrive", body, false, type(BulkResult.class));
    }

    /** Deletes one dead letter; {@link NotFoundException} when there is none. */
    public void deleteDeadLetter(String id) { call("DELETE", deadPath(id), null, true, type(JsonNode.class)); }

    /**
     * Deletes the dead letters matching the filter (at most its limit), or every one with {@code setAll(true)}.
     * An empty filter is the API's to refuse ({@link ApiException} 400, field {@code all}). The client's
     * {@link Builder#namespace} is no filter: it limits a filter that names something else, or {@code setAll(true)}
     * (every dead letter of that namespace); a {@link DeadLetterFilter#setNamespace} is a filter of its own.
     * With a limit it is not sent twice after a lost answer ({@link OutcomeUnknownException}): a second
     * request could delete up to the limit more. Without one it is sent again (deleting what still matches
     * does no harm), and the result then counts what the retry deleted.
     */
    public BulkResult deleteDeadLetters(DeadLetterFilter f) {
        Map<String, Object> q = new LinkedHashMap<String, Object>();
        q.put("task_id", f.taskId);
        q.put("flow", f.flow);
        q.put("kind", f.kind);
        q.put("since", f.since);
        q.put("until", f.until);
        boolean filtered = f.namespace != null || f.all || f.taskId != null || f.flow != null || f.kind != null
                || f.since != null || f.until != null;
        q.put("limit", f.limit);
        q.put("all", f.all ? "true" : null);
        q.put("namespace", filtered ? ns(f.namespace) : null);
        return call("DELETE", "/api/v1/dead-letters" + query(q), null, f.limit == null, type(BulkResult.class));
    }

    private static String deadPath(String id) { return "/api/v1/dead-letters/" + enc(id); }

    // ---------------------------------------------------------------------- namespaces and keys

    /** The namespaces the key may read, {@code default} first. */
    public List<Tenancy.Namespace> listNamespaces() {
        return this.<Page<Tenancy.Namespace>>call("GET", "/api/v1/namespaces", null, true, pageOf(Tenancy.Namespace.class)).items;
    }

    /** One namespace; {@link NotFoundException} when it does not exist or lies outside the key's. */
    public Tenancy.Namespace getNamespace(String name) { return get(namespacePath(name), Tenancy.Namespace.class); }

    /** Admin: makes a namespace (null quotas: unlimited); {@link ConflictException} when it exists. */
    public Tenancy.Namespace createNamespace(String name, Tenancy.Quotas quotas) {
        Map<String, Object> body = new LinkedHashMap<String, Object>();
        body.put("name", Tenancy.checkedName("name", name));
        body.put("quotas", quotas);
        return call("POST", "/api/v1/namespaces", body, true, type(Tenancy.Namespace.class));
    }

    /**
     * Admin: replaces the namespace's quotas whole (a quota left null is unlimited: to change one, start from
     * {@link #getNamespace}'s); {@link ConflictException} for {@code default}. Sent as
     * {@code POST} with {@code X-HTTP-Method-Override: PATCH}, as {@link #update}.
     */
    public Tenancy.Namespace updateNamespace(String name, Tenancy.Quotas quotas) {
        Map<String, Object> body = Collections.<String, Object>singletonMap("quotas", quotas != null ? quotas : new Tenancy.Quotas());
        return call("POST", namespacePath(name), body, true, type(Tenancy.Namespace.class),
                Collections.singletonMap("X-HTTP-Method-Override", "PATCH"));
    }

    /** Admin: deletes an empty namespace; {@link ConflictException} while it holds tasks, and for {@code default}. */
    public void deleteNamespace(String name) { call("DELETE", namespacePath(name), null, true, type(JsonNode.class)); }

    /**
     * Admin: makes an API key of {@code role} for {@code namespaces} (names, or {@code "*"} for every one).
     * The answer's {@link Tenancy.ApiKey#secret} is shown this once: give it to a client as its
     * {@link Builder#token}. Not re-sent after an unknown outcome (that would make two keys).
     */
    public Tenancy.ApiKey createApiKey(String name, Tenancy.Role role, List<String> namespaces) {
        Map<String, Object> body = new LinkedHashMap<String, Object>();
        body.put("name", name);
        body.put("role", role);
        body.put("namespaces", namespaces);
        return call("POST", "/api/v1/keys", body, false, type(Tenancy.ApiKey.class));
    }

    /** Admin: every API key, oldest first, never a secret. */
    public List<Tenancy.ApiKey> listApiKeys() {
        return this.<Page<Tenancy.ApiKey>>call("GET", "/api/v1/keys", null, true, pageOf(Tenancy.ApiKey.class)).items;
    }

    /** Admin: one key, without its secret. */
    public Tenancy.ApiKey getApiKey(String id) { return get("/api/v1/keys/" + enc(id), Tenancy.ApiKey.class); }

    /** Admin: revokes a key on every node; {@link ConflictException} for {@code bootstrap}. */
    public void deleteApiKey(String id) { call("DELETE", "/api/v1/keys/" + enc(id), null, true, type(JsonNode.class)); }

    private static String namespacePath(String name) { return "/api/v1/namespaces/" + Tenancy.checkedName("name", name); }

    // ------------------------------------------------------------------------- cluster and stats

    public Cluster.Status clusterStatus() { return get("/api/v1/cluster/status", Cluster.Status.class); }

    public Cluster.LeaderInfo clusterLeader() { return get("/api/v1/cluster/leader", Cluster.LeaderInfo.class); }

    public Cluster.ClusterStats clusterStats() { return get("/api/v1/cluster/stats", Cluster.ClusterStats.class); }

    /** This node's statistics. */
    public Cluster.Stats stats() { return get("/api/v1/stats", Cluster.Stats.class); }

    /** Another member's statistics (asked over its HTTP API), or this node's only ({@code local}). */
    public Cluster.Stats stats(String nodeId, boolean local) {
        Map<String, Object> q = new LinkedHashMap<String, Object>();
        q.put("node_id", nodeId);
        q.put("local", local ? "1" : null);
        return get("/api/v1/stats" + query(q), Cluster.Stats.class);
    }

    /** Callback latency per URL; null arguments take the server's defaults. */
    public Cluster.UrlStatsList urlStats(Long since, Long until, String url, Long bucketMs, Integer limit) {
        Map<String, Object> q = new LinkedHashMap<String, Object>();
        q.put("since", since);
        q.put("until", until);
        q.put("url", url);
        q.put("bucket_ms", bucketMs);
        q.put("limit", limit);
        return get("/api/v1/stats/urls" + query(q), Cluster.UrlStatsList.class);
    }

    public Cluster.WheelDistribution wheelDistribution() {
        return get("/api/v1/timewheel/distribution", Cluster.WheelDistribution.class);
    }

    /** The time wheel as a PNG heatmap (null level: every level; null width: 800). */
    public byte[] wheelDistributionPng(Integer level, Integer width) {
        Map<String, Object> q = new LinkedHashMap<String, Object>();
        q.put("level", level);
        q.put("width", width);
        return send("GET", "/api/v1/timewheel/distribution.png" + query(q), null, true);
    }

    /** The next fire times of a schedule, validated like a create. */
    public Cluster.SchedulePreview schedulePreview(PreviewRequest p) {
        Map<String, Object> q = new LinkedHashMap<String, Object>();
        q.put("type", p.type);
        q.put("cron_expr", p.cronExpr);
        q.put("timezone", p.timezone);
        q.put("interval_ms", p.intervalMs);
        q.put("run_at", p.runAt);
        q.put("count", p.count);
        q.put("after", p.after);
        return get("/api/v1/schedule/preview" + query(q), Cluster.SchedulePreview.class);
    }

    /** The answering node's Prometheus text. */
    public String metrics() {
        try {
            return new String(send("GET", "/metrics", null, true), "UTF-8");
        } catch (java.io.UnsupportedEncodingException e) {
            throw new IllegalStateException(e);
        }
    }

    public Cluster.Health healthz() { return get("/healthz", Cluster.Health.class); }

    public Cluster.Ready readyz() { return get("/readyz", Cluster.Ready.class); }

    /** Nothing to release: HttpURLConnection pools keep-alive connections JVM-wide. */
    @Override
    public void close() {}

    // --------------------------------------------------------------------------------- transport

    private <T> T get(String path, Class<T> cls) { return call("GET", path, null, true, type(cls)); }

    private static JavaType type(Class<?> cls) { return JSON.getTypeFactory().constructType(cls); }

    private static JavaType pageOf(Class<?> cls) {
        return JSON.getTypeFactory().constructParametricType(Page.class, cls);
    }

    private <T> T call(String method, String path, Object body, boolean safe, JavaType type) {
        return call(method, path, body, safe, type, Collections.<String, String>emptyMap());
    }

    private <T> T call(String method, String path, Object body, boolean safe, JavaType type, Map<String, String> extra) {
        return decode(method + " " + path, send(method, path, body, safe, extra), type);
    }

    /**
     * A 2xx answer's body as {@code type}. One that is not a single JSON object (not JSON, {@code null}, trailing
     * bytes) is no node's answer: {@link ApiException} 502 {@code http_error}, as in the Python SDK. An object that
     * does not fit the type is a {@link MolensException}. (Trailing tokens are checked here rather than by
     * {@code FAIL_ON_TRAILING_TOKENS}, whose error cannot be told from a misfit.)
     */
    static <T> T decode(String op, byte[] raw, JavaType type) {
        try (JsonParser p = JSON.getFactory().createParser(raw)) {
            if (p.nextToken() != JsonToken.START_OBJECT) {
                throw notAnAnswer(op, raw);
            }
            T out = JSON.readValue(p, type);
            if (p.nextToken() != null) {
                throw notAnAnswer(op, raw);
            }
            return out;
        } catch (JsonParseException e) {
            throw notAnAnswer(op, raw);
        } catch (IOException e) {
            throw new MolensException(op + ": decoding the answer: " + e.getMessage(), e);
        }
    }

    private static ApiException notAnAnswer(String op, byte[] raw) {
        String text = new String(raw, 0, Math.min(200, raw.length), java.nio.charset.StandardCharsets.UTF_8);
        return new ApiException(502, "http_error", op + ": the answer is not a JSON object: " + text, null, null);
    }

    private static String base(String raw) {
        try {
            URL u = new URL(raw.trim());
            if (!u.getProtocol().equals("http") && !u.getProtocol().equals("https") || u.getHost().isEmpty()) {
                throw new IllegalArgumentException(raw + " is not an http(s) URL");
            }
            return u.getProtocol() + "://" + u.getAuthority();
        } catch (java.net.MalformedURLException e) {
            throw new IllegalArgumentException(raw + " is not an http(s) URL", e);
        }
    }

    private static String enc(String s) {
        try {
            return URLEncoder.encode(s, "UTF-8").replace("+", "%20");
        } catch (java.io.UnsupportedEncodingException e) {
            throw new IllegalStateException(e);
        }
    }

    private static String join(List<String> xs) {
        StringBuilder sb = new StringBuilder();
        for (String x : xs) {
            if (sb.length() > 0) {
                sb.append(',');
            }
            sb.append(x);
        }
        return sb.toString();
    }

    private static String query(Map<String, Object> q) {
        StringBuilder sb = new StringBuilder();
        for (Map.Entry<String, Object> e : q.entrySet()) {
            if (e.getValue() == null) {
                continue;
            }
            sb.append(sb.length() == 0 ? '?' : '&').append(enc(e.getKey())).append('=').append(enc(String.valueOf(e.getValue())));
        }
        return sb.toString();
    }

    private synchronized String nextNode(String failed) {
        int i = addrs.indexOf(failed);
        target = addrs.get((i + 1) % addrs.size());
        return target;
    }

    /**
     * The longest wait before attempt {@code n + 1}: {@code min(max, base * 2^(n-1))}, saturating: no attempt count
     * or base overflows it (a shift past 63 bits would wrap to a negative or a smaller delay).
     */
    static long backoffCeilingMs(int n, long baseMs, long maxMs) {
        int shift = Math.min(Math.max(n - 1, 0), 63);
        return baseMs > maxMs >> shift ? maxMs : baseMs << shift; // base <= max / 2^shift: base * 2^shift <= max
    }

    /**
     * Whether a retry may be sent: at least {@link #MIN_ATTEMPT_MS} of the retry deadline is left (with less, it could
     * not succeed, and a write sent with a millisecond would turn a clean refusal into an unknown outcome).
     */
    private static boolean retryFits(long deadline) {
        return deadline - System.currentTimeMillis() >= minAttemptMs;
    }

    /**
     * Sleeps before attempt {@code n + 1}: a random time in [0, ceiling], at least {@code floorMs} ({@code Retry-After}),
     * at most until {@link #MIN_ATTEMPT_MS} before the deadline, so that the retry still has that long.
     */
    private void backoff(int n, long floorMs, long deadline) {
        long ceil = backoffCeilingMs(n, backoffBaseMs, backoffMaxMs);
        // nextLong's bound is exclusive: ceil + 1, unless that is past a long
        long d = ThreadLocalRandom.current().nextLong(ceil == Long.MAX_VALUE ? ceil : ceil + 1);
        d = Math.max(d, floorMs);
        d = Math.min(d, deadline - System.currentTimeMillis() - minAttemptMs);
        if (d <= 0) {
            return;
        }
        try {
            Thread.sleep(d);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new MolensException("interrupted while backing off", e);
        }
    }

    private static final class Answer {
        int status;
        byte[] body;
        /** An error answer whose body {@link HttpURLConnection} dropped (a 401 to a streamed request). */
        boolean bodyUnread;
        /** The body was longer than {@link #maxResponseBytes}: only its start was read ({@link #body}). */
        boolean tooLarge;
        Map<String, List<String>> headers;

        String header(String name) {
            for (Map.Entry<String, List<String>> e : headers.entrySet()) {
                if (e.getKey() != null && e.getKey().equalsIgnoreCase(name) && !e.getValue().isEmpty()) {
                    return e.getValue().get(0);
                }
            }
            return null;
        }

        /** {@code Retry-After} in whole seconds, or null when absent or not a number. */
        Integer retryAfter() {
            String ra = header("Retry-After");
            return ra != null && ra.trim().matches("\\d{1,6}") ? Integer.valueOf(ra.trim()) : null;
        }
    }

    /**
     * A proxy's 502/504 (no node answers these): the node behind it did not answer, and may have had the
     * request. {@link #send} takes it as a lost answer, as an {@link IOException} after sending.
     */
    private static final class ProxyGaveUpException extends IOException {
        private static final long serialVersionUID = 1L;
        final ApiException answer;

        ProxyGaveUpException(ApiException answer) {
            super(answer.getMessage(), answer);
            this.answer = answer;
        }
    }

    /** The request never left: the connection, its name lookup or its TLS handshake failed. */
    private static final class NotSentException extends IOException {
        private static final long serialVersionUID = 1L;

        NotSentException(IOException cause) { super(cause.toString(), cause); }

        @Override
        public String toString() { return "not sent: " + getMessage(); }
    }

    private Answer exchange(String base, String method, String path, byte[] data, Map<String, String> extra, long deadline)
            throws IOException {
        HttpURLConnection conn = (HttpURLConnection) new URL(base + path).openConnection(java.net.Proxy.NO_PROXY);
        conn.setInstanceFollowRedirects(false);
        // both cut to what is left of the deadline; 0 would be no timeout at all: a deadline already passed
        // still gets a millisecond (only the first attempt, or a redirect followed within an attempt: a retry is
        // sent with at least MIN_ATTEMPT_MS left)
        long left = deadline - System.currentTimeMillis();
        conn.setConnectTimeout((int) Math.max(1, Math.min(connectTimeoutMs, left)));
        conn.setReadTimeout((int) Math.max(1, Math.min(readTimeoutMs, left)));
        conn.setRequestMethod(method);
        conn.setRequestProperty("Accept", "application/json");
        for (Map.Entry<String, String> e : extra.entrySet()) {
            conn.setRequestProperty(e.getKey(), e.getValue());
        }
        if (token != null) {
            conn.setRequestProperty("Authorization", "Bearer " + token);
        }
        if (data != null) {
            conn.setDoOutput(true);
            conn.setRequestProperty("Content-Type", "application/json");
            conn.setFixedLengthStreamingMode(data.length);
        } else if (!method.equals("GET")) {
            // A streamed request is never re-sent by HttpURLConnection itself: without it, a POST whose
            // connection closed unanswered is silently sent again (sun.net.http.retryPost), and a
            // trigger would fire twice behind this client's back.
            conn.setDoOutput(true);
            conn.setFixedLengthStreamingMode(0);
        }
        try {
            conn.connect(); // TCP connect, name lookup and TLS handshake: nothing of the request is sent yet
        } catch (IOException e) {
            throw new NotSentException(e);
        }
        if (conn.getDoOutput()) {
            OutputStream os = conn.getOutputStream();
            try {
                if (data != null) {
                    os.write(data);
                }
            } finally {
                os.close();
            }
        }
        Answer a = new Answer();
        a.status = conn.getResponseCode();
        a.headers = conn.getHeaderFields();
        InputStream in = a.status >= 400 ? conn.getErrorStream() : conn.getInputStream();
        if (in == null && a.status >= 400) {
            // A 401 to a streamed request: HttpURLConnection cannot retry it with credentials, so it closes
            // the connection unread. The status was answered all the same: the request was refused, not lost.
            a.body = new byte[0];
            a.bodyUnread = true;
            return a;
        }
        if (in == null) {
            a.body = new byte[0];
        } else {
            try {
                a.body = readAtMost(in, maxResponseBytes + 1);
            } catch (IOException e) {
                in.close();
                throw e;
            }
            if (a.body.length > maxResponseBytes) {
                conn.disconnect(); // the rest is never read: the connection is closed, not reused
                a.tooLarge = true;
                return a;
            }
            in.close(); // read to the end and closed: the connection is reused
        }
        // HttpURLConnection ends a fixed-length body at the connection's end without an error; a node killed
        // after its headers went out leaves a 2xx with a short (even empty) body, which is a lost answer.
        String length = conn.getHeaderField("Content-Length");
        if (length != null && length.matches("\\d{1,18}") && Long.parseLong(length) != a.body.length) {
            throw new IOException("the answer ended after " + a.body.length + " of its " + length + " bytes");
        }
        return a;
    }

    /** The stream's bytes up to its end or {@code limit}, whichever comes first; the stream is left open. */
    private static byte[] readAtMost(InputStream in, int limit) throws IOException {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        byte[] buf = new byte[8192];
        int n;
        while (out.size() < limit && (n = in.read(buf, 0, Math.min(buf.length, limit - out.size()))) >= 0) {
            out.write(buf, 0, n);
        }
        return out.toByteArray();
    }

    /**
     * Sends with redirects, retries and backoff; the body of a 2xx answer. {@code safe}: retrying after
     * an unknown outcome cannot do harm (reads, keyed creates).
     */
    private byte[] send(String method, String path, Object body, boolean safe) {
        return send(method, path, body, safe, Collections.<String, String>emptyMap());
    }

    /** {@link #send(String, String, Object, boolean)} with extra headers; a {@code byte[]} body is sent as it is. */
    private byte[] send(String method, String path, Object body, boolean safe, Map<String, String> extra) {
        byte[] data;
        try {
            data = body == null ? null : body instanceof byte[] ? (byte[]) body : JSON.writeValueAsBytes(body);
        } catch (IOException e) {
            throw new MolensException("encoding the request: " + e.getMessage(), e);
        }
        String op = method + " " + path;
        long deadline = System.currentTimeMillis() + retryDeadlineMs;
        String node = target;
        int attempt = 0;
        int redirects = 0;
        boolean unknown = false; // an earlier attempt may have been applied
        ApiException answered = null; // a node's last 503/507: the cluster is there, not serving
        IOException last = null;
        while (true) {
            attempt++;
            Answer a;
            try {
                a = exchange(node, method, path, data, extra, deadline);
                if (!a.tooLarge && (a.status == 502 || a.status == 504)) {
                    throw new ProxyGaveUpException(answerError(a));
                }
            } catch (IOException e) {
                boolean sent = !(e instanceof NotSentException || e instanceof ConnectException);
                unknown = unknown || (sent && !method.equals("GET"));
                last = e;
                ApiException proxy = e instanceof ProxyGaveUpException ? ((ProxyGaveUpException) e).answer : null;
                String lost = proxy != null ? "a proxy answered " + proxy.getStatus() : "no answer";
                Throwable cause = proxy != null ? proxy : e;
                if (unknown && !safe) { // sending it again could apply it twice (a backfill fires twice)
                    throw new OutcomeUnknownException(op + ": " + lost + "; it may have been applied", cause);
                }
                if (attempt >= maxAttempts || !retryFits(deadline)) {
                    if (unknown) { // a keyed create: sent, maybe applied; the same key finds out
                        throw new OutcomeUnknownException(op + ": " + lost + " after " + attempt
                                + " attempts; it may have been applied", cause);
                    }
                    if (proxy != null) { // a GET: the proxy's last answer
                        throw proxy;
                    }
                    if (answered != null) { // some node answered "no leader": say that, not "unreachable"
                        throw answered;
                    }
                    throw new ConnectionFailedException(op + ": no node answered after " + attempt + " attempts (" + e + ")", e);
                }
                node = nextNode(node);
                redirects = 0; // loop detection counts consecutive redirects only (a dead leader is not a loop)
                backoff(attempt, 0, deadline);
                continue;
            }
            if (a.tooLarge) {
                ApiException e = new ApiException(502, "http_error", op + ": an answer (" + a.status
                        + ") longer than maxResponseBytes (" + maxResponseBytes + "); is this a molens node?", null, null);
                if (unknown || !method.equals("GET")) { // a write answered at all may have been applied
                    throw new OutcomeUnknownException(op + ": answered " + a.status + " with a body longer than maxResponseBytes ("
                            + maxResponseBytes + "); it may have been applied", e);
                }
                throw e;
            }
            if (a.status == 307 || a.status == 308) {
                // the parsed address (scheme lower-cased, no user info), as the Go SDK: "HTTP://" is plain http too
                String next = redirectBase(a.header("X-Molens-Leader"));
                if (next == null) {
                    next = redirectBase(a.header("Location"));
                }
                if (next == null) {
                    throw giveUp(unknown, op, new ApiException(a.status, "redirect", op + ": bad redirect to "
                            + shown(a.header("Location")), null, null));
                }
                boolean outOfBudget = attempt >= maxAttempts || !retryFits(deadline);
                if (node.startsWith("https://") && next.startsWith("http://")) {
                    // the bearer token would go unencrypted (a node behind a TLS proxy names its plain
                    // address): ask the next configured node instead, as after a failed attempt
                    if (addrs.size() == 1 || outOfBudget) {
                        throw giveUp(unknown, op, new ApiException(a.status, "redirect", op + ": the leader's address " + next
                                + " is plain http; not following it from https (give the client every node's https URL)",
                                null, null));
                    }
                    node = nextNode(node);
                    redirects = 0;
                    backoff(attempt, 0, deadline);
                    continue;
                }
                if (redirects >= MAX_REDIRECTS) {
                    // nodes name each other as leader: an election is settling. Back off and ask again, as
                    // after a failed attempt; a loop that outlasts the retries is an error
                    if (outOfBudget) {
                        throw giveUp(unknown, op, new ApiException(a.status, "redirect", op + ": looping redirect to " + next,
                                null, null));
                    }
                    redirects = 0;
                    backoff(attempt, 0, deadline);
                    continue;
                }
                redirects++;
                attempt--; // following the leader is not a failure
                node = next;
                target = node;
                continue;
            }
            if (a.status >= 300 && a.status < 400) { // not a node's answer: a proxy's or another server's
                String to = shown(a.header("Location"));
                throw giveUp(unknown, op, new ApiException(a.status, "http_error", op + ": unexpected redirect " + a.status
                        + " to " + (to == null ? null : to.substring(0, Math.min(200, to.length()))) + "; is this a molens node?",
                        null, null));
            }
            if (a.status == 503 || a.status == 507) { // 507: the leader's disk is full, nothing applied; it recovers by itself
                ApiException e = answerError(a);
                answered = e;
                unknown = unknown || "outcome_unknown".equals(e.getCode());
                if (unknown && !safe) {
                    throw new OutcomeUnknownException(op + ": leadership changed; it may have been applied", e);
                }
                if (attempt >= maxAttempts || !retryFits(deadline)) {
                    if (unknown) {
                        throw new OutcomeUnknownException(op + ": answered " + a.status + " after an unknown outcome;"
                                + " it may have been applied", e);
                    }
                    throw e;
                }
                if ("no_leader".equals(e.getCode()) && addrs.size() > 1) {
                    node = nextNode(node);
                }
                Integer ra = a.retryAfter();
                backoff(attempt, ra != null && attempt > 2 ? ra * 1000L : 0, deadline);
                continue;
            }
            if (a.status >= 400) {
                ApiException e = answerError(a);
                // after a lost answer a refusal cannot tell whether the first attempt applied: a keyed
                // create's retry meets a full quota (429) even when the first one made the task
                if (unknown && (a.status == 404 || a.status == 409 || a.status == 412 || a.status == 429)
                        && !method.equals("GET")) {
                    throw new OutcomeUnknownException(op + ": answered " + a.status
                            + " after a lost response; the first attempt may have been applied", last);
                }
                throw e;
            }
            target = node;
            return a.body;
        }
    }

    /**
     * {@code e}, or, when an earlier attempt of the same write may have been applied ({@code unknown}), an
     * {@link OutcomeUnknownException} caused by it: the caller must not take the write for refused (a create
     * made again without its keys would be a duplicate). The Go SDK's {@code giveUp}.
     */
    private static MolensException giveUp(boolean unknown, String op, ApiException e) {
        if (!unknown) {
            return e;
        }
        return new OutcomeUnknownException(op + ": an earlier attempt may have been applied; then " + e.getMessage(), e);
    }

    /**
     * A redirect's target as the client follows it: scheme (lower-cased) and host[:port], without user info
     * or path; null when it is no http(s) URL with a host.
     */
    private static String redirectBase(String raw) {
        if (raw == null) {
            return null;
        }
        try {
            URL u = new URL(raw.trim());
            String scheme = u.getProtocol().toLowerCase(Locale.ROOT);
            if (!scheme.equals("http") && !scheme.equals("https") || u.getHost().isEmpty()) {
                return null;
            }
            return scheme + "://" + u.getHost() + (u.getPort() >= 0 ? ":" + u.getPort() : "");
        } catch (java.net.MalformedURLException e) {
            return null;
        }
    }

    /** A URL's scheme (or none: {@code //host}), then its user info (up to the authority's last {@code @}). */
    private static final Pattern USER_INFO = Pattern.compile("^(\\s*(?:[A-Za-z][A-Za-z0-9+.-]*:)?//)([^/?#]*)@");

    /**
     * A server-sent address as messages show it: {@code user:password@} as {@code user:***@}, user info without
     * a password (often a token) as {@code ***@}.
     */
    private static String shown(String url) {
        if (url == null) {
            return null;
        }
        Matcher m = USER_INFO.matcher(url);
        if (!m.find()) {
            return url;
        }
        String user = m.group(2);
        int colon = user.indexOf(':');
        return m.group(1) + (colon >= 0 ? user.substring(0, colon) + ":***" : "***") + "@" + url.substring(m.end());
    }

    /** The error an answer of status 400 and above gives, with its {@code Retry-After} where it has one. */
    private static ApiException answerError(Answer a) {
        ApiException e = a.bodyUnread
                ? typed(a.status, a.status == 401 ? "unauthorized" : "http_error",
                        "HTTP " + a.status + " (the answer's body could not be read)", null, null)
                : parseError(a.status, a.body);
        if (e instanceof TooManyRequestsException) {
            ((TooManyRequestsException) e).retryAfterSeconds = a.retryAfter();
        } else if (e instanceof InsufficientStorageException) {
            ((InsufficientStorageException) e).retryAfterSeconds = a.retryAfter();
        }
        return e;
    }

    static ApiException parseError(int status, byte[] raw) {
        JsonNode root;
        try {
            root = JSON.readTree(raw);
        } catch (IOException e) {
            root = null;
        }
        if (root == null || !root.path("error").isObject()) {
            String text = new String(raw, java.nio.charset.StandardCharsets.UTF_8);
            return typed(status, "http_error", "HTTP " + status + ": " + text.substring(0, Math.min(200, text.length())), null, null);
        }
        Map<Integer, ApiException> items = null;
        if (root.path("errors").size() > 0) {
            items = new HashMap<Integer, ApiException>();
            for (JsonNode e : root.path("errors")) {
                items.put(e.path("index").asInt(), itemError(e));
            }
        }
        return errorOf(status, root.path("error"), items);
    }

    /**
     * One item's error of a batch answer, {@code {"index", "error": {"code", "message", "field"}}}, with the status
     * the server gives its code: an item refused because its namespace does not exist is {@code not_found} (404, a
     * {@link NotFoundException}), one the state machine failed {@code internal} (500), an invalid one (any other
     * code too) 400.
     */
    private static ApiException itemError(JsonNode entry) {
        JsonNode err = entry.path("error");
        return errorOf(itemStatus(err.path("code").asText("")), err, null);
    }

    static int itemStatus(String code) {
        if ("not_found".equals(code)) {
            return 404;
        }
        return "internal".equals(code) ? 500 : 400;
    }

    private static ApiException errorOf(int status, JsonNode err, Map<Integer, ApiException> items) {
        JsonNode f = err.path("field");
        String code = err.path("code").asText("http_error");
        String message = err.path("message").asText("");
        ApiException e = typed(status, code, message, f.isTextual() ? f.asText() : null, items);
        if (err.path("reason").isTextual()) {
            e.reason = err.path("reason").asText();
        }
        if (e instanceof QuotaExceededException && err.path("quota").isTextual()) {
            ((QuotaExceededException) e).quota = err.path("quota").asText();
        }
        return e;
    }

    /** The {@link ApiException} subclass of the status: 403, 404, 409, 412, 429 and 507 have their own. */
    private static ApiException typed(int status, String code, String message, String field, Map<Integer, ApiException> items) {
        switch (status) {
            case 403: return new ForbiddenException(status, code, message, field, items);
            case 429: return "quota_exceeded".equals(code) ? new QuotaExceededException(status, code, message, field, items)
                    : new TooManyRequestsException(status, code, message, field, items);
            case 404: return new NotFoundException(status, code, message, field, items);
            case 409: return new ConflictException(status, code, message, field, items);
            case 412: return new PreconditionFailedException(status, code, message, field, items);
            case 507: return new InsufficientStorageException(status, code, message, field, items);
            default: return new ApiException(status, code, message, field, items);
        }
    }
}
