package dev.molens.client;

import static dev.molens.client.MolensClientTest.thrown;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertNotNull;
import static org.junit.Assert.assertNull;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import com.fasterxml.jackson.databind.JsonNode;
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpHandler;
import com.sun.net.httpserver.HttpServer;
import com.sun.net.httpserver.HttpsConfigurator;
import com.sun.net.httpserver.HttpsServer;
import java.io.ByteArrayOutputStream;
import java.io.Closeable;
import java.io.File;
import java.io.FileInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.security.KeyStore;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Predicate;
import javax.net.ssl.HttpsURLConnection;
import javax.net.ssl.KeyManagerFactory;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLSocketFactory;
import javax.net.ssl.TrustManagerFactory;
import org.junit.After;
import org.junit.Test;

/** The client's transport rules against stand-in nodes on 127.0.0.1: no Molens node is needed. */
public class TransportTest {
    static final String ID = "01ARZ3NDEKTSV4RRFFQ69G5FAV";
    static final String TASK = "{\"id\": \"" + ID + "\", \"status\": \"pending\"}";

    final List<HttpServer> servers = new ArrayList<HttpServer>();
    final List<Closeable> sockets = new ArrayList<Closeable>();
    final CountDownLatch release = new CountDownLatch(1); // lets a stand-in that holds its answer go
    SSLSocketFactory defaultTls;

    @After
    public void tearDown() throws IOException {
        release.countDown();
        for (HttpServer s : servers) {
            s.stop(0);
        }
        for (Closeable c : sockets) {
            c.close();
        }
        if (defaultTls != null) {
            HttpsURLConnection.setDefaultSSLSocketFactory(defaultTls);
        }
    }

    /** A stand-in node on a free port answering every request with {@code h}, started and stopped after the test. */
    HttpServer node(HttpHandler h) throws IOException {
        HttpServer s = MolensClientTest.stubNode(h);
        servers.add(s);
        return s;
    }

    static String url(HttpServer s) {
        return (s instanceof HttpsServer ? "https" : "http") + "://127.0.0.1:" + s.getAddress().getPort();
    }

    static String body(HttpExchange ex) throws IOException {
        return new String(readAllOf(ex.getRequestBody()), StandardCharsets.UTF_8);
    }

    /** Answers {@code status} with {@code text} (null: no body) and the header name/value pairs given. */
    static void answer(HttpExchange ex, int status, String text, String... headers) throws IOException {
        body(ex);
        for (int i = 0; i < headers.length; i += 2) {
            ex.getResponseHeaders().set(headers[i], headers[i + 1]);
        }
        byte[] data = text == null ? new byte[0] : text.getBytes(StandardCharsets.UTF_8);
        if (text != null) {
            ex.getResponseHeaders().set("Content-Type", "application/json");
        }
        ex.sendResponseHeaders(status, data.length == 0 ? -1 : data.length);
        ex.getResponseBody().write(data);
        ex.close();
    }

    static String error(String code, String message) {
        return "{\"error\": {\"code\": \"" + code + "\", \"message\": \"" + message + "\"}}";
    }

    /** Reads the request and closes the connection unanswered: a node killed mid-request. */
    static void drop(HttpExchange ex) throws IOException {
        body(ex);
        ex.close();
    }

    /** A client of these nodes that retries fast. */
    static MolensClient.Builder client(String... addrs) { return MolensClient.builder(addrs).backoffMs(1, 2); }

    static TaskRequest far() {
        return new TaskRequest().setType("delayed").setIntervalMs(3600000L).setCallbackUrl("http://127.0.0.1:9/cb");
    }

    // ------------------------------------------------------------------------------- redirects

    @Test
    public void aRedirectFromHttpsToPlainHttpIsNotFollowedTheNextNodeIsAsked() throws Exception {
        final List<String> plainTokens = Collections.synchronizedList(new ArrayList<String>());
        HttpServer plain = node(ex -> {
            plainTokens.add(String.valueOf(ex.getRequestHeaders().getFirst("Authorization")));
            answer(ex, 200, TASK);
        });
        final String leader = url(plain);
        HttpsServer tls = httpsNode(ex -> answer(ex, 307, error("not_leader", "ask the leader"),
                "X-Molens-Leader", leader, "Location", leader + ex.getRequestURI()));
        final AtomicInteger other = new AtomicInteger();
        HttpServer next = node(ex -> {
            other.incrementAndGet();
            answer(ex, 200, TASK);
        });

        MolensClient c = client(url(tls), url(next)).token("s3cret").build();
        assertEquals(ID, c.pause(ID).id);
        assertEquals("the next configured node answered", 1, other.get());
        final MolensClient alone = client(url(tls)).token("s3cret").build();
        ApiException e = thrown(ApiException.class, () -> alone.pause(ID), "redirect", null);
        assertEquals(307, e.getStatus());
        assertTrue(e.getMessage(), e.getMessage().contains("plain http"));
        assertEquals("the token never went to a plain http address", Collections.<String>emptyList(), plainTokens);
    }

    @Test
    public void redirectsLoopingWhileAnElectionSettlesAreAskedAgainWithinTheAttempts() throws Exception {
        // two nodes name each other as leader for a while (an election settling), then one leads
        final AtomicInteger askedA = new AtomicInteger();
        final String[] b = new String[1];
        HttpServer a = node(ex -> {
            if (askedA.incrementAndGet() <= 6) {
                answer(ex, 307, null, "X-Molens-Leader", b[0]);
            } else {
                answer(ex, 200, TASK);
            }
        });
        final String aUrl = url(a);
        b[0] = url(node(ex -> answer(ex, 307, null, "X-Molens-Leader", aUrl)));
        assertEquals(ID, client(aUrl).maxAttempts(8).build().pause(ID).id);
        assertEquals(7, askedA.get());

        // a loop that outlasts the attempts is an error
        final MolensClient looping = client(b[0]).maxAttempts(2).build();
        askedA.set(-1000);
        ApiException e = thrown(ApiException.class, () -> looping.pause(ID), "redirect", null);
        assertEquals(307, e.getStatus());
        assertTrue(e.getMessage(), e.getMessage().contains("looping"));
    }

    @Test
    public void anUnexpectedRedirectIsAnErrorNotAnAnswer() throws Exception {
        final AtomicInteger status = new AtomicInteger();
        HttpServer s = node(ex -> answer(ex, status.get(), status.get() == 304 ? null : TASK, "Location", "http://login.example/"));
        final MolensClient c = client(url(s)).build();
        for (int st : new int[] {301, 302, 303, 304}) {
            status.set(st);
            ApiException e = thrown(ApiException.class, () -> c.get(ID), "http_error", null);
            assertEquals(st, e.getStatus());
            e = thrown(ApiException.class, () -> c.pause(ID), "http_error", null);
            assertEquals(st, e.getStatus());
        }
    }

