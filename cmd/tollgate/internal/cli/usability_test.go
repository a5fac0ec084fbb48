package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/controlplane/ledger"
	"github.com/tollgate-dev/tollgate/internal/apitest"
	"github.com/tollgate-dev/tollgate/internal/storetest"
	"github.com/tollgate-dev/tollgate/internal/testio"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/typeid"
)

// runCLI runs one command line as cmd/tollgate does and returns what it wrote to each
// stream, the line main prints for its error ("" when none) and the exit code.
func runCLI(ctx context.Context, env map[string]string, stdin string, args ...string) (stdout, stderr, errLine string, code int) {
	var out, errb bytes.Buffer
	err := Run(ctx, args, func(k string) string { return env[k] }, IO{Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errb})
	if err != nil {
		errLine = "tollgate: " + err.Error()
	}
	return out.String(), errb.String(), errLine, ExitCode(err)
}

// closedURL is the URL of a port nothing listens on.
func closedURL(t *testing.T) string {
	return "http://" + testio.FreeAddr(t)
}

// An error of the control plane is one line an operator can act on: the API's error code
// and message, and for 401 the variable to check, for 403 the credential needed, for a
// control plane that does not answer the URL tried. Never the raw JSON body, a Go error
// chain ("Get \"...\": dial tcp ...") or several lines; exit code 1.
func TestAPIErrorsAreOneClearLine(t *testing.T) {
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	member := e.AddMember(t, owner, "bob", "member")
	rival := e.NewOrg(t, "Rival")
	ownerKey, memberKey := e.APIKey(t, owner), e.APIKey(t, member)
	down := closedURL(t)
	// Another server where the control plane was expected (its admin port, a proxy).
	other := httptest.NewServer(http.NotFoundHandler())
	defer other.Close()
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want []string
	}{
		{"400 of the API", map[string]string{"TOLLGATE_API_KEY": ownerKey}, []string{"audit", "--action", "NO SUCH ACTION!"},
			[]string{"invalid_request", "action", "HTTP 400"}},
		{"401", map[string]string{"TOLLGATE_API_KEY": "tgk_revoked_or_mistyped"}, []string{"audit"},
			[]string{"unauthorized", "HTTP 401", "check TOLLGATE_API_KEY"}},
		{"403 of an organization's route", map[string]string{"TOLLGATE_API_KEY": memberKey}, []string{"reconcile", "list"},
			[]string{"forbidden", "HTTP 403", "needs an owner's or admin's API key"}},
		{"403 of the platform's trail", map[string]string{"TOLLGATE_API_KEY": ownerKey}, []string{"audit", "--platform"},
			[]string{"forbidden", "HTTP 403", "needs a platform administrator's API key"}},
		{"404", map[string]string{"TOLLGATE_API_KEY": ownerKey}, []string{"audit", "--org", rival.OrgID},
			[]string{"organization_not_found", "HTTP 404"}},
		{"unreachable", map[string]string{"TOLLGATE_API_KEY": ownerKey, "TOLLGATE_API_URL": down}, []string{"recover", "--reference", "INC-1"},
			[]string{"connection refused", "is the control plane running at " + down + "?"}},
		{"unreachable from dev --seed-only", nil, []string{"dev", "--seed-only", "--http-addr", strings.TrimPrefix(down, "http://")},
			[]string{"connection refused", "is the control plane running at " + down + "? (--http-addr or TOLLGATE_HTTP_ADDR)"}},
		{"another server", map[string]string{"TOLLGATE_API_KEY": ownerKey, "TOLLGATE_API_URL": other.URL}, []string{"audit"},
			[]string{"HTTP 404", "404 page not found", "is " + other.URL + " the control plane's REST API?"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"TOLLGATE_API_URL": e.URL}
			for k, v := range tc.env {
				env[k] = v
			}
			stdout, stderr, line, code := runCLI(context.Background(), env, "", tc.args...)
			if code != ExitFailure {
				t.Errorf("exit code %d, want %d", code, ExitFailure)
			}
			if strings.Contains(line, "\n") || strings.Contains(line, "{") || strings.Contains(line, `Get "`) || strings.Contains(line, "dial tcp") {
				t.Errorf("not one clear line: %q", line)
			}
			for _, w := range tc.want {
				if !strings.Contains(line, w) {
					t.Errorf("%q does not say %q", line, w)
				}
			}
			if strings.Contains(stdout+stderr, `{"error"`) {
				t.Errorf("a raw answer was printed:\n%s%s", stdout, stderr)
			}
			if testing.Verbose() {
				t.Log(line)
			}
		})
	}
}

