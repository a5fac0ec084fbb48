package e2e_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/e2e/fakellm"
)

// watchedBody is a request body that tells whether the client's transport ever read it:
// a client that sent `Expect: 100-continue` sends its body only after the 100.
type watchedBody struct {
	r    io.Reader
	read atomic.Bool
}

func (b *watchedBody) Read(p []byte) (int, error) {
	b.read.Store(true)
	return b.r.Read(p)
}

// TestRefusalBeforeTheBodyIsSent: a client that waits for `100 Continue` before it
// sends its body (curl does for a body over 1 MB, an audio file say) is refused without
// sending it when its key is unknown or its member is blocked, as the gateway's 100
// would otherwise ask for the whole upload only to answer the 429 after it. An
// admitted request still gets its 100 and goes upstream whole.
func TestRefusalBeforeTheBodyIsSent(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	awayFromDayBoundary(t, 3*time.Minute)
	var spend atomic.Bool
	fake := &fakellm.Server{Usage: func(fakellm.Call) fakellm.Usage {
		if spend.Load() {
			return fakellm.Usage{InputTokens: 2_000_000, OutputTokens: 2_000_000} // spends the limit
		}
		return fakellm.Usage{InputTokens: 10, OutputTokens: 5}
	}}
	upSrv := httptest.NewServer(fake)
	t.Cleanup(upSrv.Close)
	s := startStack(t, gatewayEnv(upSrv.URL))
	o := s.setUpOrg(t)
	client := &http.Client{Transport: &http.Transport{ExpectContinueTimeout: time.Minute}}

	// send posts body as a client waiting for the 100 would, and tells whether the body
	// went out.
	send := func(t *testing.T, key, path, contentType string, body []byte) (*http.Response, string, bool) {
		t.Helper()
		b := &watchedBody{r: bytes.NewReader(body)}
		req, _ := http.NewRequest("POST", s.gateway+path, b)
		req.ContentLength = int64(len(body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", contentType)
		req.Header.Set("Expect", "100-continue")
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		answer, _ := io.ReadAll(res.Body)
		return res, string(answer), b.read.Load()
	}
	chat := func(model string) []byte {
		b, _ := json.Marshal(map[string]any{"model": model, "messages": []map[string]string{{"role": "user", "content": "hello"}}})
		return b
	}
	audio := bytes.Repeat([]byte{0xff, 0xfb, 0x90, 0x64}, 512<<10) // 2 MiB of an MP3's frame headers

	res, answer, sent := send(t, o.key, "/v1/chat/completions", "application/json", chat("gpt-4o-mini"))
	if res.StatusCode != 200 || !sent {
		t.Fatalf("an admitted request: %d (body sent %v) %s", res.StatusCode, sent, answer)
	}
	res, answer, sent = send(t, "tgk_notakey", "/v1/audio/transcriptions", "audio/mpeg", audio)
	if res.StatusCode != 401 || sent {
		t.Fatalf("an unknown key: %d, body sent %v: %s", res.StatusCode, sent, answer)
	}

	spend.Store(true)
	if res, answer, _ := send(t, o.key, "/v1/chat/completions", "application/json", chat("gpt-4o-mini")); res.StatusCode != 200 {
		t.Fatalf("the spending call: %d %s", res.StatusCode, answer)
	}
	// Blocked in the status and in the mirror the early check reads: with the status
	// alone, the check before the 100 could read the mirror a moment before the spend
	// reached it and ask for the body, whose own check then answered the 429 (CI, once).
	s.waitBlocked(t, o)
	before := len(fake.Calls())
	waitFor(t, 10*time.Second, "the gateway's 429", func() bool {
		res, answer, sent = send(t, o.key, "/v1/audio/transcriptions", "audio/mpeg", audio)
		return res.StatusCode == 429
	})
	if sent {
		t.Fatalf("the blocked member's 2 MiB upload was sent before its 429: %s", answer)
	}
	if res.Header.Get("X-Service-Error-Code") != "service_gateway_usage_limit_exceeded" || res.Header.Get("X-Service-Usage-State") != "blocked" ||
		!strings.Contains(answer, "usage_limit") {
		t.Fatalf("the 429: %v %s", res.Header, answer)
	}
	if n := len(fake.Calls()) - before; n != 0 {
		t.Fatalf("the provider got %d calls from a blocked member", n)
	}
}