    @Test
    public void aRedirectToAnUpperCaseHttpSchemeIsPlainHttpAndIsNotFollowedFromHttps() throws Exception {
        // the scheme is case-insensitive (RFC 3986): HTTP:// is plain http, and the token must not go there
        final List<String> plainTokens = Collections.synchronizedList(new ArrayList<String>());
        HttpServer plain = node(ex -> {
            plainTokens.add(String.valueOf(ex.getRequestHeaders().getFirst("Authorization")));
            answer(ex, 200, TASK);
        });
        final String upper = "HTTP://127.0.0.1:" + plain.getAddress().getPort();
        final String[] leader = {null};
        HttpsServer tls = httpsNode(ex -> {
            if (leader[0] != null) {
                answer(ex, 307, error("not_leader", "ask the leader"), "X-Molens-Leader", leader[0]);
            } else {
                answer(ex, 307, error("not_leader", "ask the leader"), "Location", upper + ex.getRequestURI());
            }
        });
        final AtomicInteger other = new AtomicInteger();
        HttpServer next = node(ex -> {
            other.incrementAndGet();
            answer(ex, 200, TASK);
        });
        for (String named : new String[] {null, upper, " Http://127.0.0.1:" + plain.getAddress().getPort() + " "}) {
            leader[0] = named;
            other.set(0);
            MolensClient c = client(url(tls), url(next)).token("s3cret").build();
            assertEquals(ID, c.pause(ID).id);
            assertEquals("the next configured node answered (" + named + ")", 1, other.get());
            final MolensClient alone = client(url(tls)).token("s3cret").build();
            ApiException e = thrown(ApiException.class, () -> alone.pause(ID), "redirect", null);
            assertTrue(e.getMessage(), e.getMessage().contains("plain http"));
        }
        assertEquals("the token never went to a plain http address", Collections.<String>emptyList(), plainTokens);

        // from a plain http node such an address is followed, as a lower-case one is
        HttpServer follower = node(ex -> answer(ex, 307, null, "X-Molens-Leader", upper));
        MolensClient c = client(url(follower)).build();
        assertEquals(ID, c.pause(ID).id);
        assertEquals(url(plain), c.currentNode());
        assertEquals(1, plainTokens.size());
    }

    @Test
    public void aRedirectWithNoUsableAddressIsABadRedirect() throws Exception {
        final String[] location = new String[1];
        HttpServer s = node(ex -> answer(ex, 307, null, "Location", location[0]));
        final MolensClient c = client(url(s)).build();
        for (String bad : new String[] {"http://", "ftp://127.0.0.1/", "/api/v1/tasks", "not a url"}) {
            location[0] = bad;
            ApiException e = thrown(ApiException.class, () -> c.pause(ID), "redirect", null);
            assertTrue(e.getMessage(), e.getMessage().contains("bad redirect"));
        }
    }

    @Test
    public void aRedirectsAddressIsQuotedWithoutItsPassword() throws Exception {
        // a server-sent Location may carry user:password@; an error message (a log line) must not
        final String[] headers = new String[3];
        HttpServer s = node(ex -> answer(ex, Integer.parseInt(headers[0]), null, headers[1], headers[2]));
        final MolensClient c = client(url(s)).build();
        String[][] cases = {
            {"302", "Location", "http://alice:s3cret@login.example/", "http_error", "alice:***@login.example"},
            {"301", "Location", "//alice:s3cret@login.example/", "http_error", "alice:***@login.example"},
            {"303", "Location", "https://tok3n-s3cret@login.example/", "http_error", "***@login.example"},
            {"307", "Location", "ftp://alice:s3cret@files.example/", "redirect", "alice:***@files.example"},
        };
        for (String[] k : cases) {
            System.arraycopy(k, 0, headers, 0, 3);
            ApiException e = thrown(ApiException.class, () -> c.pause(ID), k[3], null);
            assertTrue(e.getMessage(), e.getMessage().contains(k[4]));
            assertTrue(e.getMessage(), !e.getMessage().contains("s3cret"));
        }
        HttpsServer tls = httpsNode(ex -> answer(ex, 307, null, "X-Molens-Leader", "http://alice:s3cret@127.0.0.1:9"));
        final MolensClient alone = client(url(tls)).build();
        ApiException e = thrown(ApiException.class, () -> alone.pause(ID), "redirect", null);
        assertTrue(e.getMessage(), e.getMessage().contains("plain http") && !e.getMessage().contains("s3cret"));
        final String self = url(s);
        headers[0] = "307";
        headers[1] = "X-Molens-Leader";
        headers[2] = "http://alice:s3cret@" + self.substring("http://".length());
        e = thrown(ApiException.class, () -> client(self).maxAttempts(1).build().pause(ID), "redirect", null);
        assertTrue(e.getMessage(), e.getMessage().contains("looping") && !e.getMessage().contains("s3cret"));
    }

    @Test
    public void aCreateWhoseAnswerWasLostThenMeetsARedirectItWillNotFollowIsAnUnknownOutcomeCarryingItsKey() throws Exception {
        // a plain error here would let the caller create again without the key: a duplicate task
        final AtomicInteger asked = new AtomicInteger();
        final String[] then = new String[3];
        HttpServer s = node(ex -> {
            if (asked.incrementAndGet() == 1) {
                drop(ex); // the first attempt was sent, and may have been applied
            } else {
                answer(ex, Integer.parseInt(then[0]), null, then[1], then[2]);
            }
        });
        final String self = url(s);
        String[][] cases = {
            {"307", "Location", "ftp://127.0.0.1/"}, // bad redirect
            {"307", "X-Molens-Leader", self}, // looping until the attempts are spent
            {"302", "Location", "http://login.example/"}, // unexpected redirect
        };
        for (String[] k : cases) {
            System.arraycopy(k, 0, then, 0, 3);
            asked.set(0);
            final MolensClient c = client(self).maxAttempts(2).build();
            OutcomeUnknownException e = outcomeUnknown(() -> c.create(far().setIdempotencyKey("k-" + k[0] + k[1])));
            assertEquals(Collections.singletonList("k-" + k[0] + k[1]), e.getIdempotencyKeys());
            assertTrue(String.valueOf(e.getCause()), e.getCause() instanceof ApiException);
            // without a lost answer before it, the same redirect is the plain error it was
            asked.set(1);
            thrown(ApiException.class, () -> c.create(far()), k[0].equals("302") ? "http_error" : "redirect", null);
        }

        // the https node's redirect to plain http, met after a lost answer
        final AtomicInteger tlsAsked = new AtomicInteger();
        HttpsServer tls = httpsNode(ex -> {
            if (tlsAsked.incrementAndGet() == 1) {
                drop(ex);
            } else {
                answer(ex, 307, null, "X-Molens-Leader", "http://127.0.0.1:9");
            }
        });
        final MolensClient alone = client(url(tls)).build();
        OutcomeUnknownException e = outcomeUnknown(() -> alone.create(far().setIdempotencyKey("k-tls")));
        assertEquals(Collections.singletonList("k-tls"), e.getIdempotencyKeys());
        assertTrue(e.getMessage(), e.getMessage().contains("plain http"));
    }

    @Test
    public void a2xxWhoseBodyIsNotOneJsonObjectIsAnError() throws Exception {
        final String[] text = new String[1];
        HttpServer s = node(ex -> answer(ex, 200, text[0]));
        final MolensClient c = client(url(s)).build();
        for (String bad : Arrays.asList("null", TASK + " trailing", TASK + TASK, "not json", "[" + TASK + "]", "\"text\"", null)) {
            text[0] = bad;
            ApiException e = thrown(ApiException.class, () -> c.get(ID), "http_error", null);
            assertEquals(bad, 502, e.getStatus());
            thrown(ApiException.class, () -> c.listFlows(), "http_error", null);
        }
        text[0] = "{\"items\": []}";
        assertEquals(Collections.emptyList(), c.listFlows());
        text[0] = "\n " + TASK + " \n";
        assertEquals("whitespace around the object is JSON", ID, c.get(ID).id);
    }

    // ------------------------------------------------------------------- refused, lost, not sent

    @Test
    public void a401ToAWriteIsUnauthorizedNotALostAnswer() throws Exception {
        // HttpURLConnection drops the body of a 401 to a streamed request: the status alone says "refused"
        final AtomicInteger asked = new AtomicInteger();
        final AtomicInteger status = new AtomicInteger(401);
        HttpServer s = node(ex -> {
            asked.incrementAndGet();
            String code = status.get() == 401 ? "unauthorized" : "forbidden";
            answer(ex, status.get(), error(code, "the key is " + code), "WWW-Authenticate", "Bearer realm=\"molens\"");
        });
        final MolensClient c = client(url(s)).token("revoked").build();
        ApiException e = MolensClientTest.apiError(() -> c.pause(ID), 401, "unauthorized", null);
        assertTrue(e.isUnauthorized());
        assertEquals("a refusal is not retried", 1, asked.get());
        MolensClientTest.apiError(() -> c.create(far()), 401, "unauthorized", null);
        MolensClientTest.apiError(() -> c.trigger(ID), 401, "unauthorized", null);
        MolensClientTest.apiError(() -> c.createAll(Collections.singletonList(far())), 401, "unauthorized", null);
        e = MolensClientTest.apiError(() -> c.get(ID), 401, "unauthorized", null);
        assertTrue("a read's body is kept: " + e.getMessage(), e.getMessage().contains("the key is unauthorized"));
        assertEquals(5, asked.get());
        status.set(403);
        thrown(ForbiddenException.class, () -> c.pause(ID), "forbidden", null);
        assertEquals(6, asked.get());
    }

