package cli

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/controlplane/ledger"
	"github.com/tollgate-dev/tollgate/internal/apitest"
	"github.com/tollgate-dev/tollgate/internal/storetest"
	"github.com/tollgate-dev/tollgate/internal/testio"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// flagNames are the flags a -h output lists ("  -name ..." lines of flag.PrintDefaults).
func flagNames(help string) []string {
	var names []string
	for _, m := range regexp.MustCompile(`(?m)^  -(\S+)`).FindAllStringSubmatch(help, -1) {
		names = append(names, m[1])
	}
	slices.Sort(names)
	return names
}

// Each command's -h lists its own flags, and only those (migrate has no listen address,
// resync no internal token), after a line or more saying what the command does, and
// shows an example of it (capture's and reconcile's own -h too, not only their
// actions': an operator who types `tollgate capture -h` learns what it does and how). Its usage
// line names the command as it is run here: "tollgate migrate", never "controlplane
// migrate" (the control plane's subcommands run inside this program).
func TestCommandHelpListsOnlyItsFlags(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		flags []string
		says  string // part of the description
	}{
		{[]string{"migrate", "-h"}, []string{"database-url", "log-format", "log-level", "to"}, "migrations"},
		{[]string{"resync", "-h"}, []string{"database-url", "log-format", "log-level",
			"redis-addrs", "redis-mode", "redis-prefix", "redis-sentinel-master", "redis-sentinel-password", "redis-sentinel-username", "redis-url"}, "mirror"},
		{[]string{"bootstrap", "-h"}, []string{"api", "database-url", "email", "organization"}, "platform administrator"},
		{[]string{"recover", "-h"}, []string{"api", "apply", "before", "key", "org", "reference"}, "pending"},
		{[]string{"capture", "suspend", "-h"}, []string{"api", "apply", "key", "member", "org", "reference"}, "capture"},
		{[]string{"capture", "-h"}, []string{"api", "apply", "key", "member", "org", "reference"}, "usage-limits/members/"}, // where to read coverage.trackingVersion (since 2026-12-07)
		{[]string{"reconcile", "-h"}, nil, "tollgate reconcile charge -h"},
		{[]string{"reconcile", "list", "-h"}, []string{"api", "json", "key", "member", "org", "state"}, "quarantined"},
		{[]string{"reconcile", "charge", "-h"}, []string{"admitted-at", "api", "apply", "cost-micro-usd", "key", "member", "org", "reference", "request"}, "once"},
		{[]string{"retention", "-h"}, []string{"apply", "database-url", "log-format", "log-level", "retention-age", "retention-batch"}, "pending start is never touched"},
		{[]string{"audit", "-h"}, []string{"action", "actor", "api", "json", "key", "limit", "org", "platform", "since", "until"}, "audit trail"},
		{[]string{"dev", "-h"}, nil, ""}, // its own business; only that -h works
	} {
		name := strings.Join(tc.args, " ")
		t.Run(name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if err := Run(context.Background(), tc.args, func(string) string { return "" }, IO{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errOut}); err != nil {
				t.Fatalf("tollgate %s: %v\n%s%s", name, err, out.String(), errOut.String())
			}
			// Help asked for is the command's output: on standard output, so that
			// `tollgate audit -h | less` pages it.
			if errOut.Len() > 0 {
				t.Errorf("tollgate %s wrote to standard error:\n%s", name, errOut.String())
			}
			help := out.String()
			// A default shown is one the command uses: never a sentinel such as -1.
			if strings.Contains(help, `(default -1)`) {
				t.Errorf("tollgate %s shows a sentinel default:\n%s", name, help)
			}
			if !strings.HasPrefix(help, "Usage: ") || strings.Contains(help, "Usage of ") {
				t.Errorf("tollgate %s does not start with its usage line:\n%s", name, help)
			}
			if usage, _, _ := strings.Cut(help, "\n"); !strings.Contains(usage, "tollgate "+strings.Join(tc.args[:len(tc.args)-1], " ")) ||
				strings.Contains(help, "controlplane") {
				t.Errorf("tollgate %s's usage does not name the command as it is run:\n%s", name, help)
			}
			if !strings.Contains(help, tc.says) {
				t.Errorf("tollgate %s does not say what the command does (%q):\n%s", name, tc.says, help)
			}
			if !strings.Contains(help, "\nExample") {
				t.Errorf("tollgate %s shows no example:\n%s", name, help)
			}
			if got := flagNames(help); tc.flags != nil && !slices.Equal(got, tc.flags) {
				t.Errorf("tollgate %s lists flags %v, want exactly %v:\n%s", name, got, tc.flags, help)
			}
		})
	}
}

