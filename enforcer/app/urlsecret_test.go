package app_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/enforcer/app"
	"github.com/tollgate-dev/tollgate/internal/secrettest"
)

// No part of Redis's password reaches the enforcer's output, whatever the password
// holds: its -h, the usage a mistyped flag prints, and the error it stops with (printed
// to stderr, which is the log). go-redis quoted the part of a URL it refused: a password
// with an unencoded '/' read as a path, "redis: invalid URL path: /Zk9@127.0.0.1:1/0".
// The start is stopped right after the Redis client is built, by a settlement spool
// directory that is a file.
func TestRedisURLPasswordsNeverPrinted(t *testing.T) {
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, pw := range secrettest.Passwords {
		for _, rd := range []string{"redis://:" + pw + "@127.0.0.1:1/0", "redis://tg~user:" + pw + "@127.0.0.1:1/0", "rediss://:" + pw + "@127.0.0.1:1"} {
			env := envOf(map[string]string{"TOLLGATE_REDIS_URL": rd, "TOLLGATE_INTERNAL_TOKEN": "tok-0123456789abcdef0123456789",
				"TOLLGATE_ENFORCER_SETTLE_SPOOL_DIR": notDir})
			for _, args := range [][]string{nil, {"-h"}, {"--no-such-flag"}} {
				var out bytes.Buffer
				err := app.Run(context.Background(), args, env, app.IO{Stdout: &out, Stderr: &out})
				if err == nil && args == nil {
					t.Fatalf("%s started", rd)
				}
				fmt.Fprintf(&out, "enforcer: %v\n", err) // as main prints it
				if leaks := secrettest.Leaks(out.String(), pw); len(leaks) > 0 {
					t.Errorf("password %q, %v: %q printed:\n%s", pw, args, leaks, out.String())
				}
			}
		}
	}
}

// A flag's value with a space, unquoted on a shell's or a container's command line,
// splits: --upstream-authorization takes "Bearer", and the key is left over as an
// argument. The problem the start stops with (printed to stderr, which is the log) says
// there are arguments left, not what they are: it quoted them whole.
func TestLeftOverArgumentsAreNotQuoted(t *testing.T) {
	var out bytes.Buffer
	err := app.Run(context.Background(), []string{"--upstream-authorization", "Bearer", "sk-live-Qa7Zk9Xm3"},
		envOf(nil), app.IO{Stdout: &out, Stderr: &out})
	if err == nil {
		t.Fatal("the enforcer started")
	}
	fmt.Fprintf(&out, "enforcer: %v\n", err) // as main prints it
	if strings.Contains(out.String(), "Qa7Zk9Xm3") {
		t.Errorf("the key is printed:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "unexpected arguments") {
		t.Errorf("the left-over argument is not reported:\n%s", out.String())
	}
}
