package dev.molens.client;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertNotNull;
import static org.junit.Assert.assertNull;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Map;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import org.junit.Before;
import org.junit.Test;

/** Against the single node MOLENS_NODE_URL names. */
public class MolensClientTest {
    String base;
    MolensClient c;

    @Before
    public void setUp() {
        base = NodeEnv.require("MOLENS_NODE_URL");
        c = MolensClient.builder(base).backoffMs(10, 200).build();
    }

    TaskRequest far(String scene) {
        return new TaskRequest().setType("delayed").setIntervalMs(3600000L)
                .setCallbackUrl(base + "/api/v1/test/callback").setScene(scene);
    }

    static String scene(String prefix) { return prefix + "-" + System.nanoTime(); }

    static ApiException apiError(Runnable r, int status, String code, String field) {
        try {
            r.run();
        } catch (ApiException e) {
            assertEquals(e.toString(), status, e.getStatus());
            assertEquals(e.toString(), code, e.getCode());
            assertEquals(e.toString(), field, e.getField());
            return e;
        }
        fail("expected " + status + " " + code);
        return null;
    }

    /** Runs r, which must throw the {@code cls} subclass of ApiException with this code and field. */
    static <T extends ApiException> T thrown(Class<T> cls, Runnable r, String code, String field) {
        try {
            r.run();
        } catch (ApiException e) {
            assertTrue("want " + cls.getSimpleName() + ", got " + e.getClass().getSimpleName() + ": " + e, cls.isInstance(e));
            assertEquals(e.toString(), code, e.getCode());
            assertEquals(e.toString(), field, e.getField());
            return cls.cast(e);
        }
        fail("expected " + cls.getSimpleName() + " " + code);
        return null;
    }

    @Test
    public void taskLifecycle() {
        String tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        TaskRequest req = far(scene("life")).setPayload(Collections.singletonMap("order_id", 42)).setMaxRetries(2)
                .setTraceparent(tp);
        final Task t = c.create(req);
        assertEquals("pending", t.status);
        assertEquals(tp, t.traceparent);
        assertEquals(tp, req.copy().getTraceparent());
        assertEquals("{\"order_id\":42}", t.payload.toString());
        assertEquals(2, t.maxRetries);
        assertNotNull(t.nextRunAt);
        assertNull("the SDK's key goes on a copy, not the caller's request", req.getIdempotencyKey());
        assertTrue(t.idempotencyKey.matches("[0-9a-f]{32}"));
        assertEquals(t.id, c.get(t.id).id);
        Task p = c.pause(t.id);
        assertEquals("paused", p.status);
        assertNull(p.nextRunAt);
        ApiException e = apiError(new Runnable() { public void run() { c.pause(t.id); } }, 409, "illegal_transition", "status");
        assertTrue(e.isConflict());
        assertTrue(e instanceof ConflictException);
        assertEquals("pending", c.resume(t.id).status);
        Map<String, Object> change = new HashMap<String, Object>();
        change.put("scene", "updated");
        change.put("max_retries", null); // back to the default
        Task u = c.update(t.id, change, t.version);
        assertEquals(t.version + 1, u.version);
        assertEquals("updated", u.scene);
        assertEquals(3, u.maxRetries);
        e = apiError(new Runnable() { public void run() {
            c.update(t.id, Collections.singletonMap("scene", "stale"), t.version); } }, 412, "precondition_failed", "If-Match");
        assertTrue(e.isPreconditionFailed());
        assertTrue(e instanceof PreconditionFailedException);
        assertTrue("a stale version is a conflict, as in the Python SDK", e instanceof ConflictException);
        assertEquals(u.version + 1, c.update(t.id, Collections.singletonMap("scene", "again"), null).version);
        assertEquals(t.id, c.delete(t.id).id);
        e = apiError(new Runnable() { public void run() { c.get(t.id); } }, 404, "not_found", "task_id");
        assertTrue(e.isNotFound());
        assertTrue(e instanceof NotFoundException);
    }

