package containersession_test

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/enforcer/containersession"
	"github.com/tollgate-dev/tollgate/internal/testredis"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
	"github.com/tollgate-dev/tollgate/pkg/pricecatalog"
)

// TestCharge: a container's life is charged once across the requests that use it, from
// the first one's start to its idle window after the last one's end, in whole minutes,
// at least the minimum for a container first seen; one seen again after its charged time
// ended is another session; a request asked again is charged the same.
func TestCharge(t *testing.T) {
	rdb, layout := testredis.New(t)
	l := containersession.New(rdb, layout, 0)
	ctx := context.Background()
	openai, _ := pricecatalog.Default().Container("openai-1g")    // idle 20, minimum 5
	anthropic, _ := pricecatalog.Default().Container("anthropic") // idle 5, minimum 5
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	for _, step := range []struct {
		what       string
		request    string
		c          pricecatalog.Container
		ids        []string
		start, end time.Duration
		want       int64
	}{
		{"first use: its 10 s and 20 idle minutes", "r1", openai, []string{"cntr_a"}, 0, 10 * time.Second, 21},
		{"asked again: the same", "r1", openai, []string{"cntr_a"}, 0, 10 * time.Second, 21},
		{"used again 5 minutes later: the 5 minutes its idle window moved", "r2", openai, []string{"cntr_a"}, 5 * time.Minute, 5*time.Minute + 10*time.Second, 5},
		{"a request inside the charged time: the minutes its end moved the idle window", "r3", openai, []string{"cntr_a"}, 6 * time.Minute, 7 * time.Minute, 2},
		{"two containers: each its own", "r4", openai, []string{"cntr_a", "cntr_b"}, 8 * time.Minute, 8*time.Minute + 30*time.Second, 2 + 21},
		{"after the charged time ended: another session", "r5", openai, []string{"cntr_a"}, 60 * time.Minute, 61 * time.Minute, 21},
		{"anthropic: at least its minimum", "r6", anthropic, []string{"container_1"}, 0, time.Second, 6},
		{"a long request: its own length and the idle window", "r7", anthropic, []string{"container_2"}, 0, 30 * time.Minute, 35},
		{"an end before its start is the start", "r8", anthropic, []string{"container_3"}, time.Minute, 0, 5},
	} {
		got, err := l.Charge(ctx, step.request, step.c, step.ids, at(step.start), at(step.end))
		if got != step.want || err != nil {
			t.Fatalf("%s: %d minutes (%v), want %d", step.what, got, err, step.want)
		}
	}
}

// TestChargeWithoutRedis: when Redis does not answer, each container is charged as one
// seen for the first time (an estimate), and the error says why.
func TestChargeWithoutRedis(t *testing.T) {
	_, layout := testredis.New(t)
	l := containersession.New(testredis.Dead(t), layout, 200*time.Millisecond)
	c, _ := pricecatalog.Default().Container("openai-4g")
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	got, err := l.Charge(context.Background(), "r1", c, []string{"cntr_a", "cntr_b"}, t0, t0.Add(90*time.Second))
	if got != 2*22 || err == nil {
		t.Fatalf("%d minutes (%v), want 44 and Redis's error", got, err)
	}
}

// TestChargeOnACluster: on Redis Cluster a container's two keys share its slot (the
// container id is their hash tag), so the script runs; containers spread over the shards.
func TestChargeOnACluster(t *testing.T) {
	c := testredis.StartCluster(t)
	l := containersession.New(c.Client(t), mirror.Layout{Prefix: "tg:"}, 0)
	openai, _ := pricecatalog.Default().Container("openai-1g")
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	ids := []string{"cntr_a", "cntr_b", "cntr_c", "cntr_d"}
	if got, err := l.Charge(context.Background(), "r1", openai, ids, t0, t0.Add(time.Second)); got != 4*21 || err != nil {
		t.Fatalf("first use: %d minutes (%v), want 84", got, err)
	}
	if got, err := l.Charge(context.Background(), "r2", openai, ids, t0.Add(time.Minute), t0.Add(2*time.Minute)); got != 4*2 || err != nil {
		t.Fatalf("used again: %d minutes (%v), want 8", got, err)
	}
}

// TestChargeAfterEviction: Redis under an evicting policy may drop either key of a
// container (docs/redis.md, "maxmemory-policy"). Its charged time gone, the next request
// is charged as the container's first: more than the bill, never less. A request's own
// charge gone, asking for that request again charges only what is not charged yet (0
// here): the one case eviction lowers a charge, harmless when the first answer was
// settled (settlements are idempotent by request id, the first wins).
func TestChargeAfterEviction(t *testing.T) {
	rdb, layout := testredis.New(t)
	l := containersession.New(rdb, layout, 0)
	ctx := context.Background()
	openai, _ := pricecatalog.Default().Container("openai-1g") // idle 20, minimum 5
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	if got, err := l.Charge(ctx, "r1", openai, []string{"cntr_a"}, t0, t0.Add(10*time.Second)); got != 21 || err != nil {
		t.Fatalf("first use: %d (%v)", got, err)
	}
	if err := rdb.Del(ctx, layout.ContainerKey("cntr_a")).Err(); err != nil {
		t.Fatal(err)
	}
	// With the key, 5 minutes (the idle window moved); without it, a first use's 21.
	if got, err := l.Charge(ctx, "r2", openai, []string{"cntr_a"}, t0.Add(5*time.Minute), t0.Add(5*time.Minute+10*time.Second)); got != 21 || err != nil {
		t.Fatalf("after the container's key was evicted: %d (%v), want 21 (charged as first seen)", got, err)
	}
	if err := rdb.Del(ctx, layout.ContainerRequestKey("cntr_a", "r2")).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := l.Charge(ctx, "r2", openai, []string{"cntr_a"}, t0.Add(5*time.Minute), t0.Add(5*time.Minute+10*time.Second)); got != 0 || err != nil {
		t.Fatalf("r2 asked again after its own key was evicted: %d (%v), want 0 (its time is charged already)", got, err)
	}
}
