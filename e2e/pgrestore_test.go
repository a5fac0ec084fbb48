package e2e_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/internal/storetest"
	"github.com/tollgate-dev/tollgate/internal/testio"
)

// pgDump takes a backup of the stack's database with pg_dump (custom format) while the
// stack runs, as a nightly backup job would, and returns the file.
func (s *stack) pgDump(t *testing.T) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "backup.dump")
	db := s.db.Pool.Config().ConnConfig.Database
	out, err := exec.Command("pg_dump", "--format=custom", "--file="+file, "--dbname="+storetest.URLFor(db)).CombinedOutput()
	if err != nil {
		t.Fatalf("pg_dump: %v\n%s", err, out)
	}
	return file
}

// pgRestore replaces the stack's database by the backup, as an SRE whose Postgres died
// does: the database is dropped (its connections killed, the control plane's included),
// created empty under the same name and filled with pg_restore. The control plane keeps
// running and reconnects.
func (s *stack) pgRestore(t *testing.T, file string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := s.db.Pool.Config().ConnConfig.Database
	admin, err := pgx.Connect(ctx, storetest.ServerURL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	for _, stmt := range []string{`DROP DATABASE ` + db + ` WITH (FORCE)`, `CREATE DATABASE ` + db} {
		if _, err := admin.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	out, err := exec.Command("pg_restore", "--exit-on-error", "--no-owner", "--dbname="+storetest.URLFor(db), file).CombinedOutput()
	if err != nil {
		t.Fatalf("pg_restore: %v\n%s", err, out)
	}
}

// TestRestoredPostgresIsNoticedWithoutAResync: an SRE's Postgres dies and is replaced
// by last night's pg_dump while both programs keep running. Redis still holds the
// member's record from before (spend the database no longer has, under a mirror version
// it has not reached), so every write of the restored database's lower versions was
// refused by the monotonic write: the member's spend after the restore never reached the
// mirror, and a member over the hard limit by the database was admitted on every check
// until someone ran `controlplane resync`. The control plane now notices the replaced
// database by itself (its identity and write-ahead log position, noted in Redis) and
// rebuilds the mirror as a resync does; the enforcer then sends again what it settled
// in the last two minutes, which the backup lacked, starts and all.
func TestRestoredPostgresIsNoticedWithoutAResync(t *testing.T) {
	t.Parallel()
	awayFromDayBoundary(t, 3*time.Minute)
	s := startStack(t)
	o := s.setUpOrg(t)

	r1 := admitted(t, s.check(t, o.key), "within_limit")
	s.respond(t, r1, "application/json", testio.Chunks(openAIJSON("chatcmpl-1", 2_000_000, 0, 0), 2)) // 300,000
	s.waitSettled(t, o, 1, 300_000)

	// A second member, in the backup with no request yet: their first request (and
	// tracking row, which the ledger's start batches remember) comes after the backup.
	other := s.invite(t, o, "other")
	otherKey := s.apiKey(t, o, other)

	dump := s.pgDump(t)

	// After the backup: 450,000 more, in Postgres and in the mirror, then lost.
	r2 := admitted(t, s.check(t, o.key), "within_limit")
	s.respond(t, r2, "application/json", testio.Chunks(openAIJSON("chatcmpl-2", 3_000_000, 0, 0), 2))
	s.waitSettled(t, o, 2, 750_000)
	first := admitted(t, s.check(t, otherKey), "unlimited")
	s.respond(t, first, "application/json", testio.Chunks(openAIJSON("chatcmpl-o1", 1_000_000, 0, 0), 2))
	waitFor(t, 10*time.Second, "the second member's first settlement", func() bool {
		return s.metric(t, "tollgate_enforcer_settlements_total", `outcome="settled"`) == 3
	})

	s.pgRestore(t, dump)
	// The restored database lost r2 and the second member's first request, starts and
	// receipts. The enforcer sends both settlements again once it sees the rebuild, with
	// their starts' snapshots, and they are charged again (before 2026-12-04 they were
	// quarantined for review, and before that gone): the member's 750,000 is back.
	waitFor(t, 20*time.Second, "the status read from the restored database, with the settlements sent again", func() bool {
		var st status
		_, err := s.call("GET", "/v1/gateway/usage-limits/me", o.member.token, o.id, nil, &st)
		return err == nil && len(st.Windows) == 3 && st.Windows[0].UsedMicroUsd == 750_000
	})

	// Spent after the restore: 900,000, 1,650,000 in all by the database: blocked.
	r3 := admitted(t, s.check(t, o.key), "within_limit")
	s.respond(t, r3, "application/json", testio.Chunks(openAIJSON("chatcmpl-3", 6_000_000, 0, 0), 2))
	waitFor(t, 10*time.Second, "the settlement after the restore", func() bool {
		return s.status(t, o).Windows[0].UsedMicroUsd == 1_650_000
	})
	st := s.expectStatus(t, o, "after the restore", expected{state: "blocked", used: 1_650_000, pending: 0, lastSettled: r3, canRequestReset: true})

	// The second member's tracking row was gone with the backup: their first request,
	// sent again, made it anew, and their next one is charged after it.
	again := admitted(t, s.check(t, otherKey), "unlimited")
	s.respond(t, again, "application/json", testio.Chunks(openAIJSON("chatcmpl-o2", 2_000_000, 0, 0), 2)) // 300,000
	waitFor(t, 10*time.Second, "the second member's settlement after the restore", func() bool {
		var st status
		_, err := s.call("GET", "/v1/gateway/usage-limits/me", other.token, o.id, nil, &st)
		return err == nil && st.Windows[0].UsedMicroUsd == 450_000 && st.Coverage.LastSettlementRequestID != nil &&
			*st.Coverage.LastSettlementRequestID == again
	})
	if n := s.metric(t, "tollgate_enforcer_settle_sent_again_total", `outcome="settled"`); n != 2 {
		t.Errorf("%v settlements sent again were charged, want r2's and the second member's first", n)
	}

	// No operator ran anything: the enforcer must refuse as the database says.
	var admittedAfter int
	waitFor(t, 15*time.Second, "the enforcer to refuse the member the restored database says is blocked", func() bool {
		out, _ := classify(s.check(t, o.key), nil)
		if out == outAdmitted {
			admittedAfter++
		}
		time.Sleep(100 * time.Millisecond)
		return out == outBlocked
	})
	blocked(t, s.check(t, o.key)).agreesWith(t, st)
	if !strings.Contains(s.cpLogs.String(), "Postgres was replaced") {
		t.Errorf("the control plane did not log the replaced database:\n%s", s.cpLogs.String())
	}
	t.Logf("%d checks admitted after the restore before the mirror was rebuilt", admittedAfter)
}

// docBlocks returns the ```sh blocks of the section of a Markdown file that starts with
// the heading line, in order.
func docBlocks(t *testing.T, file, heading string) []string {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(raw), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("%s has no section %q", file, heading)
	}
	if i := strings.Index(sec, "\n## "); i >= 0 {
		sec = sec[:i]
	}
	var blocks []string
	for {
		_, rest, ok := strings.Cut(sec, "```sh\n")
		if !ok {
			return blocks
		}
		block, after, ok := strings.Cut(rest, "```")
		if !ok {
			t.Fatalf("%s: an unclosed block in %q", file, heading)
		}
		blocks = append(blocks, block)
		sec = after
	}
}

// buildCommands builds the named commands of this tree (cmd/<name>) into a directory
// and returns it, to put first on PATH.
func buildCommands(t *testing.T, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, n := range names {
		out, err := exec.Command("go", "build", "-o", filepath.Join(dir, n), "../cmd/"+n).CombinedOutput()
		if err != nil {
			t.Fatalf("go build %s: %v\n%s", n, err, out)
		}
	}
	return dir
}

// runShell runs a documented block with bash (-e: a failing command fails it) in dir.
func runShell(t *testing.T, dir string, env []string, script string) string {
	t.Helper()
	cmd := exec.Command("bash", "-e", "-o", "pipefail", "-c", script)
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the documented block failed: %v\n%s\n--- output:\n%s", err, script, out)
	}
	return string(out)
}

