package app_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/controlplane/app"
	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/internal/storetest"
	"github.com/tollgate-dev/tollgate/internal/testio"
	"github.com/tollgate-dev/tollgate/internal/testredis"
)

// testToken is the internal token of the servers these tests start.
const testToken = "test-internal-token-0123"

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestConfigReportsEveryProblem(t *testing.T) {
	var stderr bytes.Buffer
	err := app.Run(context.Background(), []string{"serve"}, envOf(map[string]string{
		"TOLLGATE_DATABASE_URL":            "mysql://x",
		"TOLLGATE_HTTP_ADDR":               "nonsense",
		"TOLLGATE_LOG_FORMAT":              "xml",
		"TOLLGATE_SESSION_TTL":             "forever",
		"TOLLGATE_PLATFORM_ADMIN_EMAILS":   "root@example.test, not-an-email",
		"TOLLGATE_SHUTDOWN_TIMEOUT":        "5s",
		"TOLLGATE_SHUTDOWN_DELAY":          "5s",
		"TOLLGATE_GRPC_MAX_CONNECTION_AGE": "500ms",
	}), app.IO{Stdout: io.Discard, Stderr: &stderr})
	if err == nil {
		t.Fatal("bad configuration accepted")
	}
	for _, want := range []string{"TOLLGATE_DATABASE_URL", "TOLLGATE_HTTP_ADDR", "TOLLGATE_LOG_FORMAT", "TOLLGATE_SESSION_TTL", "not-an-email",
		"TOLLGATE_SHUTDOWN_DELAY: 5s must be below TOLLGATE_SHUTDOWN_TIMEOUT (5s)", "TOLLGATE_GRPC_MAX_CONNECTION_AGE: must be 0 (for ever) or at least 1s"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %s:\n%v", want, err)
		}
	}
}

func TestUnknownCommand(t *testing.T) {
	err := app.Run(context.Background(), []string{"frobnicate"}, envOf(nil), app.IO{Stdout: io.Discard, Stderr: io.Discard})
	if err == nil || !strings.Contains(err.Error(), "frobnicate") {
		t.Fatalf("err %v", err)
	}
	var out bytes.Buffer
	if err := app.Run(context.Background(), []string{"serve", "-h"}, envOf(nil), app.IO{Stdout: &out, Stderr: &out}); err != nil {
		t.Fatalf("-h: %v", err)
	}
	if !strings.Contains(out.String(), "TOLLGATE_GRPC_ADDR") {
		t.Fatalf("help does not document the environment: %s", out.String())
	}
}

func TestServeRefusesSchemaBehindThenMigrateFixesIt(t *testing.T) {
	dbURL := storetest.URLFor(storetest.NewDatabase(t))
	env := envOf(map[string]string{"TOLLGATE_DATABASE_URL": dbURL, "TOLLGATE_HTTP_ADDR": "127.0.0.1:0",
		"TOLLGATE_GRPC_ADDR": "127.0.0.1:0", "TOLLGATE_ADMIN_ADDR": "127.0.0.1:0", "TOLLGATE_INTERNAL_TOKEN": testToken})
	err := app.Run(context.Background(), []string{"serve"}, env, app.IO{Stdout: io.Discard, Stderr: io.Discard})
	if err == nil || !strings.Contains(err.Error(), "controlplane migrate") {
		t.Fatalf("serve on an empty database: %v", err)
	}
	var out bytes.Buffer
	if err := app.Run(context.Background(), []string{"migrate"}, env, app.IO{Stdout: &out, Stderr: io.Discard}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "schema at version") {
		t.Fatalf("migrate printed %q", out.String())
	}
}