    @Test
    public void retryOverlapCatchupJitterAndBoundsRoundTripThroughCreateGetAndUpdate() {
        final long day = 86400000L;
        final long start = System.currentTimeMillis() + day;
        RetryPolicy retry = new RetryPolicy().setMaxRetries(5).setBackoff(Backoff.FIXED).setInitialMs(250L).setMaxMs(10000L)
                .setJitter(RetryJitter.FULL).setNonRetryableStatuses(410, 422).setMaxThrottleMs(60000L);
        final Task created = c.create(new TaskRequest().setType("periodic").setIntervalMs(3600000L)
                .setCallbackUrl(base + "/api/v1/test/callback").setScene(scene("fields")).setRetry(retry)
                .setOverlap(Overlap.BUFFER_ONE).setCatchup(Catchup.NONE).setCatchupWindowMs(600000L).setJitterMs(5000L)
                .setStartAt(start).setEndAt(start + 30 * day).setMaxRuns(10).setFlowKey("sdk-java.fields")
                .setNotifyUrl(base + "/api/v1/test/callback"));
        RetryPolicy want = new RetryPolicy().setMaxRetries(5).setBackoff(Backoff.FIXED).setInitialMs(250L).setFactor(2)
                .setMaxMs(10000L).setJitter(RetryJitter.FULL).setNonRetryableStatuses(410, 422).setMaxThrottleMs(60000L);
        for (Task t : Arrays.asList(created, c.get(created.id))) {
            assertEquals(want, t.retry);
            assertEquals(5, t.maxRetries);
            assertEquals(Overlap.BUFFER_ONE, t.overlap);
            assertEquals(Catchup.NONE, t.catchup);
            assertEquals(600000L, t.catchupWindowMs);
            assertEquals(5000L, t.jitterMs);
            assertEquals(Long.valueOf(start), t.startAt);
            assertEquals(Long.valueOf(start + 30 * day), t.endAt);
            assertEquals(Integer.valueOf(10), t.maxRuns);
            assertEquals("sdk-java.fields", t.flowKey);
            assertEquals(base + "/api/v1/test/callback", t.notifyUrl);
            // the first occurrence is start_at plus this task's fixed offset in [0, jitter_ms)
            assertTrue(t.nextRunAt + " vs " + start, t.nextRunAt >= start && t.nextRunAt < start + 5000);
        }
        Task plain = c.create(new TaskRequest().setType("delayed").setIntervalMs(3600000L)
                .setCallbackUrl(base + "/api/v1/test/callback").setScene(scene("defaults")));
        assertEquals(Overlap.SKIP, plain.overlap);
        assertEquals(Catchup.ONE, plain.catchup);
        assertEquals(0L, plain.jitterMs);
        assertNull(plain.startAt);
        assertNull(plain.flowKey);
        assertEquals(Integer.valueOf(3), plain.retry.getMaxRetries());
        assertEquals(Backoff.EXPONENTIAL, plain.retry.getBackoff());
        assertEquals(Long.valueOf(1000), plain.retry.getInitialMs());

        // a patch giving retry replaces the whole policy; enums and nulls go as the API spells them
        Map<String, Object> change = new HashMap<String, Object>();
        change.put("retry", new RetryPolicy().setMaxRetries(1));
        change.put("overlap", Overlap.SKIP);
        change.put("catchup", Catchup.ALL);
        change.put("flow_key", null);
        Task u = c.update(created.id, change, created.version);
        assertEquals(created.version + 1, u.version);
        assertEquals(Integer.valueOf(1), u.retry.getMaxRetries());
        assertEquals(Backoff.EXPONENTIAL, u.retry.getBackoff());
        assertEquals(Overlap.SKIP, u.overlap);
        assertEquals(Catchup.ALL, u.catchup);
        assertNull(u.flowKey);
        PreconditionFailedException stale = thrown(PreconditionFailedException.class, new Runnable() { public void run() {
            c.update(created.id, Collections.singletonMap("max_runs", 3), created.version); } }, "precondition_failed", "If-Match");
        assertTrue(stale.isPreconditionFailed());
        assertEquals(412, stale.getStatus());
        assertEquals("a stale update changes nothing", Integer.valueOf(10), c.get(created.id).maxRuns);

        c.pause(created.id);
        Task resumed = c.resume(created.id, ResumeFrom.SCHEDULE);
        assertEquals("pending", resumed.status);
        assertTrue(resumed.nextRunAt >= start);
        thrown(ConflictException.class, new Runnable() { public void run() { c.resume(created.id, ResumeFrom.NOW); } },
                "illegal_transition", "status");
        thrown(ApiException.class, new Runnable() { public void run() {
            c.create(new TaskRequest().setType("delayed").setIntervalMs(1000L).setCallbackUrl(base + "/api/v1/test/callback")
                    .setFlowKey("no spaces")); } }, "invalid_argument", "flow_key");
        thrown(NotFoundException.class, new Runnable() { public void run() { c.get("01ARZ3NDEKTSV4RRFFQ69G5FAV"); } },
                "not_found", "task_id");
    }

