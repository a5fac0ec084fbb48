// Package storetest gives each test its own real, migrated Postgres database, cloned from
// a template database that is migrated once per set of migrations. It is for tests only.
//
// The server is TOLLGATE_TEST_DATABASE_URL (default
// postgres://postgres@127.0.0.1:5432/test?sslmode=disable). When it is unreachable the
// test is skipped, except under CI=true, where it fails: CI must never pass by skipping.
package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/controlplane/store"
)

// DefaultURL is the Postgres server tests use unless TOLLGATE_TEST_DATABASE_URL says otherwise.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// ServerURL is the admin connection URL of the test Postgres server.
func ServerURL() string {
	if u := os.Getenv("TOLLGATE_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return DefaultURL
}

// templateLock serializes template creation across the test binaries that `go test ./...`
// runs in parallel.
const templateLock = 7_311_002

var (
	templateOnce sync.Once
	templateName string
	templateErr  error
)

// URLFor returns the server URL with its database replaced.
func URLFor(database string) string {
	u, err := url.Parse(ServerURL())
	if err != nil {
		panic(err)
	}
	u.Path = "/" + database
	return u.String()
}

// URLWith returns URLFor(database) with the query parameters query ("a=1&b=2") added,
// such as pgxpool's pool_max_conns.
func URLWith(database, query string) string {
	u, err := url.Parse(URLFor(database))
	if err != nil {
		panic(err)
	}
	extra, err := url.ParseQuery(query)
	if err != nil {
		panic(err)
	}
	q := u.Query()
	for k, vs := range extra {
		for _, v := range vs {
			q.Add(k, v)
		}
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// Unavailable fails (CI) or skips (local) a test whose service is unreachable.
func Unavailable(t testing.TB, what string, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is required under CI=true: %v", what, err)
	}
	t.Skipf("%s unreachable (set CI=true to fail instead): %v", what, err)
}

func ensureTemplate(ctx context.Context) (string, error) {
	templateOnce.Do(func() {
		templateName = "tollgate_tpl_" + store.MigrationsFingerprint()
		templateErr = createTemplate(ctx, templateName)
	})
	return templateName, templateErr
}

func createTemplate(ctx context.Context, name string) error {
	admin, err := pgx.Connect(ctx, ServerURL())
	if err != nil {
		return err
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, `SELECT pg_advisory_lock($1)`, templateLock); err != nil {
		return err
	}
	defer admin.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, templateLock) //nolint:errcheck
	var exists bool
	if err := admin.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return err
	}
	if exists {
		return nil
	}
	// Build under a temporary name and rename when complete, so a crash mid-migration
	// never leaves a half-migrated template behind under the real name.
	building := name + "_building"
	if _, err := admin.Exec(ctx, `DROP DATABASE IF EXISTS `+building+` WITH (FORCE)`); err != nil {
		return err
	}
	if _, err := admin.Exec(ctx, `CREATE DATABASE `+building); err != nil {
		return err
	}
	st, err := store.Open(ctx, URLFor(building))
	if err != nil {
		return err
	}
	_, err = st.Migrate(ctx, slog.New(slog.NewTextHandler(io.Discard, nil)))
	st.Close()
	if err != nil {
		return fmt.Errorf("migrate template: %w", err)
	}
	_, err = admin.Exec(ctx, `ALTER DATABASE `+building+` RENAME TO `+name)
	return err
}

// NewDatabase creates an empty database (no migrations) and drops it when the test ends.
func NewDatabase(t testing.TB) string {
	t.Helper()
	return newDatabase(t, "")
}

// New returns a Store on a fresh, fully migrated database of its own, dropped when the
// test ends.
func New(t testing.TB) *store.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tpl, err := ensureTemplate(ctx)
	if err != nil {
		Unavailable(t, "Postgres", err)
	}
	name := newDatabase(t, tpl)
	st, err := store.Open(ctx, URLFor(name))
	if err != nil {
		t.Fatalf("open test database: %v", err)
	}
	t.Cleanup(st.Close)
	return st
}

func newDatabase(t testing.TB, template string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, err := pgx.Connect(ctx, ServerURL())
	if err != nil {
		Unavailable(t, "Postgres", err)
	}
	defer admin.Close(ctx)
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "tollgate_t_" + strings.ToLower(hex.EncodeToString(b[:]))
	stmt := `CREATE DATABASE ` + name
	if template != "" {
		stmt += ` TEMPLATE ` + template
	}
	if _, err := admin.Exec(ctx, stmt); err != nil {
		t.Fatalf("create test database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, ServerURL())
		if err != nil {
			t.Logf("drop test database %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, `DROP DATABASE IF EXISTS `+name+` WITH (FORCE)`); err != nil {
			t.Logf("drop test database %s: %v", name, err)
		}
	})
	return name
}
