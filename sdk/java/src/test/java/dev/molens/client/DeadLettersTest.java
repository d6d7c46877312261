package dev.molens.client;

import static dev.molens.client.MolensClientTest.thrown;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertNotNull;
import static org.junit.Assert.assertNull;
import static org.junit.Assert.assertTrue;

import com.sun.net.httpserver.HttpServer;
import java.io.InputStream;
import java.net.InetSocketAddress;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.After;
import org.junit.Before;
import org.junit.Test;

/** Dead letters, made by a receiver of this test answering 500, against the single node MOLENS_NODE_URL names. */
public class DeadLettersTest {
    MolensClient c;
    HttpServer receiver;
    final AtomicInteger status = new AtomicInteger(500);
    final List<String> fires = Collections.synchronizedList(new ArrayList<String>());

    @Before
    public void setUp() {
        c = MolensClient.builder(NodeEnv.require("MOLENS_NODE_URL")).backoffMs(10, 200).build();
    }

    @After
    public void tearDown() {
        if (receiver != null) {
            receiver.stop(0);
        }
    }

    /** A callback receiver answering {@link #status} and recording each X-Fire-ID; its base URL. */
    String startReceiver() throws Exception {
        receiver = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 0);
        receiver.createContext("/", ex -> {
            InputStream in = ex.getRequestBody();
            while (in.read() >= 0) {
                // drain
            }
            fires.add(ex.getRequestHeaders().getFirst("X-Fire-ID"));
            ex.sendResponseHeaders(status.get(), -1);
            ex.close();
        });
        receiver.start();
        return "http://127.0.0.1:" + receiver.getAddress().getPort();
    }

    @Test
    public void deadLettersAreListedFetchedRedrivenAndDeleted() throws Exception {
        final String url = startReceiver();
        final String flow = url.substring("http://".length()); // a task's flow without flow_key: its URL's host:port
        final List<Task> tasks = new ArrayList<Task>();
        for (int i = 0; i < 4; i++) { // a delayed task that fails at once: one attempt, answered 500
            tasks.add(c.create(new TaskRequest().setType("delayed").setIntervalMs(100L).setCallbackUrl(url + "/hook")
                    .setScene(MolensClientTest.scene("dead")).setRetry(new RetryPolicy().setMaxRetries(0))));
        }
        final Map<String, DeadLetter> byTask = new LinkedHashMap<String, DeadLetter>();
        NodeEnv.pollUntil("a dead letter of each task", 30000, new Callable<Boolean>() {
            public Boolean call() {
                byTask.clear();
                for (DeadLetter d : c.listAllDeadLetters(new DeadLetterOptions().setFlow(flow).setLimit(1))) {
                    byTask.put(d.taskId, d);
                }
                return byTask.size() == tasks.size();
            }
        });
        final Task t0 = tasks.get(0);
        final DeadLetter a = byTask.get(t0.id);
        assertEquals(t0.id + "-1.1", a.id);
        assertEquals(t0.id + "-1", a.fireId);
        assertEquals(DeadLetterKind.RETRIES_EXHAUSTED, a.kind);
        assertEquals(1, a.attempts);
        assertEquals(Integer.valueOf(500), a.statusCode);
        assertEquals(flow, a.flow);
        assertEquals(url + "/hook", a.url);
        assertEquals("at_least_once", a.reliability);
        assertTrue(a.at > 0 && a.scheduledAt > 0);
        DeadLetter got = c.getDeadLetter(a.id);
        assertEquals(a.id, got.id);
        assertEquals("default", got.namespace);
        assertEquals(a.kind, got.kind);
        assertEquals(a.at, got.at);
        Page<DeadLetter> page = c.listDeadLetters(new DeadLetterOptions().setFlow(flow).setLimit(2));
        assertEquals(2, page.items.size());
        assertNotNull(page.nextCursor);
        Page<DeadLetter> one = c.listDeadLetters(new DeadLetterOptions().setTaskId(tasks.get(1).id));
        assertEquals(1, one.items.size());
        assertEquals(tasks.get(1).id, one.items.get(0).taskId);
        assertTrue(c.listDeadLetters(new DeadLetterOptions().setFlow(flow).setKind(DeadLetterKind.NON_RETRYABLE)).items.isEmpty());
        assertEquals("failed", c.get(t0.id).status);

        // redrive one: delivered again with the same fire id, and the dead letter is gone
        status.set(200);
        DeadLetter rd = c.redriveDeadLetter(a.id);
        assertEquals(a.id, rd.id);
        assertNull(rd.warning);
        NodeEnv.pollUntil("the redriven occurrence to succeed", 30000, new Callable<Boolean>() {
            public Boolean call() { return c.get(t0.id).status.equals("done"); }
        });
        assertEquals("the failure and the redrive", 2, Collections.frequency(new ArrayList<String>(fires), a.fireId));
        thrown(NotFoundException.class, new Runnable() { public void run() { c.getDeadLetter(a.id); } }, "not_found", "id");
        thrown(NotFoundException.class, new Runnable() { public void run() { c.redriveDeadLetter(a.id); } }, "not_found", "id");

        // redrive by filter
        final Task t1 = tasks.get(1);
        BulkResult bulk = c.redriveDeadLetters(new DeadLetterFilter().setTaskId(t1.id));
        assertEquals(1, bulk.matched);
        assertEquals(1, bulk.redriven);
        assertEquals(0, bulk.errorCount);
        assertFalse(bulk.more);
        NodeEnv.pollUntil("the bulk-redriven occurrence to succeed", 30000, new Callable<Boolean>() {
            public Boolean call() { return c.get(t1.id).status.equals("done"); }
        });

        // delete one, then delete by filter
        final String d2 = byTask.get(tasks.get(2).id).id;
        c.deleteDeadLetter(d2);
        thrown(NotFoundException.class, new Runnable() { public void run() { c.deleteDeadLetter(d2); } }, "not_found", "id");
        thrown(ApiException.class, new Runnable() { public void run() { c.deleteDeadLetters(new DeadLetterFilter()); } },
                "invalid_argument", "all");
        // the client's namespace is no filter: an empty filter is refused all the same, nothing is deleted
        final MolensClient inDefault = MolensClient.builder(NodeEnv.require("MOLENS_NODE_URL")).namespace("default").build();
        thrown(ApiException.class, new Runnable() { public void run() { inDefault.deleteDeadLetters(new DeadLetterFilter()); } },
                "invalid_argument", "all");
        BulkResult del = c.deleteDeadLetters(new DeadLetterFilter().setFlow(flow));
        assertEquals(1, del.matched);
        assertEquals(1, del.deleted);
        assertFalse(del.more);
        assertTrue(c.listDeadLetters(new DeadLetterOptions().setFlow(flow)).items.isEmpty());
    }
}