    @Test
    public void theSameIdempotencyKeyReturnsTheFirstTask() {
        String key = MolensClient.newIdempotencyKey();
        Task a = c.create(far("idem").setIdempotencyKey(key));
        Task b = c.create(far("idem").setIdempotencyKey(key).setPayload("other"));
        assertEquals(a.id, b.id);
    }

    @Test
    public void idempotencyKeysAreTimeOrderedHex() {
        long before = System.currentTimeMillis();
        String prev = "";
        for (int i = 0; i < 1000; i++) {
            String k = MolensClient.newIdempotencyKey();
            assertTrue(k, k.matches("[0-9a-f]{32}"));
            assertTrue(k.substring(0, 12).compareTo(prev) >= 0);
            prev = k.substring(0, 12);
        }
        long ms = Long.parseLong(prev, 16);
        assertTrue(ms >= before && ms <= System.currentTimeMillis());
    }

    @Test
    public void validationErrorsCarryCodeAndField() {
        apiError(new Runnable() { public void run() {
            c.create(new TaskRequest().setType("delayed").setCallbackUrl(base + "/cb")); } }, 400, "invalid_argument", "interval_ms");
        ApiException e = apiError(new Runnable() { public void run() {
            c.create(new TaskRequest().setType("delayed").setIntervalMs(1000L).setCallbackUrl("http://169.254.169.254/")); } },
                400, "invalid_argument", "callback_url");
        assertTrue(e.isBadRequest());
        apiError(new Runnable() { public void run() { c.listTasks(new ListOptions().setLimit(5000)); } }, 400, "invalid_argument", "limit");
    }

    @Test
    public void batchCreateAndARejectedBatchNamesEachBadItem() {
        String sc = scene("batch");
        List<TaskRequest> reqs = new ArrayList<TaskRequest>();
        for (int i = 0; i < 1203; i++) {
            reqs.add(far(sc).setPayload(Collections.singletonMap("i", i)));
        }
        List<Task> made = c.createAll(reqs);
        assertEquals(1203, made.size());
        for (int i = 0; i < made.size(); i++) {
            assertEquals(i, made.get(i).payload.path("i").asInt());
        }
        final List<TaskRequest> bad = Arrays.asList(far(sc), new TaskRequest().setType("delayed").setCallbackUrl(base + "/cb"),
                far("bad scene!"));
        ApiException e = apiError(new Runnable() { public void run() { c.createAll(bad); } }, 400, "invalid_argument",
                "tasks[1].interval_ms");
        assertEquals(2, e.getItemErrors().size());
        assertEquals("interval_ms", e.getItemErrors().get(1).getField());
        assertEquals("scene", e.getItemErrors().get(2).getField());
        assertEquals("nothing of the rejected batch exists", 1203, c.listAllTasks(new ListOptions().setScene(sc).setLimit(1000)).size());
    }

