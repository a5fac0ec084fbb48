package e2e_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/enforcer/streamoptions"
	"github.com/tollgate-dev/tollgate/internal/testio"
	"github.com/tollgate-dev/tollgate/internal/testredis"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
)

// documentedACL is the ACL line of docs/redis.md ("An ACL user"), as ACL SETUSER
// arguments for a user of the given prefix and password.
func documentedACL(t *testing.T, prefix, password string) []any {
	t.Helper()
	docs, err := os.ReadFile("../docs/redis.md")
	if err != nil {
		t.Fatal(err)
	}
	var line string
	for l := range strings.Lines(string(docs)) {
		if strings.HasPrefix(l, "user tollgate on ") {
			line = strings.TrimSpace(l)
		}
	}
	if line == "" {
		t.Fatal("docs/redis.md has no `user tollgate on ...` line")
	}
	args := []any{"ACL", "SETUSER", "tollgate"}
	for _, f := range strings.Fields(line)[2:] {
		switch {
		case f == ">CHANGE-ME":
			f = ">" + password
		case strings.HasPrefix(f, "~tg:"), strings.HasPrefix(f, "&tg:"):
			f = f[:1] + prefix + f[len("~tg:"):]
		}
		args = append(args, f)
	}
	return args
}

// blockOneMember sets up an organization whose member (o.key) is blocked by one
// settled response, and returns it with its status.
func blockOneMember(t *testing.T, s *stack) (org, status, expected) {
	t.Helper()
	o := s.setUpOrg(t)
	reqID := admitted(t, s.check(t, o.key), "within_limit")
	s.respond(t, reqID, "application/json", testio.Chunks(openAIJSON("chatcmpl-big", 8_000_000, 0, 0), 3))
	s.waitSettled(t, o, 1, 1_200_000)
	want := expected{state: "blocked", used: 1_200_000, pending: 0, lastSettled: reqID, canRequestReset: true}
	st := s.expectStatus(t, o, "blocked", want)
	blocked(t, s.check(t, o.key)).agreesWith(t, st)
	return o, st, want
}

// TestBothProgramsWorkThroughTheDocumentedACL: both programs run as the ACL user of
// docs/redis.md (the line read from the page), on database 3: admission, settlement,
// the record writes, the generation, the masters' note, invalidations, a refusal. Redis
// logs every command or key it refuses a user in ACL LOG; it must be empty. And nothing
// of theirs lands in database 0.
func TestBothProgramsWorkThroughTheDocumentedACL(t *testing.T) {
	t.Parallel() // its own redis-server, database and prefix
	awayFromDayBoundary(t, time.Minute)
	srv := testredis.StartServer(t)
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr, DB: 3})
	defer admin.Close()
	prefix := testredis.Prefix()
	if err := admin.Do(ctx, documentedACL(t, prefix, "acl-password-0123456789")...).Err(); err != nil {
		t.Fatalf("the documented ACL line: %v", err)
	}
	s := startStackOn(t, &topology{name: "acl", rdb: admin, prefix: prefix, env: map[string]string{
		"TOLLGATE_REDIS_URL": fmt.Sprintf("redis://tollgate:acl-password-0123456789@%s/3", srv.Addr)}})
	o, _, _ := blockOneMember(t, s)
	if n := s.metric(t, "tollgate_enforcer_decisions_total", `decision="admitted"`); n != 1 {
		t.Fatalf("%v admissions, want 1", n)
	}
	shareThroughACL(t, srv.Addr, s.layout, admin)
	log, err := admin.Do(ctx, "ACL", "LOG").Slice()
	if err != nil {
		t.Fatal(err)
	}
	if len(log) != 0 {
		t.Fatalf("Redis refused the documented user %d times: %v", len(log), log)
	}
	if n, err := admin.Exists(ctx, s.layout.GenerationKey(), s.layout.MastersKey(), s.layout.MemberKey(o.member.memberID)).Result(); err != nil || n != 3 {
		t.Fatalf("database 3 holds %d of the generation, the masters' note and the record (%v)", n, err)
	}
	db0 := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer db0.Close()
	if keys, err := db0.Keys(ctx, prefix+"*").Result(); err != nil || len(keys) != 0 {
		t.Fatalf("database 0 holds %v (%v)", keys, err)
	}
	for _, l := range []string{s.cpLogs.String(), s.enfLogs.String()} {
		if strings.Contains(l, "NOPERM") || strings.Contains(l, "acl-password") {
			t.Fatalf("a log says NOPERM or the password:\n%s", l)
		}
	}
}