    @Test
    public void aRequestThatNeverLeftIsSentToTheNextNode() throws Exception {
        // no byte of these reached a node: a trigger (never sent twice) goes on to the next one
        final AtomicInteger triggered = new AtomicInteger();
        HttpServer good = node(ex -> {
            triggered.incrementAndGet();
            answer(ex, 200, TASK);
        });
        List<String> neverSent = Arrays.asList(
                "http://molens-no-such-node.invalid:1", // the name does not resolve
                "http://127.0.0.1:" + fullBacklog(), // the connect times out
                "https://127.0.0.1:" + hangingUp()); // the TLS handshake fails
        for (String first : neverSent) {
            MolensClient c = client(first, url(good)).connectTimeoutMs(300).build();
            assertEquals(first, ID, c.trigger(ID).id);
            assertEquals(url(good), c.currentNode());
        }
        assertEquals(neverSent.size(), triggered.get());
    }

    @Test
    public void aReadTimeoutAfterSendingIsAnUnknownOutcome() throws Exception {
        final AtomicInteger asked = new AtomicInteger();
        HttpServer slow = node(ex -> {
            body(ex);
            asked.incrementAndGet();
            awaitRelease();
            answer(ex, 200, TASK);
        });
        final MolensClient c = client(url(slow)).readTimeoutMs(200).build();
        try {
            c.trigger(ID);
            fail("no error");
        } catch (OutcomeUnknownException expected) {
            assertEquals("a trigger is not sent twice", 1, asked.get());
        }
    }

    @Test
    public void theReadTimeoutIsCutToWhatIsLeftOfTheRetryDeadline() throws Exception {
        HttpServer slow = node(ex -> {
            awaitRelease();
            answer(ex, 200, TASK);
        });
        final MolensClient c = client(url(slow)).readTimeoutMs(10000).retryDeadlineMs(300).build();
        long t0 = System.nanoTime();
        try {
            c.get(ID);
            fail("answered after the deadline");
        } catch (ConnectionFailedException expected) {
            long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
            assertTrue("gave up after " + ms + " ms, deadline 300 ms", ms < 3000);
        }
    }

    @Test
    public void theConnectTimeoutIsCutToWhatIsLeftOfTheRetryDeadline() throws Exception {
        // a node that drops the SYN: the connect, like the read, must end with the deadline, not 20 s later
        final MolensClient c = client("http://127.0.0.1:" + fullBacklog()).connectTimeoutMs(20000).retryDeadlineMs(300).build();
        long t0 = System.nanoTime();
        try {
            c.get(ID);
            fail("connected to a full listen queue");
        } catch (ConnectionFailedException expected) {
            long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
            assertTrue("gave up after " + ms + " ms, deadline 300 ms", ms < 3000);
        }
    }

    @Test
    public void anAnswerLongerThanMaxResponseBytesIsRefused() throws Exception {
        final String big = "{\"id\": \"" + ID + "\", \"status\": \"pending\", \"payload\": \"" + repeat('x', 5000) + "\"}";
        final int length = big.getBytes(StandardCharsets.UTF_8).length;
        final AtomicInteger chunked = new AtomicInteger(); // 1: the answer has no Content-Length
        HttpServer s = node(ex -> {
            if (ex.getRequestURI().getPath().endsWith("/small")) {
                answer(ex, 200, TASK);
            } else if (chunked.get() == 1) {
                body(ex);
                ex.sendResponseHeaders(200, 0);
                ex.getResponseBody().write(big.getBytes(StandardCharsets.UTF_8));
                ex.close();
            } else {
                answer(ex, 200, big);
            }
        });
        final MolensClient c = client(url(s)).maxResponseBytes(4096).build();
        for (int k = 0; k < 2; k++) {
            chunked.set(k);
            ApiException e = thrown(ApiException.class, () -> c.get(ID), "http_error", null);
            assertEquals(502, e.getStatus());
            assertTrue(e.getMessage(), e.getMessage().contains("longer than maxResponseBytes (4096)"));
            assertEquals("the connection left unread is not reused", ID, c.get("small").id);
            // a write answered at all may have been applied: a create's keys find out
            OutcomeUnknownException u = outcomeUnknown(() -> c.create(far().setIdempotencyKey("k-2")));
            assertEquals(Collections.singletonList("k-2"), u.getIdempotencyKeys());
            assertEquals(502, ((ApiException) u.getCause()).getStatus());
            u = outcomeUnknown(() -> c.createAll(Arrays.asList(far().setIdempotencyKey("k-3"), far().setIdempotencyKey("k-4"))));
            assertEquals(Arrays.asList("k-3", "k-4"), u.getIdempotencyKeys());
            outcomeUnknown(() -> c.pause(ID));
        }
        chunked.set(0);
        assertEquals("the bound counts the body, not the head", ID, client(url(s)).maxResponseBytes(length).build().get(ID).id);
        assertEquals(ID, client(url(s)).build().get(ID).id);
        assertEquals(256 << 20, MolensClient.DEFAULT_MAX_RESPONSE_BYTES);
        for (int bad : new int[] {0, -1, Integer.MAX_VALUE}) {
            try {
                MolensClient.builder(url(s)).maxResponseBytes(bad).build();
                fail("maxResponseBytes " + bad + " accepted");
            } catch (IllegalArgumentException expected) {
                assertTrue(expected.getMessage(), expected.getMessage().startsWith("maxResponseBytes must be"));
            }
        }
    }

    // ------------------------------------------------------------------------------- backoff

    @Test
    public void theBackoffCeilingSaturatesForAnyAttemptCountAndBase() {
        // min(max, base * 2^(n-1)) without overflow: a shifted long wraps to a negative or to a smaller delay
        assertEquals(50, MolensClient.backoffCeilingMs(1, 50, 2000));
        assertEquals(1600, MolensClient.backoffCeilingMs(6, 50, 2000));
        assertEquals(2000, MolensClient.backoffCeilingMs(7, 50, 2000));
        assertEquals(2000, MolensClient.backoffCeilingMs(Integer.MAX_VALUE, 50, 2000));
        assertEquals(50L << 40, MolensClient.backoffCeilingMs(41, 50, Long.MAX_VALUE));
        assertEquals(Long.MAX_VALUE, MolensClient.backoffCeilingMs(31, (1L << 34) + 1, Long.MAX_VALUE));
        assertEquals(Long.MAX_VALUE, MolensClient.backoffCeilingMs(1000, 1, Long.MAX_VALUE));
        for (long base : new long[] {1, 50, (1L << 33) + 1, (1L << 34) + 1, Long.MAX_VALUE / 3, Long.MAX_VALUE}) {
            for (long max : new long[] {2000, 1L << 40, Long.MAX_VALUE}) {
                long before = 0;
                for (int n = 1; n <= 200; n++) {
                    long ceil = MolensClient.backoffCeilingMs(n, base, max);
                    String at = "base " + base + " max " + max + " attempt " + n + ": " + ceil;
                    assertTrue(at, ceil > 0 && ceil <= max && ceil >= before);
                    before = ceil;
                }
                assertEquals(max, before);
            }
        }
    }