// A rollback to an older build: the database already has a migration this build does
// not know, applied by a newer build that recorded the oldest build able to run on it.
// An expand-only one (oldest reader at or below this build's latest) is served, and
// migrate applies this build's own pending migrations and says so; one that needs a
// newer build, or that recorded no reader (a build from before the column), is refused
// by both, naming it and the way back, and migrate changes nothing.
func TestNewerSchema(t *testing.T) {
	latest := store.LatestVersion()
	future := latest + 1
	ms := mustMigrations(t)
	last := ms[len(ms)-1]
	for _, tc := range []struct {
		name   string
		reader any // oldest_reader of the newer migration; nil: NULL
		refuse string
	}{
		{name: "expand only", reader: 0},
		{name: "readable by this build", reader: latest},
		{name: "needs a newer build", reader: future,
			refuse: fmt.Sprintf("migration(s) %04d_future (oldest reader %d) need a newer build", future, future)},
		{name: "no reader recorded", reader: nil,
			refuse: fmt.Sprintf("migration(s) %04d_future (no oldest reader recorded: only builds that know it) need a newer build", future)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dbURL := storetest.URLFor(storetest.NewDatabase(t))
			env := envOf(map[string]string{"TOLLGATE_DATABASE_URL": dbURL})
			if err := app.Run(ctx, []string{"migrate"}, env, app.IO{Stdout: io.Discard, Stderr: io.Discard}); err != nil {
				t.Fatal(err)
			}
			st, err := store.Open(ctx, dbURL)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			// This build's latest migration pending under the newer build's, which
			// recorded its oldest reader (the column is the newer build's too).
			if _, err := st.MigrateTo(ctx, quietLog(), latest-1); err != nil {
				t.Fatal(err)
			}
			if _, err := st.Pool.Exec(ctx, `ALTER TABLE schema_migrations ADD COLUMN IF NOT EXISTS oldest_reader integer`); err != nil {
				t.Fatal(err)
			}
			if _, err := st.Pool.Exec(ctx, `INSERT INTO schema_migrations (version, name, oldest_reader) VALUES ($1, 'future', $2)`, future, tc.reader); err != nil {
				t.Fatal(err)
			}

			var logs bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			checkErr := app.CheckSchema(ctx, st, log, true)
			var out bytes.Buffer
			migrateErr := app.Run(ctx, []string{"migrate"}, env, app.IO{Stdout: &out, Stderr: io.Discard})

			if tc.refuse != "" {
				for what, err := range map[string]error{"serve": checkErr, "migrate": migrateErr} {
					for _, want := range []string{
						fmt.Sprintf("database schema is at version %d, newer than this build's %d", future, latest),
						tc.refuse,
						fmt.Sprintf("with the newer build's image: `controlplane migrate --to %d`; then roll back", latest),
					} {
						if err == nil || !strings.Contains(err.Error(), want) {
							t.Errorf("%s on a schema at version %d: err %v, want %q", what, future, err, want)
						}
					}
				}
				if out.Len() != 0 {
					t.Errorf("migrate refused the database but printed %q", out.String())
				}
				if pending, _ := st.Pending(ctx); len(pending) != 1 {
					t.Errorf("a refused schema was migrated: pending %v", pending)
				}
				return
			}
			if checkErr != nil {
				t.Fatalf("serve's check on a readable newer schema: %v", checkErr)
			}
			if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "newer than this build") {
				t.Errorf("serve's check logged no warning: %s", logs.String())
			}
			if migrateErr != nil {
				t.Fatalf("migrate on a readable newer schema: %v", migrateErr)
			}
			// serve's check (auto-migrate) applied the pending migration; once more
			// with it pending, for migrate to apply.
			if _, err := st.MigrateTo(ctx, quietLog(), latest-1); err != nil {
				t.Fatal(err)
			}
			out.Reset()
			if err := app.Run(ctx, []string{"migrate"}, env, app.IO{Stdout: &out, Stderr: io.Discard}); err != nil {
				t.Fatal(err)
			}
			want := fmt.Sprintf("schema at version %d (1 migration(s) applied)\nschema newer than this build's %d but readable by it: %04d_future (oldest reader %v)\n",
				future, latest, future, tc.reader)
			if out.String() != want {
				t.Fatalf("migrate printed %q, want %q", out.String(), want)
			}
			if pending, _ := st.Pending(ctx); len(pending) != 0 {
				t.Fatalf("migrate left %v (%04d_%s) pending", pending, last.Version, last.Name)
			}
		})
	}
}