    @Test
    public void createAllIdsAnswersIdsAloneAndKeysMakeItIdempotent() {
        String sc = scene("ids");
        List<TaskRequest> reqs = new ArrayList<TaskRequest>();
        for (int i = 0; i < 1200; i++) { // two requests: 1000 + 200
            reqs.add(far(sc).setIdempotencyKey(sc + "-" + i).setPayload(Collections.singletonMap("i", i)));
        }
        List<String> ids = c.createAllIds(reqs);
        assertEquals(1200, ids.size());
        assertEquals("distinct ids", 1200, new HashSet<String>(ids).size());
        assertFalse(ids.contains(""));
        Task got = c.get(ids.get(1100));
        assertEquals(1100, got.payload.path("i").asInt());
        assertEquals(sc, got.scene);
        assertEquals("the same keys answer the same ids, in order", ids, c.createAllIds(reqs));
        final List<TaskRequest> bad = Arrays.asList(far(sc), new TaskRequest().setType("delayed").setCallbackUrl(base + "/cb"));
        ApiException e = apiError(new Runnable() { public void run() { c.createAllIds(bad); } }, 400, "invalid_argument",
                "tasks[1].interval_ms");
        assertEquals(1, e.getItemErrors().size());
        assertEquals("interval_ms", e.getItemErrors().get(1).getField());
        assertEquals("nothing of the rejected batch exists", 1200, c.listAllTasks(new ListOptions().setScene(sc).setLimit(1000)).size());
    }

    @Test
    public void listFiltersAndFollowsCursors() {
        String sc = scene("list");
        List<String> ids = new ArrayList<String>();
        for (int i = 0; i < 7; i++) {
            ids.add(c.create(far(sc)).id);
        }
        c.pause(ids.get(3));
        Page<Task> page = c.listTasks(new ListOptions().setScene(sc).setLimit(3));
        assertEquals(3, page.items.size());
        assertNotNull(page.nextCursor);
        List<String> all = new ArrayList<String>();
        for (Task t : c.listAllTasks(new ListOptions().setScene(sc).setLimit(2))) {
            all.add(t.id);
        }
        assertEquals(ids, all);
        List<Task> paused = c.listAllTasks(new ListOptions().setScene(sc).setStatus("paused", "done").setType("delayed")
                .setUrl("TEST/CALLBACK"));
        assertEquals(1, paused.size());
        assertEquals(ids.get(3), paused.get(0).id);
    }

    @Test
    public void aBackfillFiresTheOccurrencesOfAPastRange() throws Exception {
        final Task t = c.create(new TaskRequest().setType("periodic").setCronExpr("0 * * * *")
                .setCallbackUrl(base + "/api/v1/test/callback").setScene(scene("backfill")));
        final long hour = 3600000L;
        final long end = System.currentTimeMillis() / hour * hour;
        Backfill b = c.backfill(t.id, end - 3 * hour, end);
        assertEquals(3, b.occurrences);
        assertEquals(Long.valueOf(end - 3 * hour), b.first);
        assertEquals(Long.valueOf(end - hour), b.last);
        assertEquals(t.id, b.task.id);
        NodeEnv.pollUntil("three backfilled callbacks", 30000, new java.util.concurrent.Callable<Boolean>() {
            public Boolean call() {
                return c.taskExecutions(t.id, new ExecutionOptions().setResult("success").setLimit(10)).items.size() == 3;
            }
        });
        apiError(new Runnable() { public void run() { c.backfill(t.id, end, end + hour); } }, 400, "invalid_argument", "end");
    }

