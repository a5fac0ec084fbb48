// Package app is the control plane program: its configuration, its subcommands (serve,
// migrate, bootstrap-admin, resync, retention) and the lifecycle of its servers (serve.go: New wires,
// Listen opens the sockets, Serve runs the loops and servers and shuts them down in
// order). cmd/controlplane only calls Run, so tests start the whole program in-process.
package app

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/controlplane/password"
	"github.com/tollgate-dev/tollgate/controlplane/platform"
	"github.com/tollgate-dev/tollgate/controlplane/retention"
	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/pkg/clock"
	"github.com/tollgate-dev/tollgate/pkg/logging"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
	"github.com/tollgate-dev/tollgate/pkg/typeid"
)

const usage = `Usage: controlplane [command] [flags]

Commands:
  serve            serve the REST API, the internal gRPC API and the admin port
                   (the command when none is named: "controlplane --http-addr ..." serves)
  migrate          apply the embedded database migrations (or --to N: revert or apply
                   them up to version N) and exit
  resync           rebuild the Redis mirror from Postgres (new generation) and exit
  bootstrap-admin  create or reset a platform administrator; password on standard input
  retention        remove old request-level data (preview unless --apply) and exit
  help             this text

Run "controlplane <command> -h" for the flags of a command ("controlplane serve -h" for
every knob of the server). Every flag has an environment variable default, named in its
help.
`

// IO is what the program reads and writes.
type IO struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// Program is the command a subcommand's -h names in its usage line ("Usage: tollgate
	// migrate [flags]" when the tollgate CLI runs it); "controlplane" when empty.
	Program string
	// QuietUsage leaves out the usage a refused flag prints (its -h still prints): the
	// caller says the error on one line itself (the tollgate CLI, whose errors are one
	// line each), and 25 lines of usage with the error before and after them buried it.
	QuietUsage bool
	// Environ lists the environment (os.Environ) so that a TOLLGATE_* variable the
	// control plane does not read, a typo most likely, is named in a warning at start.
	// Nil checks nothing: the tollgate CLI, which runs the control plane in its own
	// process beside the enforcer (tollgate dev) or from a shell of the operator's.
	Environ func() []string
}

// program is the command the usage lines name.
func (stdio IO) program() string {
	if stdio.Program == "" {
		return "controlplane"
	}
	return stdio.Program
}

// Run runs the control plane with the given arguments (without the program name).
func Run(ctx context.Context, args []string, getenv func(string) string, stdio IO) error {
	err := run(ctx, args, getenv, stdio)
	if errors.Is(err, flag.ErrHelp) {
		return nil // the flag package already printed the help
	}
	return err
}

func run(ctx context.Context, args []string, getenv func(string) string, stdio IO) error {
	cmd := "serve"
	if len(args) > 0 {
		switch args[0] {
		case "help", "-h", "-help", "--help": // the commands; "serve -h" has serve's flags
			fmt.Fprint(stdio.Stdout, usage)
			return nil
		}
		if !strings.HasPrefix(args[0], "-") {
			cmd, args = args[0], args[1:]
		}
	}
	switch cmd {
	case "serve":
		return serve(ctx, args, getenv, stdio)
	case "migrate":
		return migrate(ctx, args, getenv, stdio)
	case "bootstrap-admin":
		return bootstrapAdmin(ctx, args, getenv, stdio)
	case "resync":
		return resync(ctx, args, getenv, stdio)
	case "retention":
		return runRetention(ctx, args, getenv, stdio)
	}
	fmt.Fprint(stdio.Stderr, usage)
	return fmt.Errorf("unknown command %q", cmd)
}

// newLogger is the logger of a subcommand (pkg/logging).
func newLogger(c Config, w io.Writer) *slog.Logger { return logging.New(c.LogFormat, c.LogLevel, w) }

