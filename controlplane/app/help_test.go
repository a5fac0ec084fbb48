package app_test

import (
	"bytes"
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/controlplane/app"
)

// helpFlags are the flags a -h output lists ("  -name ..." lines of flag.PrintDefaults).
func helpFlags(help string) []string {
	var names []string
	for _, m := range regexp.MustCompile(`(?m)^  -(\S+)`).FindAllStringSubmatch(help, -1) {
		names = append(names, m[1])
	}
	slices.Sort(names)
	return names
}

// Each subcommand's -h says what it does and lists the flags it reads, and only those:
// migrate -h has no --http-addr, resync -h no --internal-token. serve -h lists every knob.
func TestSubcommandHelpListsOnlyItsFlags(t *testing.T) {
	redis := []string{"redis-addrs", "redis-mode", "redis-prefix", "redis-sentinel-master", "redis-sentinel-password", "redis-sentinel-username", "redis-url"}
	for _, tc := range []struct {
		cmd   string
		flags []string // exactly these; nil: see has
		has   []string // at least these
		says  string   // part of the description
	}{
		{cmd: "migrate", flags: []string{"database-url", "log-format", "log-level", "to"}, says: "migrations"},
		{cmd: "resync", flags: append([]string{"database-url", "log-format", "log-level"}, redis...), says: "mirror"},
		{cmd: "bootstrap-admin", flags: append([]string{"database-url", "email", "log-format", "log-level", "name"}, redis...), says: "standard input"},
		{cmd: "retention", flags: []string{"apply", "database-url", "log-format", "log-level", "retention-age", "retention-batch"}, says: "pending start is never touched"},
		{cmd: "serve", has: append([]string{"accounting-lanes", "admin-addr", "auto-migrate", "database-url", "grpc-addr", "http-addr",
			"internal-token", "log-level", "mirror-check-interval", "platform-admin-emails", "retention-age", "retention-batch", "retention-interval",
			"session-ttl", "shutdown-delay", "shutdown-timeout"}, redis...), says: "drains"},
	} {
		t.Run(tc.cmd, func(t *testing.T) {
			var out bytes.Buffer
			if err := app.Run(context.Background(), []string{tc.cmd, "-h"}, envOf(nil), app.IO{Stdout: &out, Stderr: &out}); err != nil {
				t.Fatalf("%s -h: %v", tc.cmd, err)
			}
			help := out.String()
			if usage, _, _ := strings.Cut(help, "\n"); !strings.Contains(usage, "controlplane "+strings.TrimPrefix(tc.cmd, "serve")) {
				t.Errorf("%s -h does not name controlplane %s in its usage line:\n%s", tc.cmd, tc.cmd, help)
			}
			if !strings.HasPrefix(help, "Usage: ") || !strings.Contains(help, tc.says) {
				t.Errorf("%s -h does not start with its usage and say what it does (%q):\n%s", tc.cmd, tc.says, help)
			}
			got := helpFlags(help)
			if want := slices.Sorted(slices.Values(tc.flags)); tc.flags != nil && !slices.Equal(got, want) {
				t.Errorf("%s -h lists %v, want exactly %v:\n%s", tc.cmd, got, want, help)
			}
			for _, f := range tc.has {
				if !slices.Contains(got, f) {
					t.Errorf("%s -h does not list --%s:\n%s", tc.cmd, f, help)
				}
			}
		})
	}
}

// A subcommand's -h names the program that runs it (IO.Program): the tollgate CLI runs
// migrate, resync and retention as its own commands.
func TestSubcommandHelpNamesTheProgram(t *testing.T) {
	for _, cmd := range []string{"migrate", "resync", "retention"} {
		var out bytes.Buffer
		if err := app.Run(context.Background(), []string{cmd, "-h"}, envOf(nil), app.IO{Stdout: &out, Stderr: &out, Program: "tollgate"}); err != nil {
			t.Fatalf("%s -h: %v", cmd, err)
		}
		if !strings.HasPrefix(out.String(), "Usage: tollgate "+cmd+" [") || strings.Contains(out.String(), "controlplane") {
			t.Errorf("%s -h run as tollgate:\n%s", cmd, out.String())
		}
	}
}

// `controlplane -h` (and --help, help) lists the subcommands, not serve's flags, and
// every subcommand it names answers its own -h.
func TestHelpListsSubcommands(t *testing.T) {
	for _, arg := range []string{"-h", "--help", "help"} {
		var out bytes.Buffer
		if err := app.Run(context.Background(), []string{arg}, envOf(nil), app.IO{Stdout: &out, Stderr: &out}); err != nil {
			t.Fatalf("%s: %v", arg, err)
		}
		if flags := helpFlags(out.String()); len(flags) > 0 {
			t.Fatalf("controlplane %s lists serve's flags instead of the subcommands:\n%s", arg, out.String())
		}
		for _, cmd := range []string{"serve", "migrate", "resync", "bootstrap-admin", "retention"} {
			if !regexp.MustCompile(`(?m)^  ` + cmd + ` `).MatchString(out.String()) {
				t.Errorf("controlplane %s does not name %s:\n%s", arg, cmd, out.String())
			}
			if err := app.Run(context.Background(), []string{cmd, "-h"}, envOf(nil), app.IO{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}}); err != nil {
				t.Errorf("%s -h: %v", cmd, err)
			}
		}
	}
}

// A knob a subcommand does not take cannot fail it: a listen address that is not
// host:port stops serve, not migrate's flag parsing.
func TestSubcommandIgnoresOtherKnobs(t *testing.T) {
	env := envOf(map[string]string{"TOLLGATE_HTTP_ADDR": "nonsense", "TOLLGATE_SESSION_TTL": "forever", "TOLLGATE_DATABASE_URL": "mysql://x"})
	err := app.Run(context.Background(), []string{"migrate"}, env, app.IO{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}})
	if err == nil || !strings.Contains(err.Error(), "TOLLGATE_DATABASE_URL") ||
		strings.Contains(err.Error(), "TOLLGATE_HTTP_ADDR") || strings.Contains(err.Error(), "TOLLGATE_SESSION_TTL") {
		t.Fatalf("migrate with a bad database URL and bad serve knobs: %v, want only the database URL reported", err)
	}
}

// Secrets read from the environment never reach -h (nor the usage a mistyped flag
// writes to the logs): the internal token, the database's and Redis's passwords.
func TestHelpNeverPrintsSecrets(t *testing.T) {
	env := envOf(map[string]string{"TOLLGATE_INTERNAL_TOKEN": "tok-s3cret-0123456789abcdef",
		"TOLLGATE_DATABASE_URL": "postgres://tollgate:pg-pa55@db:5432/tollgate", "TOLLGATE_REDIS_URL": "redis://:redis-pa55@r:6379/0"})
	for _, args := range [][]string{{"serve", "-h"}, {"serve", "--no-such-flag"}, {"migrate", "-h"}, {"resync", "-h"}} {
		var out bytes.Buffer
		_ = app.Run(context.Background(), args, env, app.IO{Stdout: &out, Stderr: &out})
		for _, secret := range []string{"tok-s3cret", "pg-pa55", "redis-pa55"} {
			if strings.Contains(out.String(), secret) {
				t.Errorf("%v prints %q:\n%s", args, secret, out.String())
			}
		}
		if !strings.Contains(out.String(), "TOLLGATE_DATABASE_URL") {
			t.Errorf("%v printed no help:\n%s", args, out.String())
		}
	}
}
