package cli

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/internal/secrettest"
	"github.com/tollgate-dev/tollgate/internal/storetest"
	"github.com/tollgate-dev/tollgate/internal/testio"
	"github.com/tollgate-dev/tollgate/internal/testredis"
)

// resetEnv is the environment of one reset: TOLLGATE_* values, and nothing else.
func resetEnv(env map[string]string) func(string) string {
	return func(k string) string { return env[k] }
}

// `tollgate dev --reset` refuses, before connecting, any Postgres host that is not this
// machine: the host pgx connects to, which a host query parameter (like libpq's) or a
// fallback host list names in place of the URL's host part. 192.0.2.1 (TEST-NET-1)
// stands for a production server. Should the check fail, the reset reaches at most a
// database and a key prefix no one uses, and stops at the unreachable Redis.
func TestResetRefusesARemoteDatabaseHost(t *testing.T) {
	db := strings.TrimSuffix(strings.TrimPrefix(testredis.Prefix(), "tgtest:"), ":")
	db = "tollgate_reset_refused_" + db
	for _, tc := range []struct{ name, url string }{
		{"url host", "postgres://192.0.2.1:5432/" + db + "?connect_timeout=1"},
		{"host parameter over a loopback url host", "postgres://127.0.0.1:5432/" + db + "?host=192.0.2.1&connect_timeout=1"},
		{"host parameter over an empty url host", "postgres:///" + db + "?host=192.0.2.1&connect_timeout=1"},
		{"remote fallback host", "postgres://127.0.0.1:5432,192.0.2.1:5432/" + db + "?connect_timeout=1"},
		{"remote fallback in the host parameter", "postgres:///" + db + "?host=/var/run/postgresql,192.0.2.1&connect_timeout=1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err := resetLocal(ctx, resetEnv(map[string]string{"TOLLGATE_DATABASE_URL": tc.url,
				"TOLLGATE_REDIS_URL": "redis://192.0.2.1:6379/0?dial_timeout=1s", "TOLLGATE_REDIS_PREFIX": testredis.Prefix()}), io.Discard)
			if err == nil || !strings.Contains(err.Error(), `only touches local databases, not "192.0.2.1"`) {
				t.Fatalf("reset of %s was not refused before connecting: %v", tc.url, err)
			}
		})
	}
}

// No part of a password in TOLLGATE_DATABASE_URL or TOLLGATE_REDIS_URL reaches the error
// --reset stops with, whatever the password holds. pgx reads a password's unencoded '@'
// as its end, and the rest as the host it then refused by name: `not "Zk9~@192.0.2.1"`.
// Nothing is reached: the hosts are remote, or port 1.
func TestResetNeverPrintsURLPasswords(t *testing.T) {
	for _, pw := range secrettest.Passwords {
		for _, env := range []map[string]string{
			{"TOLLGATE_DATABASE_URL": "postgres://tg~user:" + pw + "@192.0.2.1:5432/x?connect_timeout=1"},
			{"TOLLGATE_DATABASE_URL": "postgres://tg~user:" + pw + "@127.0.0.1:1/x"},
			{"TOLLGATE_DATABASE_URL": "postgres://tg~user@127.0.0.1:1/x?password=" + pw},
			{"TOLLGATE_DATABASE_URL": "postgres://tg~user@127.0.0.1:1/x", "TOLLGATE_REDIS_URL": "redis://:" + pw + "@192.0.2.1:6379/0"},
			{"TOLLGATE_DATABASE_URL": "postgres://tg~user@127.0.0.1:1/x", "TOLLGATE_REDIS_URL": "redis://tg~user:" + pw + "@127.0.0.1:1/0"},
		} {
			env["TOLLGATE_REDIS_PREFIX"] = testredis.Prefix()
			if env["TOLLGATE_REDIS_URL"] == "" {
				env["TOLLGATE_REDIS_URL"] = "redis://127.0.0.1:1/0"
			}
			err := resetLocal(context.Background(), resetEnv(env), io.Discard)
			if err == nil {
				t.Fatalf("%v: reset", env)
			}
			if leaks := secrettest.Leaks(err.Error(), pw); len(leaks) > 0 {
				t.Errorf("password %q: %q printed: %v", pw, leaks, err)
			}
		}
	}
}

