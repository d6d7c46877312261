package molens

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"testing"
	"time"
)

// Made by molens.signing.signature_header (the node's own code).
const (
	pyHeader = "t=1795978278937,v1=d32d6a5407897a318c877eb42b951412c320e95f86cdfc293e5ea5508bffec8d," +
		"v1=a370fdeb83368bcab014e81e8e2948b90440bf398d0db4f59c49e1aaa25b38bb"
	pyFireID = "01M8MABE0SEAD6S92SY1NA2EWB-1"
	pyBody   = `{"order_id":42}`
	pyT      = int64(1795978278937)
)

func signed(sig, fireID string) http.Header {
	h := http.Header{}
	h.Set(SignatureHeader, sig)
	h.Set(FireIDHeader, fireID)
	return h
}

func TestSignatureHeaderIsByteForByteThePythonOne(t *testing.T) {
	got := SignatureHeaderValue([]string{"s3cret", "next-secret"}, pyFireID, []byte(pyBody), pyT)
	if got != pyHeader {
		t.Fatalf("header\n got %s\nwant %s", got, pyHeader)
	}
}

func TestVerifySignatureAcceptsEitherSecretOfARotation(t *testing.T) {
	now := time.UnixMilli(pyT + 1000)
	for _, secrets := range [][]string{{"s3cret"}, {"next-secret"}, {"other", "next-secret"}} {
		if !VerifySignatureAt(signed(pyHeader, pyFireID), []byte(pyBody), secrets, DefaultTolerance, now) {
			t.Errorf("secrets %v: rejected", secrets)
		}
	}
}

func TestVerifySignatureRejectsTamperingReplayAndJunk(t *testing.T) {
	now := time.UnixMilli(pyT)
	body := []byte(pyBody)
	cases := map[string]struct {
		h       http.Header
		body    []byte
		secrets []string
		now     time.Time
	}{
		"tampered body":     {signed(pyHeader, pyFireID), []byte(`{"order_id":43}`), []string{"s3cret"}, now},
		"other fire id":     {signed(pyHeader, pyFireID+"x"), body, []string{"s3cret"}, now},
		"wrong secret":      {signed(pyHeader, pyFireID), body, []string{"nope"}, now},
		"no secrets":        {signed(pyHeader, pyFireID), body, nil, now},
		"empty secret":      {signed(pyHeader, pyFireID), body, []string{""}, now},
		"replayed too late": {signed(pyHeader, pyFireID), body, []string{"s3cret"}, now.Add(DefaultTolerance + time.Millisecond)},
		"from the future":   {signed(pyHeader, pyFireID), body, []string{"s3cret"}, now.Add(-DefaultTolerance - time.Millisecond)},
		"no header":         {http.Header{FireIDHeader: {pyFireID}}, body, []string{"s3cret"}, now},
		"no fire id":        {http.Header{SignatureHeader: {pyHeader}}, body, []string{"s3cret"}, now},
		"no t":              {signed("v1="+ComputeV1("s3cret", pyFireID, body, pyT), pyFireID), body, []string{"s3cret"}, now},
		"two t":             {signed("t=1,"+pyHeader, pyFireID), body, []string{"s3cret"}, now},
		"short v1":          {signed("t=1795978278937,v1=abc", pyFireID), body, []string{"s3cret"}, now},
		"item without =":    {signed(pyHeader+",junk", pyFireID), body, []string{"s3cret"}, now},
		"negative t":        {signed("t=-5,v1="+ComputeV1("s3cret", pyFireID, body, -5), pyFireID), body, []string{"s3cret"}, time.UnixMilli(-5)},
		"only unknown v2":   {signed("t=1795978278937,v2="+ComputeV1("s3cret", pyFireID, body, pyT), pyFireID), body, []string{"s3cret"}, now},
		"signature twice":   {http.Header{SignatureHeader: {pyHeader, "t=1,v1=00"}, FireIDHeader: {pyFireID}}, body, []string{"s3cret"}, now},
		"two spellings":     {http.Header{SignatureHeader: {pyHeader}, "x-molens-signature": {pyHeader}, FireIDHeader: {pyFireID}}, body, []string{"s3cret"}, now},
		"fire id twice":     {http.Header{SignatureHeader: {pyHeader}, FireIDHeader: {pyFireID, "other-1"}}, body, []string{"s3cret"}, now},
	}
	for name, c := range cases {
		if VerifySignatureAt(c.h, c.body, c.secrets, DefaultTolerance, c.now) {
			t.Errorf("%s: accepted", name)
		}
	}
	// unknown schemes beside v1 are ignored; header names are case-insensitive; upper-case hex is fine
	h := http.Header{"x-molens-signature": {"v0=zz," + pyHeader}, "x-fire-id": {pyFireID}}
	if !VerifySignatureAt(h, body, []string{"s3cret"}, DefaultTolerance, now) {
		t.Error("a valid header beside an unknown scheme, in lower-case header names: rejected")
	}
}

// MOLENS_SIGNING_VECTOR is a fresh vector the pytest driver makes with molens.signing.
func TestVerifySignatureOfAFreshPythonVector(t *testing.T) {
	raw := os.Getenv("MOLENS_SIGNING_VECTOR")
	if raw == "" {
		t.Skip("MOLENS_SIGNING_VECTOR not set (tests/integration/test_sdk_go.py sets it)")
	}
	var v struct {
		Secrets []string `json:"secrets"`
		FireID  string   `json:"fire_id"`
		Body    string   `json:"body"`
		TMs     int64    `json:"t_ms"`
		Header  string   `json:"header"`
	}
	if err := json.Unmarshal([]byte(raw), &v); err != nil {
		t.Fatal(err)
	}
	if got := SignatureHeaderValue(v.Secrets, v.FireID, []byte(v.Body), v.TMs); got != v.Header {
		t.Fatalf("header\n got %s\nwant %s", got, v.Header)
	}
	if !VerifySignatureAt(signed(v.Header, v.FireID), []byte(v.Body), v.Secrets[len(v.Secrets)-1:], DefaultTolerance, time.UnixMilli(v.TMs)) {
		t.Fatal("rejected")
	}
}

func TestIdempotencyKeysAreTimeOrderedHexAndUnique(t *testing.T) {
	re := regexp.MustCompile(`^[0-9a-f]{32}$`)
	before := time.Now().UnixMilli()
	seen := map[string]bool{}
	prev := ""
	for i := 0; i < 1000; i++ {
		k := NewIdempotencyKey()
		if !re.MatchString(k) {
			t.Fatalf("key %q is not 32 hex digits", k)
		}
		if seen[k] {
			t.Fatalf("key %q twice", k)
		}
		seen[k] = true
		if k[:12] < prev {
			t.Fatalf("key %q sorts before the earlier key's time %s", k, prev)
		}
		prev = k[:12]
	}
	var ms int64
	if _, err := fmtSscanHex(prev, &ms); err != nil || ms < before || ms > time.Now().UnixMilli() {
		t.Fatalf("time part %s (%d) is not the wall clock in ms", prev, ms)
	}
}

func fmtSscanHex(s string, v *int64) (int, error) { return fmt.Sscanf(s, "%x", v) }