// migrate --to N reverts this build's migrations above N with their down files and
// applies them again, printing each step; N outside 0..latest is refused with the
// other configuration problems, and so is a schema with migrations of a newer build
// (this build cannot revert them).
func TestMigrateTo(t *testing.T) {
	ctx := context.Background()
	dbURL := storetest.URLFor(storetest.NewDatabase(t))
	env := envOf(map[string]string{"TOLLGATE_DATABASE_URL": dbURL})
	ms := mustMigrations(t)
	latest := store.LatestVersion()
	name := func(m store.Migration) string { return fmt.Sprintf("%04d_%s", m.Version, m.Name) }
	run := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := app.Run(ctx, args, env, app.IO{Stdout: &out, Stderr: io.Discard})
		return out.String(), err
	}
	if _, err := run("migrate"); err != nil {
		t.Fatal(err)
	}
	a, b := ms[len(ms)-2], ms[len(ms)-1]
	target := ms[len(ms)-3].Version
	out, err := run("migrate", "--to", fmt.Sprint(target))
	if want := fmt.Sprintf("reverted %s\nreverted %s\nschema at version %d (2 migration(s) reverted or applied)\n", name(b), name(a), target); err != nil || out != want {
		t.Fatalf("migrate --to %d: %v, printed %q, want %q", target, err, out, want)
	}
	out, err = run("migrate", "--to", fmt.Sprint(latest))
	if want := fmt.Sprintf("applied %s\napplied %s\nschema at version %d (2 migration(s) reverted or applied)\n", name(a), name(b), latest); err != nil || out != want {
		t.Fatalf("migrate --to %d: %v, printed %q, want %q", latest, err, out, want)
	}
	out, err = run("migrate", "--to", "0")
	if err != nil || !strings.HasSuffix(out, "schema at version 0 ("+fmt.Sprint(len(ms))+" migration(s) reverted or applied)\n") {
		t.Fatalf("migrate --to 0: %v, printed %q", err, out)
	}
	if out, err = run("migrate"); err != nil || !strings.Contains(out, fmt.Sprintf("schema at version %d (%d migration(s) applied)", latest, len(ms))) {
		t.Fatalf("migrate after --to 0: %v, printed %q", err, out)
	}

	for _, bad := range []string{"-1", fmt.Sprint(latest + 1)} {
		err := app.Run(ctx, []string{"migrate", "--to", bad, "--log-format", "xml"}, env, app.IO{Stdout: io.Discard, Stderr: io.Discard})
		for _, want := range []string{"--to: " + bad + " is not a schema version of this build: from 0 to " + fmt.Sprint(latest), "TOLLGATE_LOG_FORMAT"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("migrate --to %s: %v, want %q", bad, err, want)
			}
		}
	}
	if _, err := run("migrate", "--to", "latest"); err == nil || !strings.Contains(err.Error(), "not a whole number") {
		t.Errorf("migrate --to latest: %v", err)
	}

	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `INSERT INTO schema_migrations (version, name, oldest_reader) VALUES ($1, 'future', 0)`, latest+1); err != nil {
		t.Fatal(err)
	}
	out, err = run("migrate", "--to", fmt.Sprint(latest-1))
	if want := fmt.Sprintf("migration(s) newer than this build's %d, which it cannot revert: %04d_future (oldest reader 0)", latest, latest+1); err == nil || !strings.Contains(err.Error(), want) || out != "" {
		t.Fatalf("migrate --to under a newer build's migration: %v, printed %q, want %q", err, out, want)
	}
	if v, _ := conn.Exec(ctx, `SELECT 1 FROM schema_migrations WHERE version = $1`, latest); v.RowsAffected() != 1 {
		t.Fatal("migrate --to reverted this build's latest migration under a newer build's")
	}
}

