package app_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/controlplane/app"
	"github.com/tollgate-dev/tollgate/internal/secrettest"
	"github.com/tollgate-dev/tollgate/internal/storetest"
)

// No part of the database's or Redis's password reaches the program's output, whatever
// the password holds: its -h, the usage a mistyped flag prints, the error it stops
// with (printed to stderr, which is the log) and its log lines. A password with an
// unencoded '@' read to pgx (as to libpq) as a password cut short and a host made of its
// rest: "connect to database Zk9@127.0.0.1: ... lookup Zk9@127.0.0.1: no such host".
func TestURLPasswordsNeverPrinted(t *testing.T) {
	const token = "tok-0123456789abcdef0123456789"
	migrated := storetest.URLFor(storetest.NewDatabase(t))
	for _, pw := range secrettest.Passwords {
		for _, db := range []string{
			"postgres://tg~user:" + pw + "@127.0.0.1:1/tollgate",
			"postgres://tg~user:" + pw + "@127.0.0.1:1/tollgate?sslmode=disable",
			"postgresql://tg~user@127.0.0.1:1/tollgate?password=" + pw,
			"postgres://tg~user@127.0.0.1:1/tollgate?password=" + pw + "&sslmode=disable",
		} {
			env := envOf(map[string]string{"TOLLGATE_DATABASE_URL": db, "TOLLGATE_INTERNAL_TOKEN": token})
			for _, args := range [][]string{{"serve"}, {"migrate"}, {"serve", "-h"}, {"migrate", "--no-such-flag"}} {
				checkNotPrinted(t, pw, args, env)
			}
		}
		for _, rd := range []string{"redis://:" + pw + "@127.0.0.1:1/0", "redis://default:" + pw + "@127.0.0.1:1/0"} {
			env := envOf(map[string]string{"TOLLGATE_DATABASE_URL": migrated, "TOLLGATE_REDIS_URL": rd, "TOLLGATE_INTERNAL_TOKEN": token})
			for _, args := range [][]string{{"resync"}, {"resync", "-h"}} {
				checkNotPrinted(t, pw, args, env)
			}
		}
	}
}

func checkNotPrinted(t *testing.T, pw string, args []string, env func(string) string) {
	t.Helper()
	var out bytes.Buffer
	err := app.Run(context.Background(), args, env, app.IO{Stdout: &out, Stderr: &out})
	fmt.Fprintf(&out, "controlplane: %v\n", err) // as main prints it
	if leaks := secrettest.Leaks(out.String(), pw); len(leaks) > 0 {
		t.Errorf("password %q, %v: %q printed:\n%s", pw, args, leaks, out.String())
	}
}

// A flag's value with spaces, unquoted (a Postgres keyword/value string given to
// --database-url), splits into arguments left after the flags. The problem printed
// (stderr, the log) says there are some, not what they are: it quoted the password.
func TestLeftOverArgumentsAreNotQuoted(t *testing.T) {
	for _, cmd := range []string{"serve", "migrate"} {
		var out bytes.Buffer
		err := app.Run(context.Background(), []string{cmd, "--database-url", "host=db", "user=tg", "password=Qa7Zk9Xm3"},
			envOf(nil), app.IO{Stdout: &out, Stderr: &out})
		if err == nil {
			t.Fatalf("%s ran", cmd)
		}
		fmt.Fprintf(&out, "controlplane: %v\n", err) // as main prints it
		if strings.Contains(out.String(), "Qa7Zk9Xm3") {
			t.Errorf("%s: the password is printed:\n%s", cmd, out.String())
		}
		if !strings.Contains(out.String(), "unexpected arguments") {
			t.Errorf("%s: the left-over arguments are not reported:\n%s", cmd, out.String())
		}
	}
}
