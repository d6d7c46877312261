package dev.molens.client;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.junit.Test;

public class SignaturesTest {
    // Made by molens.signing.signature_header (the node's own code).
    static final String PY_HEADER = "t=1795978278937,v1=d32d6a5407897a318c877eb42b951412c320e95f86cdfc293e5ea5508bffec8d,"
            + "v1=a370fdeb83368bcab014e81e8e2948b90440bf398d0db4f59c49e1aaa25b38bb";
    static final String FIRE = "01M8MABE0SEAD6S92SY1NA2EWB-1";
    static final byte[] BODY = "{\"order_id\":42}".getBytes(StandardCharsets.UTF_8);
    static final long T = 1795978278937L;

    static Map<String, String> signed(String sig, String fireId) {
        Map<String, String> h = new HashMap<String, String>();
        h.put("X-Molens-Signature", sig);
        h.put("X-Fire-ID", fireId);
        return h;
    }

    static boolean verify(Map<String, String> h, byte[] body, List<String> secrets, long now) {
        return Signatures.verifySignature(h, body, secrets, Signatures.DEFAULT_TOLERANCE_MS, now);
    }

    @Test
    public void headerIsByteForByteThePythonOne() {
        assertEquals(PY_HEADER, Signatures.signatureHeader(Arrays.asList("s3cret", "next-secret"), FIRE, BODY, T));
    }

    @Test
    public void eitherSecretOfARotationIsAccepted() {
        assertTrue(verify(signed(PY_HEADER, FIRE), BODY, Arrays.asList("s3cret"), T + 1000));
        assertTrue(verify(signed(PY_HEADER, FIRE), BODY, Arrays.asList("other", "next-secret"), T));
        Map<String, String> lower = new HashMap<String, String>();
        lower.put("x-molens-signature", "v0=zz," + PY_HEADER.toUpperCase().replace("T=", "t=").replace("V1=", "v1="));
        lower.put("x-fire-id", FIRE);
        assertTrue("lower-case names, an unknown scheme, upper-case hex", verify(lower, BODY, Arrays.asList("s3cret"), T));
    }

    @Test
    public void tamperingReplayAndJunkAreRejected() {
        List<String> s = Arrays.asList("s3cret");
        long tol = Signatures.DEFAULT_TOLERANCE_MS;
        assertFalse(verify(signed(PY_HEADER, FIRE), "{\"order_id\":43}".getBytes(StandardCharsets.UTF_8), s, T));
        assertFalse(verify(signed(PY_HEADER, FIRE + "x"), BODY, s, T));
        assertFalse(verify(signed(PY_HEADER, FIRE), BODY, Arrays.asList("nope"), T));
        assertFalse(verify(signed(PY_HEADER, FIRE), BODY, Collections.<String>emptyList(), T));
        assertFalse(verify(signed(PY_HEADER, FIRE), BODY, Arrays.asList(""), T));
        assertFalse(verify(signed(PY_HEADER, FIRE), BODY, s, T + tol + 1));
        assertFalse(verify(signed(PY_HEADER, FIRE), BODY, s, T - tol - 1));
        Map<String, String> noFire = signed(PY_HEADER, FIRE);
        noFire.remove("X-Fire-ID");
        assertFalse(verify(noFire, BODY, s, T));
        assertFalse(verify(new HashMap<String, String>(), BODY, s, T));
        assertFalse(verify(signed("v1=" + Signatures.computeV1("s3cret", FIRE, BODY, T), FIRE), BODY, s, T));
        assertFalse(verify(signed("t=1," + PY_HEADER, FIRE), BODY, s, T));
        assertFalse(verify(signed("t=1795978278937,v1=abc", FIRE), BODY, s, T));
        assertFalse(verify(signed(PY_HEADER + ",junk", FIRE), BODY, s, T));
        assertFalse(verify(signed(PY_HEADER + ",", FIRE), BODY, s, T));
        assertFalse(verify(signed("t=-5,v1=" + Signatures.computeV1("s3cret", FIRE, BODY, -5), FIRE), BODY, s, -5));
        assertFalse(verify(signed("t=1795978278937,v2=" + Signatures.computeV1("s3cret", FIRE, BODY, T), FIRE), BODY, s, T));
    }

    /** MOLENS_SIGNING_VECTOR: a vector the pytest driver made just now with molens.signing. */
    @Test
    public void aFreshPythonVectorVerifies() throws Exception {
        String raw = NodeEnv.require("MOLENS_SIGNING_VECTOR");
        JsonNode v = MolensClient.JSON.readTree(raw);
        List<String> secrets = new ArrayList<String>();
        for (JsonNode s : v.path("secrets")) {
            secrets.add(s.asText());
        }
        byte[] body = v.path("body").asText().getBytes(StandardCharsets.UTF_8);
        String fire = v.path("fire_id").asText();
        long t = v.path("t_ms").asLong();
        assertEquals(v.path("header").asText(), Signatures.signatureHeader(secrets, fire, body, t));
        assertTrue(verify(signed(v.path("header").asText(), fire), body, secrets.subList(1, 2), t));
    }
}
