package app

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/controlplane/ledger"
	"github.com/tollgate-dev/tollgate/controlplane/retention"
	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/pkg/envflag"
	"github.com/tollgate-dev/tollgate/pkg/internaltoken"
	"github.com/tollgate-dev/tollgate/pkg/lifecycle"
	"github.com/tollgate-dev/tollgate/pkg/listen"
	"github.com/tollgate-dev/tollgate/pkg/logging"
	"github.com/tollgate-dev/tollgate/pkg/redisconf"
)

// Config is every knob of the control plane. Each field comes from a flag whose default
// is read from the environment variable named in its help text.
type Config struct {
	// DatabaseURL is the Postgres connection URL (TOLLGATE_DATABASE_URL).
	DatabaseURL string
	// Redis is the mirror's Redis: TOLLGATE_REDIS_URL, _MODE, _ADDRS, _SENTINEL_MASTER,
	// _SENTINEL_USERNAME, _SENTINEL_PASSWORD and
	// _PREFIX, shared with the enforcers (pkg/redisconf).
	Redis redisconf.Config
	// MirrorCheckInterval is how often the mirror's generation is checked and failed
	// writes repaired (TOLLGATE_MIRROR_CHECK_INTERVAL).
	MirrorCheckInterval time.Duration
	// GRPCTLSCert and GRPCTLSKey serve the internal API over TLS
	// (TOLLGATE_GRPC_TLS_CERT, TOLLGATE_GRPC_TLS_KEY); GRPCClientCA additionally
	// requires enforcers to present a certificate it signed (TOLLGATE_GRPC_CLIENT_CA).
	GRPCTLSCert  string
	GRPCTLSKey   string
	GRPCClientCA string
	// GRPCMaxConnectionAge is how long an enforcer's connection to the internal API
	// lasts before the control plane asks it to make another, finishing the calls on it
	// (TOLLGATE_GRPC_MAX_CONNECTION_AGE; 0: for ever). An enforcer keeps one connection,
	// to whichever replica behind the Service took it: without an end, a replica added
	// by a scale-up or a rollout gets no enforcer's calls until a connection breaks.
	GRPCMaxConnectionAge time.Duration
	// AccountingLanes, AccountingMaxBatch and AccountingMaxDelay tune the group commit
	// of starts and settlements (TOLLGATE_ACCOUNTING_LANES, _MAX_BATCH, _MAX_DELAY).
	AccountingLanes    int
	AccountingMaxBatch int
	AccountingMaxDelay time.Duration
	// RESTDatabaseConns is the REST API's share of the database pool: the most of its
	// connections REST requests hold at once (TOLLGATE_REST_DATABASE_CONNS); 0, the
	// default, is half of pool_max_conns (store.DefaultShare). The rest of the pool
	// stays accounting's whatever the REST API does.
	RESTDatabaseConns int
	// HTTPAddr serves the REST API (TOLLGATE_HTTP_ADDR).
	HTTPAddr string
	// GRPCAddr serves the internal API for enforcers (TOLLGATE_GRPC_ADDR).
	GRPCAddr string
	// AdminAddr serves /healthz, /readyz and /metrics (TOLLGATE_ADMIN_ADDR).
	AdminAddr string
	// PlatformAdminEmails are added to the platform-admin allowlist at start
	// (TOLLGATE_PLATFORM_ADMIN_EMAILS, comma-separated).
	PlatformAdminEmails []string
	// InternalToken is the shared secret enforcers present (TOLLGATE_INTERNAL_TOKEN).
	InternalToken string
	// InternalTokenPrevious is accepted as well during a rotation
	// (TOLLGATE_INTERNAL_TOKEN_PREVIOUS).
	InternalTokenPrevious string
	// LogFormat is text or json (TOLLGATE_LOG_FORMAT).
	LogFormat string
	// LogLevel is debug, info, warn or error (TOLLGATE_LOG_LEVEL).
	LogLevel string
	// SessionTTL is how long session tokens live (TOLLGATE_SESSION_TTL).
	SessionTTL time.Duration
	// ShutdownTimeout bounds the drain on SIGTERM (TOLLGATE_SHUTDOWN_TIMEOUT).
	ShutdownTimeout time.Duration
	// ShutdownDelay is how long, within ShutdownTimeout, the servers go on serving after
	// SIGTERM while reporting not-ready, before they stop taking connections
	// (TOLLGATE_SHUTDOWN_DELAY).
	ShutdownDelay time.Duration
	// TrustForwardedFor keys sign-in and sign-up throttling on X-Forwarded-For's
	// right-most address (TOLLGATE_TRUST_FORWARDED_FOR); enable only behind a proxy
	// that sets or appends it.
	TrustForwardedFor bool
	// AutoMigrate applies pending migrations at start instead of refusing to serve.
	AutoMigrate bool
	// MigrateTo is migrate's --to: the schema version to revert (or apply) this build's
	// migrations to; nil without the flag (apply them all). No environment variable:
	// a lingering one would revert the schema at every run of the Helm hook.
	MigrateTo *int
	// RetentionAge is how old request-level data must be before retention removes it
	// (TOLLGATE_RETENTION_AGE), and RetentionBatch how many rows one of its
	// transactions examines (TOLLGATE_RETENTION_BATCH); package retention.
	RetentionAge   time.Duration
	RetentionBatch int
	// RetentionInterval runs an applied retention that often inside serve
	// (TOLLGATE_RETENTION_INTERVAL); 0, the default, never.
	RetentionInterval time.Duration
}