// TestRestoringPostgresByTheBook runs docs/admin.md's "Restoring Postgres" as written:
// a pg_dump taken while the stack runs (its schema one migration older, as a backup
// taken before an upgrade), activity after it, the documented restore under the running
// stack, and then checks what the section says it costs: the spend after the backup is
// gone and the enforcer agrees with the status read without anyone running a resync, an
// API key made after the backup is refused with 401, and the request in flight across
// the restore and the settlement after the backup that the enforcer sends again once it
// sees the rebuild are charged from the snapshots of their starts, leaving nothing to
// review (before 2026-12-04 both were listed for review, no_snapshot, the first charged
// once by the documented reconciliation).
func TestRestoringPostgresByTheBook(t *testing.T) {
	t.Parallel()
	awayFromDayBoundary(t, 3*time.Minute)
	blocks := docBlocks(t, "../docs/admin.md", "## Restoring Postgres")
	if len(blocks) != 2 {
		t.Fatalf("%d sh blocks in docs/admin.md's Restoring Postgres, want 2 (the backup, the restore)", len(blocks))
	}
	bin := buildCommands(t, "controlplane", "tollgate")
	s := startStack(t, map[string]string{"TOLLGATE_ENFORCER_IDENTITY_TTL": "2s"})
	o := s.setUpOrg(t)
	ownerKey := s.apiKey(t, o, o.owner)
	db := s.db.Pool.Config().ConnConfig.Database
	work := t.TempDir()
	env := append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "DB="+db,
		"TOLLGATE_DATABASE_URL="+storetest.URLFor(db), "POSTGRES_ADMIN_URL="+storetest.URLFor("postgres"),
		"TOLLGATE_API_URL="+s.rest, "TOLLGATE_API_KEY="+ownerKey)

	r1 := admitted(t, s.check(t, o.key), "within_limit")
	s.respond(t, r1, "application/json", testio.Chunks(openAIJSON("chatcmpl-1", 2_000_000, 0, 0), 2)) // 300,000
	s.waitSettled(t, o, 1, 300_000)

	runShell(t, work, env, blocks[0])
	// The backup as one taken before the last upgrade: its schema a migration behind.
	old := storetest.NewDatabase(t)
	runShell(t, work, env, `pg_restore --exit-on-error --no-owner --dbname="`+storetest.URLFor(old)+`" backup.dump &&
		TOLLGATE_DATABASE_URL="`+storetest.URLFor(old)+`" controlplane migrate --to 31 &&
		pg_dump --format=custom --file=backup.dump "`+storetest.URLFor(old)+`"`)

	// After the backup: a request admitted (its start durable) that finishes only after
	// the restore, spend past the limit, and a new API key.
	admittedBefore := time.Now().UTC().Truncate(time.Second)
	inFlight := admitted(t, s.check(t, o.key), "within_limit")
	r2 := admitted(t, s.check(t, o.key), "within_limit")
	s.respond(t, r2, "application/json", testio.Chunks(openAIJSON("chatcmpl-2", 6_000_000, 0, 0), 2)) // 900,000
	s.waitSettled(t, o, 2, 1_200_000)
	newKey := s.apiKey(t, o, o.member)
	blocked(t, s.check(t, newKey))

	out := runShell(t, work, env, blocks[1])
	// The migrations after 31 applied by the documented `controlplane migrate`, and the
	// review list empty: nothing was quarantined (r2, sent again after the rebuild,
	// carries its start's snapshot: below).
	applied := fmt.Sprintf("schema at version %d (%d migration(s) applied)", store.LatestVersion(), store.LatestVersion()-31)
	if !strings.Contains(out, applied) || !strings.Contains(out, "0 record(s)") {
		t.Errorf("the restore's review list:\n%s", out)
	}
	waitFor(t, 15*time.Second, "the control plane to notice the restored database", func() bool {
		return strings.Contains(s.cpLogs.String(), "mirror: Postgres was replaced")
	})

	// r2, settled after the backup and so lost with it, start and receipt, was answered
	// within the enforcer's resend window: sent again after the rebuild with its start's
	// snapshot, it is charged again (before 2026-12-04 it was quarantined for review,
	// and before that gone). The enforcer then refuses as the status read says.
	waitFor(t, 15*time.Second, "r2's settlement sent again and charged", func() bool {
		return s.metric(t, "tollgate_enforcer_settle_sent_again_total", `outcome="settled"`) >= 1
	})
	s.expectStatus(t, o, "after the restore", expected{state: "blocked", used: 1_200_000, pending: 0, lastSettled: r2, canRequestReset: true})
	waitFor(t, 10*time.Second, "the enforcer to refuse on the spend sent again", func() bool {
		out, _ := classify(s.check(t, o.key), nil)
		return out == outBlocked
	})
	// The key made after the backup: refused once the identity cache lets it go.
	waitFor(t, 10*time.Second, "the key made after the backup to be refused", func() bool {
		return s.check(t, newKey).GetDeniedResponse().GetStatus().GetCode() == 401
	})

	// The request in flight across the restore: its start is gone too, but its
	// settlement, sent within the window after the rebuild, carries the start's snapshot
	// and is charged to the windows of its admission.
	s.respond(t, inFlight, "application/json", testio.Chunks(openAIJSON("chatcmpl-4", 1_000_000, 0, 0), 2)) // 150,000
	waitFor(t, 10*time.Second, "the in-flight request's settlement", func() bool {
		return s.status(t, o).Buckets[0].UsedMicroUsd == 1_350_000
	})
	var admittedAt time.Time
	if err := s.db.Pool.QueryRow(context.Background(), `SELECT admitted_at FROM usage_request_starts WHERE request_id = $1`, inFlight).Scan(&admittedAt); err != nil {
		t.Fatal(err)
	}
	if admittedAt.Before(admittedBefore) || admittedAt.After(admittedBefore.Add(time.Minute)) {
		t.Errorf("the in-flight request was charged as admitted at %s, want its admission (after %s)", admittedAt, admittedBefore)
	}
	if n := s.metric(t, "tollgate_enforcer_settlements_total", `outcome="no_snapshot"`); n != 0 {
		t.Errorf("%v settlements quarantined for want of a start", n)
	}
	var list string
	for _, l := range strings.Split(blocks[1], "\n") {
		if strings.HasPrefix(l, "tollgate reconcile list") {
			list = l
		}
	}
	if out = runShell(t, work, env, list); !strings.Contains(out, "0 record(s)") {
		t.Fatalf("%s (want nothing to review):\n%s", list, out)
	}
}
