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