// shareThroughACL has an enforcer's share of refusals of stream_options (package
// streamoptions) write and read its key as the documented user (database 3): it learns
// one refusal, and another share reads it.
func shareThroughACL(t *testing.T, addr string, layout mirror.Layout, admin *redis.Client) {
	t.Helper()
	user := redis.NewClient(&redis.Options{Addr: addr, DB: 3, Username: "tollgate", Password: "acl-password-0123456789"})
	defer user.Close()
	errs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "errors"}, []string{"op"})
	memories := []*streamoptions.Memory{streamoptions.NewMemory(time.Now, time.Hour), streamoptions.NewMemory(time.Now, time.Hour)}
	ctx, cancel := context.WithCancel(context.Background())
	var running sync.WaitGroup
	defer running.Wait()
	defer cancel()
	for _, m := range memories {
		share := streamoptions.NewShare(streamoptions.ShareConfig{Redis: user, Key: layout.StreamOptionsRefusalsKey(), Now: time.Now,
			Every: 20 * time.Millisecond, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Errors: errs})
		share.Add("gateway", m)
		running.Go(func() { _ = share.Run(ctx) })
	}
	memories[0].Learn("api.example.com", "a-model")
	waitFor(t, 10*time.Second, "the refusal shared as the documented user", func() bool {
		return memories[1].Refuses("api.example.com", "a-model")
	})
	if n := testutil.ToFloat64(errs.WithLabelValues("write")) + testutil.ToFloat64(errs.WithLabelValues("read")); n != 0 {
		t.Fatalf("%v rounds of the share failed as the documented user", n)
	}
	if n, err := admin.Exists(context.Background(), layout.StreamOptionsRefusalsKey()).Result(); err != nil || n != 1 {
		t.Fatalf("database 3 holds no shared refusals (%v)", err)
	}
}

// TestEvictedMirrorKeysNeverAdmitASpentMember: Redis under an evicting policy
// (allkeys-lru) at a maxmemory other data fills: every key of the installation is
// evicted, then each family alone (deleted as eviction would: the generation, the
// masters' note, the record). Every check of the blocked member meanwhile is the 429
// with the real spend, and the mirror comes back.
func TestEvictedMirrorKeysNeverAdmitASpentMember(t *testing.T) {
	t.Parallel() // its own redis-server, database and prefix
	awayFromDayBoundary(t, time.Minute)
	srv := testredis.StartServer(t)
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	s := startStackOn(t, &topology{name: "evicting", rdb: rdb, env: map[string]string{"TOLLGATE_REDIS_URL": srv.URL()}})
	o, st, want := blockOneMember(t, s)
	mine := func() int {
		keys, err := rdb.Keys(ctx, s.layout.Prefix+"*").Result()
		if err != nil {
			t.Fatal(err)
		}
		return len(keys)
	}
	if mine() < 3 {
		t.Fatalf("%d keys before the eviction", mine())
	}

	// Real eviction: a maxmemory just above what Redis uses, and other data written
	// until nothing of the installation is left.
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	var usedMemory int64
	for l := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "used_memory:"); ok {
			fmt.Sscan(v, &usedMemory)
		}
	}
	for _, kv := range [][2]string{{"maxmemory-policy", "allkeys-lru"}, {"maxmemory", fmt.Sprint(usedMemory + 2<<20)}} {
		if err := rdb.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	filler := strings.Repeat("x", 16<<10)
	for i := 0; mine() > 0; i++ {
		if i == 5000 {
			t.Fatalf("%d keys of the installation left after 80 MB of other data", mine())
		}
		if err := rdb.Set(ctx, fmt.Sprintf("other:%d", i), filler, 0).Err(); err != nil {
			t.Fatal(err)
		}
		if i%50 == 0 {
			blocked(t, s.check(t, o.key)).agreesWith(t, st)
		}
	}
	evicted, _ := rdb.Info(ctx, "stats").Result()
	if !strings.Contains(evicted, "evicted_keys:") || strings.Contains(evicted, "evicted_keys:0\r") {
		t.Fatalf("nothing was evicted:\n%s", evicted)
	}
	// Room again (the other data gone), and the mirror comes back.
	if err := rdb.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	waitMirrorBack := func(what string) {
		t.Helper()
		waitFor(t, 15*time.Second, what, func() bool {
			blocked(t, s.check(t, o.key)).agreesWith(t, st)
			n, err := rdb.Exists(ctx, s.layout.GenerationKey(), s.layout.MemberKey(o.member.memberID)).Result()
			return err == nil && n == 2
		})
	}
	waitMirrorBack("the mirror rebuilt after the eviction")

	for _, key := range []string{s.layout.GenerationKey(), s.layout.MastersKey(), s.layout.MemberKey(o.member.memberID)} {
		if err := rdb.Del(ctx, key).Err(); err != nil {
			t.Fatal(err)
		}
		for range 20 {
			blocked(t, s.check(t, o.key)).agreesWith(t, st)
		}
		waitMirrorBack("the mirror back after " + key + " was evicted")
	}
	s.expectStatus(t, o, "after the evictions", want)
}

