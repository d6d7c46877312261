package dev.molens.client;

import static dev.molens.client.MolensClientTest.thrown;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertNotNull;
import static org.junit.Assert.assertNull;
import static org.junit.Assert.assertTrue;

import org.junit.Before;
import org.junit.Test;

/** Flows against the single node MOLENS_NODE_URL names. */
public class FlowsTest {
    MolensClient c;

    @Before
    public void setUp() {
        c = MolensClient.builder(NodeEnv.require("MOLENS_NODE_URL")).backoffMs(10, 200).build();
    }

    @Test
    public void flowsAreSetPausedListedResumedAndDeleted() {
        final String key = "[::1]:" + (System.nanoTime() % 60000 + 1024); // brackets and a colon go through the path
        Flow f = c.setFlow(key, new FlowLimits().setRatePerS(20.0).setConcurrency(3));
        assertEquals(key, f.key);
        assertTrue(f.configured);
        assertEquals(Double.valueOf(20), f.ratePerS);
        assertEquals(Integer.valueOf(3), f.concurrency);
        assertNull(f.burst);
        assertFalse(f.paused);
        assertNotNull(f.updatedAt);
        assertTrue(f.live);
        assertNotNull(f.inFlight);
        Flow p = c.pauseFlow(key);
        assertTrue(p.paused);
        assertEquals(Double.valueOf(20), p.ratePerS);
        assertTrue(c.getFlow(key).paused);
        Flow listed = null;
        for (Flow x : c.listFlows()) {
            if (x.key.equals(key)) {
                listed = x;
            }
        }
        assertNotNull(key + " is listed", listed);
        assertTrue(listed.paused);
        Flow r = c.resumeFlow(key);
        assertFalse(r.paused);
        assertEquals(Integer.valueOf(3), r.concurrency);
        thrown(ApiException.class, new Runnable() { public void run() { c.setFlow(key, new FlowLimits().setBurst(3)); } },
                "invalid_argument", "burst");
        Flow replaced = c.setFlow(key, new FlowLimits().setConcurrency(1));
        assertNull("limits are replaced whole", replaced.ratePerS);
        assertFalse(c.deleteFlow(key).configured);
        NotFoundException e = thrown(NotFoundException.class, new Runnable() { public void run() { c.getFlow(key); } },
                "not_found", "key");
        assertTrue(e.isNotFound());
        thrown(NotFoundException.class, new Runnable() { public void run() { c.deleteFlow(key); } }, "not_found", "key");
    }
}
