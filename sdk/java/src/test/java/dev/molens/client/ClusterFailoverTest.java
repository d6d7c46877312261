package dev.molens.client;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertNotEquals;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import org.junit.FixMethodOrder;
import org.junit.Test;
import org.junit.runners.MethodSorters;

/** Against the 3-node cluster MOLENS_CLUSTER_URLS names (MOLENS_CLUSTER_PIDS: "id=pid,..."). */
@FixMethodOrder(MethodSorters.NAME_ASCENDING) // the failover test, last, leaves a node dead
public class ClusterFailoverTest {
    static String[] urls() { return NodeEnv.require("MOLENS_CLUSTER_URLS").split(","); }

    static TaskRequest far(String base, String scene) {
        return new TaskRequest().setType("delayed").setIntervalMs(3600000L)
                .setCallbackUrl(base + "/api/v1/test/callback").setScene(scene);
    }

    /** [leader id, leader URL] as the cluster reports it (polled until known). */
    static String[] leader(final MolensClient c) throws Exception {
        final String[] out = new String[2];
        NodeEnv.pollUntil("a leader", 30000, new java.util.concurrent.Callable<Boolean>() {
            public Boolean call() {
                Cluster.Status st = c.clusterStatus();
                if (st.leaderId == null) {
                    return false;
                }
                out[0] = st.leaderId;
                out[1] = st.leaderId.equals(st.nodeId) ? c.currentNode() : c.clusterLeader().leaderUrl;
                return out[1] != null;
            }
        });
        return out;
    }

    @Test
    public void aFollowerRedirectsWritesToTheLeader() throws Exception {
        String[] us = urls();
        String[] lead = leader(MolensClient.builder(us).build());
        String follower = null;
        for (String u : us) {
            if (!u.equals(lead[1])) {
                follower = u;
            }
        }
        MolensClient c = MolensClient.builder(follower).build();
        Task t = c.create(far(follower, "redirect-" + System.nanoTime()));
        assertEquals("the client moved to the leader " + lead[0], lead[1], c.currentNode());
        assertEquals("paused", c.pause(t.id).status);
    }

    @Test
    public void killingTheLeaderMidBatchLosesAndDuplicatesNothing() throws Exception {
        String[] us = urls();
        Map<String, String> pids = new HashMap<String, String>();
        for (String kv : NodeEnv.require("MOLENS_CLUSTER_PIDS").split(",")) {
            String[] p = kv.split("=");
            pids.put(p[0], p[1]);
        }
        MolensClient c = MolensClient.builder(us).maxAttempts(40).retryDeadlineMs(60000).backoffMs(20, 500).build();
        String[] lead = leader(c);
        final int n = 6000;
        String scene = "failover-" + System.nanoTime();
        BatchingClient b = new BatchingClient(c, 100, 5, 100000, 2);
        List<CompletableFuture<Task>> fs = new ArrayList<CompletableFuture<Task>>();
        boolean killed = false;
        for (int i = 0; i < n; i++) {
            fs.add(b.submit(far(us[0], scene).setPayload(java.util.Collections.singletonMap("i", i))));
            if (i == n / 2) { // half submitted: once a sixth are created, kill -9 the leader; the rest are in flight or queued
                fs.get(n / 6).join();
                Process kill = new ProcessBuilder("kill", "-9", pids.get(lead[0])).inheritIO().start();
                assertEquals("kill -9 " + lead[0], 0, kill.waitFor());
                killed = true;
            }
        }
        b.close();
        assertTrue(killed);
        Set<String> ids = new HashSet<String>();
        for (int i = 0; i < n; i++) {
            try {
                ids.add(fs.get(i).get().id);
            } catch (ExecutionException e) {
                fail("task " + i + " failed across the failover: " + e.getCause());
            }
        }
        String[] now = leader(c);
        assertNotEquals(lead[0] + " still leads after kill -9", lead[0], now[0]);
        int[] seen = new int[n];
        List<Task> all = c.listAllTasks(new ListOptions().setScene(scene).setLimit(1000));
        for (Task t : all) {
            assertTrue("task " + t.id + " exists but no future returned it: a duplicate", ids.contains(t.id));
            seen[t.payload.path("i").asInt()]++;
        }
        for (int i = 0; i < n; i++) {
            assertEquals("copies of task i=" + i + " (" + all.size() + " tasks of " + n + ")", 1, seen[i]);
        }
        System.out.println("killed leader " + lead[0] + " mid-batch; " + now[0] + " took over; " + all.size()
                + " tasks, each exactly once");
    }

    /** After the failover test: kill -9 a second node; the survivor's 503 no_leader is retried, then thrown with its code. */
    @Test
    public void lastlyNoLeaderIsRetriedThenReportedWithItsCode() throws Exception {
        Map<String, String> pids = new HashMap<String, String>();
        for (String kv : NodeEnv.require("MOLENS_CLUSTER_PIDS").split(",")) {
            String[] p = kv.split("=");
            pids.put(p[0], p[1]);
        }
        List<String> alive = new ArrayList<String>();
        List<String> aliveIds = new ArrayList<String>();
        for (String u : urls()) {
            try {
                aliveIds.add(MolensClient.builder(u).maxAttempts(1).build().clusterStatus().nodeId);
                alive.add(u);
            } catch (MolensException e) {
                // the node the failover test killed
            }
        }
        assertEquals("the 2 nodes the failover test left: " + aliveIds, 2, alive.size());
        Process kill = new ProcessBuilder("kill", "-9", pids.get(aliveIds.get(0))).inheritIO().start();
        assertEquals(0, kill.waitFor());
        final String survivor = alive.get(1);
        NodeEnv.pollUntil("the survivor to know it has no leader", 30000, new java.util.concurrent.Callable<Boolean>() {
            public Boolean call() throws Exception {
                java.net.HttpURLConnection conn = (java.net.HttpURLConnection) new java.net.URL(survivor + "/readyz").openConnection();
                try {
                    return conn.getResponseCode() == 503;
                } finally {
                    conn.disconnect();
                }
            }
        });
        MolensClient c = MolensClient.builder(survivor).maxAttempts(4).backoffMs(10, 50).build();
        try {
            c.create(far(survivor, "no-leader"));
            fail("created without a leader");
        } catch (ApiException e) {
            assertEquals(e.toString(), 503, e.getStatus());
            assertEquals("no_leader", e.getCode());
            assertTrue(e.isUnavailable());
        }
    }
}