// Defaults of the address and URL knobs.
const (
	DefaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/tollgate?sslmode=disable"
	DefaultRedisURL    = redisconf.DefaultURL
	DefaultHTTPAddr    = "127.0.0.1:8080"
	DefaultGRPCAddr    = "127.0.0.1:8081"
	DefaultAdminAddr   = "127.0.0.1:9090"
)

// knobs are groups of flags. Each subcommand registers, reads and validates only the
// groups it uses, so its -h lists only its own flags and a knob it ignores (a listen
// address for migrate, say) can neither appear there nor fail it.
type knobs uint8

const (
	databaseKnobs  knobs = 1 << iota // --database-url
	logKnobs                         // --log-format, --log-level
	redisKnobs                       // the mirror's Redis (pkg/redisconf)
	serveKnobs                       // the rest: listen addresses, TLS, the internal token, accounting, sessions, drain
	retentionKnobs                   // --retention-age, --retention-batch (serve adds --retention-interval)
	migrateKnobs                     // --to

	allKnobs = databaseKnobs | logKnobs | redisKnobs | serveKnobs | retentionKnobs
)

// subcommand is what a subcommand's -h says and which knobs it takes.
type subcommand struct {
	knobs knobs
	usage string // the first lines of its -h, before its flags; %s is the program (IO.Program)
}