// Migration 0030 was removed after databases applied it, and they still record it.
// migrate --to below it, run before rolling back to a build whose latest is lower, left
// that record: the schema still read as version 30 ("schema at version 30"), which the
// older build refuses as newer than itself, so the way back the docs give never ended.
// Reverting below it removes its record (its storage setting stays, which every build
// runs on); migrating up again does not bring it back.
func TestMigrateToBelowARemovedMigration(t *testing.T) {
	ctx := context.Background()
	dbURL := storetest.URLFor(storetest.NewDatabase(t))
	env := envOf(map[string]string{"TOLLGATE_DATABASE_URL": dbURL})
	run := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := app.Run(ctx, args, env, app.IO{Stdout: &out, Stderr: io.Discard})
		return out.String(), err
	}
	if _, err := run("migrate"); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// As the build that had 0030 left the database.
	if _, err := conn.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES (30, 'starts_fillfactor');
		ALTER TABLE usage_request_starts SET (fillfactor = 50)`); err != nil {
		t.Fatal(err)
	}
	out, err := run("migrate", "--to", "29")
	if err != nil || !strings.HasSuffix(out, fmt.Sprintf("reverted 0031_mirror_repairs\nreverted 0030_starts_fillfactor\nschema at version 29 (%d migration(s) reverted or applied)\n",
		store.LatestVersion()-29)) {
		t.Fatalf("migrate --to 29: %v, printed %q", err, out)
	}
	var recorded bool
	var options []string
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = 30),
		(SELECT coalesce(reloptions, '{}') FROM pg_class WHERE relname = 'usage_request_starts')`).Scan(&recorded, &options); err != nil {
		t.Fatal(err)
	}
	if recorded || len(options) != 1 || options[0] != "fillfactor=50" {
		t.Fatalf("after migrate --to 29: 0030 recorded %v, the starts' options %v", recorded, options)
	}
	if out, err := run("migrate"); err != nil || !strings.Contains(out, fmt.Sprintf("schema at version %d", store.LatestVersion())) {
		t.Fatalf("migrate up again: %v, printed %q", err, out)
	}
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = 30)`).Scan(&recorded); err != nil || recorded {
		t.Fatalf("0030 recorded again: %v, %v", recorded, err)
	}
}

// migrate prints the version the database reached, which is this build's latest once
// every migration is applied.
func TestMigratePrintsTheVersionReached(t *testing.T) {
	dbURL := storetest.URLFor(storetest.NewDatabase(t))
	env := envOf(map[string]string{"TOLLGATE_DATABASE_URL": dbURL})
	for _, applied := range []int{len(mustMigrations(t)), 0} {
		var out bytes.Buffer
		if err := app.Run(context.Background(), []string{"migrate"}, env, app.IO{Stdout: &out, Stderr: io.Discard}); err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("schema at version %d (%d migration(s) applied)\n", store.LatestVersion(), applied); out.String() != want {
			t.Fatalf("migrate printed %q, want %q", out.String(), want)
		}
	}
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func mustMigrations(t *testing.T) []store.Migration {
	t.Helper()
	ms, err := store.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

func TestServeLifecycleAndBootstrapAdmin(t *testing.T) {
	dbURL := storetest.URLFor(storetest.NewDatabase(t))
	_, layout := testredis.New(t)
	env := envOf(map[string]string{"TOLLGATE_DATABASE_URL": dbURL, "TOLLGATE_HTTP_ADDR": "127.0.0.1:0",
		"TOLLGATE_GRPC_ADDR": "127.0.0.1:0", "TOLLGATE_ADMIN_ADDR": "127.0.0.1:0",
		"TOLLGATE_PLATFORM_ADMIN_EMAILS": "Ops@Example.test", "TOLLGATE_INTERNAL_TOKEN": testToken,
		"TOLLGATE_REDIS_URL": testredis.URL(), "TOLLGATE_REDIS_PREFIX": layout.Prefix, "TOLLGATE_SHUTDOWN_DELAY": "0s"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := &testio.SyncBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- app.Run(ctx, []string{"serve", "--auto-migrate"}, env, app.IO{Stdout: io.Discard, Stderr: logs})
	}()
	addrs := map[string]string{}
	re := regexp.MustCompile(`msg=listening server=(\w+) addr=(\S+)`)
	deadline := time.Now().Add(20 * time.Second)
	for len(addrs) < 3 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		for _, m := range re.FindAllStringSubmatch(logs.String(), -1) {
			addrs[m[1]] = m[2]
		}
	}
	if len(addrs) < 3 {
		t.Fatalf("servers did not start: %s", logs.String())
	}
	get := func(url string) (int, string) {
		res, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if code, _ := get("http://" + addrs["admin"] + "/readyz"); code != 200 {
		t.Fatalf("readyz %d", code)
	}
	if code, _ := get("http://" + addrs["rest"] + "/health"); code != 200 {
		t.Fatalf("health %d", code)
	}
	if code, body := get("http://" + addrs["admin"] + "/metrics"); code != 200 || !strings.Contains(body, `tollgate_controlplane_http_requests_total{code="200",route="GET /health"} 1`) {
		t.Fatalf("metrics %d:\n%s", code, body)
	}

	// The allowlisted email cannot be claimed by signing up...
	res, err := http.Post("http://"+addrs["rest"]+"/v1/auth/sign-up", "application/json",
		strings.NewReader(`{"email":"ops@example.test","password":"123456789012","name":"Mallory"}`))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusForbidden {
		t.Fatalf("sign-up of an allowlisted email: %d", res.StatusCode)
	}
	// ...but bootstrap-admin provisions it, and resets its password when run again.
	for i, pw := range []string{"first password 1", "second password 2"} {
		var out bytes.Buffer
		err := app.Run(context.Background(), []string{"bootstrap-admin", "--email", "OPS@example.test"}, env,
			app.IO{Stdin: strings.NewReader(pw + "\n"), Stdout: &out, Stderr: io.Discard})
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"created", "reset"}[i]
		if !strings.Contains(out.String(), want) {
			t.Fatalf("bootstrap %d printed %q", i, out.String())
		}
		res, err := http.Post("http://"+addrs["rest"]+"/v1/auth/sign-in", "application/json",
			strings.NewReader(`{"email":"ops@example.test","password":"`+pw+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 200 {
			t.Fatalf("sign-in with bootstrap password %d: %d", i, res.StatusCode)
		}
	}
	err = app.Run(context.Background(), []string{"bootstrap-admin", "--email", "x@example.test"}, env,
		app.IO{Stdin: strings.NewReader("short\n"), Stdout: io.Discard, Stderr: io.Discard})
	if err == nil || !strings.Contains(err.Error(), "at least 12") {
		t.Fatalf("short password: %v", err)
	}
	// One sign-in could never take (it refuses what sign-up cannot set) is refused too.
	err = app.Run(context.Background(), []string{"bootstrap-admin", "--email", "x@example.test"}, env,
		app.IO{Stdin: strings.NewReader(strings.Repeat("long password ", 400) + "\n"), Stdout: io.Discard, Stderr: io.Discard})
	if err == nil || !strings.Contains(err.Error(), "at most 1024") {
		t.Fatalf("long password: %v", err)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve returned %v", err)
		}
	case <-time.After(25 * time.Second):
		t.Fatal("serve did not stop after cancellation")
	}
	sc := bufio.NewScanner(strings.NewReader(logs.String()))
	stopped := false
	for sc.Scan() {
		stopped = stopped || strings.Contains(sc.Text(), "msg=stopped")
	}
	if !stopped {
		t.Fatalf("no shutdown log:\n%s", logs.String())
	}
}

