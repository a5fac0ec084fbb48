// Package cli is the tollgate operator command line. It is the one place allowed to
// start the control plane and the enforcer together (for `tollgate dev`); it talks to a
// running installation only through its public and operator interfaces.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/tollgate-dev/tollgate/controlplane/app"
)

// IO is what the CLI reads and writes.
type IO = app.IO

const usage = `Usage: tollgate <command> [flags]

Commands:
  dev       run the whole stack locally against Postgres and Redis (the control plane,
            the enforcer with its inference gateway, a fake upstream), seed a demo
            organization, and print what to call (Ctrl-C stops it)
  migrate   apply the control plane's database migrations
  bootstrap first platform administrator, organization and API key of a fresh install
  resync    rebuild the Redis mirror from Postgres (after Redis lost its data)
  capture   suspend|resume usage capture of members (the capture fence)
  recover   close abandoned pending starts as unknown/incomplete
  reconcile list|charge quarantined settlements (reviewed reconciliation)
  retention remove old request-level data (preview unless --apply)
  audit     print the organization's (or, --platform, the platform's) audit trail
  help      this text

Run "tollgate <command> -h" for the flags of a command.
`

// Run runs one CLI command. Its error is printed by the caller on one line; ExitCode
// gives the exit code: 2 for a command line refused before anything ran (usageError),
// 1 for a failure.
func Run(ctx context.Context, args []string, getenv func(string) string, stdio IO) error {
	if len(args) == 0 {
		fmt.Fprint(stdio.Stderr, usage)
		return usagef("a command is required (see tollgate help)")
	}
	cmd, rest := args[0], args[1:]
	// The control plane's subcommands run here name this program in their -h, which
	// goes to standard output when it is asked for, as the CLI's own commands' does.
	cp := stdio
	cp.Program = "tollgate"
	cp.QuietUsage = true // a refused flag is said on one line, as every command's
	if wantsHelp(rest) {
		cp.Stderr = stdio.Stdout
	}
	var err error
	switch cmd {
	case "dev":
		err = dev(ctx, rest, getenv, stdio)
	case "capture":
		err = capture(ctx, rest, getenv, stdio)
	case "recover":
		err = recoverCmd(ctx, rest, getenv, stdio)
	case "reconcile":
		err = reconcileCmd(ctx, rest, getenv, stdio)
	case "retention":
		err = controlPlaneUsage(app.Run(ctx, append([]string{"retention"}, rest...), getenv, cp))
	case "audit":
		err = auditCmd(ctx, rest, getenv, stdio)
	case "resync":
		err = controlPlaneUsage(app.Run(ctx, append([]string{"resync"}, rest...), getenv, cp))
	case "bootstrap":
		err = bootstrap(ctx, rest, getenv, stdio)
	case "migrate":
		err = controlPlaneUsage(app.Run(ctx, append([]string{"migrate"}, rest...), getenv, cp))
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdio.Stdout, usage)
		return nil
	default:
		return usagef("unknown command %q (see tollgate help)", oneLine(cmd, 80))
	}
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil && cmd != "dev" {
		// Errors of the database's client span lines (pgx lists each host it tried on
		// one of its own), and the control plane lists its configuration's problems one a
		// line ("invalid configuration:\n  X\n  Y"); an operator's command says its
		// error on one line.
		return oneLineError{err}
	}
	return err
}

// oneLineError is an error said on one line: each of its lines, trimmed, after the one
// before (after ": " when that one ends with a colon, else after "; ").
type oneLineError struct{ err error }

func (e oneLineError) Error() string {
	var b strings.Builder
	for _, l := range strings.Split(e.err.Error(), "\n") {
		if l = strings.TrimSpace(l); l == "" {
			continue
		}
		switch s := b.String(); {
		case s == "":
		case strings.HasSuffix(s, ":"):
			b.WriteString(" ")
		default:
			b.WriteString("; ")
		}
		b.WriteString(l)
	}
	return b.String()
}

func (e oneLineError) Unwrap() error { return e.err }

// controlPlaneUsage makes a usage error (exit 2) of what the control plane's subcommands
// refuse before doing anything (app.ConfigError: a flag they do not have, a value of the
// wrong type, a configuration their validation refuses, stray arguments included).
func controlPlaneUsage(err error) error {
	if ce := (app.ConfigError{}); errors.As(err, &ce) {
		return usageError{err.Error()} // said on one line by Run, as every error
	}
	return err
}