// `tollgate -h` names every command, and each one it names answers its own -h.
func TestHelpNamesEveryCommand(t *testing.T) {
	var out bytes.Buffer
	if err := Run(context.Background(), []string{"-h"}, func(string) string { return "" }, IO{Stdout: &out, Stderr: &out}); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"dev", "migrate", "bootstrap", "resync", "capture", "recover", "reconcile", "retention", "audit"} {
		if !regexp.MustCompile(`(?m)^  ` + cmd + ` `).MatchString(out.String()) {
			t.Errorf("tollgate -h does not name %s:\n%s", cmd, out.String())
		}
	}
}

// tableCounts is the number of rows of every table of the database.
func tableCounts(t *testing.T, conn *pgx.Conn) map[string]int64 {
	t.Helper()
	ctx := context.Background()
	rows, err := conn.Query(ctx, `SELECT quote_ident(table_name) FROM information_schema.tables
		WHERE table_schema = 'public' AND table_type = 'BASE TABLE'`)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int64{}
	for _, table := range tables {
		var n int64
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		counts[table] = n
	}
	return counts
}

// bootstrap writes only to the database (the administrator directly, the organization
// and key through the API). With TOLLGATE_API_URL naming an API that does not answer, it
// fails before writing anything, naming that URL, and the database keeps every row
// count it had.
func TestBootstrapUnreachableAPIWritesNothing(t *testing.T) {
	st := storetest.New(t)
	var dbName string
	if err := st.Pool.QueryRow(context.Background(), `SELECT current_database()`).Scan(&dbName); err != nil {
		t.Fatal(err)
	}
	dbURL := storetest.URLFor(dbName)
	apiURL := "http://" + testio.FreeAddr(t) // nothing listens there
	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	before := tableCounts(t, conn)
	if before["users"] != 0 {
		t.Fatalf("premise: a fresh database, not %v", before)
	}

	env := func(k string) string {
		return map[string]string{"TOLLGATE_DATABASE_URL": dbURL, "TOLLGATE_API_URL": apiURL}[k]
	}
	var out bytes.Buffer
	err = Run(context.Background(), []string{"bootstrap", "--email", "ops@example.test", "--organization", "Acme"}, env,
		IO{Stdin: strings.NewReader("a long admin password\n"), Stdout: &out, Stderr: &out})
	if err == nil || !strings.Contains(err.Error(), apiURL) || !strings.Contains(err.Error(), "nothing was written") {
		t.Fatalf("bootstrap with the API down: %v, want an error naming %s and saying nothing was written\n%s", err, apiURL, out.String())
	}
	if after := tableCounts(t, conn); !maps.Equal(after, before) {
		t.Fatalf("bootstrap wrote rows although the API was unreachable:\nbefore %v\nafter  %v", before, after)
	}
}

