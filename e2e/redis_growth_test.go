package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/e2e/fakellm"
	"github.com/tollgate-dev/tollgate/internal/testio"
)

// redisKeyFamily is one family of Redis keys the programs write: how docs/redis.md names
// it, a pattern of its keys after the prefix, and whether a key of it may live without a
// TTL (only singletons may: a family with a key per member, container or request must
// expire, or it grows for as long as the deployment runs).
type redisKeyFamily struct {
	doc       string
	pattern   *regexp.Regexp
	singleton bool
}

var redisKeyFamilies = []redisKeyFamily{
	{doc: "`<prefix>{<memberId>}:rec`", pattern: regexp.MustCompile(`^\{om_[0-9a-z]{26}\}:rec$`)},
	{doc: "`<prefix>generation`", pattern: regexp.MustCompile(`^generation$`), singleton: true},
	{doc: "`<prefix>masters`", pattern: regexp.MustCompile(`^masters$`), singleton: true},
	{doc: "`<prefix>postgres`", pattern: regexp.MustCompile(`^postgres$`), singleton: true},
	{doc: "`<prefix>rebuild`", pattern: regexp.MustCompile(`^rebuild$`), singleton: true},
	{doc: "`<prefix>container:{<containerId>}`", pattern: regexp.MustCompile(`^container:\{[^{}]+\}$`)},
	{doc: "`<prefix>container:{<containerId>}:request:<requestId>`", pattern: regexp.MustCompile(`^container:\{[^{}]+\}:request:req_[0-9a-z]{26}$`)},
}

// TestRedisHoldsOnlyBoundedKeys runs every kind of traffic through both programs (many
// members and keys; checks through ext_authz, /check and the gateway; responses through
// ext_proc, /settle and the gateway, with containers; refusals: unknown keys, a blocked
// member) and then reads every key under the test's prefix: each belongs to a family
// docs/redis.md documents, and every key of a family that grows with members, containers
// or requests carries a TTL, so nothing in Redis grows with time or traffic for good.
func TestRedisHoldsOnlyBoundedKeys(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	awayFromDayBoundary(t, 2*time.Minute)
	docs, err := os.ReadFile("../docs/redis.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range redisKeyFamilies {
		if !strings.Contains(string(docs), f.doc) {
			t.Errorf("docs/redis.md does not document the key family %s", f.doc)
		}
	}

	containers := []string{"cntr_growth_a", "cntr_growth_b", "cntr_growth_c"}
	var calls atomic.Int64
	fake := &fakellm.Server{Usage: func(fakellm.Call) fakellm.Usage {
		return fakellm.Usage{InputTokens: 1_000, OutputTokens: 100, Container: containers[calls.Add(1)%int64(len(containers))]}
	}}
	_, s, o := routedGatewayWith(t, fake, "authorization", "Bearer sk-provider")

	// Twelve members with a key each and the 1 USD day limit (the organization's own
	// member among them).
	keys := []string{o.key}
	for i := range 11 {
		p := s.invite(t, o, fmt.Sprintf("growth%d", i))
		s.must(t, 200, "POST", "/v1/gateway/usage-limit-policies/"+o.policyID+"/assignments", o.owner.token, o.id,
			map[string]string{"memberId": p.memberID}, nil)
		keys = append(keys, s.apiKey(t, o, p))
	}

	// ext_authz and ext_proc: admitted and settled.
	for i, key := range keys {
		reqID := admitted(t, s.check(t, key), "within_limit")
		s.respond(t, reqID, "application/json", testio.Chunks(openAIJSON(fmt.Sprintf("chatcmpl-g%d", i), 1_000, 0, 100), 2))
	}
	// /check and /settle.
	for _, key := range keys {
		req, _ := http.NewRequest("POST", s.enfHTTP+"/check", nil)
		req.Header.Set("x-api-key", key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		id := res.Header.Get("X-Service-Request-Id")
		if res.StatusCode != http.StatusOK || id == "" {
			t.Fatalf("/check: %d, request id %q", res.StatusCode, id)
		}
		body := fmt.Sprintf(`{"requestId":%q,"model":%q,"inputTokens":1000,"outputTokens":100,"complete":true}`, id, model)
		res, err = http.Post(s.enfHTTP+"/settle", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK && res.StatusCode != http.StatusAccepted {
			t.Fatalf("/settle: %d", res.StatusCode)
		}
	}
	// The gateway, with containers: each request leaves what it was charged of its
	// container, and each container its charged time.
	for i, key := range keys {
		for range 2 {
			code, _, body := postJSON(t, s.gateway, "/v1/responses", "Authorization", key,
				`{"model":"gpt-5","input":"compute","tools":[{"type":"code_interpreter","container":{"type":"auto"}}]}`)
			if code != http.StatusOK {
				t.Fatalf("gateway call of member %d: %d %s", i, code, body)
			}
		}
	}
	// Refusals: unknown keys, each distinct, and a member past the day limit.
	for i := range 200 {
		if code, _, _ := s.httpCheck(t, fmt.Sprintf("tgk_unknown_%d", i)); code != http.StatusUnauthorized {
			t.Fatalf("an unknown key: %d", code)
		}
	}
	reqID := admitted(t, s.check(t, o.key), "within_limit")
	s.respond(t, reqID, "application/json", testio.Chunks(openAIJSON("chatcmpl-big", 10_000_000, 0, 0), 2))
	s.waitBlocked(t, o)
	if code, _, body := s.httpCheck(t, o.key); code != http.StatusTooManyRequests {
		t.Fatalf("the blocked member's check: %d %s", code, body)
	}
	blocked(t, s.check(t, o.key))
	// Every request ended: nothing is pending in Postgres.
	waitFor(t, 15*time.Second, "every start settled", func() bool {
		var pending int
		if err := s.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM usage_request_starts WHERE state = 'pending'`).Scan(&pending); err != nil {
			t.Fatal(err)
		}
		return pending == 0
	})

	ctx := context.Background()
	families := map[string]int{}
	var unknown []string
	iter := s.rdb.Scan(ctx, 0, s.layout.Prefix+"*", 500).Iterator()
	for iter.Next(ctx) {
		key := iter.Val()
		rest := strings.TrimPrefix(key, s.layout.Prefix)
		var fam *redisKeyFamily
		for i := range redisKeyFamilies {
			if redisKeyFamilies[i].pattern.MatchString(rest) {
				fam = &redisKeyFamilies[i]
				break
			}
		}
		if fam == nil {
			unknown = append(unknown, key)
			continue
		}
		families[fam.doc]++
		if fam.singleton {
			continue
		}
		ttl, err := s.rdb.PTTL(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		// -2: gone since the scan; -1: no TTL.
		if ttl == -1 {
			t.Errorf("%s (%s) has no TTL: it stays for good", key, fam.doc)
		}
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	if len(unknown) > 0 {
		t.Errorf("keys of no family docs/redis.md documents: %q", unknown)
	}
	// The traffic reached every family, or the test proves nothing of it.
	for _, f := range redisKeyFamilies {
		if families[f.doc] == 0 {
			t.Errorf("no key of %s after the traffic: the test does not exercise it", f.doc)
		}
	}
	if n := families[redisKeyFamilies[0].doc]; n > len(keys)+1 { // the owner is a member too
		t.Errorf("%d member records for %d members", n, len(keys)+1)
	}
	t.Logf("keys by family: %v", families)
}
