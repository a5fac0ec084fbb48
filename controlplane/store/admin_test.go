package store_test

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/internal/storetest"
)

func TestLikeEscape(t *testing.T) {
	cases := map[string]string{
		"acme":   "acme",
		"100%":   `100\%`,
		"a_b":    `a\_b`,
		`c:\dir`: `c:\\dir`,
		`%_\`:    `\%\_\\`,
		"":       "",
	}
	for in, want := range cases {
		if got := store.LikeEscape(in); got != want {
			t.Errorf("LikeEscape(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestAdminMigrationUpDownUp applies 0003_admin, reverts it and applies it again on a
// database holding an organization, checking what it adds each way.
func TestAdminMigrationUpDownUp(t *testing.T) {
	ctx := context.Background()
	name := storetest.NewDatabase(t)
	st, err := store.Open(ctx, storetest.URLFor(name))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	exists := func(relation string) bool {
		t.Helper()
		var ok bool
		if err := st.Pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, relation).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if _, err := st.MigrateTo(ctx, log, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Pool.Exec(ctx, `INSERT INTO organizations (id, name, slug, created_at)
		VALUES ('org_01h0000000000000000000000a', 'Pré-existing Co', 'pre-existing', now())`); err != nil {
		t.Fatal(err)
	}
	for i, target := range []int{3, 2, 3} {
		if _, err := st.MigrateTo(ctx, log, target); err != nil {
			t.Fatalf("step %d (to %d): %v", i, target, err)
		}
		up := target == 3
		for _, rel := range []string{"organization_capability_overrides", "organizations_search_key_trgm", "organizations_newest"} {
			if exists(rel) != up {
				t.Fatalf("after migrating to %d: %s exists = %v", target, rel, !up)
			}
		}
	}
	// The generated search key covers rows that existed before the migration.
	var key string
	if err := st.Pool.QueryRow(ctx, `SELECT search_key FROM organizations`).Scan(&key); err != nil {
		t.Fatal(err)
	}
	if key != "pré-existing co\npre-existing\norg_01h0000000000000000000000a" {
		t.Fatalf("search_key %q", key)
	}
	if _, err := st.MigrateTo(ctx, log, store.LatestVersion()); err != nil {
		t.Fatal(err)
	}
}