func migrate(ctx context.Context, args []string, getenv func(string) string, stdio IO) error {
	cfg, err := parseConfig("migrate", args, getenv, stdio, nil)
	if err != nil {
		return err
	}
	log := newLogger(cfg, stdio.Stderr)
	st, err := store.Open(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer st.Close()
	if cfg.MigrateTo != nil {
		return migrateTo(ctx, st, log, *cfg.MigrateTo, stdio.Stdout)
	}
	// A database migrated by a newer build (a rollback of the program, not of the
	// schema): served if every newer migration says this build can run on it, else
	// refused, as serve refuses it, so that the rollback stops here (the chart runs this
	// on pre-rollback too) and says how to revert the schema.
	newer, err := refuseNewerSchema(ctx, st)
	if err != nil {
		return err
	}
	applied, err := st.Migrate(ctx, log)
	if err != nil {
		return err
	}
	have, err := st.SchemaVersion(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdio.Stdout, "schema at version %d (%d migration(s) applied)\n", have, len(applied))
	if len(newer) > 0 {
		fmt.Fprintf(stdio.Stdout, "schema newer than this build's %d but readable by it: %s\n", store.LatestVersion(), describeMigrations(newer))
	}
	return nil
}

// migrateTo moves the schema to the version target, reverting this build's migrations
// above it with their down files or applying those up to it, and prints each step. It
// refuses a schema with migrations this build does not know: it could not revert them,
// and reverting its own under them could break them; the build that applied them (or a
// newer one) reverts them.
func migrateTo(ctx context.Context, st *store.Store, log *slog.Logger, target int, stdout io.Writer) error {
	latest := store.LatestVersion()
	newer, err := st.AppliedBeyond(ctx, latest)
	if err != nil {
		return err
	}
	if len(newer) > 0 {
		return fmt.Errorf("database schema has migration(s) newer than this build's %d, which it cannot revert: %s; run `controlplane migrate --to %d` with the image of the build that applied them (or a newer one)",
			latest, describeMigrations(newer), target)
	}
	steps, err := st.MigrateTo(ctx, log, target)
	// The steps taken before any failure too: each committed on its own.
	for _, v := range steps {
		if v < 0 {
			fmt.Fprintf(stdout, "reverted %s\n", store.MigrationLabel(-v))
		} else {
			fmt.Fprintf(stdout, "applied %s\n", store.MigrationLabel(v))
		}
	}
	if err != nil {
		return err
	}
	have, err := st.SchemaVersion(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "schema at version %d (%d migration(s) reverted or applied)\n", have, len(steps))
	return nil
}

// refuseNewerSchema refuses a database whose schema is newer than this build's unless
// the build can run on it: every applied migration it does not know must have recorded
// an oldest reader at or below this build's latest migration (expand-only migrations
// record 0). A migration without one (a build from before the column applied it)
// counts as its own version. It returns the newer migrations of a schema it accepts.
func refuseNewerSchema(ctx context.Context, st *store.Store) ([]store.AppliedMigration, error) {
	latest := store.LatestVersion()
	newer, err := st.AppliedBeyond(ctx, latest)
	if err != nil || len(newer) == 0 {
		return nil, err
	}
	var unreadable []store.AppliedMigration
	for _, m := range newer {
		if !m.ReadableBy(latest) {
			unreadable = append(unreadable, m)
		}
	}
	if len(unreadable) > 0 {
		return nil, fmt.Errorf("database schema is at version %d, newer than this build's %d, and migration(s) %s need a newer build. "+
			"To roll back to this build, first revert the schema with the newer build's image: `controlplane migrate --to %d`; then roll back (docs/admin.md, \"Rolling back\")",
			newer[len(newer)-1].Version, latest, describeMigrations(unreadable), latest)
	}
	return newer, nil
}

// describeMigrations names migrations recorded in schema_migrations with their oldest
// reader.
func describeMigrations(ms []store.AppliedMigration) string {
	parts := make([]string, len(ms))
	for i, m := range ms {
		reader := "no oldest reader recorded: only builds that know it"
		if m.OldestReader != nil {
			reader = fmt.Sprintf("oldest reader %d", *m.OldestReader)
		}
		parts[i] = fmt.Sprintf("%04d_%s (%s)", m.Version, m.Name, reader)
	}
	return strings.Join(parts, ", ")
}

// checkSchema refuses to serve a database whose schema differs from this build's, unless
// told to migrate it first, or is newer than it in ways it cannot run on. A newer
// schema it can run on (a rollback of the program after expand-only migrations) is
// served, with a warning.
func checkSchema(ctx context.Context, st *store.Store, log *slog.Logger, autoMigrate bool) error {
	newer, err := refuseNewerSchema(ctx, st)
	if err != nil {
		return err
	}
	if len(newer) > 0 {
		log.Warn("database schema is newer than this build, which can run on it: serving it",
			"schema_version", newer[len(newer)-1].Version, "build_version", store.LatestVersion(),
			"newer_migrations", describeMigrations(newer))
	}
	pending, err := st.Pending(ctx)
	if err != nil || len(pending) == 0 {
		return err
	}
	if autoMigrate {
		_, err := st.Migrate(ctx, log)
		return err
	}
	return fmt.Errorf("database schema is missing migration(s) %v of this build (latest %d): run `controlplane migrate` first (or start with --auto-migrate)", pending, store.LatestVersion())
}

// bootstrapAdmin creates or resets a platform administrator so a fresh install has its
// first admin. The password comes from standard input (first line), never from a flag, so
// it stays out of shell history and process listings.
func bootstrapAdmin(ctx context.Context, args []string, getenv func(string) string, stdio IO) error {
	var email, name string
	cfg, err := parseConfig("bootstrap-admin", args, getenv, stdio, func(fs *flag.FlagSet) {
		fs.StringVar(&email, "email", "", "the administrator's email (required)")
		fs.StringVar(&name, "name", "Platform administrator", "display name when the user is created")
	})
	if err != nil {
		return err
	}
	email = strings.ToLower(strings.TrimSpace(email))
	if !strings.Contains(email, "@") {
		return errors.New("bootstrap-admin: --email is required and must be an email address")
	}
	line, err := bufio.NewReader(stdio.Stdin).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read password from standard input: %w", err)
	}
	pw := strings.TrimRight(line, "\r\n")
	// The bounds of sign-up: a longer password was set before 2026-12-07, and sign-in,
	// which refuses what is longer than any password sign-up takes, never took it.
	if n := len([]rune(pw)); n < password.MinLength || n > password.MaxLength {
		return fmt.Errorf("bootstrap-admin: the password on standard input must be at least %d and at most %d characters", password.MinLength, password.MaxLength)
	}
	hash, err := password.Hash(pw)
	if err != nil {
		return err
	}
	st, err := store.Open(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer st.Close()
	if err := checkSchema(ctx, st, newLogger(cfg, stdio.Stderr), false); err != nil {
		return err
	}
	now := clock.System{}.Now()
	var p platform.Provisioned
	err = st.InTx(ctx, func(tx pgx.Tx) error {
		var err error
		if p, err = platform.ProvisionAdmin(ctx, tx, email, name, hash, typeid.New(typeid.User), now); err != nil {
			return err
		}
		return store.RecordAudit(ctx, tx, store.AuditEvent{ID: typeid.New(typeid.AuditEvent), OccurredAt: now,
			Action: "platform_admin.bootstrap", TargetID: p.User.ID,
			Details: map[string]any{"email": email, "created": p.Created, "revokedApiKeys": p.RevokedKeys}})
	})
	if err != nil {
		return err
	}
	forgetCredentials(ctx, cfg, p.Revoked, p.RevokedKeys, stdio.Stderr)
	if p.Created {
		fmt.Fprintf(stdio.Stdout, "created platform administrator %s\n", email)
		return nil
	}
	// A reset shuts out whoever held the account: say what it ended, since an operator
	// resetting their own forgotten password loses their scripts' keys too.
	keys := "none"
	if len(p.RevokedKeys) > 0 {
		keys = strings.Join(p.RevokedKeys, ", ")
	}
	fmt.Fprintf(stdio.Stdout, "reset the password of platform administrator %s: ended %d session(s) and revoked %d API key(s) of the account, in every organization (%s)\n",
		email, len(p.Revoked), len(p.RevokedKeys), keys)
	return nil
}

// forgetCredentials tells the enforcers (the mirror's invalidation channel) to forget
// the sessions (token hashes) and API keys (ids) a password reset revoked, so they are
// refused at once, as a sign-out or a key's deletion is. It is best effort: a Redis that
// cannot be reached is reported, and the enforcers' identity caches drop them within
// their TTL (30s) anyway.
func forgetCredentials(ctx context.Context, cfg Config, hashes [][]byte, keyIDs []string, stderr io.Writer) {
	if len(hashes)+len(keyIDs) == 0 {
		return
	}
	invs := make([]mirror.Invalidation, 0, len(hashes)+len(keyIDs))
	for _, h := range hashes {
		invs = append(invs, mirror.Invalidation{Kind: mirror.KindCredential, ID: hex.EncodeToString(h)})
	}
	for _, k := range keyIDs {
		invs = append(invs, mirror.Invalidation{Kind: mirror.KindAPIKey, ID: k})
	}
	rdb, err := newRedis(cfg)
	if err == nil {
		err = mirror.Layout{Prefix: cfg.Redis.Prefix}.PublishMany(ctx, rdb, invs)
		_ = rdb.Close()
	}
	if err != nil {
		fmt.Fprintf(stderr, "warning: cannot tell the enforcers that %d revoked sessions and %d revoked API keys ended (%v); they stop working within 30s\n",
			len(hashes), len(keyIDs), err)
	}
}

// runRetention runs retention once (package retention): a preview unless --apply, then
// the summary of what was removed and what was kept, by reason.
func runRetention(ctx context.Context, args []string, getenv func(string) string, stdio IO) error {
	var apply bool
	cfg, err := parseConfig("retention", args, getenv, stdio, func(fs *flag.FlagSet) {
		fs.BoolVar(&apply, "apply", false, "remove the data (default: preview only, nothing written)")
	})
	if err != nil {
		return err
	}
	log := newLogger(cfg, stdio.Stderr)
	st, err := store.Open(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer st.Close()
	if err := checkSchema(ctx, st, log, false); err != nil {
		return err
	}
	report, err := retention.Run(ctx, retention.Deps{Store: st, Clock: clock.System{}, Log: log}, cfg.retentionOptions(apply))
	if err != nil && !report.Interrupted {
		return err
	}
	// An interrupted run's summary too: what it removed before it stopped is gone.
	report.Write(stdio.Stdout)
	return err
}
