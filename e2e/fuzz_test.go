package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// FuzzGatewayResponseToReceipt fuzzes the settlement path end to end, from the bytes an
// upstream answers to the receipt (issue 17's hostile values): the gateway in front of
// an upstream that answers a JSON completion with the fuzzed model name (raw bytes or
// JSON-escaped) and token counts, the real enforcer's extractor, its settlement, the
// real control plane's ledger and Postgres. Whatever the upstream says, the request is
// settled (never left pending), and when it reported tokens it is charged.
//
// `make test` runs the seeds (the values that once left requests pending and
// uncharged); `go test -run '^$' -fuzz FuzzGatewayResponseToReceipt ./e2e` explores.
func FuzzGatewayResponseToReceipt(f *testing.F) {
	f.Add("gpt-4o-mini\x00", int64(1000), int64(1000), true)
	f.Add("gpt-4o-mini\x00", int64(1000), int64(1000), false)
	f.Add("gpt-4o-\xff\xfe", int64(1), int64(0), true)
	f.Add(strings.Repeat("claude-3-5-sonnet-", 17), int64(10), int64(10), false)
	f.Add("o1-pro", int64(math.MaxInt64), int64(math.MaxInt64), false)
	f.Add("", int64(-7), int64(3), false)
	f.Add("unknown-model\r\n", int64(0), int64(0), true)
	f.Add(`a"b\`, int64(5), int64(5), true)

	var mu sync.Mutex
	answer := ""
	var seen string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		body := answer
		seen = r.Header.Get("X-Service-Request-Id")
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, body)
	}))
	f.Cleanup(up.Close)
	s := startStack(f, map[string]string{"TOLLGATE_GATEWAY_ADDR": "127.0.0.1:0", "TOLLGATE_GATEWAY_UPSTREAM": up.URL})
	o := s.setUpOrg(f)
	key := s.apiKey(f, o, o.owner) // the owner: no limit, so every call is admitted

	f.Fuzz(func(t *testing.T, model string, in, out int64, raw bool) {
		quoted, _ := json.Marshal(model)
		if raw {
			quoted = []byte(`"` + model + `"`) // the bytes as an upstream might send them, unescaped
		}
		mu.Lock()
		answer = fmt.Sprintf(`{"id":"x","object":"chat.completion","model":%s,"choices":[{"message":{"content":"hi"}}],`+
			`"usage":{"prompt_tokens":%d,"completion_tokens":%d}}`, quoted, in, out)
		seen = ""
		mu.Unlock()
		req, _ := http.NewRequest("POST", s.gateway+"/v1/chat/completions", strings.NewReader(`{"model":"gpt-4o-mini","messages":[]}`))
		req.Header.Set("X-Api-Key", key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		mu.Lock()
		id := seen
		mu.Unlock()
		if res.StatusCode != 200 || id == "" {
			t.Fatalf("status %d, request id %q", res.StatusCode, id)
		}
		// The start is closed by a receipt, whatever the answer said.
		var state string
		var cost int64
		deadline := time.Now().Add(15 * time.Second)
		for {
			err := s.db.Pool.QueryRow(context.Background(), `SELECT s.state, r.cost_micro_usd FROM usage_request_starts s
				JOIN usage_receipts r USING (request_id) WHERE s.request_id = $1`, id).Scan(&state, &cost)
			if err == nil {
				break
			}
			if err != pgx.ErrNoRows {
				t.Fatal(err)
			}
			if time.Now().After(deadline) {
				t.Fatalf("request %s (model %q, %d in, %d out) was never settled", id, model, in, out)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if state != "settled" || cost < 0 {
			t.Fatalf("start %s, cost %d", state, cost)
		}
		// Reported tokens, or the estimate of the request and the text: never free.
		if cost == 0 && (in > 0 || out > 0) {
			t.Fatalf("charged 0 for %d input and %d output tokens (model %q)", in, out, model)
		}
	})
}