// A malformed command line is refused before any call, with one line naming the
// argument and the form it wants, and exit code 2.
func TestMalformedArgumentsAreRefusedClearly(t *testing.T) {
	var calls atomic.Int32
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		http.Error(w, "no call expected", http.StatusTeapot)
	}))
	defer api.Close()
	member := typeid.New(typeid.Member)
	charge := func(flags ...string) []string {
		base := map[string]string{"--request": "req_1", "--member": member, "--admitted-at": "2026-12-01T10:00:00Z",
			"--cost-micro-usd": "250", "--reference": "INC-1"}
		for i := 0; i+1 < len(flags); i += 2 {
			base[flags[i]] = flags[i+1]
		}
		args := []string{"reconcile", "charge"}
		for k, v := range base {
			if v != "" {
				args = append(args, k, v)
			}
		}
		return args
	}
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"stray argument of audit", []string{"audit", "everything"}, []string{`unexpected argument "everything"`, "takes only flags"}},
		{"stray argument of recover", []string{"recover", "--reference", "INC-1", "now"}, []string{`unexpected argument "now"`}},
		{"stray argument of reconcile list", []string{"reconcile", "list", "open"}, []string{`unexpected argument "open"`}},
		{"stray argument of bootstrap", []string{"bootstrap", "--email", "ops@example.test", "--organization", "Acme", "extra"}, []string{`unexpected argument "extra"`}},
		{"--since not RFC 3339", []string{"audit", "--since", "yesterday"}, []string{"--since", `"yesterday"`, "RFC 3339", "2026-01-31T05:00:00Z"}},
		{"--until without an offset", []string{"audit", "--until", "2026-01-31T05:00:00"}, []string{"--until", "RFC 3339"}},
		{"--before not RFC 3339", []string{"recover", "--reference", "INC-1", "--before", "5pm"}, []string{"--before", "RFC 3339"}},
		{"--admitted-at a date", charge("--admitted-at", "2026-12-01"), []string{"--admitted-at", "RFC 3339"}},
		{"negative cost", charge("--cost-micro-usd", "-5"), []string{"-cost-micro-usd", `"-5"`, "0 to 1000000000"}},
		{"fractional cost", charge("--cost-micro-usd", "1.5"), []string{"-cost-micro-usd", "whole number"}},
		{"missing cost", charge("--cost-micro-usd", ""), []string{"--cost-micro-usd is required"}},
		{"malformed member id", charge("--member", "alice"), []string{"--member", `"alice"`, "om_"}},
		{"a user id as member", []string{"reconcile", "list", "--member", typeid.New(typeid.User)}, []string{"--member", "om_"}},
		{"malformed member of capture", []string{"capture", "suspend", "--member", "alice:3", "--reference", "INC-1"}, []string{"-member", "MEMBER_ID:TRACKING_VERSION"}},
		{"malformed actor", []string{"audit", "--actor", "alice"}, []string{"--actor", "om_", "usr_"}},
		{"malformed organization", []string{"audit", "--org", "acme"}, []string{"--org", "org_"}},
		{"limit out of range", []string{"audit", "--limit", "0"}, []string{"--limit", "1 to 10000"}},
		// The flag package's own types said "parse error" until 2026-12-07 (envflag.Explain).
		{"limit not a number", []string{"audit", "--limit", "ten"}, []string{"--limit", `"ten"`, "not a whole number"}},
		{"apply not a boolean", []string{"recover", "--reference", "INC-1", "--apply=yes"}, []string{"--apply", `"yes"`, "true or false"}},
		{"retention age in days", []string{"retention", "--retention-age", "90d"}, []string{"--retention-age", `"90d"`, "not a duration", "2160h"}},
		{"retention batch not a number", []string{"retention", "--retention-batch", "1k"}, []string{"--retention-batch", "not a whole number"}},
		{"migrate --to not a number", []string{"migrate", "--to", "v33"}, []string{"-to", "not a whole number"}},
		{"unknown state", []string{"reconcile", "list", "--state", "closed"}, []string{"--state", "open, reconciled or all"}},
		{"unknown flag", []string{"audit", "--organisation", "x"}, []string{"-organisation", "tollgate audit -h"}},
		{"missing reference", []string{"recover"}, []string{"--reference is required"}},
		{"long reference", []string{"recover", "--reference", strings.Repeat("x", 201)}, []string{"--reference", "1 to 200"}},
		{"missing key", []string{"audit", "--key", ""}, []string{"TOLLGATE_API_KEY"}},
		{"--api without a scheme", []string{"audit", "--api", "localhost:8080"}, []string{"--api", "http://"}},
		{"unknown command", []string{"recovr"}, []string{`unknown command "recovr"`}},
		{"capture without an action", []string{"capture", "--member", member + ":1"}, []string{"suspend or resume"}},
		{"reconcile without an action", []string{"reconcile"}, []string{"list or charge"}},
		{"bootstrap email", []string{"bootstrap", "--email", "ops", "--organization", "Acme"}, []string{"--email", "not an email"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"TOLLGATE_API_URL": api.URL, "TOLLGATE_API_KEY": "tgk_" + strings.Repeat("k", 43),
				"TOLLGATE_DATABASE_URL": "postgres://nobody@127.0.0.1:1/none"}
			before := calls.Load()
			stdout, _, line, code := runCLI(context.Background(), env, "a long admin password\n", tc.args...)
			if code != ExitUsage {
				t.Errorf("exit code %d (%q), want %d", code, line, ExitUsage)
			}
			if strings.Contains(line, "\n") {
				t.Errorf("not one line: %q", line)
			}
			for _, w := range tc.want {
				if !strings.Contains(line, w) {
					t.Errorf("%q does not say %q", line, w)
				}
			}
			if calls.Load() != before {
				t.Errorf("the control plane was called before the arguments were checked")
			}
			if stdout != "" {
				t.Errorf("a refused command line printed on standard output:\n%s", stdout)
			}
			if testing.Verbose() {
				t.Log(line)
			}
		})
	}
}