// subcommands are the control plane's subcommands (usage, in app.go, lists them).
var subcommands = map[string]subcommand{
	"serve": {allKnobs, `Usage: %[1]s [serve] [flags]

Serves the REST API, the internal gRPC API for enforcers and the admin port (/healthz,
/readyz, /metrics) until SIGTERM or SIGINT, then drains. Refuses a database whose schema
lacks a migration of this build, unless --auto-migrate.

Example:
  TOLLGATE_DATABASE_URL=postgres://... TOLLGATE_INTERNAL_TOKEN=... %[1]s serve`},
	"migrate": {databaseKnobs | logKnobs | migrateKnobs, `Usage: %[1]s migrate [--to N] [flags]

Applies the embedded database migrations the database lacks, and exits. A schema a
newer build migrated is accepted when every migration this build does not know says
this build can run on it (its oldest reader); otherwise it is refused, naming them.
With --to N, moves the schema to version N instead, reverting this build's migrations
above it with their down files (or applying those up to it), and prints each step: run
it with the newer build's image before rolling back to a build whose latest migration
is N (docs/admin.md, "Rolling back").

Example:
  %[1]s migrate --database-url postgres://tollgate@db:5432/tollgate
  %[1]s migrate --to 33          # before rolling back to a build whose latest is 33`},
	"resync": {databaseKnobs | logKnobs | redisKnobs, `Usage: %[1]s resync [flags]

Rebuilds the enforcers' Redis mirror from Postgres under a new generation, and exits
(a running control plane also does it by itself when Redis loses its data).

Example:
  %[1]s resync --redis-url redis://redis:6379/0`},
	"bootstrap-admin": {databaseKnobs | logKnobs | redisKnobs, `Usage: echo PASSWORD | %[1]s bootstrap-admin --email E [flags]

Creates a platform administrator, or resets their password, so that a fresh install has
its first one. A reset ends the account's sessions and revokes its API keys, and tells the
enforcers, through the mirror's Redis, to forget them. The password is the first line of standard input, never a flag, so that
it stays out of shell history and process listings.

Example:
  read -rs PW && echo "$PW" | %[1]s bootstrap-admin --email admin@example.com`},
	"retention": {databaseKnobs | logKnobs | retentionKnobs, `Usage: %[1]s retention [--apply] [flags]

Removes request-level data older than --retention-age, in batches of --retention-batch
rows, logging progress, and prints what it removed and what it kept and why: the raw
snapshots of closed starts, the raw detail of receipts (model, tokens), quarantine
records reconciled before the cutoff, and login sessions and invitations that ended
before it. Counters, receipts' costs and charges, tracking rows, audit events, open
quarantine records, live sessions and open invitations stay;
a pending start is never touched.
Without --apply it only previews. Serve can run it on a schedule
(TOLLGATE_RETENTION_INTERVAL).

Example:
  %[1]s retention --retention-age 2160h           # preview: what would go
  %[1]s retention --retention-age 2160h --apply`},
}

