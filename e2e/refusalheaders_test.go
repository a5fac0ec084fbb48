package e2e_test

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/e2e/fakellm"
)

// TestAnswersHaveTheSameHeadersThroughEnvoyAndTheGateway: the same refusal answers the
// same headers, never cached (Cache-Control: no-store), through the gateway and through
// deploy/envoy/envoy.yaml's filter chain: the usage-limit 429 (ext_authz's), and a body
// of a coding nobody decodes (415, ext_proc's own). Before 2026-12-03, Envoy's had no
// Cache-Control: only the gateway's HTTP writer added it. The 429's way to ask for more
// (X-Codex-Promo-Message) is the same through both too. An admitted response names the
// member's limit in Codex's headers through both (ext_authz's response headers), as the
// member's usage status says it, and so does the usage-limit 429 (spent).
func TestAnswersHaveTheSameHeadersThroughEnvoyAndTheGateway(t *testing.T) {
	t.Parallel()
	fake := &fakellm.Server{Usage: func(fakellm.Call) fakellm.Usage { return fakellm.Usage{InputTokens: 10_000, OutputTokens: 1_000} }}
	up := httptest.NewServer(fake)
	t.Cleanup(up.Close)
	s := startStack(t, gatewayEnv(up.URL))
	spent, fresh := s.setUpOrg(t), s.setUpOrg(t)
	s.guardPolicy(t, spent, "0.001", nil)
	_, front := s.deployedEnvoy(t, up.URL)
	chat := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hello"}]}`
	send := func(base, key, coding, body string) (int, http.Header) {
		t.Helper()
		req, _ := http.NewRequest("POST", base+"/v1/chat/completions", bytes.NewReader([]byte(body)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+key)
		if coding != "" {
			req.Header.Set("Content-Encoding", coding)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode, res.Header
	}
	for _, base := range []string{s.gateway, front} {
		o := s.setUpOrg(t)
		want := codexLimitHeaders(s.status(t, o))
		if code, h := send(base, o.key, "", chat); code != 200 || !maps.Equal(codexHeaders(h), want) {
			t.Errorf("admitted through %s: %d, Codex's headers %v, want %v", base, code, codexHeaders(h), want)
		}
	}
	send(s.gateway, spent.key, "", chat)
	waitFor(t, 15*time.Second, "blocked", func() bool { return s.status(t, spent).State == "blocked" })
	waitFor(t, 15*time.Second, "the enforcer refusing", func() bool { code, _ := send(front, spent.key, "", chat); return code == 429 })
	// Blocked at its settled spend, which calls admitted before the refusals may have
	// taken past what an extension allows: an extension lifts the block, and the 429
	// offers it.
	s.blockAtSpend(t, spent)
	// A 429 names what the enforcer's mirror held when it decided, the status what
	// Postgres holds, which a settlement reaches first (a call admitted while the mirror
	// lagged, as the wait above can send, is charged later): wait until they agree.
	waitFor(t, 15*time.Second, "the 429's limits to be the usage status's", func() bool {
		_, h := send(s.gateway, spent.key, "", chat)
		return maps.Equal(codexHeaders(h), codexLimitHeaders(s.status(t, spent)))
	})

	for _, c := range []struct {
		name, key, coding, body string
		status                  int
	}{
		{"usage limit", spent.key, "", chat, 429},
		{"unknown coding", fresh.key, "zstd", chat, 415},
	} {
		t.Run(c.name, func(t *testing.T) {
			gs, gh := send(s.gateway, c.key, c.coding, c.body)
			es, eh := send(front, c.key, c.coding, c.body)
			if gs != c.status || es != c.status {
				t.Fatalf("status: gateway %d, Envoy %d, want %d", gs, es, c.status)
			}
			if gh.Get("Cache-Control") != "no-store" {
				t.Errorf("the gateway's Cache-Control %q", gh.Get("Cache-Control"))
			}
			// (Envoy's 415 also carries the usage state its check, before the body, added.)
			for _, h := range []string{"Cache-Control", "Content-Type", "X-Service-Error-Code", "Retry-After", "X-Should-Retry", "X-Codex-Promo-Message"} {
				if gh.Get(h) != eh.Get(h) {
					t.Errorf("%s: gateway %q, Envoy %q", h, gh.Get(h), eh.Get(h))
				}
			}
			// The 429 names the member's spent limit in Codex's headers through both, as
			// the usage status says it.
			if c.status == 429 {
				want := codexLimitHeaders(s.status(t, spent))
				if !maps.Equal(codexHeaders(gh), want) || !maps.Equal(codexHeaders(eh), want) {
					t.Errorf("Codex's headers: gateway %v, Envoy %v, want %v", codexHeaders(gh), codexHeaders(eh), want)
				}
			}
			// The 429's way to ask for more, for Codex (the policy allows asking), through
			// both: ext_authz's denied response carries it as the gateway does.
			if promo := gh.Get("X-Codex-Promo-Message"); (c.status == 429) != strings.HasPrefix(promo, s.askForMore()) {
				t.Errorf("X-Codex-Promo-Message %q (status %d)", promo, c.status)
			}
		})
	}
}

// codexHeaders are a response's headers of Codex's rate-limit family
// (x-codex-primary-*, x-codex-secondary-*), by lower-case name.
func codexHeaders(h http.Header) map[string]string {
	got := map[string]string{}
	for k := range h {
		if k := strings.ToLower(k); strings.HasPrefix(k, "x-codex-primary-") || strings.HasPrefix(k, "x-codex-secondary-") {
			got[k] = h.Get(k)
		}
	}
	return got
}

// codexLimitHeaders are Codex's rate-limit headers a member whose usage status is st
// is admitted with, written out from the status: its one limited window (the tests'
// policies limit the day) as primary, the share used in tenths of a percent (rounded
// down), the window's length in minutes and its reset in Unix seconds.
func codexLimitHeaders(st status) map[string]string {
	b := st.Buckets[0]
	perMille := b.UsedMicroUsd * 1000 / b.AllowanceMicroUsd
	return map[string]string{
		"x-codex-primary-used-percent":   fmt.Sprintf("%d.%d", perMille/10, perMille%10),
		"x-codex-primary-window-minutes": fmt.Sprint(int64(b.ResetAt.Sub(b.WindowStart) / time.Minute)),
		"x-codex-primary-reset-at":       fmt.Sprint(b.ResetAt.Unix()),
	}
}