func TestServeNeedsAnInternalTokenOrMTLS(t *testing.T) {
	for _, tc := range []struct{ name, token, want string }{
		{"empty", "", "TOLLGATE_INTERNAL_TOKEN is empty"},
		{"short", "short", "at least 16"},
	} {
		err := app.Run(context.Background(), []string{"serve"}, envOf(map[string]string{"TOLLGATE_INTERNAL_TOKEN": tc.token}),
			app.IO{Stdout: io.Discard, Stderr: io.Discard})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s token: %v", tc.name, err)
		}
	}
}

func TestResyncRebuildsTheMirror(t *testing.T) {
	dbURL := storetest.URLFor(storetest.NewDatabase(t))
	rdb, layout := testredis.New(t)
	env := envOf(map[string]string{"TOLLGATE_DATABASE_URL": dbURL, "TOLLGATE_REDIS_URL": testredis.URL(), "TOLLGATE_REDIS_PREFIX": layout.Prefix})
	if err := app.Run(context.Background(), []string{"migrate"}, env, app.IO{Stdout: io.Discard, Stderr: io.Discard}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := app.Run(context.Background(), []string{"resync"}, env, app.IO{Stdout: &out, Stderr: io.Discard}); err != nil {
		t.Fatal(err)
	}
	gen, err := layout.Generation(context.Background(), rdb)
	if err != nil || gen == "" || !strings.Contains(out.String(), gen) {
		t.Fatalf("generation %q (%v) after resync printing %q", gen, err, out.String())
	}
}

// A shutdown timeout of 5s or less alone, valid before TOLLGATE_SHUTDOWN_DELAY existed,
// is still accepted (the delay nobody set fits it); a delay set is checked as given.
func TestShortShutdownTimeoutAloneStillStarts(t *testing.T) {
	for _, env := range []map[string]string{{"TOLLGATE_SHUTDOWN_TIMEOUT": "5s"}, {"TOLLGATE_SHUTDOWN_TIMEOUT": "3s"}} {
		env["TOLLGATE_LOG_FORMAT"] = "xml" // stops Run at its configuration check
		err := app.Run(context.Background(), []string{"serve"}, envOf(env), app.IO{Stdout: io.Discard, Stderr: io.Discard})
		if err == nil || !strings.Contains(err.Error(), "TOLLGATE_LOG_FORMAT") || strings.Contains(err.Error(), "TOLLGATE_SHUTDOWN") {
			t.Errorf("%v: %v; want only the log format refused", env, err)
		}
	}
	err := app.Run(context.Background(), []string{"serve", "--shutdown-delay", "4s"}, envOf(map[string]string{"TOLLGATE_SHUTDOWN_TIMEOUT": "3s"}),
		app.IO{Stdout: io.Discard, Stderr: io.Discard})
	if err == nil || !strings.Contains(err.Error(), "TOLLGATE_SHUTDOWN_DELAY: 4s must be below TOLLGATE_SHUTDOWN_TIMEOUT (3s)") {
		t.Errorf("a delay set by flag past the timeout: %v", err)
	}
}

// A TOLLGATE_* variable no subcommand reads, a typo most likely, is named in a warning at
// start (its value never); a variable of another subcommand (serve's, in migrate's
// environment) and other prefixes are not. The known names come from the parsing itself
// (app.KnownEnv).
func TestUnknownVariablesAreWarnedOf(t *testing.T) {
	vars := map[string]string{
		// Nothing listens there: migrate stops at its connection, after the warnings.
		"TOLLGATE_DATABASE_URL": "postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=2",
		"TOLLGATE_SESSION_TTL":  "1h",
		"TOLLGATE_SESION_TTL":   "s3cret-1h",
		"TOLLGATE_RETENTON_AGE": "800h",
		"HOME":                  "/root",
		// The operator CLI's, which the restore runbook sets in the same shell for the
		// tollgate command after controlplane migrate: no typo (until 2026-12-07 warned of).
		"TOLLGATE_API_URL": "http://127.0.0.1:8080",
		"TOLLGATE_API_KEY": "tgk_x",
		"TOLLGATE_ORG_ID":  "org_x",
	}
	var environ []string
	for k, v := range vars {
		environ = append(environ, k+"="+v)
	}
	var logs bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := app.Run(ctx, []string{"migrate"}, envOf(vars), app.IO{Stdout: io.Discard, Stderr: &logs, Environ: func() []string { return environ }}); err == nil {
		t.Fatal("migrate reached a database at port 1")
	}
	var names []string
	for _, m := range regexp.MustCompile(`unknown environment variable[^\n]* name=(\S+)`).FindAllStringSubmatch(logs.String(), -1) {
		names = append(names, m[1])
	}
	if strings.Join(names, " ") != "TOLLGATE_RETENTON_AGE TOLLGATE_SESION_TTL" {
		t.Fatalf("warned of %v, want the two typos:\n%s", names, logs.String())
	}
	if strings.Contains(logs.String(), "s3cret") {
		t.Fatalf("a value is logged:\n%s", logs.String())
	}
	known := strings.Join(app.KnownEnv(), " ")
	for _, n := range []string{"TOLLGATE_SESSION_TTL", "TOLLGATE_DATABASE_URL", "TOLLGATE_RETENTION_INTERVAL", "TOLLGATE_REDIS_SENTINEL_PASSWORD", "TOLLGATE_GRPC_CLIENT_CA"} {
		if !strings.Contains(" "+known+" ", " "+n+" ") {
			t.Errorf("KnownEnv lacks %s", n)
		}
	}
}
