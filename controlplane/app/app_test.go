package app_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
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
		"TOLLGATE_DATABASE_URL":          "mysql://x",
		"TOLLGATE_HTTP_ADDR":             "nonsense",
		"TOLLGATE_LOG_FORMAT":            "xml",
		"TOLLGATE_SESSION_TTL":           "forever",
		"TOLLGATE_PLATFORM_ADMIN_EMAILS": "root@example.test, not-an-email",
		"TOLLGATE_SHUTDOWN_TIMEOUT":      "5s",
		"TOLLGATE_SHUTDOWN_DELAY":        "5s",
	}), app.IO{Stdout: io.Discard, Stderr: &stderr})
	if err == nil {
		t.Fatal("bad configuration accepted")
	}
	for _, want := range []string{"TOLLGATE_DATABASE_URL", "TOLLGATE_HTTP_ADDR", "TOLLGATE_LOG_FORMAT", "TOLLGATE_SESSION_TTL", "not-an-email",
		"TOLLGATE_SHUTDOWN_DELAY: 5s must be below TOLLGATE_SHUTDOWN_TIMEOUT (5s)"} {
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
// not know. migrate refuses it as serve does (it exited 0 printing this build's latest
// version as the schema's), and changes nothing.
func TestMigrateRefusesASchemaNewerThanTheBuild(t *testing.T) {
	dbURL := storetest.URLFor(storetest.NewDatabase(t))
	env := envOf(map[string]string{"TOLLGATE_DATABASE_URL": dbURL})
	if err := app.Run(context.Background(), []string{"migrate"}, env, app.IO{Stdout: io.Discard, Stderr: io.Discard}); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	latest := store.LatestVersion()
	future := latest + 1
	if _, err := conn.Exec(context.Background(), `INSERT INTO schema_migrations (version, name) VALUES ($1, 'future')`, future); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err = app.Run(context.Background(), []string{"migrate"}, env, app.IO{Stdout: &out, Stderr: io.Discard})
	want := fmt.Sprintf("database schema is at version %d, newer than this build's %d", future, latest)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("migrate on a database at version %d: err %v (want %q), printed %q", future, err, want, out.String())
	}
	if out.Len() != 0 {
		t.Fatalf("migrate refused the database but printed %q", out.String())
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