// recover ends with a table of outcomes (a header, then one aligned row per outcome),
// both when it previews and when it applies.
func TestRecoverPrintsATable(t *testing.T) {
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	alice := e.AddMember(t, owner, "alice", "member")
	key := e.APIKey(t, owner)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l := ledger.New(ledger.Deps{Store: e.Store, Clock: e.Clock, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	go l.Run(ctx)
	old := e.Clock.Now().Add(-2 * time.Hour) // the default cutoff is an hour ago
	for i, id := range []string{"req_a", "req_b", "req_c"} {
		if _, err := l.Start(ctx, []*internalv1.StartItem{startItem(id, owner.OrgID, alice.MemberID, old.Add(time.Duration(i)*time.Second))}); err != nil {
			t.Fatal(err)
		}
	}
	env := func(k string) string {
		return map[string]string{"TOLLGATE_API_URL": e.URL, "TOLLGATE_API_KEY": key}[k]
	}
	for _, tc := range []struct {
		args    []string
		outcome string
	}{
		{[]string{"recover", "--reference", "INC-7"}, "would_recover"},
		{[]string{"recover", "--reference", "INC-7", "--apply"}, "recovered"},
	} {
		var out bytes.Buffer
		if err := Run(context.Background(), tc.args, env, IO{Stdout: &out, Stderr: &out}); err != nil {
			t.Fatalf("%v: %v\n%s", tc.args, err, out.String())
		}
		table := regexp.MustCompile(`(?m)^OUTCOME( +)REQUESTS\n` + tc.outcome + `( +)3\n`).FindStringSubmatch(out.String())
		if table == nil || len("OUTCOME"+table[1]) != len(tc.outcome+table[2]) {
			t.Fatalf("%v printed no aligned table of outcomes (OUTCOME REQUESTS / %s 3):\n%s", tc.args, tc.outcome, out.String())
		}
		if strings.Contains(out.String(), "map[") {
			t.Fatalf("%v printed a Go map:\n%s", tc.args, out.String())
		}
		if testing.Verbose() {
			t.Logf("%v:\n%s", tc.args, out.String())
		}
	}
	var out bytes.Buffer
	if err := Run(context.Background(), []string{"recover", "--reference", "INC-7"}, env, IO{Stdout: &out, Stderr: &out}); err != nil ||
		!strings.Contains(out.String(), "Nothing to recover") {
		t.Fatalf("recover with nothing pending: %v\n%s", err, out.String())
	}
}

// startItem is a durable start of request id, admitted at at, in the windows of at.
func startItem(id, org, member string, at time.Time) *internalv1.StartItem {
	s := &internalv1.Snapshot{Version: 2, AdmittedAtUnixMs: at.UnixMilli()}
	for _, w := range window.Current(at) {
		s.Buckets = append(s.Buckets, &internalv1.SnapshotBucket{Timeframe: string(w.Timeframe), WindowStartUnixMs: w.Start.UnixMilli(),
			WindowEndUnixMs: w.End.UnixMilli(), BucketId: window.BucketID(org, member, w.Timeframe, w.Start), PolicyId: "unlimited"})
	}
	return &internalv1.StartItem{RequestId: id, OrganizationId: org, MemberId: member, Snapshot: s}
}

// TestAuditPrintsTheTrail: tollgate audit prints the key's organization's trail newest
// first, across pages, filtered as asked; another organization's trail is an error.
func TestAuditPrintsTheTrail(t *testing.T) {
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	for _, name := range []string{"Research", "Sales", "Support"} {
		e.Do(t, "POST", "/v1/teams", map[string]string{"name": name}, owner.As()...).Expect(t, 201)
		e.Clock.Advance(time.Minute)
	}
	rival := e.NewOrg(t, "Rival")
	key := e.APIKey(t, owner)
	env := func(k string) string {
		return map[string]string{"TOLLGATE_API_URL": e.URL, "TOLLGATE_API_KEY": key}[k]
	}
	run := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := Run(context.Background(), append([]string{"audit"}, args...), env, IO{Stdout: &out, Stderr: &out})
		return out.String(), err
	}
	// Two events a page, so the command must follow the cursor.
	out, err := run("--action", "team.create", "--limit", "3")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[0], "OCCURRED AT") || lines[4] != "3 event(s)" {
		t.Fatalf("want a header, 3 events and a count:\n%s", out)
	}
	for i, l := range lines[1:4] {
		if !strings.Contains(l, "team.create") || !strings.Contains(l, owner.MemberID) || !strings.Contains(l, owner.OrgID) {
			t.Fatalf("line %d: %q", i, l)
		}
	}
	if !(lines[1] > lines[2] && lines[2] > lines[3]) { // the timestamps lead each line
		t.Fatalf("not newest first:\n%s", out)
	}
	if out, err := run("--limit", "1"); err != nil || !strings.Contains(out, "1 event(s)") {
		t.Fatalf("--limit 1: %v\n%s", err, out)
	}
	if out, err := run("--org", rival.OrgID); err == nil || !strings.Contains(err.Error(), "organization_not_found") {
		t.Fatalf("another organization: %v\n%s", err, out)
	}
	if out, err := run("--since", "yesterday"); ExitCode(err) != ExitUsage || !strings.Contains(err.Error(), "--since") {
		t.Fatalf("a bad --since: %v (exit %d), want refused before the call\n%s", err, ExitCode(err), out)
	}
	if out, err := run("--platform"); err == nil || !strings.Contains(err.Error(), "403") {
		t.Fatalf("--platform as an owner: %v\n%s", err, out)
	}
}

// Secrets read from the environment never reach a command's -h: an admin's API key,
// the database's password.
func TestHelpNeverPrintsSecrets(t *testing.T) {
	env := map[string]string{"TOLLGATE_API_KEY": "tgk_s3cret_key", "TOLLGATE_DATABASE_URL": "postgres://tollgate:pg-pa55@db:5432/tollgate"}
	for _, args := range [][]string{{"recover", "-h"}, {"bootstrap", "-h"}, {"migrate", "-h"}} {
		var out bytes.Buffer
		_ = Run(context.Background(), args, func(k string) string { return env[k] }, IO{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &out})
		for _, secret := range []string{"tgk_s3cret", "pg-pa55"} {
			if strings.Contains(out.String(), secret) {
				t.Errorf("%v prints %q:\n%s", args, secret, out.String())
			}
		}
		if !strings.Contains(out.String(), "Usage: ") {
			t.Errorf("%v printed no help:\n%s", args, out.String())
		}
	}
}