// parseConfig builds the config of a subcommand from its flags and the environment, and
// validates it, reporting every problem at once. Only the knobs the subcommand takes
// (subcommands) are registered, read and validated; the others keep their zero values.
// Its -h goes to stdio.Stdout, and the usage a mistyped flag prints to stdio.Stderr.
func parseConfig(name string, args []string, getenv func(string) string, stdio IO, extra func(*flag.FlagSet)) (Config, error) {
	var c Config
	var admins string
	sub, ok := subcommands[name]
	if !ok {
		return c, fmt.Errorf("parseConfig: unknown subcommand %q", name)
	}
	k := sub.knobs
	read := envflag.NewRecorder(getenv)
	getenv = read.Getenv
	e := envflag.New(getenv)
	env, durationEnv, intEnv, boolEnv := e.String, e.Duration, e.Int, e.Bool
	out := envflag.HelpOutput(args, stdio.Stdout, stdio.Stderr)
	if stdio.QuietUsage {
		out = envflag.HelpOutput(args, stdio.Stdout, io.Discard)
	}
	fs := flag.NewFlagSet(stdio.program()+" "+name, flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprintf(out, sub.usage+"\n\nFlags (a variable named in a flag's help is its default):\n", stdio.program())
		fs.PrintDefaults()
	}
	if k&databaseKnobs != 0 {
		fs.StringVar(&c.DatabaseURL, "database-url", env("TOLLGATE_DATABASE_URL", DefaultDatabaseURL), "Postgres URL (TOLLGATE_DATABASE_URL)")
		envflag.HideDefaults(fs, "database-url")
	}
	if k&redisKnobs != 0 {
		c.Redis.Register(fs, e)
	}
	if k&serveKnobs != 0 {
		fs.DurationVar(&c.MirrorCheckInterval, "mirror-check-interval", durationEnv("TOLLGATE_MIRROR_CHECK_INTERVAL", 5*time.Second), "how often the mirror generation is checked and failed Redis writes repaired (TOLLGATE_MIRROR_CHECK_INTERVAL)")
		fs.StringVar(&c.GRPCTLSCert, "grpc-tls-cert", getenv("TOLLGATE_GRPC_TLS_CERT"), "PEM certificate of the internal gRPC API; with --grpc-tls-key, serve it over TLS, the files read again every 10s (TOLLGATE_GRPC_TLS_CERT)")
		fs.StringVar(&c.GRPCTLSKey, "grpc-tls-key", getenv("TOLLGATE_GRPC_TLS_KEY"), "PEM private key of --grpc-tls-cert (TOLLGATE_GRPC_TLS_KEY)")
		fs.StringVar(&c.GRPCClientCA, "grpc-client-ca", getenv("TOLLGATE_GRPC_CLIENT_CA"), "PEM CA bundle, read again every 10s; enforcers must present a client certificate it signed (mTLS) (TOLLGATE_GRPC_CLIENT_CA)")
		fs.DurationVar(&c.GRPCMaxConnectionAge, "grpc-max-connection-age", durationEnv("TOLLGATE_GRPC_MAX_CONNECTION_AGE", DefaultGRPCMaxConnectionAge), "how long an enforcer's connection to the internal API lasts (give or take a tenth) before it is asked to reconnect, its calls finished first, so that enforcers spread over the replicas behind a Service; 0: for ever (TOLLGATE_GRPC_MAX_CONNECTION_AGE)")
		fs.IntVar(&c.AccountingLanes, "accounting-lanes", intEnv("TOLLGATE_ACCOUNTING_LANES", ledger.DefaultConfig.Lanes), "transactions committing starts (and, separately, settlements) at once (TOLLGATE_ACCOUNTING_LANES)")
		fs.IntVar(&c.AccountingMaxBatch, "accounting-max-batch", intEnv("TOLLGATE_ACCOUNTING_MAX_BATCH", ledger.DefaultConfig.MaxBatch), "most starts or settlements in one transaction (TOLLGATE_ACCOUNTING_MAX_BATCH)")
		fs.DurationVar(&c.AccountingMaxDelay, "accounting-max-delay", durationEnv("TOLLGATE_ACCOUNTING_MAX_DELAY", ledger.DefaultConfig.MaxDelay), "how long a batch waits for more items when traffic is thin (TOLLGATE_ACCOUNTING_MAX_DELAY)")
		fs.IntVar(&c.RESTDatabaseConns, "rest-database-conns", intEnv("TOLLGATE_REST_DATABASE_CONNS", 0), "most database connections REST requests hold at once, out of the pool's pool_max_conns (16 unless the URL says); the rest stays the enforcers' accounting's; 0: half the pool (TOLLGATE_REST_DATABASE_CONNS)")
		fs.StringVar(&c.HTTPAddr, "http-addr", env("TOLLGATE_HTTP_ADDR", DefaultHTTPAddr), "REST API listen address (TOLLGATE_HTTP_ADDR)")
		fs.StringVar(&c.GRPCAddr, "grpc-addr", env("TOLLGATE_GRPC_ADDR", DefaultGRPCAddr), "internal gRPC API listen address for enforcers (TOLLGATE_GRPC_ADDR)")
		fs.StringVar(&c.AdminAddr, "admin-addr", env("TOLLGATE_ADMIN_ADDR", DefaultAdminAddr), "/healthz, /readyz and /metrics listen address (TOLLGATE_ADMIN_ADDR)")
		fs.StringVar(&admins, "platform-admin-emails", getenv("TOLLGATE_PLATFORM_ADMIN_EMAILS"), "comma-separated emails added to the platform-admin allowlist at start (TOLLGATE_PLATFORM_ADMIN_EMAILS)")
		fs.StringVar(&c.InternalToken, "internal-token", getenv("TOLLGATE_INTERNAL_TOKEN"), "shared secret enforcers present on the internal API (TOLLGATE_INTERNAL_TOKEN)")
		fs.StringVar(&c.InternalTokenPrevious, "internal-token-previous", getenv("TOLLGATE_INTERNAL_TOKEN_PREVIOUS"), "while rotating the internal token, the previous one, accepted as well until every enforcer has the new one (TOLLGATE_INTERNAL_TOKEN_PREVIOUS)")
		envflag.HideDefaults(fs, "internal-token", "internal-token-previous")
	}
	if k&logKnobs != 0 {
		fs.StringVar(&c.LogFormat, "log-format", env("TOLLGATE_LOG_FORMAT", "text"), "log format: text or json (TOLLGATE_LOG_FORMAT)")
		fs.StringVar(&c.LogLevel, "log-level", env("TOLLGATE_LOG_LEVEL", "info"), "log level: debug, info, warn or error (TOLLGATE_LOG_LEVEL)")
	}
	if k&serveKnobs != 0 {
		fs.DurationVar(&c.SessionTTL, "session-ttl", durationEnv("TOLLGATE_SESSION_TTL", 7*24*time.Hour), "lifetime of session tokens (TOLLGATE_SESSION_TTL)")
		fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", durationEnv("TOLLGATE_SHUTDOWN_TIMEOUT", 20*time.Second), "how long to drain on SIGTERM, TOLLGATE_SHUTDOWN_DELAY included (TOLLGATE_SHUTDOWN_TIMEOUT)")
		fs.DurationVar(&c.ShutdownDelay, "shutdown-delay", durationEnv("TOLLGATE_SHUTDOWN_DELAY", lifecycle.DefaultShutdownDelay), lifecycle.ShutdownDelayHelp)
		fs.BoolVar(&c.TrustForwardedFor, "trust-forwarded-for", boolEnv("TOLLGATE_TRUST_FORWARDED_FOR"), "throttle sign-ins and sign-ups by X-Forwarded-For's right-most address, the one the proxy appended; only behind a proxy that sets or appends it (TOLLGATE_TRUST_FORWARDED_FOR)")
	}
	if k&retentionKnobs != 0 {
		fs.DurationVar(&c.RetentionAge, "retention-age", durationEnv("TOLLGATE_RETENTION_AGE", retention.DefaultAge), "request-level data older than this is removed by retention; at least 745h, the longest window (31 days) plus the abandonment period (TOLLGATE_RETENTION_AGE)")
		fs.IntVar(&c.RetentionBatch, "retention-batch", intEnv("TOLLGATE_RETENTION_BATCH", retention.DefaultBatch), "rows retention examines per transaction (TOLLGATE_RETENTION_BATCH)")
		if k&serveKnobs != 0 {
			fs.DurationVar(&c.RetentionInterval, "retention-interval", durationEnv("TOLLGATE_RETENTION_INTERVAL", 0), "run an applied retention this often while serving; 0 never (TOLLGATE_RETENTION_INTERVAL)")
		}
	}
	if k&migrateKnobs != 0 {
		fs.Func("to", "revert (or apply) this build's migrations to schema version `N`, from 0 to this build's latest; run with the newest build that migrated the database (no environment variable)", func(v string) error {
			n, err := strconv.Atoi(v)
			if err != nil {
				return errors.New("not a whole number")
			}
			c.MigrateTo = &n
			return nil
		})
	}
	if extra != nil {
		extra(fs)
	}
	if err := fs.Parse(args); err != nil {
		return c, ConfigError{envflag.Explain(fs, err)}
	}
	problems := e.Problems
	if fs.NArg() > 0 {
		problems = append(problems, envflag.Unexpected(fs.Args()))
	}
	for _, e := range strings.Split(admins, ",") {
		if e = strings.ToLower(strings.TrimSpace(e)); e != "" {
			if !strings.Contains(e, "@") {
				problems = append(problems, fmt.Sprintf("TOLLGATE_PLATFORM_ADMIN_EMAILS: %q is not an email", e))
			}
			c.PlatformAdminEmails = append(c.PlatformAdminEmails, e)
		}
	}
	if k&redisKnobs != 0 {
		c.Redis.Finish()
	}
	if k&serveKnobs != 0 {
		c.ShutdownDelay = lifecycle.FitDefaultDelay(c.ShutdownDelay, c.ShutdownTimeout, lifecycle.ShutdownDelaySet(fs, getenv))
	}
	problems = append(problems, c.validate(k)...)
	if len(problems) > 0 {
		return c, ConfigError{errors.New("invalid configuration:\n  " + strings.Join(problems, "\n  "))}
	}
	if stdio.Environ != nil {
		warnUnknownEnv(logging.New(c.LogFormat, c.LogLevel, stdio.Stderr), envflag.Unknown(stdio.Environ(), "TOLLGATE_", KnownEnv(), OperatorCLIEnv, read.Names()))
	}
	return c, nil
}

