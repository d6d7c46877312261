package dev.molens.client;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.TreeSet;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * Collects {@link #submit} calls into batch creates, sent when {@code maxBatch} tasks are queued, when
 * the oldest has waited {@code flushIntervalMs}, on {@link #flush()} (or {@link #flush(long, TimeUnit)}) and on
 * {@link #close()} (or {@link #close(long, TimeUnit)}); the timed forms say when they gave up waiting. Every task
 * gets its idempotency key when submitted, so a batch retried after a lost response (a leader killed
 * mid-request) creates each task exactly once. An invalid task fails only its own future; the valid
 * rest of its batch is re-sent at once. With {@code idsOnly} the batches ask for {@code Prefer: return=minimal}
 * and each future completes with a {@link Task} holding only its id, for loads that need no more of the
 * created tasks. Thread-safe.
 *
 * <pre>{@code
 * try (BatchingClient b = new BatchingClient(client, 500, 50, 100_000, 1)) {
 *     CompletableFuture<Task> f = b.submit(new TaskRequest().setType("delayed").setIntervalMs(60000L)
 *             .setCallbackUrl(url));
 * } // close() flushes
 * }</pre>
 */
public final class BatchingClient implements AutoCloseable {
    private static final class Item {
        final TaskRequest req;
        final CompletableFuture<Task> future = new CompletableFuture<Task>();

        Item(TaskRequest req) { this.req = req; }
    }

    private final MolensClient client;
    private final int maxBatch;
    private final boolean idsOnly;
    private final long flushIntervalNanos;
    private final Semaphore slots;
    private final List<Thread> senders = new ArrayList<Thread>();
    private final ArrayDeque<Item> queue = new ArrayDeque<Item>();
    private long oldest;
    private int inflight;
    private boolean closing;
    // tasks are numbered in submit order: submitted so far, taken into batches so far, flushed up to (the senders
    // send at once while taken < flushUpto), and the first number of each batch being sent
    private long submitted;
    private long taken;
    private long flushUpto;
    private final TreeSet<Long> sending = new TreeSet<Long>();

    /** Batches of 500, a 50 ms interval, 100,000 pending at most, one sender. */
    public BatchingClient(MolensClient client) { this(client, 500, 50, 100000, 1); }

    /**
     * @param maxBatch tasks per request, 1..1000
     * @param flushIntervalMs how long the oldest queued task waits at most
     * @param maxPending submitted but unanswered tasks; {@link #submit} blocks beyond it
     * @param senderThreads batch requests in flight at once
     */
    public BatchingClient(MolensClient client, int maxBatch, long flushIntervalMs, int maxPending, int senderThreads) {
        this(client, maxBatch, flushIntervalMs, maxPending, senderThreads, false);
    }

    /**
     * @param maxBatch tasks per request, 1..1000
     * @param flushIntervalMs how long the oldest queued task waits at most
     * @param maxPending submitted but unanswered tasks; {@link #submit} blocks beyond it
     * @param senderThreads batch requests in flight at once
     * @param idsOnly the batches ask for {@code Prefer: return=minimal}; each future's task holds only its id
     */
    public BatchingClient(MolensClient client, int maxBatch, long flushIntervalMs, int maxPending, int senderThreads,
            boolean idsOnly) {
        if (maxBatch < 1 || maxBatch > 1000) {
            throw new IllegalArgumentException("maxBatch must be in 1..1000");
        }
        this.client = client;
        this.maxBatch = maxBatch;
        this.idsOnly = idsOnly;
        this.flushIntervalNanos = TimeUnit.MILLISECONDS.toNanos(flushIntervalMs);
        this.slots = new Semaphore(maxPending);
        for (int i = 0; i < Math.max(1, senderThreads); i++) {
            Thread t = new Thread(new Runnable() {
                @Override
                public void run() { loop(); }
            }, "molens-batcher-" + i);
            t.setDaemon(true);
            senders.add(t);
            t.start();
        }
    }

    /**
     * Queues one task (a copy of r) for creation; the future completes with the created task (idsOnly: its id alone),
     * or fails with its error: an {@link OutcomeUnknownException} carries this task's own idempotency key (create
     * it again with that key to learn whether it exists); its cause is the batch's, with every key of the batch.
     */
    public CompletableFuture<Task> submit(TaskRequest r) {
        Item it = new Item(client.keyed(r));
        slots.acquireUninterruptibly();
        synchronized (this) {
            if (closing) {
                slots.release();
                throw new MolensException("the batching client is closed");
            }
            boolean first = queue.isEmpty();
            if (first) {
                oldest = System.nanoTime();
            }
            queue.add(it);
            submitted++;
            if (first || queue.size() >= maxBatch) {
                notifyAll(); // start the interval clock, or send a full batch now
            }
        }
        return it.future;
    }

    /**
     * Sends everything submitted so far and waits until it has been answered (its futures completed); waits as long
     * as that takes. What other threads submit meanwhile is not waited for, and batches as usual.
     */
    public void flush() throws InterruptedException {
        awaitFlushed(-1);
    }

    /**
     * Sends everything submitted so far and waits until it has been answered (its futures completed), at most
     * {@code timeout} (0: only checks). What other threads submit meanwhile is not waited for, and batches as usual.
     * {@link TimeoutException} when the time ends first: those tasks are still sent, and their futures complete,
     * while the JVM lives. The wait holds no lock: {@link #submit} and the senders go on meanwhile.
     *
     * @throws IllegalArgumentException when {@code timeout} is negative
     * @throws NullPointerException when {@code unit} is null
     */
    public void flush(long timeout, TimeUnit unit) throws InterruptedException, TimeoutException {
        if (timeout < 0) {
            throw new IllegalArgumentException("timeout must not be negative, got " + timeout);
        }
        if (unit == null) {
            throw new NullPointerException("unit");
        }
        if (!awaitFlushed(unit.toNanos(timeout))) {
            throw new TimeoutException("flush timed out: tasks submitted before it are not answered yet");
        }
    }

    /** Flushes what was submitted before the call; waits at most {@code nanos} (negative: no bound). */
    private synchronized boolean awaitFlushed(long nanos) throws InterruptedException {
        long start = System.nanoTime();
        long upto = flushUpto = Math.max(flushUpto, submitted);
        notifyAll();
        // wait() and timedWait release the monitor: submit and the senders are not held up
        while (taken < upto || (!sending.isEmpty() && sending.first() < upto)) {
            if (nanos < 0) {
                wait();
                continue;
            }
            long left = nanos - (System.nanoTime() - start);
            if (left <= 0) {
                return false;
            }
            TimeUnit.NANOSECONDS.timedWait(this, left);
        }
        return true;
    }

    /** Flushes, then stops the sender threads; waits as long as that takes. */
    @Override
    public void close() {
        synchronized (this) {
            closing = true;
            notifyAll();
        }
        boolean interrupted = false;
        for (Thread t : senders) {
            while (t.isAlive()) {
                try {
                    t.join();
                } catch (InterruptedException e) {
                    interrupted = true;
                }
            }
        }
        if (interrupted) {
            Thread.currentThread().interrupt();
        }
    }

    /**
     * Flushes, then stops the sender threads, waiting at most {@code timeout}. {@link TimeoutException} when the
     * time ends first: its message counts the submitted tasks not answered yet. They are still sent, and their
     * futures complete, while the JVM lives (the sender threads are daemons: an exit drops what is left). Either
     * way {@link #submit} refuses new tasks from the call on.
     */
    public void close(long timeout, TimeUnit unit) throws InterruptedException, TimeoutException {
        synchronized (this) {
            closing = true;
            notifyAll();
        }
        long deadline = System.nanoTime() + unit.toNanos(timeout);
        for (Thread t : senders) {
            long left = deadline - System.nanoTime();
            if (left > 0) {
                TimeUnit.NANOSECONDS.timedJoin(t, left);
            }
        }
        for (Thread t : senders) {
            if (t.isAlive()) {
                int unanswered;
                synchronized (this) {
                    unanswered = queue.size() + inflight;
                }
                throw new TimeoutException("close timed out: " + unanswered + " submitted tasks are not answered yet");
            }
        }
    }

    private void loop() {
        while (true) {
            List<Item> batch = new ArrayList<Item>();
            long first;
            synchronized (this) {
                try {
                    while (true) {
                        int n = queue.size();
                        if (n >= maxBatch || (n > 0 && (closing || taken < flushUpto))) {
                            break;
                        }
                        if (n == 0) {
                            if (closing) {
                                return;
                            }
                            wait();
                            continue;
                        }
                        long left = oldest + flushIntervalNanos - System.nanoTime();
                        if (left <= 0) {
                            break;
                        }
                        TimeUnit.NANOSECONDS.timedWait(this, left);
                    }
                } catch (InterruptedException e) {
                    return;
                }
                while (batch.size() < maxBatch && !queue.isEmpty()) {
                    batch.add(queue.poll());
                }
                if (!queue.isEmpty()) {
                    oldest = System.nanoTime();
                }
                first = taken;
                taken += batch.size();
                sending.add(first);
                inflight += batch.size();
                notifyAll();
            }
            try {
                send(batch); // completes every future of the batch
            } finally {
                synchronized (this) {
                    sending.remove(first);
                    inflight -= batch.size();
                    notifyAll();
                }
            }
        }
    }

    private void send(List<Item> batch) {
        while (!batch.isEmpty()) {
            List<TaskRequest> reqs = new ArrayList<TaskRequest>(batch.size());
            for (Item it : batch) {
                reqs.add(it.req);
            }
            MolensClient.BatchResult res;
            try {
                res = client.createBatch(reqs, idsOnly);
            } catch (ApiException e) {
                if (!e.getItemErrors().isEmpty()) {
                    List<Item> keep = new ArrayList<Item>();
                    for (int i = 0; i < batch.size(); i++) {
                        ApiException ie = e.getItemErrors().get(i);
                        if (ie != null) {
                            complete(batch.get(i), null, ie);
                        } else {
                            keep.add(batch.get(i));
                        }
                    }
                    if (keep.size() < batch.size()) {
                        batch = keep;
                        continue;
                    }
                }
                failAll(batch, e);
                return;
            } catch (OutcomeUnknownException e) { // each future gets its own task's key to create it again with
                for (Item it : batch) {
                    OutcomeUnknownException own = new OutcomeUnknownException(e.getMessage(), e);
                    own.idempotencyKeys = Collections.singletonList(it.req.getIdempotencyKey());
                    complete(it, null, own);
                }
                return;
            } catch (RuntimeException e) {
                failAll(batch, e);
                return;
            }
            for (int i = 0; i < batch.size(); i++) {
                complete(batch.get(i), res.tasks.get(i), res.errors.get(i));
            }
            return;
        }
    }

    private void failAll(List<Item> batch, RuntimeException e) {
        for (Item it : batch) {
            complete(it, null, e);
        }
    }

    private void complete(Item it, Task t, RuntimeException e) {
        if (e != null) {
            it.future.completeExceptionally(e);
        } else {
            it.future.complete(t);
        }
        slots.release();
    }
}
