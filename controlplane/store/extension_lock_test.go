package store_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/internal/storetest"
)

// TestClearUsageExtensionsLocksInIDOrder: the entitlement fence's ClearUsageExtensions
// locks its buckets in bucket id order, the order settlements lock them in (the lock
// order of migration 0005). It updated them in whatever order its plan read them (a
// sequential or bitmap scan reads them in heap order), so a fence that took the higher
// id first while a settlement held the lower one and wanted the higher deadlocked: one
// of the two was aborted (SQLSTATE 40P01) after deadlock_timeout and retried.
func TestClearUsageExtensionsLocksInIDOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	low, high := strings.Repeat("0", 64), strings.Repeat("f", 64)
	// The higher id is written first: a heap-order scan meets it first.
	if _, err := st.Pool.Exec(ctx, `
		INSERT INTO organizations (id, name, slug, created_at) VALUES ('org_1', 'O', 'o', now());
		INSERT INTO users (id, email, email_normalized, name, password_hash, created_at, updated_at)
			VALUES ('usr_1', 'u@x.test', 'u@x.test', 'U', 'x', now(), now());
		INSERT INTO members (id, organization_id, user_id, role, created_at) VALUES ('om_1', 'org_1', 'usr_1', 'member', now());
		INSERT INTO usage_buckets (id, organization_id, member_id, timeframe, window_start, window_end, extension_micro_usd, created_at, updated_at)
			VALUES ('`+high+`', 'org_1', 'om_1', 'day', now() - interval '1 day', now(), 25, now(), now()),
				('`+low+`', 'org_1', 'om_1', 'week', now() - interval '1 day', now(), 25, now(), now())`); err != nil {
		t.Fatal(err)
	}
	monitor := storetest.Conn(t, st)

	// The settlement: the lower bucket first.
	settlement, err := storetest.Conn(t, st).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer settlement.Rollback(ctx)
	if _, err := settlement.Exec(ctx, `SELECT 1 FROM usage_buckets WHERE id = $1 FOR UPDATE`, low); err != nil {
		t.Fatal(err)
	}

	// The fence, reading the buckets in heap order as its plan may.
	type result struct {
		cleared []string
		err     error
	}
	fence := make(chan result, 1)
	go func() {
		tx, err := st.Pool.Begin(ctx)
		if err != nil {
			fence <- result{err: err}
			return
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, `SET LOCAL enable_indexscan = off; SET LOCAL enable_bitmapscan = off`); err != nil {
			fence <- result{err: err}
			return
		}
		cleared, err := store.ClearUsageExtensions(ctx, tx, []string{low, high}, time.Now())
		if err == nil {
			err = tx.Commit(ctx)
		}
		fence <- result{cleared, err}
	}()
	storetest.WaitForLockWaiters(t, monitor, 1)

	// The settlement goes on to the higher bucket, then commits.
	_, err = settlement.Exec(ctx, `SELECT 1 FROM usage_buckets WHERE id = $1 FOR UPDATE`, high)
	if err == nil {
		err = settlement.Commit(ctx)
	}
	r := <-fence
	for _, e := range []error{err, r.err} {
		var pgErr *pgconn.PgError
		if errors.As(e, &pgErr) && pgErr.Code == "40P01" {
			t.Fatalf("the fence and a settlement deadlocked: %v", e)
		}
		if e != nil {
			t.Fatal(e)
		}
	}
	slices.Sort(r.cleared)
	if !slices.Equal(r.cleared, []string{low, high}) {
		t.Fatalf("cleared %v, want both buckets", r.cleared)
	}
}