    @Test
    public void aTriggeredTaskHasExecutions() throws Exception {
        final Task t = c.create(far(scene("exec")));
        c.trigger(t.id);
        final List<Execution> got = new ArrayList<Execution>();
        NodeEnv.pollUntil("the triggered fire's execution record", 30000, new java.util.concurrent.Callable<Boolean>() {
            public Boolean call() {
                got.clear();
                got.addAll(c.taskExecutions(t.id, new ExecutionOptions().setLimit(10)).items);
                return !got.isEmpty();
            }
        });
        Execution e = got.get(0);
        assertEquals(t.id, e.taskId);
        assertEquals(t.id + "-1", e.fireId);
        assertEquals("callback", e.kind);
        assertEquals("success", e.result);
        assertEquals(Integer.valueOf(200), e.statusCode);
        Page<Execution> f = c.executions(new ExecutionOptions().setTaskId(t.id).setResult("success")
                .setSince(e.finishedAt).setUntil(e.finishedAt + 1));
        assertEquals(1, f.items.size());
        assertEquals(e.id, f.items.get(0).id);
        apiError(new Runnable() { public void run() {
            c.taskExecutions("01ARZ3NDEKTSV4RRFFQ69G5FAV", new ExecutionOptions()); } }, 404, "not_found", "task_id");
    }

    @Test
    public void clusterStatsAndMetaEndpoints() {
        Cluster.Status st = c.clusterStatus();
        assertEquals("leader", st.role);
        assertEquals(st.nodeId, st.leaderId);
        assertEquals(1, st.nodes.size());
        Cluster.LeaderInfo li = c.clusterLeader();
        assertEquals(st.nodeId, li.leaderId);
        assertTrue(li.term >= 1);
        Cluster.Stats s = c.stats(null, true);
        assertEquals(st.nodeId, s.nodeId);
        assertTrue(s.tasks.size() >= 7);
        assertEquals(st.nodeId, c.stats().nodeId);
        assertTrue("stats of an unknown member: 404", statsOfAnUnknownMemberIs404());
        Cluster.ClusterStats cs = c.clusterStats();
        assertEquals(1, cs.nodes.size());
        assertNotNull(cs.nodes.get(0).lag);
        Cluster.SchedulePreview p = c.schedulePreview(new PreviewRequest().setCronExpr("30 2 * * *").setTimezone("Europe/Berlin")
                .setAfter(1774738800000L).setCount(3));
        assertEquals(Arrays.asList(1774746000000L, 1774830600000L, 1774917000000L), p.items);
        assertEquals("2026-03-29T03:00:00.000+02:00", p.local.get(0));
        apiError(new Runnable() { public void run() { c.schedulePreview(new PreviewRequest().setCronExpr("not cron")); } },
                400, "invalid_argument", "cron_expr");
        Cluster.UrlStatsList u = c.urlStats(null, null, null, null, null);
        assertTrue(u.until > u.since);
        Cluster.WheelDistribution w = c.wheelDistribution();
        assertFalse(w.levels.isEmpty());
        byte[] png = c.wheelDistributionPng(1, 400);
        assertEquals("PNG", new String(png, 1, 3, java.nio.charset.StandardCharsets.US_ASCII));
        assertTrue(c.metrics().contains("molens_raft_term"));
        assertTrue(c.healthz().ok);
        assertTrue(c.readyz().ready);
    }

    private boolean statsOfAnUnknownMemberIs404() {
        try {
            c.stats("nope", false);
        } catch (ApiException e) {
            return e.isNotFound();
        }
        return false;
    }

    @Test
    public void unreachableNodesFailAfterBoundedAttempts() {
        MolensClient dead = MolensClient.builder("http://127.0.0.1:9", "http://127.0.0.1:7").maxAttempts(3).backoffMs(5, 20).build();
        try {
            dead.create(far("x"));
            fail("created on no node");
        } catch (ConnectionFailedException e) {
            assertTrue(e.getMessage(), e.getMessage().contains("after 3 attempts"));
        }
    }

    @Test
    public void aDeadNodeIsSkipped() {
        MolensClient m = MolensClient.builder("http://127.0.0.1:9", base).backoffMs(5, 20).build();
        assertEquals("pending", m.create(far("skip")).status);
        assertEquals(base, m.currentNode());
    }

