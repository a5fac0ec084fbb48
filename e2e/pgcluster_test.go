package e2e_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/internal/storetest"
	"github.com/tollgate-dev/tollgate/internal/testio"
)

// pgCluster is a Postgres primary and its streaming replica of the test's own, started
// from the installed server binaries on loopback (initdb, pg_ctl, pg_basebackup), for
// failovers done for real: a node stopped (fast or immediate), a replica promoted, an
// old primary brought back as a replica of the new one.
type pgCluster struct {
	t      testing.TB
	bindir string
	dir    string // owned by the user the servers run as
	nodes  [2]*pgNode
}

// pgNode is one server of the cluster.
type pgNode struct {
	name string
	port int
	data string
}

// pgBindir finds initdb, pg_ctl, pg_basebackup and postgres: TOLLGATE_PG_BINDIR, the
// newest Debian /usr/lib/postgresql/*/bin, or PATH (deploy/local/services-lib.sh's
// order). Without them the test skips, or fails under CI=true.
func pgBindir(t testing.TB) string {
	has := func(d string) bool {
		for _, b := range []string{"initdb", "pg_ctl", "pg_basebackup", "postgres"} {
			if _, err := os.Stat(filepath.Join(d, b)); err != nil {
				return false
			}
		}
		return true
	}
	if d := os.Getenv("TOLLGATE_PG_BINDIR"); d != "" && has(d) {
		return d
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int {
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(a)))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(b)))
		return vb - va
	})
	for _, d := range dirs {
		if has(d) {
			return d
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil && has(filepath.Dir(p)) {
		return filepath.Dir(p)
	}
	storetest.Unavailable(t, "the Postgres server binaries (initdb, pg_ctl, pg_basebackup)", fmt.Errorf("none found"))
	return ""
}

// startPgCluster initdbs a primary, takes a replica of it with pg_basebackup and starts
// both (asynchronous streaming replication, as Postgres's defaults have it), and
// creates the database name on the primary, migrated.
func startPgCluster(t testing.TB, name string) *pgCluster {
	t.Helper()
	c := &pgCluster{t: t, bindir: pgBindir(t)}
	dir, err := os.MkdirTemp("", "tollgate-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if os.Geteuid() == 0 { // initdb refuses root: the servers run as postgres
		u, err := user.Lookup("postgres")
		if err != nil {
			storetest.Unavailable(t, "the postgres user (initdb refuses root)", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	c.dir = dir
	for i, n := range []string{"pg1", "pg2"} {
		c.nodes[i] = &pgNode{name: n, port: testio.FreePort(t), data: filepath.Join(dir, n)}
	}
	primary := c.nodes[0]
	c.run("initdb", "-D", primary.data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-locale", "--no-sync")
	c.configure(primary)
	c.start(primary)
	t.Cleanup(func() {
		for _, n := range c.nodes {
			c.runQuiet("pg_ctl", "-D", n.data, "-m", "immediate", "-w", "stop")
		}
	})
	c.replicate(c.nodes[1], primary)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, err := pgx.Connect(ctx, c.nodeURL(primary, "postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(ctx, c.nodeURL(primary, name))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Migrate(ctx, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	return c
}

// command is a server binary run as the user that owns the data (postgres when root).
func (c *pgCluster) command(bin string, args ...string) *exec.Cmd {
	path := filepath.Join(c.bindir, bin)
	var cmd *exec.Cmd
	if os.Geteuid() == 0 {
		cmd = exec.Command("runuser", append([]string{"-u", "postgres", "--", path}, args...)...)
	} else {
		cmd = exec.Command(path, args...)
	}
	cmd.Dir = c.dir
	return cmd
}

func (c *pgCluster) run(bin string, args ...string) {
	c.t.Helper()
	if out, err := c.command(bin, args...).CombinedOutput(); err != nil {
		c.t.Fatalf("%s %s: %v\n%s", bin, strings.Join(args, " "), err, out)
	}
}

func (c *pgCluster) runQuiet(bin string, args ...string) { _ = c.command(bin, args...).Run() }

// configure gives a node its port and socket directory (the last setting of
// postgresql.conf wins, so a copied primary's is overridden).
func (c *pgCluster) configure(n *pgNode) {
	c.t.Helper()
	conf := fmt.Sprintf("\nlisten_addresses = '127.0.0.1'\nport = %d\nunix_socket_directories = '%s'\n"+
		"max_connections = 60\nshared_buffers = 16MB\nfsync = off\nwal_level = replica\nmax_wal_senders = 4\n"+
		"hot_standby = on\nwal_keep_size = 64MB\n", n.port, c.dir)
	f, err := os.OpenFile(filepath.Join(n.data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		c.t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(conf); err != nil {
		c.t.Fatal(err)
	}
}

func (c *pgCluster) start(n *pgNode) {
	c.t.Helper()
	c.run("pg_ctl", "-D", n.data, "-l", n.data+".log", "-w", "-t", "60", "start")
}

// stop stops a node: mode "fast" (clients cut, WAL sent to the replicas first) or
// "immediate" (as a crash: what was not streamed yet never reaches them).
func (c *pgCluster) stop(n *pgNode, mode string) {
	c.t.Helper()
	c.run("pg_ctl", "-D", n.data, "-m", mode, "-w", "-t", "60", "stop")
}

// promote ends a replica's recovery: it takes writes, on a new timeline.
func (c *pgCluster) promote(n *pgNode) {
	c.t.Helper()
	c.run("pg_ctl", "-D", n.data, "-w", "-t", "60", "promote")
}

// replicate makes n a fresh streaming replica of primary (pg_basebackup -R, as an
// operator rebuilds an old primary after a failover) and starts it.
func (c *pgCluster) replicate(n, primary *pgNode) {
	c.t.Helper()
	if err := os.RemoveAll(n.data); err != nil {
		c.t.Fatal(err)
	}
	c.run("pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(primary.port), "-U", "postgres", "-D", n.data,
		"-R", "-X", "stream", "--checkpoint=fast", "--no-sync")
	c.configure(n)
	c.start(n)
	c.waitStreaming(primary)
}

// waitStreaming waits until primary has a replica streaming that has replayed all it wrote.
func (c *pgCluster) waitStreaming(primary *pgNode) {
	c.t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, c.nodeURL(primary, "postgres"))
	if err != nil {
		c.t.Fatal(err)
	}
	defer conn.Close(ctx)
	waitFor(c.t, 60*time.Second, primary.name+"'s replica to stream and catch up", func() bool {
		var n int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_replication
			WHERE state = 'streaming' AND replay_lsn >= pg_current_wal_lsn()`).Scan(&n)
		return err == nil && n == 1
	})
}

// nodeURL is the URL of one node's database.
func (c *pgCluster) nodeURL(n *pgNode, db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", n.port, db)
}

// url is the multi-host URL an operator gives the control plane: both nodes, the one
// that takes writes chosen at each connection.
func (c *pgCluster) url(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/%s?sslmode=disable&target_session_attrs=read-write&connect_timeout=5",
		c.nodes[0].port, c.nodes[1].port, db)
}

// sql runs statements on one node's postgres database.
func (c *pgCluster) sql(n *pgNode, stmts ...string) {
	c.t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, c.nodeURL(n, "postgres"))
	if err != nil {
		c.t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, q := range stmts {
		if _, err := conn.Exec(ctx, q); err != nil {
			c.t.Fatalf("%s: %v", q, err)
		}
	}
}

// fence makes n refuse writes in place, as a fencing does (default_transaction_read_only,
// its connections kept), and returns once that holds for every transaction: the
// postmaster has read the setting, so every session has been signalled and begins its
// next transaction read-only, and every transaction begun before then has ended. Such a
// transaction keeps the read-write it began with and can still commit after the reload;
// a replica promoted before it ends, however caught up it looked, misses that commit
// (a lost tail of its own: the likeliest cause of the failover test's fenced switchover
// once finding 13 acknowledged settlements missing from the promoted node).
func (c *pgCluster) fence(n *pgNode) {
	c.t.Helper()
	c.sql(n, `ALTER SYSTEM SET default_transaction_read_only = on`, `SELECT pg_reload_conf()`)
	ctx := context.Background()
	var since time.Time
	waitFor(c.t, 30*time.Second, n.name+"'s new sessions to be read-only", func() bool {
		var ok bool
		since, ok = c.newSessionsReadOnly(n)
		return ok
	})
	conn, err := pgx.Connect(ctx, c.nodeURL(n, "postgres"))
	if err != nil {
		c.t.Fatal(err)
	}
	defer conn.Close(ctx)
	waitFor(c.t, 30*time.Second, n.name+"'s transactions begun before the fence to end", func() bool {
		var open int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE backend_type = 'client backend' AND xact_start < $1`, since).Scan(&open)
		return err == nil && open == 0
	})
}

// newSessionsReadOnly reports whether a session opened on n now begins its transactions
// read-only, and the server's time then. A new session is forked from the postmaster,
// which signals every session only once it has read the files: a new session that has
// the setting comes after the signals.
func (c *pgCluster) newSessionsReadOnly(n *pgNode) (time.Time, bool) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, c.nodeURL(n, "postgres"))
	if err != nil {
		return time.Time{}, false
	}
	defer conn.Close(ctx)
	var on string
	var at time.Time
	err = conn.QueryRow(ctx, `SELECT current_setting('default_transaction_read_only'), clock_timestamp()`).Scan(&on, &at)
	return at, err == nil && on == "on"
}