    @Test
    public void aBackoffAsLongAsALongStillEndsAtTheDeadline() throws Exception {
        // the jitter's bound is ceiling + 1: at Long.MAX_VALUE that wrapped to a negative bound (IllegalArgumentException)
        HttpServer s = node(ex -> answer(ex, 503, error("no_leader", "no leader")));
        final MolensClient c = client(url(s)).backoffMs(Long.MAX_VALUE, Long.MAX_VALUE).retryDeadlineMs(300).build();
        long t0 = System.nanoTime();
        ApiException e = thrown(ApiException.class, () -> c.get(ID), "no_leader", null);
        assertEquals(503, e.getStatus());
        long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
        assertTrue("gave up after " + ms + " ms, deadline 300 ms", ms < 3000);
    }

    /** The least time of the retry deadline a retry is sent with, as in every SDK (MolensClient.MIN_ATTEMPT_MS). */
    static final long MIN_ATTEMPT_MS = 100;

    @Test
    public void aRetryIsOnlySentWithAtLeastMinAttemptOfTheDeadlineLeft() throws Exception {
        // a backoff that would sleep to the deadline: the retry after it went with a millisecond, could not be
        // answered, and turned a create every node refused (503 no_leader, nothing applied) into an unknown
        // outcome. The window is widened to 1 s of 3 s here, so that a timer waking late on a loaded machine
        // does not eat it; a node takes 20 ms to answer
        final List<Long> arrivals = Collections.synchronizedList(new ArrayList<Long>());
        HttpServer s = node(ex -> {
            arrivals.add(System.nanoTime());
            try {
                Thread.sleep(20);
            } catch (InterruptedException ie) {
                Thread.currentThread().interrupt();
            }
            answer(ex, 503, error("no_leader", "x"));
        });
        long was = MolensClient.minAttemptMs;
        MolensClient.minAttemptMs = 1000;
        try {
            final MolensClient c = client(url(s)).maxAttempts(100).backoffMs(Long.MAX_VALUE, Long.MAX_VALUE)
                    .retryDeadlineMs(3000).build();
            for (String call : new String[] {"get", "create"}) {
                arrivals.clear();
                long t0 = System.nanoTime();
                ApiException e;
                try {
                    if (call.equals("get")) {
                        c.get(ID);
                    } else {
                        c.create(far().setIdempotencyKey("k-min-attempt"));
                    }
                    fail(call + ": answered");
                    return;
                } catch (OutcomeUnknownException u) {
                    throw new AssertionError(call + ": every node answered 503 no_leader, nothing was applied: want the "
                            + "no_leader ApiException, got " + u + " (arrivals " + sinceMs(t0, arrivals) + " ms)", u);
                } catch (ApiException x) {
                    e = x;
                }
                assertEquals(call + ": " + e, "no_leader", e.getCode());
                assertEquals(503, e.getStatus());
                assertTrue(call + ": " + e, e.isUnavailable());
                assertTrue(call + ": the first attempt and the retry the backoff left its time, arrivals "
                        + sinceMs(t0, arrivals) + " ms", arrivals.size() >= 2);
            }
        } finally {
            MolensClient.minAttemptMs = was;
        }
    }

    @Test
    public void aRetryDeadlineShorterThanMinAttemptStillSendsTheFirstAttemptAndNoRetry() throws Exception {
        final List<Long> arrivals = Collections.synchronizedList(new ArrayList<Long>());
        HttpServer s = node(ex -> {
            arrivals.add(System.nanoTime());
            answer(ex, 503, error("no_leader", "x"));
        });
        thrown(ApiException.class, () -> client(url(s)).maxAttempts(1).build().get(ID), "no_leader", null); // warm up
        arrivals.clear();
        final MolensClient c = client(url(s)).maxAttempts(100).retryDeadlineMs(MIN_ATTEMPT_MS - 10).build();
        ApiException e = thrown(ApiException.class, () -> c.get(ID), "no_leader", null);
        assertEquals(503, e.getStatus());
        Thread.sleep(200); // a late retry has arrived by now
        assertEquals("the first attempt goes, no retry", 1, arrivals.size());
    }

    /** The times in {@code arrivals} (nanoTime) as ms since {@code t0}. */
    static List<Long> sinceMs(long t0, List<Long> arrivals) {
        List<Long> ms = new ArrayList<Long>();
        synchronized (arrivals) {
            for (long t : arrivals) {
                ms.add(TimeUnit.NANOSECONDS.toMillis(t - t0));
            }
        }
        return ms;
    }

    // ------------------------------------------------------------------- outcome unknown: the keys

    @Test
    public void aKeyedCreateWhoseRetryMeets429IsAnUnknownOutcomeCarryingItsKeys() throws Exception {
        // a quota the lost first attempt filled refuses the retry: the task may exist
        final AtomicInteger asked = new AtomicInteger();
        final List<String> bodies = Collections.synchronizedList(new ArrayList<String>());
        HttpServer s = node(ex -> {
            String b = body(ex);
            if (asked.incrementAndGet() % 2 == 1) {
                bodies.add(b);
                ex.close(); // the first attempt's answer is lost
            } else {
                answer(ex, 429, "{\"error\": {\"code\": \"quota_exceeded\", \"quota\": \"max_pending_tasks\", "
                        + "\"field\": \"max_pending_tasks\", \"message\": \"full\"}}", "Retry-After", "1");
            }
        });
        final MolensClient c = client(url(s)).build();
        OutcomeUnknownException e = outcomeUnknown(() -> c.create(far()));
        assertEquals(Collections.singletonList(keyOf(MolensClient.JSON.readTree(bodies.get(0)))), e.getIdempotencyKeys());
        assertTrue(e.getIdempotencyKeys().get(0).matches("[0-9a-f]{32}"));

        e = outcomeUnknown(() -> c.createAll(Arrays.asList(far(), far().setIdempotencyKey("mine"))));
        JsonNode tasks = MolensClient.JSON.readTree(bodies.get(1)).path("tasks");
        assertEquals(Arrays.asList(keyOf(tasks.get(0)), "mine"), e.getIdempotencyKeys());

        BatchingClient b = new BatchingClient(c, 10, 3600000, 100, 1);
        CompletableFuture<Task> f;
        try {
            f = b.submit(far().setIdempotencyKey("submitted"));
        } finally {
            b.close();
        }
        try {
            f.get();
            fail("no error");
        } catch (ExecutionException x) {
            assertTrue(String.valueOf(x.getCause()), x.getCause() instanceof OutcomeUnknownException);
            assertEquals(Collections.singletonList("submitted"), ((OutcomeUnknownException) x.getCause()).getIdempotencyKeys());
        }
        assertEquals(6, asked.get());
    }

    @Test
    public void aCreateWhoseEveryAnswerIsLostCarriesItsKey() throws Exception {
        HttpServer s = node(TransportTest::drop);
        final MolensClient c = client(url(s)).maxAttempts(2).build();
        OutcomeUnknownException e = outcomeUnknown(() -> c.create(far().setIdempotencyKey("k1")));
        assertEquals(Collections.singletonList("k1"), e.getIdempotencyKeys());
        e = outcomeUnknown(() -> c.createAllIds(Arrays.asList(far().setIdempotencyKey("k2"), far().setIdempotencyKey("k3"))));
        assertEquals(Arrays.asList("k2", "k3"), e.getIdempotencyKeys());
        e = outcomeUnknown(() -> c.trigger(ID));
        assertEquals("not a create: no keys", Collections.<String>emptyList(), e.getIdempotencyKeys());
    }

    // a proxy's 502/504: the node behind it did not answer and may have had the request (a lost answer)