    @Test
    public void batchingClientFlushesByCountIntervalFlushAndClose() throws Exception {
        // by count: a full batch goes at once, the interval is an hour away
        BatchingClient b = new BatchingClient(c, 10, 3600000, 1000, 1);
        List<CompletableFuture<Task>> fs = new ArrayList<CompletableFuture<Task>>();
        for (int i = 0; i < 10; i++) {
            fs.add(b.submit(far("batcher").setPayload(i)));
        }
        for (int i = 0; i < 10; i++) {
            assertEquals(i, fs.get(i).get().payload.asInt());
        }
        // by close
        fs.clear();
        for (int i = 0; i < 3; i++) {
            fs.add(b.submit(far("batcher")));
        }
        assertFalse("a partial batch went before its interval or close", fs.get(0).isDone());
        b.close();
        for (CompletableFuture<Task> f : fs) {
            assertTrue("close returned before every task was answered", f.isDone());
            assertEquals("pending", f.get().status);
        }
        try {
            b.submit(far("batcher"));
            fail("submit after close");
        } catch (MolensException e) {
            assertTrue(e.getMessage().contains("closed"));
        }
        // by interval
        BatchingClient bi = new BatchingClient(c, 1000, 20, 1000, 1);
        try {
            assertEquals("pending", bi.submit(far("batcher")).get().status);
        } finally {
            bi.close();
        }
        // flush, and an invalid task fails only itself
        BatchingClient bf = new BatchingClient(c, 1000, 3600000, 1000, 2);
        try {
            CompletableFuture<Task> good = bf.submit(far("batcher"));
            CompletableFuture<Task> bad = bf.submit(new TaskRequest().setType("delayed").setCallbackUrl(base + "/cb"));
            CompletableFuture<Task> good2 = bf.submit(far("batcher"));
            bf.flush();
            assertTrue(good.isDone() && bad.isDone() && good2.isDone());
            assertEquals("pending", good.get().status);
            assertEquals("pending", good2.get().status);
            try {
                bad.get();
                fail("an invalid task was created");
            } catch (ExecutionException e) {
                ApiException ae = (ApiException) e.getCause();
                assertEquals("interval_ms", ae.getField());
            }
        } finally {
            bf.close();
        }
    }

    /** Every field of t but its id is unset: null, or a primitive's zero. */
    static void onlyIdSet(String what, Task t) throws IllegalAccessException {
        assertNotNull(what, t);
        assertNotNull(what, t.id);
        assertFalse(what + ": empty id", t.id.isEmpty());
        for (java.lang.reflect.Field f : Task.class.getFields()) {
            if (f.getName().equals("id") || java.lang.reflect.Modifier.isStatic(f.getModifiers())) {
                continue;
            }
            Object v = f.get(t);
            boolean unset = v == null || (f.getType().isPrimitive()
                    && (v.equals(0L) || v.equals(0) || v.equals(Boolean.FALSE) || v.equals(0.0)));
            assertTrue(what + ": field " + f.getName() + " is set to " + v, unset);
        }
    }

    @Test
    public void batchingClientIdsOnlyCompletesWithTasksHoldingOnlyTheirIds() throws Exception {
        String sc = scene("batcher-ids");
        final int n = 250;
        final int badAt = 137;
        List<CompletableFuture<Task>> fs = new ArrayList<CompletableFuture<Task>>();
        BatchingClient b = new BatchingClient(c, 100, 5, 100000, 2, true);
        try {
            for (int i = 0; i < n; i++) {
                fs.add(b.submit(i == badAt
                        ? new TaskRequest().setType("delayed").setCallbackUrl(base + "/cb").setScene(sc) // no interval
                        : far(sc).setPayload(Collections.singletonMap("i", i))));
            }
        } finally {
            b.close();
        }
        Map<String, Integer> seen = new HashMap<String, Integer>();
        for (int i = 0; i < n; i++) {
            assertTrue("close returned before every task was answered", fs.get(i).isDone());
            if (i == badAt) {
                try {
                    fs.get(i).get();
                    fail("an invalid task was created");
                } catch (ExecutionException e) {
                    ApiException ae = (ApiException) e.getCause();
                    assertEquals(400, ae.getStatus());
                    assertEquals("interval_ms", ae.getField());
                }
                continue;
            }
            Task t = fs.get(i).get(); // a valid task in a stream with a bad one is created
            onlyIdSet("item " + i, t);
            assertNull(t.callbackUrl);
            Integer dup = seen.put(t.id, i);
            assertNull("items " + dup + " and " + i + " share an id", dup);
        }
        assertEquals(n - 1, seen.size());
        Task got = c.get(fs.get(200).get().id);
        assertEquals(200, got.payload.path("i").asInt());
        assertEquals(sc, got.scene);
        assertEquals("pending", got.status);
        assertEquals("each valid task exactly once, the invalid one never", n - 1,
                c.listAllTasks(new ListOptions().setScene(sc).setLimit(1000)).size());
    }

