package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"

	cpapp "github.com/tollgate-dev/tollgate/controlplane/app"
	enfapp "github.com/tollgate-dev/tollgate/enforcer/app"
)

// TestProgramsPrintTheirHelpOnStdout: README sends operators to `controlplane serve -h`
// and `enforcer -h` for every knob, 76 and 129 lines, read through a pager or a grep, as
// `controlplane -h` and every tollgate command's -h already are. Their -h goes to standard
// output; only the usage a mistyped flag prints goes to standard error, with the error.
func TestProgramsPrintTheirHelpOnStdout(t *testing.T) {
	env := func(string) string { return "" }
	run := map[string]func(args []string, stdio IO) error{
		"controlplane": func(args []string, stdio IO) error {
			return cpapp.Run(context.Background(), args, env, stdio)
		},
		"enforcer": func(args []string, stdio IO) error {
			return enfapp.Run(context.Background(), args, env, enfapp.IO{Stdout: stdio.Stdout, Stderr: stdio.Stderr})
		},
	}
	for _, tc := range []struct {
		program string
		args    []string
		want    string
	}{
		{"controlplane", []string{"serve", "-h"}, "TOLLGATE_HTTP_ADDR"},
		{"controlplane", []string{"migrate", "--help"}, "TOLLGATE_DATABASE_URL"},
		{"controlplane", []string{"resync", "-h"}, "TOLLGATE_REDIS_URL"},
		{"controlplane", []string{"bootstrap-admin", "-h"}, "TOLLGATE_DATABASE_URL"},
		{"controlplane", []string{"retention", "-h"}, "TOLLGATE_RETENTION_AGE"},
		{"enforcer", []string{"-h"}, "TOLLGATE_ENFORCER_GRPC_ADDR"},
		{"enforcer", []string{"help"}, "TOLLGATE_ENFORCER_GRPC_ADDR"},
	} {
		var stdout, stderr bytes.Buffer
		if err := run[tc.program](tc.args, IO{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr}); err != nil {
			t.Errorf("%s %s: %v", tc.program, strings.Join(tc.args, " "), err)
			continue
		}
		if !strings.Contains(stdout.String(), tc.want) || stderr.Len() != 0 {
			t.Errorf("%s %s: stdout %d bytes (want the help, naming %s), stderr %q", tc.program, strings.Join(tc.args, " "), stdout.Len(), tc.want, stderr.String())
		}
	}
	// A mistyped flag is an error: its usage stays on stderr.
	for program, args := range map[string][]string{"controlplane": {"serve", "--no-such-flag"}, "enforcer": {"--no-such-flag"}} {
		var stdout, stderr bytes.Buffer
		if err := run[program](args, IO{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr}); err == nil {
			t.Errorf("%s %v: no error", program, args)
		}
		if stdout.Len() != 0 || !strings.Contains(stderr.String(), "no-such-flag") {
			t.Errorf("%s %v: stdout %q, stderr %q", program, args, stdout.String(), stderr.String())
		}
	}
}

// TestHelpSaysDevRunsTheWholeStack: `tollgate help` described dev as running "the control
// plane locally", while it runs the enforcer with its inference gateway and a fake
// upstream beside it (README: "the whole stack in one process").
func TestHelpSaysDevRunsTheWholeStack(t *testing.T) {
	stdout, _, errLine, _ := runCLI(context.Background(), nil, "", "help")
	if errLine != "" {
		t.Fatal(errLine)
	}
	i := strings.Index(stdout, "\n  dev ")
	j := strings.Index(stdout, "\n  migrate ")
	if i < 0 || j < i {
		t.Fatalf("no dev entry in:\n%s", stdout)
	}
	dev := strings.Join(strings.Fields(stdout[i:j]), " ")
	for _, s := range []string{"the control plane", "the enforcer", "inference gateway", "fake upstream"} {
		if !strings.Contains(dev, s) {
			t.Errorf("tollgate help's dev entry does not name %s: %q", s, dev)
		}
	}
}