    @Test
    public void aGetAnswered502ByAProxyIsRetried() throws Exception {
        final AtomicInteger asked = new AtomicInteger();
        HttpServer s = node(ex -> {
            if (asked.incrementAndGet() == 1) {
                answer(ex, 502, "<html>Bad Gateway</html>");
            } else {
                answer(ex, 200, TASK);
            }
        });
        assertEquals(ID, client(url(s)).maxAttempts(3).build().get(ID).id);
        assertEquals(2, asked.get());
        // when every attempt meets the proxy, the last 502/504 is thrown
        HttpServer gw = node(ex -> answer(ex, 504, null));
        final MolensClient c = client(url(gw)).maxAttempts(2).build();
        ApiException e = thrown(ApiException.class, () -> c.get(ID), "http_error", null);
        assertEquals(504, e.getStatus());
    }

    @Test
    public void aKeyedCreateAnswered504EveryTimeIsAnUnknownOutcomeCarryingItsKey() throws Exception {
        final AtomicInteger asked = new AtomicInteger();
        HttpServer s = node(ex -> {
            asked.incrementAndGet();
            answer(ex, 504, "<html>Gateway Timeout</html>");
        });
        final MolensClient c = client(url(s)).maxAttempts(3).build();
        OutcomeUnknownException e = outcomeUnknown(() -> c.create(far().setIdempotencyKey("k-504")));
        assertEquals(Collections.singletonList("k-504"), e.getIdempotencyKeys());
        assertEquals("retried as after a lost answer", 3, asked.get());
        assertTrue(String.valueOf(e.getCause()), e.getCause() instanceof ApiException);
        assertEquals(504, ((ApiException) e.getCause()).getStatus());
    }

    @Test
    public void aTriggerAnswered502ByAProxyIsNotSentTwice() throws Exception {
        final AtomicInteger asked = new AtomicInteger();
        HttpServer s = node(ex -> {
            asked.incrementAndGet();
            answer(ex, 502, null);
        });
        final MolensClient c = client(url(s)).maxAttempts(3).build();
        outcomeUnknown(() -> c.trigger(ID));
        assertEquals("a trigger is not sent twice", 1, asked.get());
    }

    @Test
    public void aDeadLetterDeleteWithALimitIsNotSentTwiceAfterALostAnswer() throws Exception {
        // sent again, it could delete up to the limit more; without a limit, deleting what still matches is harmless
        final AtomicInteger asked = new AtomicInteger();
        HttpServer s = node(ex -> {
            if (asked.incrementAndGet() <= 2) { // the first request of each call
                drop(ex);
            } else {
                answer(ex, 200, "{\"matched\": 3, \"deleted\": 3, \"error_count\": 0, \"errors\": [], \"more\": false}");
            }
        });
        final MolensClient c = client(url(s)).maxAttempts(3).build();
        outcomeUnknown(() -> c.deleteDeadLetters(new DeadLetterFilter().setFlow("f").setLimit(5)));
        assertEquals(1, asked.get());
        assertEquals(3, c.deleteDeadLetters(new DeadLetterFilter().setFlow("f")).deleted);
        assertEquals(3, asked.get());
    }

    @Test
    public void aCreateAllWhoseSecondBatchIsLostNamesTheTasksTheFirstCreated() throws Exception {
        final AtomicInteger batches = new AtomicInteger();
        HttpServer s = node(ex -> {
            JsonNode tasks = MolensClient.JSON.readTree(body(ex)).path("tasks");
            if (batches.incrementAndGet() > 1) {
                drop(ex);
                return;
            }
            StringBuilder items = new StringBuilder();
            for (int i = 0; i < tasks.size(); i++) {
                items.append(i == 0 ? "" : ", ").append("{\"id\": \"t").append(i).append("\"}");
            }
            answer(ex, 201, "{\"items\": [" + items + "]}");
        });
        final MolensClient c = client(url(s)).maxAttempts(1).build();
        final List<TaskRequest> reqs = new ArrayList<TaskRequest>();
        for (int i = 0; i < 1500; i++) {
            reqs.add(far().setIdempotencyKey("k" + i));
        }
        OutcomeUnknownException e = outcomeUnknown(() -> c.createAllIds(reqs));
        assertEquals(1000, e.getCreated().size());
        assertEquals("t999", e.getCreated().get(999).id);
        assertEquals(500, e.getIdempotencyKeys().size());
        assertEquals("k1000", e.getIdempotencyKeys().get(0));
        assertEquals("not a bulk create: nothing created", 0,
                outcomeUnknown(() -> c.create(far().setIdempotencyKey("one"))).getCreated().size());
    }

    // ------------------------------------------------------------------------- batching client

    @Test
    public void aBatchingClientsUnknownOutcomeGivesEachFutureItsOwnTasksKey() throws Exception {
        // with the whole batch's keys, a caller creating "its" task again would create the batch's others too
        HttpServer s = node(ex -> answer(ex, 503, error("outcome_unknown", "leadership changed")));
        MolensClient c = client(url(s)).maxAttempts(1).build();
        List<CompletableFuture<Task>> fs = new ArrayList<CompletableFuture<Task>>();
        try (BatchingClient b = new BatchingClient(c, 3, 3600000, 100, 1)) {
            for (int i = 0; i < 3; i++) {
                fs.add(b.submit(far().setIdempotencyKey("k" + i)));
            }
        }
        for (int i = 0; i < 3; i++) {
            try {
                fs.get(i).get();
                fail("no error");
            } catch (ExecutionException x) {
                assertTrue(String.valueOf(x.getCause()), x.getCause() instanceof OutcomeUnknownException);
                OutcomeUnknownException e = (OutcomeUnknownException) x.getCause();
                assertEquals(Collections.singletonList("k" + i), e.getIdempotencyKeys());
                assertTrue(String.valueOf(e.getCause()), e.getCause() instanceof OutcomeUnknownException);
                assertEquals("the batch's own exception, as its cause", Arrays.asList("k0", "k1", "k2"),
                        ((OutcomeUnknownException) e.getCause()).getIdempotencyKeys());
            }
        }
    }

    @Test
    public void aBatchingClientsCloseWithATimeoutSaysWhenTasksAreStillUnanswered() throws Exception {
        final AtomicInteger asked = new AtomicInteger();
        HttpServer s = node(ex -> {
            int n = MolensClient.JSON.readTree(body(ex)).path("tasks").size();
            asked.incrementAndGet();
            awaitRelease();
            StringBuilder items = new StringBuilder();
            for (int i = 0; i < n; i++) {
                items.append(i == 0 ? "" : ", ").append("{\"id\": \"t").append(i).append("\"}");
            }
            answer(ex, 201, "{\"items\": [" + items + "]}");
        });
        MolensClient c = client(url(s)).build();
        BatchingClient b = new BatchingClient(c, 10, 3600000, 100, 1);
        CompletableFuture<Task> f0 = b.submit(far());
        CompletableFuture<Task> f1 = b.submit(far());
        long t0 = System.nanoTime();
        try {
            b.close(200, TimeUnit.MILLISECONDS);
            fail("close returned with 2 tasks unanswered");
        } catch (java.util.concurrent.TimeoutException e) {
            assertEquals("close timed out: 2 submitted tasks are not answered yet", e.getMessage());
        }
        long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
        assertTrue("close waited " + ms + " ms, timeout 200 ms", ms < 3000);
        try {
            b.submit(far());
            fail("a closed batching client took a task");
        } catch (MolensException expected) {
            assertEquals("the batching client is closed", expected.getMessage());
        }
        // the tasks are still sent, and their futures complete
        release.countDown();
        assertEquals("t0", f0.get(5, TimeUnit.SECONDS).id);
        assertEquals("t1", f1.get(5, TimeUnit.SECONDS).id);
        b.close(5, TimeUnit.SECONDS); // everything answered: returns
        assertEquals(1, asked.get());
    }

    /** The answer of a batch create of {@code n} tasks, created as {@code prefix0}, {@code prefix1}, ... */
    static String created(int n, String prefix) {
        StringBuilder items = new StringBuilder();
        for (int i = 0; i < n; i++) {
            items.append(i == 0 ? "" : ", ").append("{\"id\": \"").append(prefix).append(i).append("\"}");
        }
        return "{\"items\": [" + items + "]}";
    }

