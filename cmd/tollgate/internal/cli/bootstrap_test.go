package cli

import (
	"bytes"
	"context"
	"io"
	"regexp"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/apitest"
	"github.com/tollgate-dev/tollgate/internal/storetest"
)

func TestBootstrap(t *testing.T) {
	e := apitest.New(t)
	var dbName string
	if err := e.Store.Pool.QueryRow(context.Background(), `SELECT current_database()`).Scan(&dbName); err != nil {
		t.Fatal(err)
	}
	env := func(k string) string {
		if k == "TOLLGATE_DATABASE_URL" {
			return storetest.URLFor(dbName)
		}
		return ""
	}
	var out bytes.Buffer
	err := Run(context.Background(), []string{"bootstrap", "--email", "ops@example.test", "--organization", "Acme", "--api", e.URL}, env,
		IO{Stdin: strings.NewReader("a long admin password\n"), Stdout: &out, Stderr: io.Discard})
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	key := regexp.MustCompile(`API key \(shown once\)\s+(tgk_\S+)`).FindStringSubmatch(out.String())
	if key == nil {
		t.Fatalf("no key printed:\n%s", out.String())
	}
	// The key works, and its user is a platform administrator.
	e.Do(t, "GET", "/v1/me", nil, apitest.Key(key[1])).Expect(t, 200)
	e.Do(t, "GET", "/v1/admin/organizations", nil, apitest.Key(key[1])).Expect(t, 200)

	err = Run(context.Background(), []string{"bootstrap", "--email", "x@example.test"}, env, IO{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: io.Discard})
	if err == nil || !strings.Contains(err.Error(), "--organization") {
		t.Fatalf("missing flag: %v", err)
	}
}

// bootstrap run a second time keeps what the first made: the administrator's password
// (a reset would revoke the key the first run printed), the organization and the key,
// which keeps working; it prints no other key and creates no other organization. With
// a password that does not sign in, or another organization's name, it refuses and
// changes nothing either.
func TestBootstrapTwiceKeepsTheFirstKeyAndOrganization(t *testing.T) {
	e := apitest.New(t)
	var dbName string
	if err := e.Store.Pool.QueryRow(context.Background(), `SELECT current_database()`).Scan(&dbName); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"TOLLGATE_DATABASE_URL": storetest.URLFor(dbName), "TOLLGATE_API_URL": e.URL}
	const pw = "a long admin password\n"
	args := []string{"bootstrap", "--email", "ops@example.test", "--organization", "Acme"}
	keyRE := regexp.MustCompile(`tgk_[A-Za-z0-9_-]{20,}`)
	stdout, _, line, code := runCLI(context.Background(), env, pw, args...)
	if code != 0 {
		t.Fatalf("first bootstrap: %s\n%s", line, stdout)
	}
	key := keyRE.FindString(stdout)
	if key == "" {
		t.Fatalf("the first bootstrap printed no key:\n%s", stdout)
	}
	count := func(table string) int {
		var n int
		if err := e.Store.Pool.QueryRow(context.Background(), `SELECT count(*) FROM `+table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	var hash string
	if err := e.Store.Pool.QueryRow(context.Background(), `SELECT password_hash FROM users`).Scan(&hash); err != nil {
		t.Fatal(err)
	}
	unchanged := func(t *testing.T, what string) {
		t.Helper()
		if orgs, keys := count("organizations"), count("api_keys WHERE revoked_at IS NULL"); orgs != 1 || keys != 1 {
			t.Errorf("%s: %d organization(s) and %d live key(s), want the first run's 1 and 1", what, orgs, keys)
		}
		var now string
		if err := e.Store.Pool.QueryRow(context.Background(), `SELECT password_hash FROM users`).Scan(&now); err != nil || now != hash {
			t.Errorf("%s: the administrator's password was reset (%v)", what, err)
		}
		if r := e.Do(t, "GET", "/v1/me", nil, apitest.Key(key)); r.Status != 200 {
			t.Errorf("%s: the first run's key no longer works: %d", what, r.Status)
		}
	}

	stdout, _, line, code = runCLI(context.Background(), env, pw, args...)
	if code != 0 {
		t.Fatalf("second bootstrap: %s\n%s", line, stdout)
	}
	if k := keyRE.FindString(stdout); k != "" {
		t.Errorf("the second bootstrap printed a key (%s):\n%s", k, stdout)
	}
	if !strings.Contains(stdout, "Nothing was changed") || !strings.Contains(stdout, key[:8]) {
		t.Errorf("the second bootstrap does not say what exists (the key starting %s) and that nothing changed:\n%s", key[:8], stdout)
	}
	unchanged(t, "second run")

	for _, tc := range []struct {
		name, stdin string
		args        []string
		want        string
	}{
		{"another password", "another long password\n", args, "does not sign in"},
		{"another organization", pw, []string{"bootstrap", "--email", "ops@example.test", "--organization", "Globex"}, `owns organization(s) "Acme"`},
	} {
		stdout, _, line, code := runCLI(context.Background(), env, tc.stdin, tc.args...)
		if code != ExitFailure || !strings.Contains(line, tc.want) || !strings.Contains(line, "changed nothing") && !strings.Contains(line, "nothing was changed") {
			t.Errorf("%s: exit %d, %q; want refused (%q), nothing changed\n%s", tc.name, code, line, tc.want, stdout)
		}
		unchanged(t, tc.name)
	}
}

// bootstrap with TOLLGATE_DATABASE_URL and --api naming two installations (a local
// database left in the environment beside a port-forwarded control plane, say) writes
// the administrator to one and signs in at the other. It says so. Before, it said
// "unauthorized ...; check the email and the password", which were right, and run again
// it said the password does not sign in, sending the operator to reset it.
func TestBootstrapSaysTheAPIServesAnotherDatabase(t *testing.T) {
	here, there := apitest.New(t), apitest.New(t)
	var dbName string
	if err := here.Store.Pool.QueryRow(context.Background(), `SELECT current_database()`).Scan(&dbName); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"TOLLGATE_DATABASE_URL": storetest.URLFor(dbName), "TOLLGATE_API_URL": there.URL}
	for _, run := range []string{"first run", "second run"} {
		_, _, line, code := runCLI(context.Background(), env, "a long admin password\n",
			"bootstrap", "--email", "ops@example.test", "--organization", "Acme")
		if code != ExitFailure || !strings.Contains(line, "another database") || !strings.Contains(line, there.URL) {
			t.Errorf("%s: exit %d, %q; want it to say that the control plane at %s serves another database", run, code, line, there.URL)
		}
	}
}
