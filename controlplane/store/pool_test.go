package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/internal/storetest"
)

// The pool is bounded at 16 connections and keeps 4 open from the start (so the first
// burst of traffic does not wait for new Postgres backends); the URL overrides both.
func TestPoolSize(t *testing.T) {
	ctx := context.Background()
	db := storetest.NewDatabase(t)
	for _, c := range []struct {
		query         string
		wantMax, want int32
	}{
		{"", 16, 4},
		{"pool_max_conns=2", 2, 2},
		{"pool_max_conns=8&pool_min_conns=6", 8, 6},
	} {
		st, err := store.Open(ctx, storetest.URLWith(db, c.query))
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Pool.Config().MaxConns; got != c.wantMax {
			t.Errorf("%q: MaxConns %d, want %d", c.query, got, c.wantMax)
		}
		// The pool opens its minimum in the background; no traffic is needed.
		deadline := time.Now().Add(10 * time.Second)
		for st.Pool.Stat().TotalConns() < c.want && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		// Open's ping may have opened one more while the minimum was being filled.
		if got := st.Pool.Stat().TotalConns(); got < c.want || got > min(c.want+1, c.wantMax) {
			t.Errorf("%q: %d connections open without traffic, want %d", c.query, got, c.want)
		}
		st.Close()
	}
}