// recover stopped part way (Ctrl-C: its context ends while a batch is being sent)
// prints the table of what it applied so far and after how many of the listed starts it
// stopped, and says so in its error; what it did not send stays pending.
func TestRecoverInterruptedSaysWhatItDid(t *testing.T) {
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	alice := e.AddMember(t, owner, "alice", "member")
	key := e.APIKey(t, owner)
	lctx, lcancel := context.WithCancel(context.Background())
	defer lcancel()
	l := ledger.New(ledger.Deps{Store: e.Store, Clock: e.Clock, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	go l.Run(lctx)
	old := e.Clock.Now().Add(-2 * time.Hour)
	var items []*internalv1.StartItem
	for i := range 150 {
		items = append(items, startItem(fmt.Sprintf("req_%03d", i), owner.OrgID, alice.MemberID, old.Add(time.Duration(i)*time.Millisecond)))
	}
	if _, err := l.Start(lctx, items); err != nil {
		t.Fatal(err)
	}

	// Between the CLI and the control plane: the second batch is the moment of Ctrl-C.
	// It is never passed on, so exactly the first batch was applied.
	ctx, interrupt := context.WithCancel(context.Background())
	defer interrupt()
	target, _ := url.Parse(e.URL)
	proxy := httputil.NewSingleHostReverseProxy(target)
	var batches atomic.Int32
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/gateway/usage-recovery/recover" && batches.Add(1) == 2 {
			io.Copy(io.Discard, r.Body) // then the server notices the client hang up
			interrupt()
			<-r.Context().Done()
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	defer front.Close()

	env := map[string]string{"TOLLGATE_API_URL": front.URL, "TOLLGATE_API_KEY": key}
	stdout, _, line, code := runCLI(ctx, env, "", "recover", "--reference", "INC-7", "--apply")
	if code != ExitFailure {
		t.Errorf("exit code %d, want %d", code, ExitFailure)
	}
	if !strings.Contains(line, "stopped after 100 of 150") || !strings.Contains(line, "interrupted") || strings.Contains(line, "\n") {
		t.Errorf("error line %q does not say it was interrupted after 100 of 150", line)
	}
	table := regexp.MustCompile(`(?m)^OUTCOME( +)REQUESTS\nrecovered( +)100\n`).FindStringSubmatch(stdout)
	if table == nil || len("OUTCOME"+table[1]) != len("recovered"+table[2]) {
		t.Errorf("no aligned table of what was applied (recovered 100):\n%s", stdout)
	}
	if !strings.Contains(strings.ToLower(stdout), "stopped after 100 of 150") {
		t.Errorf("the output does not say where it stopped:\n%s", stdout)
	}
	var pending struct{ Pending []any }
	e.Do(t, "GET", "/v1/gateway/usage-recovery/pending?limit=100", nil, apitest.Key(key)).Expect(t, 200).Decode(t, &pending)
	if len(pending.Pending) != 50 {
		t.Errorf("%d starts still pending, want the 50 never sent", len(pending.Pending))
	}
	if testing.Verbose() {
		t.Logf("%s\n%s", stdout, line)
	}
}

// --key takes a session token (tgs_...) as its help says, with --org naming the
// organization it acts in; it was sent as an API key and refused (401).
func TestKeyTakesASessionToken(t *testing.T) {
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	env := map[string]string{"TOLLGATE_API_URL": e.URL}
	stdout, _, line, code := runCLI(context.Background(), env, "", "audit", "--key", owner.Token, "--org", owner.OrgID)
	if code != 0 || !strings.Contains(stdout, "organization.create") {
		t.Fatalf("audit with a session token: exit %d, %s\n%s", code, line, stdout)
	}
}

// migrate, resync and retention (the control plane's subcommands) exit like the CLI's
// own commands: 2 for a command line or configuration refused before anything ran.
func TestControlPlaneCommandsExitLikeTheOthers(t *testing.T) {
	env := map[string]string{"TOLLGATE_DATABASE_URL": "postgres://nobody@127.0.0.1:1/none"}
	for _, args := range [][]string{
		{"migrate", "extra"}, {"migrate", "--bogus"}, {"migrate", "--to", "x"}, {"retention", "--apply=maybe"},
		{"resync", "--redis-url", "bogus"}, {"retention", "--retention-age", "1h"},
	} {
		_, stderr, line, code := runCLI(context.Background(), env, "", args...)
		if code != ExitUsage {
			t.Errorf("%v: exit %d (%q), want %d", args, code, line, ExitUsage)
		}
		// One line, as every command's refusal: not the control plane's list of problems
		// one a line, nor its usage (25 lines, the error before and after them).
		if strings.Contains(line, "\n") || stderr != "" {
			t.Errorf("%v: the refusal is not one line: %q, and on stderr before it:\n%s", args, line, stderr)
		}
	}
	// A database that cannot be reached is a failure, not a usage error.
	// And said on one line, as the others' failures: pgx lists each host it tried on a
	// line of its own.
	for _, cmd := range []string{"migrate", "retention"} {
		if _, _, line, code := runCLI(context.Background(), env, "", cmd); code != ExitFailure || strings.Contains(line, "\n") {
			t.Errorf("%s against no database: exit %d (%q), want %d, on one line", cmd, code, line, ExitFailure)
		}
	}
}

// tollgate resync against a Redis that does not answer names Redis and its setting.
// Before, it said "resync: dial tcp ...: connect: connection refused", which names
// neither, beside a database that is reached the same way.
func TestResyncNamesAnUnreachableRedis(t *testing.T) {
	e := apitest.New(t)
	var dbName string
	if err := e.Store.Pool.QueryRow(context.Background(), `SELECT current_database()`).Scan(&dbName); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"TOLLGATE_DATABASE_URL": storetest.URLFor(dbName), "TOLLGATE_REDIS_URL": "redis://" + testio.FreeAddr(t) + "/0",
		"TOLLGATE_REDIS_PREFIX": "tg-resync-unreachable:"}
	_, _, line, code := runCLI(context.Background(), env, "", "resync")
	if code != ExitFailure || !strings.Contains(line, "cannot reach Redis") || !strings.Contains(line, "TOLLGATE_REDIS_URL") {
		t.Errorf("exit %d, %q; want a failure that names Redis and TOLLGATE_REDIS_URL", code, line)
	}
}

// TestStrayArgumentThatMayBeASecretIsNotPrinted: an unquoted credential with a space
// (`--key Bearer tgs_...`, `--key sk-... rest`) leaves its second half as a stray
// argument, and the usage error printed it whole: the token on the terminal, in the
// shell's scrollback and in whatever logs a CI job's output. Such an argument (a
// Tollgate token, a provider key, a Bearer scheme, or anything longer than a word) is
// counted, not shown, with the hint to quote; a mistyped word is still quoted.
func TestStrayArgumentThatMayBeASecretIsNotPrinted(t *testing.T) {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no call expected", http.StatusTeapot)
	}))
	defer api.Close()
	env := map[string]string{"TOLLGATE_API_URL": api.URL, "TOLLGATE_API_KEY": "tgk_" + strings.Repeat("k", 43)}
	session := "tgs_" + strings.Repeat("s", 43)
	for _, stray := range [][]string{
		{"--key", "Bearer", session},
		{"--key", "tgk_", "tgk_" + strings.Repeat("a", 43)},
		{"--key", "x", "sk-proj-abcdef"},
		{"--key", "x", "Bearer"},
		{"--key", "x", "BEARER"},
		{"--key", "x", "AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY"},
	} {
		_, _, line, code := runCLI(context.Background(), env, "", append([]string{"audit"}, stray...)...)
		if code != ExitUsage || !strings.Contains(line, "not shown") || !strings.Contains(line, "quoted") {
			t.Errorf("%q: exit %d, %q: want a usage error that counts the argument and says to quote", stray, code, line)
		}
		// (The hint's own example says "Bearer sk-...".)
		if secret := stray[len(stray)-1]; strings.Contains(line, strconv.Quote(secret)) || (len(secret) > 6 && strings.Contains(line, secret)) {
			t.Errorf("%q: the error prints the stray argument: %q", stray, line)
		}
	}
	_, _, line, _ := runCLI(context.Background(), env, "", "audit", "everything")
	if !strings.Contains(line, `unexpected argument "everything"`) {
		t.Errorf("a mistyped word is no longer named: %q", line)
	}
}