// KnownEnv lists the environment variables the control plane reads, under any of its
// subcommands: the names their configuration's parsing asks for, recorded over an empty
// environment. A variable of serve's is no typo in migrate's environment (one set of
// variables for both, as in deploy/compose).
func KnownEnv() []string {
	read := envflag.NewRecorder(nil)
	for name := range subcommands {
		_, _ = parseConfig(name, nil, read.Getenv, IO{Stderr: io.Discard}, nil) // the problems of no environment do not matter here
	}
	return read.Names()
}

// OperatorCLIEnv are the variables of the tollgate operator CLI's commands that call a
// running control plane (--api, --key, --org). The runbooks run them in the shell that
// runs controlplane migrate, resync and retention (docs/admin.md, "Restoring Postgres":
// controlplane migrate, then tollgate reconcile list), so they are no typo there. The
// CLI's tests hold this list to the names it reads.
var OperatorCLIEnv = []string{"TOLLGATE_API_URL", "TOLLGATE_API_KEY", "TOLLGATE_ORG_ID"}

// warnUnknownEnv names, at start, each TOLLGATE_* variable the control plane does not
// read: a typo (TOLLGATE_SESION_TTL) would otherwise leave its setting at the default
// without a word. A warning, not a refusal: an enforcer's variable in a shared
// environment is no reason not to serve. The name only, never the value, which may be a
// secret.
func warnUnknownEnv(log *slog.Logger, names []string) {
	for _, n := range names {
		log.Warn("unknown environment variable, ignored: a typo? (controlplane help and SUBCOMMAND -h list the variables)", "name", n)
	}
}