// TestPausedRedisMeetsTheDeadlinesAndLosesNothing: Redis paused by an operator (CLIENT
// PAUSE, as a manual failover or the FAILOVER command does). Paused for everything, a
// check waits out TOLLGATE_REDIS_CHECK_TIMEOUT, not the pause, and answers 503 in closed
// mode (tollgate_enforcer_redis_errors_total counts it); admission resumes after. Paused
// for writes only, the settlement that blocks the member is committed and accounted at
// once; its record write times out (counted as an error, marked for repair), and once
// the pause ends the maintenance round writes it: the member is refused from then on.
func TestPausedRedisMeetsTheDeadlinesAndLosesNothing(t *testing.T) {
	t.Parallel() // its own redis-server, database and prefix
	awayFromDayBoundary(t, time.Minute)
	srv := testredis.StartServer(t)
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	s := startStackOn(t, &topology{name: "paused", rdb: rdb, env: map[string]string{"TOLLGATE_REDIS_URL": srv.URL()}},
		map[string]string{"TOLLGATE_REDIS_CHECK_TIMEOUT": "300ms"})
	o := s.setUpOrg(t)
	first := admitted(t, s.check(t, o.key), "within_limit")

	// Paused for everything. A paused server holds a CLIENT UNPAUSE too, so the pause
	// ends by itself: a check is conclusive only when answered inside the pause (from
	// before the PAUSE was sent), and one answered after it, late on a loaded machine,
	// is made again once the pause has ended.
	const pause = 2500 * time.Millisecond
	var resp *authv3.CheckResponse
	var took time.Duration
	var errs float64
	for attempt := 1; ; attempt++ {
		errs = s.metric(t, "tollgate_enforcer_redis_errors_total")
		sent := time.Now()
		if err := rdb.Do(ctx, "CLIENT", "PAUSE", pause.Milliseconds(), "ALL").Err(); err != nil {
			t.Fatal(err)
		}
		began := time.Now()
		resp = s.check(t, o.key)
		took = time.Since(began)
		if time.Now().Before(sent.Add(pause)) {
			break
		}
		if attempt == 5 {
			t.Fatalf("5 checks while Redis was paused for %s were each answered after the pause (the last took %s): they waited for it, not for their 300ms Redis deadline", pause, took)
		}
		t.Logf("the check was answered after the pause (it took %s): checking again in a new pause", took)
		waitFor(t, 15*time.Second, "the pause to end", func() bool { return rdb.Ping(ctx).Err() == nil })
	}
	if code := resp.GetDeniedResponse().GetStatus().GetCode(); code != 503 {
		t.Fatalf("a check while Redis is paused: %v, want the 503 of closed mode", resp)
	}
	if took >= 2*time.Second {
		t.Fatalf("a check while Redis is paused took %s: it waited for the pause (%s), not its 300ms Redis deadline", took, pause)
	}
	if got := s.metric(t, "tollgate_enforcer_redis_errors_total"); got <= errs {
		t.Fatalf("redis errors %v, want more than %v", got, errs)
	}
	waitFor(t, 10*time.Second, "admission after the pause", func() bool {
		return s.check(t, o.key).GetOkResponse() != nil
	})

	// Paused for writes, until the record write of the settlement that crosses the hard
	// limit has timed out: the pause is ended by the test, not by a clock, since how long
	// the settlement takes to reach the control plane is not this test's to know (with a
	// pause of fixed length, a late settlement wrote its record after the pause, and the
	// timed-out write this test is about never happened).
	writeErrs := func() float64 {
		return metricAt(t, "http://"+s.cp.addrs["admin"], "tollgate_controlplane_mirror_writes_total", `result="error"`)
	}
	errsBefore := writeErrs()
	if err := rdb.Do(ctx, "CLIENT", "PAUSE", "60000", "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	unpause := func() {
		if err := rdb.Do(ctx, "CLIENT", "UNPAUSE").Err(); err != nil {
			t.Error(err)
		}
	}
	defer unpause() // a failure below must not leave the server paused for its stop
	s.respond(t, first, "application/json", testio.Chunks(openAIJSON("chatcmpl-big", 8_000_000, 0, 0), 3))
	// Accounted in Postgres while Redis takes no write, and the record write counted as failed.
	waitFor(t, 20*time.Second, "the settlement accounted and its record write failed", func() bool {
		return writeErrs() > errsBefore && s.status(t, o).Buckets[0].UsedMicroUsd == 1_200_000
	})
	unpause()
	// The enforcer's settle call waits for the control plane's answer, which waits for
	// that record write and its retries: on a loaded machine the call can time out first,
	// and the enforcer's retry is answered duplicate (the settlement was already
	// committed). Either way it is settled once.
	s.waitSettledOrDuplicate(t, o, 1, 1_200_000)
	waitFor(t, 15*time.Second, "the member refused once the pause ended", func() bool {
		return s.check(t, o.key).GetDeniedResponse().GetStatus().GetCode() == 429
	})
	for range 20 {
		if code := s.check(t, o.key).GetDeniedResponse().GetStatus().GetCode(); code != 429 {
			t.Fatalf("a check after the repair answered %d, want 429", code)
		}
	}
}