    @Test
    public void aBatchingClientsFlushWithATimeoutSaysWhenTasksAreStillUnansweredAndTheyStillComplete() throws Exception {
        final AtomicInteger asked = new AtomicInteger();
        HttpServer s = node(ex -> {
            int n = MolensClient.JSON.readTree(body(ex)).path("tasks").size();
            asked.incrementAndGet();
            try {
                release.await(60, TimeUnit.SECONDS); // held until the test lets it go
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            answer(ex, 201, created(n, "t"));
        });
        MolensClient c = client(url(s)).build();
        BatchingClient b = new BatchingClient(c, 10, 3600000, 100, 1);
        try {
            CompletableFuture<Task> f0 = b.submit(far());
            CompletableFuture<Task> f1 = b.submit(far());
            for (long ms : new long[] {200, 0}) {
                try {
                    b.flush(ms, TimeUnit.MILLISECONDS);
                    fail("flush(" + ms + " ms) returned with 2 tasks unanswered");
                } catch (TimeoutException e) {
                    assertEquals("flush timed out: tasks submitted before it are not answered yet", e.getMessage());
                }
            }
            assertFalse(f0.isDone() || f1.isDone());
            // the tasks are still sent, and their futures complete
            release.countDown();
            assertEquals("t0", f0.get(30, TimeUnit.SECONDS).id);
            assertEquals("t1", f1.get(30, TimeUnit.SECONDS).id);
            b.flush(30, TimeUnit.SECONDS); // everything answered: returns (once the sender has let go of the batch)
            assertEquals("one batch: the timed-out flushes sent nothing twice", 1, asked.get());
        } finally {
            b.close();
        }
    }

    @Test
    public void aBatchingClientsFlushWithTimeEnoughReturnsOnceEveryEarlierTaskIsAnswered() throws Exception {
        final AtomicInteger asked = new AtomicInteger();
        final CountDownLatch received = new CountDownLatch(1);
        HttpServer s = node(ex -> {
            int n = MolensClient.JSON.readTree(body(ex)).path("tasks").size();
            int batch = asked.getAndIncrement();
            received.countDown();
            try {
                release.await(60, TimeUnit.SECONDS); // held until the test lets it go
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            answer(ex, 201, created(n, "b" + batch + "-"));
        });
        MolensClient c = client(url(s)).build();
        // batches of 2 with 2 senders: two full batches go at once, the fifth task on the flush
        BatchingClient b = new BatchingClient(c, 2, 3600000, 100, 2);
        try {
            List<CompletableFuture<Task>> fs = new ArrayList<CompletableFuture<Task>>();
            for (int i = 0; i < 5; i++) {
                fs.add(b.submit(far()));
            }
            Thread releaser = new Thread(() -> {
                try {
                    received.await(60, TimeUnit.SECONDS);
                } catch (InterruptedException e) {
                    return;
                }
                release.countDown(); // once a batch is held, while the flush waits
            });
            releaser.start();
            b.flush(60, TimeUnit.SECONDS);
            for (CompletableFuture<Task> f : fs) {
                assertTrue("flush returned before every earlier future was done", f.isDone());
                assertTrue(f.get().id, f.get().id.matches("b[0-2]-[01]"));
            }
            assertEquals(3, asked.get());
            releaser.join();
        } finally {
            b.close();
        }
    }

    @Test
    public void aBatchingClientsFlushDoesNotWaitForTasksSubmittedAfterIt() throws Exception {
        // as Python's flush: what is submitted meanwhile batches as usual, and is not waited for
        final AtomicInteger asked = new AtomicInteger();
        final CountDownLatch received = new CountDownLatch(1);
        HttpServer s = node(ex -> {
            int n = MolensClient.JSON.readTree(body(ex)).path("tasks").size();
            int batch = asked.getAndIncrement();
            if (batch == 0) {
                received.countDown();
                try {
                    release.await(60, TimeUnit.SECONDS); // the flushed batch, held until the test lets it go
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }
            answer(ex, 201, created(n, "b" + batch + "-"));
        });
        MolensClient c = client(url(s)).build();
        final BatchingClient b = new BatchingClient(c, 10, 3600000, 100, 1);
        try {
            CompletableFuture<Task> f0 = b.submit(far());
            java.util.concurrent.FutureTask<Void> flushed = new java.util.concurrent.FutureTask<Void>(() -> {
                b.flush(); // the unbounded form: the same rule
                return null;
            });
            new Thread(flushed).start();
            // the interval is an hour: only the flush sends f0's batch, so the flush has begun once it arrives
            assertTrue("the flush sent nothing", received.await(60, TimeUnit.SECONDS));
            CompletableFuture<Task> f1 = b.submit(far());
            release.countDown();
            flushed.get(60, TimeUnit.SECONDS);
            assertEquals("b0-0", f0.getNow(null).id);
            assertFalse("the flush waited for a task submitted after it", f1.isDone());
            assertEquals("the later task waits for its batch's interval", 1, asked.get());
            b.close();
            assertEquals("b1-0", f1.get(30, TimeUnit.SECONDS).id);
        } finally {
            b.close();
        }
    }

    @Test
    public void aBatchingClientsFlushRefusesANegativeTimeoutOrNoUnit() throws Exception {
        BatchingClient b = new BatchingClient(client("http://127.0.0.1:9").build());
        try {
            try {
                b.flush(-1, TimeUnit.SECONDS);
                fail("a negative timeout was taken");
            } catch (IllegalArgumentException e) {
                assertEquals("timeout must not be negative, got -1", e.getMessage());
            }
            try {
                b.flush(1, null);
                fail("no unit was taken");
            } catch (NullPointerException e) {
                assertEquals("unit", e.getMessage());
            }
            b.flush(0, TimeUnit.NANOSECONDS); // nothing submitted: nothing to wait for
            b.flush(Long.MAX_VALUE, TimeUnit.DAYS);
        } finally {
            b.close();
        }
    }

    // ------------------------------------------------------------- a batch applied without some items

    @Test
    public void aBatchAppliedWithoutSomeItemsReportsEveryTaskItCreatedAndTheErrorsByIndex() throws Exception {
        // 2,003 tasks: the first batch is created whole, the second is applied without its item 1 (listed:
        // not_found, its namespace deleted meanwhile) and its item 5 (null, listed nowhere); the third is never sent
        for (final boolean ids : new boolean[] {false, true}) {
            final List<List<String>> sent = Collections.synchronizedList(new ArrayList<List<String>>());
            HttpServer s = node(ex -> {
                JsonNode tasks = MolensClient.JSON.readTree(body(ex)).path("tasks");
                List<String> keys = new ArrayList<String>();
                for (JsonNode t : tasks) {
                    keys.add(keyOf(t));
                }
                int batch;
                synchronized (sent) {
                    batch = sent.size();
                    sent.add(keys);
                }
                StringBuilder items = new StringBuilder();
                for (int i = 0; i < tasks.size(); i++) {
                    items.append(i == 0 ? "" : ", ");
                    if (batch == 1 && (i == 1 || i == 5)) {
                        items.append("null");
                    } else {
                        items.append("{\"id\": \"b").append(batch).append('-').append(i).append("\", \"status\": \"pending\"}");
                    }
                }
                String errors = batch != 1 ? "[]" : "[{\"index\": 1, \"error\": {\"code\": \"not_found\", "
                        + "\"message\": \"namespace gone not found\", \"field\": \"namespace\"}}]";
                answer(ex, 201, "{\"items\": [" + items + "], \"errors\": " + errors + "}");
            });
            final MolensClient c = client(url(s)).build();
            final List<TaskRequest> reqs = new ArrayList<TaskRequest>();
            for (int i = 0; i < 2003; i++) {
                reqs.add(far());
            }
            BatchPartlyCreatedException e = null;
            try {
                if (ids) {
                    c.createAllIds(reqs);
                } else {
                    c.createAll(reqs);
                }
                fail("no error");
            } catch (BatchPartlyCreatedException x) {
                e = x;
            }
            assertEquals("the earlier batches' tasks", 1000, e.getCreated().size());
            assertEquals("b0-999", e.getCreated().get(999).id);
            assertEquals("one per task given", 2003, e.getTasks().size());
            for (int i = 0; i < 2003; i++) {
                String want = i < 1000 ? "b0-" + i : i < 2000 && i != 1001 && i != 1005 ? "b1-" + (i - 1000) : null;
                Task t = e.getTasks().get(i);
                assertEquals("tasks[" + i + "]", want, t == null ? null : t.id);
            }
            assertEquals(Arrays.asList(1001, 1005), new ArrayList<Integer>(e.getItemErrors().keySet()));
            ApiException gone = e.getItemErrors().get(1001);
            assertTrue(String.valueOf(gone), gone instanceof NotFoundException && gone.isNotFound());
            assertEquals("not_found", gone.getCode());
            assertEquals("namespace", gone.getField());
            assertEquals(500, e.getItemErrors().get(1005).getStatus());
            assertEquals("internal", e.getItemErrors().get(1005).getCode());
            assertEquals("the third batch is not sent", 2, sent.size());
            assertEquals(2003, e.getIdempotencyKeys().size());
            assertEquals(sent.get(0), e.getIdempotencyKeys().subList(0, 1000));
            assertEquals(sent.get(1), e.getIdempotencyKeys().subList(1000, 2000));
            assertEquals("1998 of 2003 tasks created; task 1001 was not: 404 not_found: namespace gone not found (field namespace)",
                    e.getMessage());
        }
    }

    @Test
    public void aBatchRejectedForANamespaceThatDoesNotExistListsItsItemsAsNotFound() throws Exception {
        HttpServer s = node(ex -> answer(ex, 400, "{\"error\": {\"code\": \"invalid_argument\", \"field\": \"tasks[0].interval_ms\", "
                + "\"message\": \"2 of 2 tasks are invalid; nothing was created\"}, \"items\": [null, null], \"errors\": ["
                + "{\"index\": 0, \"error\": {\"code\": \"invalid_argument\", \"field\": \"interval_ms\", \"message\": \"bad\"}}, "
                + "{\"index\": 1, \"error\": {\"code\": \"not_found\", \"field\": \"namespace\", \"message\": \"namespace x not found\"}}]}"));
        final MolensClient c = client(url(s)).build();
        ApiException e = MolensClientTest.apiError(() -> c.createAll(Arrays.asList(far(), far())), 400, "invalid_argument",
                "tasks[0].interval_ms");
        assertEquals(0, e.getCreated().size());
        assertTrue(e.getItemErrors().get(0).isBadRequest());
        assertTrue(String.valueOf(e.getItemErrors().get(1)), e.getItemErrors().get(1) instanceof NotFoundException);
    }

    // ----------------------------------------------------------------------------------- 507

    @Test
    public void a507IsRetriedThenThrownAsInsufficientStorageWithItsRetryAfter() throws Exception {
        final AtomicInteger asked = new AtomicInteger();
        final AtomicInteger full = new AtomicInteger(2); // answers 507 this many times, then 200
        HttpServer s = node(ex -> {
            asked.incrementAndGet();
            if (full.getAndDecrement() > 0) {
                answer(ex, 507, error("insufficient_storage", "storage full: 0 bytes free"), "Retry-After", "1");
            } else {
                answer(ex, 200, TASK);
            }
        });
        final MolensClient c = client(url(s)).maxAttempts(3).build();
        assertEquals(ID, c.pause(ID).id);
        assertEquals(3, asked.get());

        full.set(1000);
        asked.set(0);
        InsufficientStorageException e = thrown(InsufficientStorageException.class, () -> c.pause(ID), "insufficient_storage", null);
        assertEquals(507, e.getStatus());
        assertEquals(Integer.valueOf(1), e.getRetryAfterSeconds());
        assertEquals(3, asked.get());
    }

    @Test
    public void a507AfterALostAnswerIsAnUnknownOutcome() throws Exception {
        final AtomicInteger asked = new AtomicInteger();
        HttpServer s = node(ex -> {
            if (asked.incrementAndGet() == 1) {
                drop(ex);
            } else {
                answer(ex, 507, error("insufficient_storage", "storage full"), "Retry-After", "1");
            }
        });
        final MolensClient c = client(url(s)).maxAttempts(3).build();
        OutcomeUnknownException e = outcomeUnknown(() -> c.create(far().setIdempotencyKey("k")));
        assertEquals(Collections.singletonList("k"), e.getIdempotencyKeys());
        assertEquals(3, asked.get());
    }

    @Test
    public void thePredicatesFollowThePythonSdksExceptionTree() throws Exception {
        // molens/client.py: PreconditionFailedError (412) is a ConflictError, InsufficientStorageError (507) an
        // UnavailableError, BadRequestError covers 400, 413 and 415
        Map<String, Predicate<ApiException>> predicates = new LinkedHashMap<String, Predicate<ApiException>>();
        predicates.put("isBadRequest", ApiException::isBadRequest);
        predicates.put("isUnauthorized", ApiException::isUnauthorized);
        predicates.put("isForbidden", ApiException::isForbidden);
        predicates.put("isNotFound", ApiException::isNotFound);
        predicates.put("isConflict", ApiException::isConflict);
        predicates.put("isPreconditionFailed", ApiException::isPreconditionFailed);
        predicates.put("isUnavailable", ApiException::isUnavailable);
        String[][] cases = { // status, code, the predicates that hold
            {"400", "invalid_argument", "isBadRequest"}, {"413", "payload_too_large", "isBadRequest"},
            {"415", "unsupported_media_type", "isBadRequest"}, {"401", "unauthorized", "isUnauthorized"},
            {"403", "forbidden", "isForbidden"}, {"404", "not_found", "isNotFound"},
            {"409", "illegal_transition", "isConflict"}, {"412", "precondition_failed", "isConflict isPreconditionFailed"},
            {"429", "too_many_requests", ""}, {"503", "no_leader", "isUnavailable"},
            {"507", "insufficient_storage", "isUnavailable"}, {"500", "internal", ""},
        };
        final String[] answer = new String[2]; // the stand-in's status and code
        HttpServer s = node(ex -> answer(ex, Integer.parseInt(answer[0]), error(answer[1], "refused")));
        final MolensClient c = client(url(s)).maxAttempts(1).build();
        for (String[] k : cases) {
            answer[0] = k[0];
            answer[1] = k[1];
            ApiException e = MolensClientTest.apiError(() -> c.get(ID), Integer.parseInt(k[0]), k[1], null);
            List<String> holds = new ArrayList<String>();
            for (Map.Entry<String, Predicate<ApiException>> p : predicates.entrySet()) {
                if (p.getValue().test(e)) {
                    holds.add(p.getKey());
                }
            }
            assertEquals(k[0] + " " + k[1], k[2], String.join(" ", holds));
        }
    }

    @Test
    public void aBoundThatIsNotPositiveIsRefusedByBuild() {
        // as the Python SDK's MolensClient: 0 would cut every attempt to nothing or (a 0 timeout) wait forever
        List<String> refused = new ArrayList<String>();
        List<java.util.function.Consumer<MolensClient.Builder>> bad = Arrays.asList(
            b -> b.retryDeadlineMs(0), b -> b.readTimeoutMs(0), b -> b.connectTimeoutMs(-1), b -> b.maxAttempts(0),
            b -> b.backoffMs(0, 2000), b -> b.backoffMs(50, 0));
        for (java.util.function.Consumer<MolensClient.Builder> set : bad) {
            MolensClient.Builder b = MolensClient.builder("http://127.0.0.1:9");
            set.accept(b);
            try {
                b.build();
            } catch (IllegalArgumentException e) {
                refused.add(e.getMessage());
            }
        }
        assertEquals(Arrays.asList("retryDeadlineMs must be positive, got 0", "readTimeoutMs must be positive, got 0",
            "connectTimeoutMs must be positive, got -1", "maxAttempts must be positive, got 0",
            "backoffMs base must be positive, got 0", "backoffMs max must be positive, got 0"), refused);
        MolensClient.builder("http://127.0.0.1:9").retryDeadlineMs(1).maxAttempts(1).build(); // the least accepted
    }

    // ------------------------------------------------------------------------- what is sent

    @Test
    public void deleteDeadLettersSendsTheClientsNamespaceOnlyWithAFilterOrAll() throws Exception {
        // the server counts ?namespace= as a filter: alone, it would delete the namespace's every dead letter
        final List<String> queries = Collections.synchronizedList(new ArrayList<String>());
        HttpServer s = node(ex -> {
            queries.add(String.valueOf(ex.getRequestURI().getRawQuery()));
            answer(ex, 200, "{\"matched\": 0, \"deleted\": 0, \"error_count\": 0, \"errors\": [], \"more\": false}");
        });
        MolensClient c = client(url(s)).namespace("pay").build();
        c.deleteDeadLetters(new DeadLetterFilter());
        c.deleteDeadLetters(new DeadLetterFilter().setLimit(5));
        c.deleteDeadLetters(new DeadLetterFilter().setAll(true));
        c.deleteDeadLetters(new DeadLetterFilter().setFlow("f"));
        c.deleteDeadLetters(new DeadLetterFilter().setNamespace("other"));
        assertEquals(Arrays.asList("null", "limit=5", "all=true&namespace=pay", "flow=f&namespace=pay", "namespace=other"), queries);
    }

    @Test
    public void aBulkRequestStoppedPartWaySaysWhyAndWhatApplied() throws Exception {
        HttpServer s = node(ex -> answer(ex, 200, "{\"matched\": 9, \"redriven\": 4, \"error_count\": 0, \"errors\": [], "
                + "\"more\": true, \"interrupted\": {\"code\": \"no_leader\", \"message\": \"leadership changed\"}}"));
        BulkResult r = client(url(s)).build().redriveDeadLetters(new DeadLetterFilter().setFlow("f"));
        assertEquals(4, r.redriven);
        assertTrue(r.more);
        assertNotNull(r.interrupted);
        assertEquals("no_leader", r.interrupted.code);
        assertEquals("leadership changed", r.interrupted.message);
    }

    @Test
    public void anErrorKeepsItsReason() throws Exception {
        final String[] text = new String[1];
        HttpServer s = node(ex -> answer(ex, 400, text[0]));
        final MolensClient c = client(url(s)).build();
        text[0] = "{\"error\": {\"code\": \"invalid_argument\", \"message\": \"it never fires\", \"field\": \"cron_expr\", "
                + "\"reason\": \"never_fires\"}}";
        assertEquals("never_fires", MolensClientTest.apiError(() -> c.create(far()), 400, "invalid_argument", "cron_expr").getReason());
        text[0] = "{\"error\": {\"code\": \"invalid_argument\", \"message\": \"tasks[0]\", \"field\": \"tasks[0].cron_expr\"}, "
                + "\"errors\": [{\"index\": 0, \"error\": {\"code\": \"invalid_argument\", \"message\": \"it never fires\", "
                + "\"field\": \"cron_expr\", \"reason\": \"never_fires\"}}]}";
        ApiException e = MolensClientTest.apiError(() -> c.createAll(Collections.singletonList(far())), 400, "invalid_argument",
                "tasks[0].cron_expr");
        assertNull(e.getReason());
        assertEquals("never_fires", e.getItemErrors().get(0).getReason());
    }

    // ----------------------------------------------------------------------------------- helpers

    static String keyOf(JsonNode task) { return task.path("idempotency_key").asText(); }

    static String repeat(char ch, int n) {
        char[] cs = new char[n];
        Arrays.fill(cs, ch);
        return new String(cs);
    }

    static OutcomeUnknownException outcomeUnknown(Runnable r) {
        try {
            r.run();
        } catch (OutcomeUnknownException e) {
            return e;
        } catch (RuntimeException e) {
            throw new AssertionError("want OutcomeUnknownException, got " + e, e);
        }
        throw new AssertionError("want OutcomeUnknownException, got an answer");
    }

    void awaitRelease() {
        try {
            release.await(5, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    /**
     * A port whose listen queue is full (a socket that never accepts, its backlog taken by connections held
     * open): a connect to it times out, as to a host that drops the SYN.
     */
    int fullBacklog() throws IOException {
        ServerSocket ss = new ServerSocket(0, 1, InetAddress.getByName("127.0.0.1"));
        sockets.add(ss);
        for (int i = 0; i < 64; i++) {
            Socket probe = new Socket();
            sockets.add(probe);
            try {
                probe.connect(new InetSocketAddress("127.0.0.1", ss.getLocalPort()), 200);
            } catch (java.net.SocketTimeoutException full) {
                return ss.getLocalPort();
            }
        }
        throw new AssertionError("the listen queue of a socket with backlog 1 never filled: connect timeouts cannot be shown here");
    }

    /** A port that accepts every connection and closes it at once: a TLS handshake with it fails. */
    int hangingUp() throws IOException {
        final ServerSocket ss = new ServerSocket(0, 50, InetAddress.getByName("127.0.0.1"));
        sockets.add(ss);
        Thread t = new Thread(() -> {
            while (true) {
                try {
                    ss.accept().close();
                } catch (IOException closed) {
                    return; // the test ended
                }
            }
        }, "hanging-up");
        t.setDaemon(true);
        t.start();
        return ss.getLocalPort();
    }

    /**
     * A stand-in node over TLS, with a self-signed certificate for 127.0.0.1 (made by the JDK's keytool) that
     * this JVM's HTTPS connections trust until the test ends.
     */
    HttpsServer httpsNode(HttpHandler h) throws Exception {
        File dir = Files.createTempDirectory("molens-tls").toFile();
        File store = new File(dir, "node.p12");
        char[] pass = "molens".toCharArray();
        Process p = new ProcessBuilder(System.getProperty("java.home") + "/bin/keytool", "-genkeypair", "-keystore", store.getPath(),
                "-storetype", "PKCS12", "-storepass", "molens", "-keypass", "molens", "-alias", "node", "-keyalg", "RSA",
                "-keysize", "2048", "-dname", "CN=127.0.0.1", "-ext", "SAN=ip:127.0.0.1", "-validity", "2")
                .redirectErrorStream(true).start();
        String out = new String(readAllOf(p.getInputStream()), StandardCharsets.UTF_8);
        assertEquals("keytool: " + out, 0, p.waitFor());
        KeyStore ks = KeyStore.getInstance("PKCS12");
        try (FileInputStream in = new FileInputStream(store)) {
            ks.load(in, pass);
        }
        store.delete();
        dir.delete();
        KeyManagerFactory kmf = KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
        kmf.init(ks, pass);
        TrustManagerFactory tmf = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
        tmf.init(ks);
        SSLContext ctx = SSLContext.getInstance("TLS");
        ctx.init(kmf.getKeyManagers(), tmf.getTrustManagers(), null);
        HttpsServer s = HttpsServer.create(new InetSocketAddress("127.0.0.1", 0), 0);
        s.setHttpsConfigurator(new HttpsConfigurator(ctx));
        s.createContext("/", h);
        s.start();
        servers.add(s);
        if (defaultTls == null) {
            defaultTls = HttpsURLConnection.getDefaultSSLSocketFactory();
        }
        HttpsURLConnection.setDefaultSSLSocketFactory(ctx.getSocketFactory());
        return s;
    }

    static byte[] readAllOf(InputStream in) throws IOException {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        byte[] buf = new byte[8192];
        int n;
        while ((n = in.read(buf)) >= 0) {
            out.write(buf, 0, n);
        }
        return out.toByteArray();
    }
}