// listenAddrs are the control plane's sockets, in the order Listen opens them.
func (c Config) listenAddrs() []listen.Addr {
	return []listen.Addr{
		{Server: "rest", Env: "TOLLGATE_HTTP_ADDR", Addr: c.HTTPAddr},
		{Server: "grpc", Env: "TOLLGATE_GRPC_ADDR", Addr: c.GRPCAddr},
		{Server: "admin", Env: "TOLLGATE_ADMIN_ADDR", Addr: c.AdminAddr},
	}
}

// validate lists the problems of the knobs in k.
func (c Config) validate(k knobs) []string {
	var p []string
	if k&databaseKnobs != 0 {
		if u, err := url.Parse(c.DatabaseURL); err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
			p = append(p, "TOLLGATE_DATABASE_URL: must be a postgres:// URL")
		}
	}
	if k&logKnobs != 0 {
		p = append(p, logging.Validate(c.LogFormat, c.LogLevel)...)
	}
	if latest := store.LatestVersion(); k&migrateKnobs != 0 && c.MigrateTo != nil && (*c.MigrateTo < 0 || *c.MigrateTo > latest) {
		p = append(p, fmt.Sprintf("--to: %d is not a schema version of this build: from 0 to %d (its latest migration)", *c.MigrateTo, latest))
	}
	if k&redisKnobs != 0 {
		p = append(p, c.Redis.Validate()...)
	}
	// serve checks the retention knobs only when it runs retention.
	if k&retentionKnobs != 0 && (k&serveKnobs == 0 || c.RetentionInterval != 0) {
		p = append(p, c.retentionOptions(false).Validate()...)
	}
	if k&serveKnobs == 0 {
		return p
	}
	p = append(p, listen.Validate(c.listenAddrs()...)...)
	if problem := internaltoken.Validate(c.InternalToken); problem != "" {
		p = append(p, problem)
	}
	if problem := internaltoken.ValidateVar(internaltoken.PreviousEnv, c.InternalTokenPrevious); problem != "" {
		p = append(p, problem)
	}
	// A previous token alone would be the only token accepted, under a name that says
	// it is on its way out: a rotation half done.
	if c.InternalTokenPrevious != "" && c.InternalToken == "" {
		p = append(p, fmt.Sprintf("%s is set but %s is empty: set the new token in %s", internaltoken.PreviousEnv, internaltoken.Env, internaltoken.Env))
	}
	if c.SessionTTL < time.Minute {
		p = append(p, "TOLLGATE_SESSION_TTL: must be at least 1m")
	}
	if c.ShutdownTimeout <= 0 {
		p = append(p, "TOLLGATE_SHUTDOWN_TIMEOUT: must be positive")
	}
	if problem := lifecycle.ValidateShutdownDelay(c.ShutdownDelay, c.ShutdownTimeout); problem != "" {
		p = append(p, problem)
	}
	if c.MirrorCheckInterval <= 0 {
		p = append(p, "TOLLGATE_MIRROR_CHECK_INTERVAL: must be positive")
	}
	if (c.GRPCTLSCert == "") != (c.GRPCTLSKey == "") {
		p = append(p, "TOLLGATE_GRPC_TLS_CERT and TOLLGATE_GRPC_TLS_KEY: set both or neither")
	}
	if c.GRPCClientCA != "" && c.GRPCTLSCert == "" {
		p = append(p, "TOLLGATE_GRPC_CLIENT_CA: mTLS needs TOLLGATE_GRPC_TLS_CERT and TOLLGATE_GRPC_TLS_KEY too")
	}
	if c.GRPCMaxConnectionAge != 0 && c.GRPCMaxConnectionAge < time.Second {
		p = append(p, "TOLLGATE_GRPC_MAX_CONNECTION_AGE: must be 0 (for ever) or at least 1s")
	}
	if c.AccountingLanes < 1 || c.AccountingLanes > 64 {
		p = append(p, "TOLLGATE_ACCOUNTING_LANES: must be 1 to 64")
	}
	if c.AccountingMaxBatch < 1 || c.AccountingMaxBatch > 10000 {
		p = append(p, "TOLLGATE_ACCOUNTING_MAX_BATCH: must be 1 to 10000")
	}
	if c.AccountingMaxDelay < 0 || c.AccountingMaxDelay > time.Second {
		p = append(p, "TOLLGATE_ACCOUNTING_MAX_DELAY: must be 0 to 1s")
	}
	if c.RESTDatabaseConns < 0 {
		p = append(p, "TOLLGATE_REST_DATABASE_CONNS: must be 0 (half the pool) or a number of connections up to the pool's pool_max_conns")
	}
	if c.RetentionInterval != 0 && c.RetentionInterval < time.Minute {
		p = append(p, "TOLLGATE_RETENTION_INTERVAL: must be 0 (never) or at least 1m")
	}
	return p
}

// retentionOptions are the retention knobs as package retention takes them.
func (c Config) retentionOptions(apply bool) retention.Options {
	return retention.Options{Age: c.RetentionAge, Batch: c.RetentionBatch, Apply: apply}
}

// ConfigError is a command line or configuration a command refused before anything ran
// (a flag it does not have, a value of the wrong type, a setting its validation
// refuses): the tollgate CLI answers it with its usage exit code.
type ConfigError struct{ Err error }

func (e ConfigError) Error() string { return e.Err.Error() }
func (e ConfigError) Unwrap() error { return e.Err }