// TestRedisAtMaxclientsMeetsTheDeadlinesAndLosesNothing: Redis at maxclients refuses
// every new connection ("ERR max number of clients reached"); the programs' connections
// are killed (a Redis restart's reconnection storm, a proxy's idle timeout) and must
// reconnect. A check answers 503 in closed mode within its deadline, /readyz says
// "redis unreachable", a settlement meanwhile is accounted in Postgres, and once Redis
// takes connections again the member it blocked is refused and the enforcer is ready.
func TestRedisAtMaxclientsMeetsTheDeadlinesAndLosesNothing(t *testing.T) {
	t.Parallel() // its own redis-server, database and prefix
	awayFromDayBoundary(t, time.Minute)
	srv := testredis.StartServer(t)
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 1, MinIdleConns: 1})
	defer rdb.Close()
	s := startStackOn(t, &topology{name: "maxclients", rdb: rdb, env: map[string]string{"TOLLGATE_REDIS_URL": srv.URL()}},
		map[string]string{"TOLLGATE_REDIS_CHECK_TIMEOUT": "300ms"})
	o := s.setUpOrg(t)
	first := admitted(t, s.check(t, o.key), "within_limit")

	if err := rdb.ConfigSet(ctx, "maxclients", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Do(ctx, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	resp := s.check(t, o.key)
	if code := resp.GetDeniedResponse().GetStatus().GetCode(); code != 503 {
		t.Fatalf("a check while Redis refuses connections: %v, want the 503 of closed mode", resp)
	}
	if took := time.Since(began); took >= 2*time.Second {
		t.Fatalf("a check while Redis refuses connections took %s (Redis deadline 300ms)", took)
	}
	waitFor(t, 10*time.Second, "/readyz saying redis unreachable", func() bool {
		res, err := http.Get(s.enfAdmin + "/readyz")
		if err != nil {
			return false
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode == 503 && string(b) == "redis unreachable\n"
	})
	s.respond(t, first, "application/json", testio.Chunks(openAIJSON("chatcmpl-big", 8_000_000, 0, 0), 3))
	// Accounted in Postgres while Redis takes no connection; settled or, when the
	// enforcer's call outlasted the control plane's failing record writes (a loaded
	// machine), duplicate on its retry.
	s.waitSettledOrDuplicate(t, o, 1, 1_200_000)

	if err := rdb.ConfigSet(ctx, "maxclients", "10000").Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "the member refused once Redis takes connections", func() bool {
		return s.check(t, o.key).GetDeniedResponse().GetStatus().GetCode() == 429
	})
	waitFor(t, 10*time.Second, "ready again", func() bool {
		res, err := http.Get(s.enfAdmin + "/readyz")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == 200
	})
	for range 20 {
		if code := s.check(t, o.key).GetDeniedResponse().GetStatus().GetCode(); code != 429 {
			t.Fatalf("a check after Redis took connections again answered %d, want 429", code)
		}
	}
}
