package streamoptions

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/testredis"
)

// TestShareScriptKeepsTheLongestLasting: the shared key holds at most MostShared
// refusals, those that last longest, one per upstream and model at its latest end, and
// ends with the last of them.
func TestShareScriptKeepsTheLongestLasting(t *testing.T) {
	rdb, layout := testredis.New(t)
	key := layout.StreamOptionsRefusalsKey()
	ctx := context.Background()
	now := time.Date(2026, 12, 6, 18, 0, 0, 0, time.UTC)
	var learned []Refusal
	for i := range MostShared + 100 {
		learned = append(learned, Refusal{Upstream: "h", Model: fmt.Sprint("m", i), Until: now.Add(time.Duration(i+1) * time.Minute)})
	}
	// m0 again, later than any other: one entry, at its latest end.
	learned = append(learned, Refusal{Upstream: "h", Model: "m0", Until: now.Add(48 * time.Hour)})
	v, err := shareScript.Run(ctx, rdb, []string{key}, shareArgs(now, learned)...).Text()
	if err != nil {
		t.Fatal(err)
	}
	got, err := parseShared(v)
	if err != nil || len(got) != MostShared {
		t.Fatalf("%d refusals kept (%v), want %d", len(got), err, MostShared)
	}
	seen := map[string]time.Time{}
	for _, r := range got {
		if _, twice := seen[r.Model]; twice {
			t.Errorf("%s kept twice", r.Model)
		}
		seen[r.Model] = r.Until
	}
	if !seen["m0"].Equal(now.Add(48 * time.Hour)) {
		t.Errorf("m0 kept until %v, want its latest end", seen["m0"])
	}
	if _, ok := seen["m1"]; ok {
		t.Error("a refusal that ends among the first was kept over longer ones")
	}
	if _, ok := seen[fmt.Sprint("m", MostShared+99)]; !ok {
		t.Error("the longest-lasting refusal learned was not kept")
	}
	ttl, err := rdb.PTTL(ctx, key).Result()
	if err != nil || ttl < 47*time.Hour || ttl > 49*time.Hour {
		t.Errorf("the key ends in %v (%v), want with its last refusal, 48h", ttl, err)
	}

	// Every refusal ended: the key goes.
	if v, err := shareScript.Run(ctx, rdb, []string{key}, shareArgs(now.Add(72*time.Hour), nil)...).Text(); err != nil || v != "[]" {
		t.Fatalf("after every end: %q (%v)", v, err)
	}
	if n, _ := rdb.Exists(ctx, key).Result(); n != 0 {
		t.Error("the key outlived its last refusal")
	}
}