// The loopback check accepts this machine in all its spellings and refuses the rest.
func TestLocalHost(t *testing.T) {
	for h, want := range map[string]bool{
		"127.0.0.1": true, "127.1.2.3": true, "::1": true, "localhost": true, "LocalHost": true,
		"/var/run/postgresql": true, "/tmp": true,
		"": false, "192.0.2.1": false, "prod-db": false, "localhost.example.com": false, "::ffff:192.0.2.1": false, "0.0.0.0": false,
	} {
		if got := localHost(h); got != want {
			t.Errorf("localHost(%q) = %v, want %v", h, got, want)
		}
	}
}

// --reset refuses a Redis that is not this machine (the URL's, or the sentinels and
// cluster seeds of TOLLGATE_REDIS_ADDRS) before it drops anything: the local database
// is still there after the refusal.
func TestResetRefusesARemoteRedisBeforeDroppingTheDatabase(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
	}{
		{"url", map[string]string{"TOLLGATE_REDIS_URL": "redis://192.0.2.1:6379/0?dial_timeout=1s"}},
		{"sentinels", map[string]string{"TOLLGATE_REDIS_URL": "redis://127.0.0.1:6379/0", "TOLLGATE_REDIS_MODE": "sentinel",
			"TOLLGATE_REDIS_ADDRS": "127.0.0.1:26379, 192.0.2.1:26379", "TOLLGATE_REDIS_SENTINEL_MASTER": "m"}},
		{"cluster seeds", map[string]string{"TOLLGATE_REDIS_URL": "redis://127.0.0.1:6379/0", "TOLLGATE_REDIS_MODE": "cluster",
			"TOLLGATE_REDIS_ADDRS": "192.0.2.1:7000"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := storetest.NewDatabase(t)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			markDatabase(ctx, t, name)
			tc.env["TOLLGATE_DATABASE_URL"] = storetest.URLFor(name)
			tc.env["TOLLGATE_REDIS_PREFIX"] = testredis.Prefix()
			err := resetLocal(ctx, resetEnv(tc.env), io.Discard)
			if err == nil || !strings.Contains(err.Error(), `only touches local Redis servers, not "192.0.2.1:`) {
				t.Errorf("reset with a remote Redis was not refused: %v", err)
			}
			if !marked(ctx, t, name) {
				t.Errorf("the database was dropped before the remote Redis was refused")
			}
		})
	}
}

