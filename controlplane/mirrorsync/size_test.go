package mirrorsync_test

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	at "github.com/tollgate-dev/tollgate/controlplane/internal/accountingtest"
	"github.com/tollgate-dev/tollgate/controlplane/mirrorsync"
	"github.com/tollgate-dev/tollgate/internal/testredis"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
	"github.com/tollgate-dev/tollgate/pkg/typeid"
)

// recordMemory is what Redis holds for one member's record (MEMORY USAGE of its key),
// written by the settlement path, for a member of an organization whose org-wide policy
// limits every timeframe and which has the given number of prices of its own.
func recordMemory(t *testing.T, e *at.Env, prices int) (int64, string) {
	t.Helper()
	org, ms := e.Org(t, 1)
	policy, assignment := typeid.New(typeid.Policy), typeid.New(typeid.Assignment)
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO usage_policies (id, organization_id, name, hard_limit, allow_request_reset, revision, created_at, updated_at,
			reserve_in_flight, reservation_micro_usd, max_in_flight)
			VALUES ($2, $1, 'Engineering default', true, true, 3, now(), now(), true, 2000000, 8)`, []any{org, policy}},
		{`INSERT INTO usage_policy_limits SELECT $1, t, c FROM (VALUES ('day', 20000000), ('week', 80000000), ('month', 250000000)) x(t, c)`, []any{policy}},
		{`INSERT INTO usage_policy_assignments (id, organization_id, policy_id, organization, created_at) VALUES ($3, $1, $2, true, now())`, []any{org, policy, assignment}},
	} {
		if _, err := e.Store.Pool.Exec(e.Ctx, q.sql, q.args...); err != nil {
			t.Fatal(err)
		}
	}
	for i := range prices {
		model := fmt.Sprintf("ft:gpt-4o-mini-2024-07-18:acme:support:%03d", i)
		if _, err := e.Store.Pool.Exec(e.Ctx, `INSERT INTO usage_model_prices (organization_id, model, match_key, input_micro_usd_per_million,
				output_micro_usd_per_million, cached_input_micro_usd_per_million, created_at, updated_at)
			VALUES ($1, $2, $2, 3000000, 15000000, 300000, now(), now())`, org, model); err != nil {
			t.Fatal(err)
		}
	}
	settleOne(t, e, org, ms[0], 1_234_567)
	rec, err := e.Layout.Read(e.Ctx, e.Redis, ms[0], e.Mirror.Generation())
	if err != nil || len(rec.GetEntitlement().GetPricedModelKeys()) != prices || rec.GetEntitlement().GetLimits()[2].GetUnlimited() {
		t.Fatalf("record %v %v", rec, err)
	}
	n, err := e.Redis.MemoryUsage(e.Ctx, e.Layout.MemberKey(ms[0])).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n, e.Layout.MemberKey(ms[0])
}

// docs/redis.md tells operators what to size maxmemory for: a record per member active
// in the last 26 h. It said "a few hundred bytes each", while Redis holds about 800 bytes
// for a member's record (its blob is longer than Redis's compact hash encoding takes),
// and every price of the organization's own adds its match key to each of its members'
// records (5.4 KB with 100 of fine-tuned models' names): a maxmemory sized by the page was reached at a
// fraction of the members it was meant for, and under noeviction every record write
// then failed and every check of those members went to the control plane. The page's
// figures must hold what Redis reports, and not overstate it twice over.
func TestRecordMemoryInRedisIsWhatTheDocsSay(t *testing.T) {
	doc, err := os.ReadFile("../../docs/redis.md")
	if err != nil {
		t.Fatal(err)
	}
	// The sentence may be wrapped anywhere: any run of spaces is any whitespace.
	var pattern []string
	for _, w := range strings.Fields("about {n} bytes each (Redis's `MEMORY USAGE`), and {n} bytes more for each price of its organization's own") {
		pattern = append(pattern, strings.ReplaceAll(regexp.QuoteMeta(w), "\\{n\\}", `(\d+)`))
	}
	m := regexp.MustCompile(strings.Join(pattern, `\s+`)).FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/redis.md does not say how many bytes a member's record takes in Redis (\"about N bytes each (Redis's `MEMORY USAGE`), and M bytes more for each price of its organization's own\")")
	}
	base, _ := strconv.ParseInt(string(m[1]), 10, 64)
	perPrice, _ := strconv.ParseInt(string(m[2]), 10, 64)
	e := at.New(t, at.Options{})
	for _, prices := range []int{0, 100} {
		got, _ := recordMemory(t, e, prices)
		docs := base + perPrice*int64(prices)
		t.Logf("%d prices of its own: %d bytes in Redis, the docs say %d", prices, got, docs)
		if got > docs || 2*got < docs {
			t.Errorf("a record of a member whose organization has %d prices of its own takes %d bytes in Redis; docs/redis.md says about %d", prices, got, docs)
		}
	}
}

// MEMORY USAGE counts a key, its value and its entry in the keyspace, not what Redis
// holds beside them for it: the entry of its expiry (every record has its TTL) and the
// slots both tables keep per key. docs/redis.md's total for 100,000 members was the
// per-record figure times 100,000, and Redis's used_memory grew by more than it for
// 100,000 such records: a maxmemory sized by it was reached before every member was
// mirrored. Measured on a throwaway redis-server (the shared one's used_memory moves with
// every other test), with 100,000 copies of a record the settlement path wrote.
func TestMirrorOfManyMembersFitsWhatTheDocsSay(t *testing.T) {
	doc, err := os.ReadFile("../../docs/redis.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`100,000\s+members\s+of\s+organizations\s+without\s+prices\s+of\s+their\s+own\s+take\s+about\s+(\d+)\s+MB`).FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/redis.md does not say how much 100,000 members take (\"100,000 members of organizations without prices of their own take about N MB\")")
	}
	docsMB, _ := strconv.ParseInt(string(m[1]), 10, 64)

	e := at.New(t, at.Options{})
	_, key := recordMemory(t, e, 0)
	f, err := e.Layout.ReadFields(e.Ctx, e.Redis, key)
	if err != nil || f.Blob == "" {
		t.Fatalf("the record written: %q %v", key, err)
	}
	srv := testredis.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	usedMemory := func() int64 {
		info := rdb.Info(e.Ctx, "memory").Val()
		v, _, _ := strings.Cut(info[strings.Index(info, "used_memory:")+len("used_memory:"):], "\r\n")
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("used_memory in %q: %v", info, err)
		}
		return n
	}
	const members = 100_000
	before := usedMemory()
	for lo := 0; lo < members; lo += mirror.PipelineSize {
		pipe := rdb.Pipeline()
		for i := lo; i < lo+mirror.PipelineSize; i++ {
			k := mirror.DefaultLayout.MemberKey(typeid.New(typeid.Member)) // the default prefix, as deployed
			pipe.HSet(e.Ctx, k, "v", 12345, "g", e.Mirror.Generation(), "r", f.Blob)
			pipe.PExpire(e.Ctx, k, mirrorsync.RecordTTL)
		}
		if _, err := pipe.Exec(e.Ctx); err != nil {
			t.Fatal(err)
		}
	}
	got := usedMemory() - before
	t.Logf("%d records: used_memory grew by %.1f MB (%d bytes a member); the docs say about %d MB", members, float64(got)/1e6, got/members, docsMB)
	if got > docsMB*1_000_000 || 2*got < docsMB*1_000_000 {
		t.Errorf("%d members' records take %.1f MB in Redis; docs/redis.md says about %d MB", members, float64(got)/1e6, docsMB)
	}
}