    @Test
    public void noLeaderFromOneNodeAndADeadOtherIsUnavailableNotUnreachable() throws Exception {
        // which error a caller gets must not depend on which node the last attempt went to
        com.sun.net.httpserver.HttpServer s = stubNode(new com.sun.net.httpserver.HttpHandler() {
            @Override
            public void handle(com.sun.net.httpserver.HttpExchange ex) throws java.io.IOException {
                byte[] data = "{\"error\": {\"code\": \"no_leader\", \"message\": \"no leader\"}}".getBytes("UTF-8");
                ex.getResponseHeaders().set("Content-Type", "application/json");
                ex.sendResponseHeaders(503, data.length);
                ex.getResponseBody().write(data);
                ex.close();
            }
        });
        java.net.ServerSocket free = new java.net.ServerSocket(0, 1, java.net.InetAddress.getByName("127.0.0.1"));
        String dead = "http://127.0.0.1:" + free.getLocalPort();
        free.close();
        try {
            MolensClient m = MolensClient.builder("http://127.0.0.1:" + s.getAddress().getPort(), dead)
                    .backoffMs(1, 2).maxAttempts(4).build();
            try {
                m.get("01ARZ3NDEKTSV4RRFFQ69G5FAV");
                fail("no error");
            } catch (ApiException expected) {
                assertEquals(503, expected.getStatus());
                assertEquals("no_leader", expected.getCode());
            }
        } finally {
            s.stop(0);
        }
    }

    @Test
    public void aTriggerWhoseAnswerIsLostIsNeverSentTwice() throws Exception {
        // a second trigger would fire the task again: the first lost answer is an unknown outcome
        final java.util.concurrent.atomic.AtomicInteger sent = new java.util.concurrent.atomic.AtomicInteger();
        com.sun.net.httpserver.HttpServer s = stubNode(new com.sun.net.httpserver.HttpHandler() {
            @Override
            public void handle(com.sun.net.httpserver.HttpExchange ex) throws java.io.IOException {
                java.io.InputStream in = ex.getRequestBody();
                while (in.read() >= 0) {
                    // drain
                }
                sent.incrementAndGet();
                ex.close(); // no answer
            }
        });
        try {
            MolensClient m = MolensClient.builder("http://127.0.0.1:" + s.getAddress().getPort()).backoffMs(5, 20).build();
            try {
                m.trigger("01ARZ3NDEKTSV4RRFFQ69G5FAV");
                fail("no error");
            } catch (OutcomeUnknownException expected) {
                assertEquals(1, sent.get());
            }
        } finally {
            s.stop(0);
        }
    }