// A local reset still does its job: the database is recreated empty and the mirror keys
// under the prefix are gone, others kept.
func TestResetEmptiesTheLocalDatabaseAndMirror(t *testing.T) {
	name := storetest.NewDatabase(t)
	rdb, layout := testredis.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	markDatabase(ctx, t, name)
	other := testredis.Prefix()
	t.Cleanup(func() { rdb.Del(context.Background(), other+"k") })
	for _, k := range []string{layout.Prefix + "a", layout.Prefix + "b", other + "k"} {
		if err := rdb.Set(ctx, k, "1", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	err := resetLocal(ctx, resetEnv(map[string]string{"TOLLGATE_DATABASE_URL": storetest.URLFor(name),
		"TOLLGATE_REDIS_URL": testredis.URL(), "TOLLGATE_REDIS_PREFIX": layout.Prefix}), io.Discard)
	if err != nil {
		t.Fatalf("local reset: %v", err)
	}
	if marked(ctx, t, name) {
		t.Errorf("the database was not recreated")
	}
	if n := rdb.Exists(ctx, layout.Prefix+"a", layout.Prefix+"b").Val(); n != 0 {
		t.Errorf("%d mirror key(s) left under the prefix", n)
	}
	if n := rdb.Exists(ctx, other+"k").Val(); n != 1 {
		t.Errorf("a key under another prefix was deleted")
	}
}

// markDatabase creates a table in database name, which a reset drops with the database.
func markDatabase(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	c, err := pgx.Connect(ctx, storetest.URLFor(name))
	if err != nil {
		storetest.Unavailable(t, "Postgres", err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, `CREATE TABLE reset_marker (x int)`); err != nil {
		t.Fatal(err)
	}
}

func marked(ctx context.Context, t *testing.T, name string) bool {
	t.Helper()
	c, err := pgx.Connect(ctx, storetest.URLFor(name))
	if err != nil {
		t.Fatalf("the database is gone: %v", err)
	}
	defer c.Close(ctx)
	var ok bool
	if err := c.QueryRow(ctx, `SELECT to_regclass('reset_marker') IS NOT NULL`).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

// `tollgate dev --reset` checks the programs' configuration before it empties anything:
// a typo in the control plane's or the enforcer's settings stops it with the problem,
// the demo's database, its mirror and its settlement spool as they were. Before, the
// reset came first and the typo was found as each program started, the data gone.
func TestDevResetChecksTheConfigurationFirst(t *testing.T) {
	for _, typo := range []struct{ key, value string }{
		{"TOLLGATE_SESSION_TTL", "7days"}, // the control plane's
		{"TOLLGATE_FAILURE_MODE", "opne"}, // the enforcer's
	} {
		t.Run(typo.key, func(t *testing.T) {
			name := storetest.NewDatabase(t)
			rdb, layout := testredis.New(t)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			markDatabase(ctx, t, name)
			if err := rdb.Set(ctx, layout.Prefix+"a", "1", time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			spool := t.TempDir()
			kept := filepath.Join(spool, "kept")
			if err := os.WriteFile(kept, []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
			env := map[string]string{
				"TOLLGATE_DATABASE_URL": storetest.URLFor(name), "TOLLGATE_REDIS_URL": testredis.URL(), "TOLLGATE_REDIS_PREFIX": layout.Prefix,
				"TOLLGATE_HTTP_ADDR": testio.FreeAddr(t), "TOLLGATE_GRPC_ADDR": testio.FreeAddr(t), "TOLLGATE_ADMIN_ADDR": testio.FreeAddr(t),
				"TOLLGATE_ENFORCER_GRPC_ADDR": testio.FreeAddr(t), "TOLLGATE_ENFORCER_HTTP_ADDR": testio.FreeAddr(t), "TOLLGATE_ENFORCER_ADMIN_ADDR": testio.FreeAddr(t),
				"TOLLGATE_DEMO_UPSTREAM_ADDR": testio.FreeAddr(t), "TOLLGATE_DEMO_PROXY_ADDR": testio.FreeAddr(t),
				"TOLLGATE_ENFORCER_SETTLE_SPOOL_DIR": spool,
				typo.key:                             typo.value,
			}
			out := &testio.SyncBuffer{}
			err := Run(ctx, []string{"dev", "--reset"}, func(k string) string { return env[k] }, IO{Stdout: out, Stderr: io.Discard})
			if err == nil || !strings.Contains(err.Error(), typo.key) || !strings.Contains(err.Error(), "--reset emptied nothing") {
				t.Fatalf("tollgate dev --reset with %s=%s: %v, want the problem and that nothing was emptied\n%s", typo.key, typo.value, err, out.String())
			}
			if !marked(ctx, t, name) {
				t.Error("the database was dropped")
			}
			if n := rdb.Exists(ctx, layout.Prefix+"a").Val(); n != 1 {
				t.Error("the mirror was emptied")
			}
			if _, err := os.Stat(kept); err != nil {
				t.Errorf("the settlement spool was removed: %v", err)
			}
		})
	}
}
