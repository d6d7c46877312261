package dev.molens.client;

import java.nio.charset.StandardCharsets;
import java.security.InvalidKeyException;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

/**
 * Callback signatures, as molens/signing.py makes them:
 * {@code X-Molens-Signature: t=<unix ms>,v1=<hex>[,v1=<hex>]}, each hex being
 * HMAC-SHA256(secret, "&lt;t&gt;.&lt;X-Fire-ID&gt;.&lt;body&gt;"); during a secret rotation one v1 per
 * configured secret, over the same t. A receiver accepts a request when any v1 matches any secret it knows.
 */
public final class Signatures {
    public static final String SIGNATURE_HEADER = "X-Molens-Signature";
    public static final String FIRE_ID_HEADER = "X-Fire-ID";
    public static final long DEFAULT_TOLERANCE_MS = 300000L;
    private static final int MAX_HEADER_LEN = 4096;

    private Signatures() {}

    /**
     * True when the headers' X-Molens-Signature carries a v1 matching one of {@code secrets} for this
     * body and X-Fire-ID, with a timestamp within {@code toleranceMs} of now (either direction). False,
     * never an exception, for a missing or malformed header, a tampered body or fire id, or no secrets.
     * Header names are matched case-insensitively; comparisons are constant-time.
     */
    public static boolean verifySignature(Map<String, String> headers, byte[] body, List<String> secrets, long toleranceMs) {
        return verifySignature(headers, body, secrets, toleranceMs, System.currentTimeMillis());
    }

    /** {@link #verifySignature(Map, byte[], List, long)} with the clock given. */
    public static boolean verifySignature(Map<String, String> headers, byte[] body, List<String> secrets, long toleranceMs, long nowMs) {
        try {
            String raw = header(headers, SIGNATURE_HEADER);
            String fireId = header(headers, FIRE_ID_HEADER);
            if (raw == null || fireId == null || body == null || secrets == null) {
                return false;
            }
            long[] t = new long[1];
            List<String> v1s = parse(raw, t);
            if (v1s == null || Math.abs(nowMs - t[0]) > toleranceMs) {
                return false;
            }
            boolean ok = false;
            for (String secret : secrets) {
                if (secret == null || secret.isEmpty()) {
                    continue;
                }
                byte[] expected = computeV1(secret, fireId, body, t[0]).getBytes(StandardCharsets.US_ASCII);
                for (String v1 : v1s) {
                    // no early exit: the work done does not depend on which pair matched
                    ok |= MessageDigest.isEqual(expected, v1.getBytes(StandardCharsets.US_ASCII));
                }
            }
            return ok;
        } catch (RuntimeException e) {
            return false;
        }
    }

    /** The hex HMAC-SHA256 of "&lt;t&gt;.&lt;fire id&gt;.&lt;body&gt;" under secret. */
    public static String computeV1(String secret, String fireId, byte[] body, long tMs) {
        try {
            Mac mac = Mac.getInstance("HmacSHA256");
            mac.init(new SecretKeySpec(secret.getBytes(StandardCharsets.UTF_8), "HmacSHA256"));
            mac.update((tMs + "." + fireId + ".").getBytes(StandardCharsets.UTF_8));
            byte[] d = mac.doFinal(body);
            StringBuilder sb = new StringBuilder(64);
            for (byte b : d) {
                sb.append(Character.forDigit((b >> 4) & 0xf, 16)).append(Character.forDigit(b & 0xf, 16));
            }
            return sb.toString();
        } catch (NoSuchAlgorithmException | InvalidKeyException e) {
            throw new IllegalStateException(e);
        }
    }

    /** The header value with one v1 per non-empty secret, as a node sends it. */
    public static String signatureHeader(List<String> secrets, String fireId, byte[] body, long tMs) {
        StringBuilder sb = new StringBuilder("t=").append(tMs);
        for (String s : secrets) {
            if (s != null && !s.isEmpty()) {
                sb.append(",v1=").append(computeV1(s, fireId, body, tMs));
            }
        }
        return sb.toString();
    }

    private static String header(Map<String, String> headers, String name) {
        String v = headers.get(name);
        if (v != null) {
            return v;
        }
        for (Map.Entry<String, String> e : headers.entrySet()) {
            if (e.getKey() != null && e.getKey().equalsIgnoreCase(name)) {
                return e.getValue();
            }
        }
        return null;
    }

    /** The v1 values (t into tOut), or null when malformed; unknown schemes (v0=, v2=) are ignored. */
    private static List<String> parse(String value, long[] tOut) {
        if (value.isEmpty() || value.length() > MAX_HEADER_LEN) {
            return null;
        }
        boolean haveT = false;
        List<String> v1s = new ArrayList<String>();
        for (String item : value.split(",", -1)) {
            String it = item.trim();
            int eq = it.indexOf('=');
            if (eq < 0) {
                return null;
            }
            String name = it.substring(0, eq);
            String val = it.substring(eq + 1);
            if (name.equals("t")) {
                if (haveT || !val.matches("[0-9]{1,16}")) {
                    return null;
                }
                tOut[0] = Long.parseLong(val);
                haveT = true;
            } else if (name.equals("v1")) {
                if (val.length() != 64 || !val.matches("\\p{ASCII}*")) {
                    return null;
                }
                v1s.add(val.toLowerCase(java.util.Locale.ROOT));
            }
        }
        return haveT && !v1s.isEmpty() ? v1s : null;
    }
}
