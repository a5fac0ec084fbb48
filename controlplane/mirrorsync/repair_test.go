package mirrorsync_test

import (
	"context"
	"testing"

	at "github.com/tollgate-dev/tollgate/controlplane/internal/accountingtest"
	"github.com/tollgate-dev/tollgate/controlplane/store"
)

// A repair mark keeps the newest failed version, and a record written at an older
// version does not clear it: a write that failed while a repair was in flight is
// repaired again, not forgotten.
func TestRepairMarkKeepsTheNewestFailure(t *testing.T) {
	ctx := context.Background()
	e := at.New(t, at.Options{})
	_, ms := e.Org(t, 1)
	m := ms[0]
	marks := func() map[string]int64 {
		return e.Int64s(t, `SELECT member_id, version FROM usage_mirror_repairs`)
	}
	for _, step := range []struct {
		name string
		run  func() error
		want int64 // 0: no mark
	}{
		{"failed at 5", func() error { return store.MarkMirrorRepairs(ctx, e.Store.Pool, map[string]int64{m: 5}) }, 5},
		{"failed at 3 later", func() error { return store.MarkMirrorRepairs(ctx, e.Store.Pool, map[string]int64{m: 3}) }, 5},
		{"written at 4", func() error { return store.ClearMirrorRepairs(ctx, e.Store.Pool, map[string]int64{m: 4}) }, 5},
		{"written at 5", func() error { return store.ClearMirrorRepairs(ctx, e.Store.Pool, map[string]int64{m: 5}) }, 0},
	} {
		if err := step.run(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if got := marks(); got[m] != step.want || len(got) > 1 {
			t.Fatalf("%s: marks %v, want %s at %d", step.name, got, m, step.want)
		}
	}
}
