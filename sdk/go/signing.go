package molens

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Callback signatures, as molens/signing.py makes them:
//
//	X-Molens-Signature: t=<unix ms>,v1=<hex>[,v1=<hex>]
//
// each <hex> being HMAC-SHA256(secret, "<t>.<X-Fire-ID>.<body>"); during a secret rotation one v1
// per configured secret, all over the same t.
const (
	SignatureHeader  = "X-Molens-Signature"
	FireIDHeader     = "X-Fire-ID"
	DefaultTolerance = 5 * time.Minute
	maxSignatureLen  = 4096
)

// VerifySignature reports whether the X-Molens-Signature header of a callback carries a v1 that
// matches one of secrets for this body and X-Fire-ID, with a timestamp within tolerance of now
// (either direction). It is false, never a panic, for a missing, repeated or malformed header, a
// tampered body or fire id, or no secrets. Comparisons are constant-time.
func VerifySignature(headers http.Header, body []byte, secrets []string, tolerance time.Duration) bool {
	return VerifySignatureAt(headers, body, secrets, tolerance, time.Now())
}

// VerifySignatureAt is VerifySignature with the clock given.
func VerifySignatureAt(headers http.Header, body []byte, secrets []string, tolerance time.Duration, now time.Time) bool {
	sigs, fireIDs := headerValues(headers, SignatureHeader), headerValues(headers, FireIDHeader)
	if len(sigs) != 1 || sigs[0] == "" || len(fireIDs) != 1 {
		return false // missing, or sent twice: refused (as the Python helper, which reads them joined)
	}
	raw, fireID := sigs[0], fireIDs[0]
	tMs, v1s, ok := parseSignature(raw)
	if !ok {
		return false
	}
	diff := now.UnixMilli() - tMs
	if diff < 0 {
		diff = -diff
	}
	if diff > tolerance.Milliseconds() {
		return false
	}
	found := false
	for _, secret := range secrets {
		if secret == "" {
			continue
		}
		expected := []byte(ComputeV1(secret, fireID, body, tMs))
		for _, v1 := range v1s {
			// no early exit: the work done does not depend on which pair matched
			if hmac.Equal(expected, []byte(v1)) {
				found = true
			}
		}
	}
	return found
}

// ComputeV1 is the hex HMAC-SHA256 of "<t>.<fire id>.<body>" under secret.
func ComputeV1(secret, fireID string, body []byte, tMs int64) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(strconv.FormatInt(tMs, 10) + "." + fireID + "."))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// SignatureHeaderValue is the header value with one v1 per non-empty secret (as a node sends it).
func SignatureHeaderValue(secrets []string, fireID string, body []byte, tMs int64) string {
	parts := []string{"t=" + strconv.FormatInt(tMs, 10)}
	for _, s := range secrets {
		if s != "" {
			parts = append(parts, "v1="+ComputeV1(s, fireID, body, tMs))
		}
	}
	return strings.Join(parts, ",")
}

// headerValues is every value of the header name, under any spelling of it (a map filled by hand
// may not use canonical keys).
func headerValues(h http.Header, name string) []string {
	var out []string
	for k, vs := range h {
		if strings.EqualFold(k, name) {
			out = append(out, vs...)
		}
	}
	return out
}

// parseSignature returns t and the v1 values; unknown schemes (v0=, v2=) are ignored.
func parseSignature(value string) (int64, []string, bool) {
	if len(value) > maxSignatureLen {
		return 0, nil, false
	}
	var t int64 = -1
	var v1s []string
	for _, item := range strings.Split(value, ",") {
		name, val, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok {
			return 0, nil, false
		}
		switch name {
		case "t":
			if t >= 0 || val == "" || len(val) > 16 || strings.TrimLeft(val, "0123456789") != "" {
				return 0, nil, false
			}
			t, _ = strconv.ParseInt(val, 10, 64)
		case "v1":
			if len(val) != 64 {
				return 0, nil, false
			}
			for i := 0; i < len(val); i++ {
				if val[i] >= 0x80 {
					return 0, nil, false
				}
			}
			v1s = append(v1s, strings.ToLower(val))
		}
	}
	if t < 0 || len(v1s) == 0 {
		return 0, nil, false
	}
	return t, v1s, true
}
