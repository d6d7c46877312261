package dev.molens.client;

import static org.junit.Assert.fail;

/** The nodes tests/integration/test_sdk_java.py starts, named by environment variables. */
final class NodeEnv {
    private NodeEnv() {}

    static String require(String name) {
        String v = System.getenv(name);
        if (v == null || v.isEmpty()) {
            fail(name + " is not set: run these tests through tests/integration/test_sdk_java.py, which starts the nodes");
        }
        return v;
    }

    static void pollUntil(String what, long timeoutMs, java.util.concurrent.Callable<Boolean> fn) throws Exception {
        long deadline = System.currentTimeMillis() + timeoutMs;
        Exception last = null;
        while (true) {
            try {
                if (fn.call()) {
                    return;
                }
            } catch (MolensException | java.io.IOException e) {
                last = e;
            }
            if (System.currentTimeMillis() > deadline) {
                fail("timed out after " + timeoutMs + " ms waiting for " + what + (last != null ? " (last error: " + last + ")" : ""));
            }
            Thread.sleep(20);
        }
    }
}