    @Test
    public void anAnswerCutShortAfterItsHeadersIsALostAnswerNotAnEmptyOne() throws Exception {
        // a node killed after its headers went out: a read is asked again, a trigger is an unknown outcome
        final java.util.concurrent.atomic.AtomicInteger sent = new java.util.concurrent.atomic.AtomicInteger();
        com.sun.net.httpserver.HttpServer s = stubNode(new com.sun.net.httpserver.HttpHandler() {
            @Override
            public void handle(com.sun.net.httpserver.HttpExchange ex) throws java.io.IOException {
                java.io.InputStream in = ex.getRequestBody();
                while (in.read() >= 0) {
                    // drain
                }
                byte[] data = ("{\"id\": \"01ARZ3NDEKTSV4RRFFQ69G5FAV\", \"status\": \"pending\"}").getBytes("UTF-8");
                ex.getResponseHeaders().set("Content-Type", "application/json");
                ex.sendResponseHeaders(200, data.length);
                if (sent.incrementAndGet() % 2 == 0) {
                    ex.getResponseBody().write(data);
                } else {
                    ex.getResponseBody().flush(); // the headers only, then the connection ends
                }
                ex.close();
            }
        });
        try {
            MolensClient m = MolensClient.builder("http://127.0.0.1:" + s.getAddress().getPort()).backoffMs(5, 20).build();
            assertEquals("pending", m.get("01ARZ3NDEKTSV4RRFFQ69G5FAV").status);
            assertEquals("the cut answer was asked again", 2, sent.get());
            try {
                m.trigger("01ARZ3NDEKTSV4RRFFQ69G5FAV");
                fail("no error");
            } catch (OutcomeUnknownException expected) {
                assertEquals("a trigger is not sent twice", 3, sent.get());
            }
        } finally {
            s.stop(0);
        }
    }

    @Test
    public void batchingClientSendsPreferReturnMinimalOnlyWithIdsOnly() throws Exception {
        final List<String> prefer = Collections.synchronizedList(new ArrayList<String>());
        com.sun.net.httpserver.HttpServer s = stubNode(new com.sun.net.httpserver.HttpHandler() {
            @Override
            public void handle(com.sun.net.httpserver.HttpExchange ex) throws java.io.IOException {
                java.io.InputStream in = ex.getRequestBody();
                while (in.read() >= 0) {
                    // drain
                }
                String p = ex.getRequestHeaders().getFirst("Prefer");
                prefer.add(p == null ? "" : p);
                String body = "return=minimal".equals(p)
                        ? "{\"items\": [{\"id\": \"01ARZ3NDEKTSV4RRFFQ69G5FAV\"}], \"errors\": []}"
                        : "{\"items\": [{\"id\": \"01ARZ3NDEKTSV4RRFFQ69G5FAW\", \"status\": \"pending\"}], \"errors\": []}";
                byte[] data = body.getBytes("UTF-8");
                ex.getResponseHeaders().set("Content-Type", "application/json");
                ex.sendResponseHeaders(200, data.length);
                ex.getResponseBody().write(data);
                ex.close();
            }
        });
        try {
            String url = "http://127.0.0.1:" + s.getAddress().getPort();
            MolensClient m = MolensClient.builder(url).backoffMs(5, 20).build();
            TaskRequest r = new TaskRequest().setType("delayed").setIntervalMs(3600000L).setCallbackUrl(url + "/cb");
            BatchingClient ids = new BatchingClient(m, 500, 50, 1000, 1, true);
            Task t;
            try {
                t = ids.submit(r).get();
            } finally {
                ids.close();
            }
            onlyIdSet("idsOnly", t);
            assertEquals("01ARZ3NDEKTSV4RRFFQ69G5FAV", t.id);
            BatchingClient full = new BatchingClient(m, 500, 50, 1000, 1);
            try {
                t = full.submit(r).get();
            } finally {
                full.close();
            }
            assertEquals("01ARZ3NDEKTSV4RRFFQ69G5FAW", t.id);
            assertEquals("pending", t.status);
            assertEquals(Arrays.asList("return=minimal", ""), prefer);
        } finally {
            s.stop(0);
        }
    }

    /** A stand-in node on a free port of 127.0.0.1 answering every request with {@code h}, started. */
    static com.sun.net.httpserver.HttpServer stubNode(com.sun.net.httpserver.HttpHandler h) throws java.io.IOException {
        com.sun.net.httpserver.HttpServer s = com.sun.net.httpserver.HttpServer.create(
                new java.net.InetSocketAddress("127.0.0.1", 0), 0);
        s.createContext("/", h);
        s.start();
        return s;
    }
}
