package app

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/enforcer/cpclient"
	"github.com/tollgate-dev/tollgate/enforcer/gate"
	"github.com/tollgate-dev/tollgate/enforcer/gateway"
	"github.com/tollgate-dev/tollgate/enforcer/record"
	"github.com/tollgate-dev/tollgate/enforcer/requestbody"
	"github.com/tollgate-dev/tollgate/enforcer/settleq"
	"github.com/tollgate-dev/tollgate/enforcer/spool"
	"github.com/tollgate-dev/tollgate/pkg/credential"
	"github.com/tollgate-dev/tollgate/pkg/envflag"
	"github.com/tollgate-dev/tollgate/pkg/internaltoken"
	"github.com/tollgate-dev/tollgate/pkg/lifecycle"
	"github.com/tollgate-dev/tollgate/pkg/listen"
	"github.com/tollgate-dev/tollgate/pkg/logging"
	"github.com/tollgate-dev/tollgate/pkg/redact"
	"github.com/tollgate-dev/tollgate/pkg/redisconf"
	"github.com/tollgate-dev/tollgate/pkg/tlsreload"
)

// Config is every knob of the enforcer. Each field comes from a flag whose default is
// read from the environment variable named in its help text.
type Config struct {
	// Redis is the mirror's Redis: TOLLGATE_REDIS_URL, _MODE, _ADDRS, _SENTINEL_MASTER,
	// _SENTINEL_USERNAME, _SENTINEL_PASSWORD and
	// _PREFIX, shared with the control plane (pkg/redisconf).
	Redis redisconf.Config
	// RedisCheckTimeout bounds the Redis work of one check (reading the member's record
	// and, when unknown, the mirror's generation): past it the check is answered as
	// with Redis down, 503 in closed mode (TOLLGATE_REDIS_CHECK_TIMEOUT). Keep it well
	// under the proxy's check timeout (Envoy's ext_authz timeout).
	RedisCheckTimeout time.Duration
	// GRPCAddr serves ext_authz, ext_proc and gRPC health (TOLLGATE_ENFORCER_GRPC_ADDR).
	GRPCAddr string
	// GRPCMaxConnectionAge sends a GOAWAY to each connection to GRPCAddr at that age
	// (TOLLGATE_ENFORCER_GRPC_MAX_CONNECTION_AGE; 0: for ever), its streams left to
	// finish however long they take, so that an Envoy whose cluster is the Service's
	// one virtual IP spreads again over the enforcers behind it.
	GRPCMaxConnectionAge time.Duration
	// HTTPAddr serves /check and /settle (TOLLGATE_ENFORCER_HTTP_ADDR).
	HTTPAddr string
	// HTTPMaxConnectionAge ends each connection to HTTPAddr at that age, by its first
	// response past it (TOLLGATE_ENFORCER_HTTP_MAX_CONNECTION_AGE; 0: for ever; package
	// connage), so that a forward-auth proxy's pool spreads again over the enforcers
	// behind a Service.
	HTTPMaxConnectionAge time.Duration
	// AdminAddr serves /healthz, /readyz and /metrics (TOLLGATE_ENFORCER_ADMIN_ADDR).
	AdminAddr string
	// ControlPlaneAddr is the control plane's internal gRPC API (TOLLGATE_CONTROLPLANE_ADDR).
	ControlPlaneAddr string
	// ControlPlaneTLS secures the connection to ControlPlaneAddr: a CA bundle, a client
	// certificate and key for mTLS, and the name the server certificate must carry
	// (TOLLGATE_CONTROLPLANE_TLS_CA, _CERT, _KEY, _SERVER_NAME). Any of them turns TLS
	// on; none keeps the connection plaintext (loopback, or a mesh that encrypts).
	ControlPlaneTLS cpclient.TLSFiles
	// controlPlaneTLS is ControlPlaneTLS loaded (by parseConfig; nil: plaintext), its
	// client certificate and CA bundle read again every 10 seconds while the enforcer
	// serves.
	controlPlaneTLS *cpclient.TLS
	// InternalToken is the shared secret presented to the control plane and accepted
	// on /settle from callers other than 127.0.0.1 and ::1 (TOLLGATE_INTERNAL_TOKEN).
	InternalToken string
	// FailureMode is closed (503 on infrastructure failure) or open (admit)
	// (TOLLGATE_FAILURE_MODE).
	FailureMode string
	// DeferredBilling is refuse (403 service_gateway_billing_deferred for a request whose
	// cost the provider bills later, out of the enforcer's sight: requestbody.Deferred) or
	// allow (such requests go through and are charged what their answers report, about
	// nothing) (TOLLGATE_DEFERRED_BILLING).
	DeferredBilling string
	// DeferredBillingAllow lists the endpoints billed later (requestbody.DeferredEndpoints)
	// let through when DeferredBilling is refuse, comma-separated
	// (TOLLGATE_DEFERRED_BILLING_ALLOW): an organization that caches Gemini contexts on
	// purpose can allow context_caches and still refuse the rest.
	DeferredBillingAllow string
	// LogFormat is text or json (TOLLGATE_LOG_FORMAT).
	LogFormat string
	// LogLevel is debug, info, warn or error (TOLLGATE_LOG_LEVEL).
	LogLevel string
	// CheckTimeout bounds a check's waits on Redis and the control plane altogether when
	// its caller sends no deadline (TOLLGATE_ENFORCER_CHECK_TIMEOUT); gate.Deps.CheckTimeout.
	CheckTimeout time.Duration
	// ShutdownTimeout bounds the drain on SIGTERM (TOLLGATE_SHUTDOWN_TIMEOUT).
	ShutdownTimeout time.Duration
	// ShutdownDelay is how long, within ShutdownTimeout, the servers go on serving after
	// SIGTERM while reporting not-ready, before they stop taking connections
	// (TOLLGATE_SHUTDOWN_DELAY).
	ShutdownDelay time.Duration
	// IdentityTTL is how long a credential's identity is cached (TOLLGATE_ENFORCER_IDENTITY_TTL).
	IdentityTTL time.Duration
	// MemberAPIURL is the control plane's REST API as members reach it
	// (TOLLGATE_ENFORCER_MEMBER_API_URL): the usage-limit 429's message names the URL a
	// member asks for more on under it; empty: the route's path alone.
	MemberAPIURL string
	// BlockedTTL is the longest a member blocked by a hard limit is refused from memory
	// without reading their record; window resets and invalidations end it sooner
	// (TOLLGATE_ENFORCER_BLOCKED_TTL). 0 reads the record on every check.
	BlockedTTL time.Duration
	// SpeculativeStarts is on (a check sends its durable start beside its record read,
	// on the member's last-known record, and voids it if the fresh record disagrees) or
	// off (TOLLGATE_ENFORCER_SPECULATIVE_STARTS; gate/speculate.go).
	SpeculativeStarts string
	// StartCapacity, StartPerMember and StartDeadline bound the write-ahead start queue
	// (TOLLGATE_ENFORCER_START_CAPACITY, _START_PER_MEMBER, _START_DEADLINE).
	StartCapacity  int
	StartPerMember int
	StartDeadline  time.Duration
	// SettleCapacity bounds queued plus reserved settlements (TOLLGATE_ENFORCER_SETTLE_CAPACITY).
	SettleCapacity int
	// MemberCapacity bounds the members and credentials whose state the enforcer keeps:
	// last-read usage records, identities and kept blocks, each
	// (TOLLGATE_ENFORCER_MEMBER_CAPACITY; docs/enforcer.md, "Memory").
	MemberCapacity int
	// SettleLinger is how long a Settle call waits to gather more settlements
	// (TOLLGATE_ENFORCER_SETTLE_LINGER; settleq.Config.Linger). 0 sends at once.
	SettleLinger time.Duration
	// SettleSpoolDir is where settlements are written before they are queued, so that a
	// crash does not lose them (package spool; TOLLGATE_ENFORCER_SETTLE_SPOOL_DIR). Empty:
	// no spool. SettleSpoolMaxBytes bounds it (TOLLGATE_ENFORCER_SETTLE_SPOOL_MAX_BYTES).
	SettleSpoolDir      string
	SettleSpoolMaxBytes int
	// SettleResendWindow is how long answered settlements are kept, to be sent again
	// when the mirror is rebuilt (a replaced Postgres may have lost them; settleq's
	// SendAnsweredAgain; TOLLGATE_ENFORCER_SETTLE_RESEND_WINDOW). 0 keeps none.
	SettleResendWindow time.Duration
	// InflightCapacity bounds the admitted requests kept in memory until someone reports
	// them (TOLLGATE_ENFORCER_INFLIGHT_CAPACITY); past it the oldest unreported one is
	// settled as incomplete at once (package inflight). 0: half of SettleCapacity.
	InflightCapacity int
	// AbandonAfter settles as incomplete an admitted request nobody reported within it
	// (TOLLGATE_ENFORCER_ABANDON_AFTER). Longer than the longest response you serve.
	AbandonAfter time.Duration
	// GenerationPoll is how often the mirror's generation marker is checked
	// (TOLLGATE_ENFORCER_GENERATION_POLL).
	GenerationPoll time.Duration
	// SettleWait is how long POST /settle waits for the control plane's receipt before
	// answering 202 (TOLLGATE_ENFORCER_SETTLE_WAIT).
	SettleWait time.Duration
	// UpstreamAuthorization is the provider's credential, the whole Authorization header
	// value (e.g. "Bearer sk-..."), that ext_authz sets on every admitted request's
	// upstream request in place of the member's Tollgate credential
	// (TOLLGATE_UPSTREAM_AUTHORIZATION, or read at start from the file
	// TOLLGATE_UPSTREAM_AUTHORIZATION_FILE names). Empty: none is set.
	UpstreamAuthorization string
	// UpstreamAPIKey is the same for providers that take their key in x-api-key, such
	// as Anthropic (TOLLGATE_UPSTREAM_API_KEY, or TOLLGATE_UPSTREAM_API_KEY_FILE).
	UpstreamAPIKey string

	// The inference gateway (package gateway), off while GatewayAddr is empty
	// (TOLLGATE_GATEWAY_ADDR). Its routes come from TOLLGATE_GATEWAY_UPSTREAM with
	// TOLLGATE_GATEWAY_UPSTREAM_AUTHORIZATION (the route "/"), and from the routes file
	// TOLLGATE_GATEWAY_ROUTES; both may be given (the file's "/" wins).
	GatewayAddr string
	Gateway     gateway.Config
	// GatewayTLS is the gateway's certificate (TOLLGATE_GATEWAY_TLS_CERT and _KEY),
	// read again every tlsreload.Interval; nil: the gateway serves plain HTTP and h2c.
	GatewayTLS *tlsreload.Pair
	// GatewayMaxConnectionAge ends each client connection of the gateway at that age,
	// by its first response past it (TOLLGATE_GATEWAY_MAX_CONNECTION_AGE; 0: for ever;
	// package connage), so that clients keeping their connections spread again over
	// the enforcers behind a Service.
	GatewayMaxConnectionAge time.Duration
}

// Defaults of the address knobs.
const (
	DefaultRedisURL = redisconf.DefaultURL
	DefaultGRPCAddr = "127.0.0.1:9001"
	DefaultHTTPAddr = "127.0.0.1:9002"
	// DefaultHTTPMaxConnectionAge is TOLLGATE_ENFORCER_HTTP_MAX_CONNECTION_AGE's
	// default, the gateway's (DefaultGatewayMaxConnectionAge) for the same reason: an
	// enforcer added behind the Service gets its share of a forward-auth proxy's pooled
	// connections within about five minutes.
	DefaultHTTPMaxConnectionAge = DefaultGatewayMaxConnectionAge
	// DefaultGRPCMaxConnectionAge is TOLLGATE_ENFORCER_GRPC_MAX_CONNECTION_AGE's
	// default, the same five minutes: Envoy opens a connection (one a worker thread)
	// again in that time, and an enforcer added behind the Service gets its share.
	DefaultGRPCMaxConnectionAge = DefaultGatewayMaxConnectionAge
	DefaultAdminAddr            = "127.0.0.1:9091"
	DefaultControlPlaneAddr     = "127.0.0.1:8081"
	// DefaultRedisCheckTimeout: a healthy Redis answers a check's read in well under a
	// millisecond; a quarter second leaves room for a slow moment and still answers a
	// 503 long before Envoy's ext_authz timeout (1s in deploy/envoy; Envoy's own
	// default is 200ms, so lower this there).
	DefaultRedisCheckTimeout = 250 * time.Millisecond
)

// DefaultConfig is the configuration with every knob at its default (no environment),
// for tests and harnesses that build an Enforcer with New.
func DefaultConfig() Config {
	c, err := parseConfig(nil, func(string) string { return "" }, io.Discard)
	if err != nil {
		panic(err) // the defaults are valid; TestDefaultConfig guards it
	}
	return c
}

// KnownEnv lists the environment variables the enforcer reads: the names its
// configuration's parsing asks for, recorded over an empty environment (the routes
// file's credentialEnv names, which only a routes file gives, aside).
func KnownEnv() []string {
	read := envflag.NewRecorder(nil)
	_, _ = parseConfig(nil, read.Getenv, io.Discard) // the problems of no environment do not matter here
	return read.Names()
}

// warnUnknownEnv names, at start, each TOLLGATE_* variable the enforcer does not read:
// a typo (TOLLGATE_GATEWAY_UPSTREM) would otherwise leave its setting at the default
// without a word. A warning, not a refusal: a variable of another program (or of a
// newer or older build) in a shared environment is no reason not to serve. The name
// only, never the value, which may be a secret.
func warnUnknownEnv(log *slog.Logger, names []string) {
	for _, n := range names {
		log.Warn("unknown environment variable, ignored: a typo? (enforcer -h lists the variables)", "name", n)
	}
}

// InflightLimit is InflightCapacity with its default applied: half the settle capacity,
// and never more than what queued starts leave of it (both hold reservations).
func (c Config) InflightLimit() int {
	if c.InflightCapacity > 0 {
		return c.InflightCapacity
	}
	return max(min(c.SettleCapacity/2, c.SettleCapacity-c.StartCapacity), 1)
}

// Speculate reports whether checks send speculative starts.
func (c Config) Speculate() bool { return c.SpeculativeStarts == "on" }

// FailOpen reports whether infrastructure failures admit.
func (c Config) FailOpen() bool { return c.FailureMode == "open" }

// AllowDeferred is the set of endpoints billed later that go through: all of them with
// DeferredBilling allow, else those DeferredBillingAllow lists (validated).
func (c Config) AllowDeferred() requestbody.DeferredAllowed {
	if c.DeferredBilling == "allow" {
		a, _ := requestbody.AllowDeferred(requestbody.DeferredEndpoints...)
		return a
	}
	a, _ := requestbody.AllowDeferred(envflag.List(c.DeferredBillingAllow)...)
	return a
}

// parseConfig builds the config from flags and the environment and validates it,
// reporting every problem at once.
func parseConfig(args []string, getenv func(string) string, out io.Writer) (Config, error) {
	var c Config
	e := envflag.New(getenv)
	env, durationEnv, intEnv := e.String, e.Duration, e.Int
	fs := flag.NewFlagSet("enforcer", flag.ContinueOnError)
	fs.SetOutput(out)
	c.Redis.Register(fs, e)
	fs.DurationVar(&c.RedisCheckTimeout, "redis-check-timeout", durationEnv("TOLLGATE_REDIS_CHECK_TIMEOUT", DefaultRedisCheckTimeout), "longest a check waits for Redis before answering as with Redis down (503 in closed mode); keep it well under the proxy's check timeout (TOLLGATE_REDIS_CHECK_TIMEOUT)")
	fs.StringVar(&c.GRPCAddr, "grpc-addr", env("TOLLGATE_ENFORCER_GRPC_ADDR", DefaultGRPCAddr), "ext_authz, ext_proc and gRPC health listen address (TOLLGATE_ENFORCER_GRPC_ADDR)")
	fs.StringVar(&c.HTTPAddr, "http-addr", env("TOLLGATE_ENFORCER_HTTP_ADDR", DefaultHTTPAddr), "HTTP /check and /settle listen address (TOLLGATE_ENFORCER_HTTP_ADDR)")
	fs.DurationVar(&c.GRPCMaxConnectionAge, "grpc-max-connection-age", durationEnv("TOLLGATE_ENFORCER_GRPC_MAX_CONNECTION_AGE", DefaultGRPCMaxConnectionAge), "how long a connection to ext_authz and ext_proc lasts (give or take a tenth) before the enforcer asks its client to connect again (a GOAWAY; its streams finish, however long), so that an Envoy dialing the Service's virtual IP spreads over the enforcers behind it; 0: for ever (TOLLGATE_ENFORCER_GRPC_MAX_CONNECTION_AGE)")
	fs.DurationVar(&c.HTTPMaxConnectionAge, "http-max-connection-age", durationEnv("TOLLGATE_ENFORCER_HTTP_MAX_CONNECTION_AGE", DefaultHTTPMaxConnectionAge), "how long a connection to /check and /settle lasts (give or take a tenth) before its next response closes it (Connection: close), so that a forward-auth proxy's pool spreads over the enforcers behind a Service; 0: for ever (TOLLGATE_ENFORCER_HTTP_MAX_CONNECTION_AGE)")
	fs.StringVar(&c.AdminAddr, "admin-addr", env("TOLLGATE_ENFORCER_ADMIN_ADDR", DefaultAdminAddr), "/healthz, /readyz and /metrics listen address (TOLLGATE_ENFORCER_ADMIN_ADDR)")
	fs.StringVar(&c.ControlPlaneAddr, "controlplane-addr", env("TOLLGATE_CONTROLPLANE_ADDR", DefaultControlPlaneAddr), "the control plane's internal gRPC address (TOLLGATE_CONTROLPLANE_ADDR)")
	fs.StringVar(&c.ControlPlaneTLS.CA, "controlplane-tls-ca", getenv("TOLLGATE_CONTROLPLANE_TLS_CA"), "PEM CA bundle that signs the control plane's certificate, read again every 10s; turns TLS on (empty with another TLS setting: the system's roots) (TOLLGATE_CONTROLPLANE_TLS_CA)")
	fs.StringVar(&c.ControlPlaneTLS.Cert, "controlplane-tls-cert", getenv("TOLLGATE_CONTROLPLANE_TLS_CERT"), "PEM client certificate presented to the control plane (mTLS); with --controlplane-tls-key, the files read again every 10s (TOLLGATE_CONTROLPLANE_TLS_CERT)")
	fs.StringVar(&c.ControlPlaneTLS.Key, "controlplane-tls-key", getenv("TOLLGATE_CONTROLPLANE_TLS_KEY"), "PEM private key of --controlplane-tls-cert (TOLLGATE_CONTROLPLANE_TLS_KEY)")
	fs.StringVar(&c.ControlPlaneTLS.ServerName, "controlplane-tls-server-name", getenv("TOLLGATE_CONTROLPLANE_TLS_SERVER_NAME"), "name the control plane's certificate must carry, when not the host of --controlplane-addr; turns TLS on (TOLLGATE_CONTROLPLANE_TLS_SERVER_NAME)")
	fs.StringVar(&c.InternalToken, "internal-token", getenv("TOLLGATE_INTERNAL_TOKEN"), "shared secret for the control plane's internal API and for /settle callers other than 127.0.0.1 and ::1 (TOLLGATE_INTERNAL_TOKEN)")
	envflag.HideDefaults(fs, "internal-token")
	fs.StringVar(&c.FailureMode, "failure-mode", env("TOLLGATE_FAILURE_MODE", "closed"), "on Redis or control-plane failure: closed answers 503, open admits (TOLLGATE_FAILURE_MODE)")
	fs.StringVar(&c.DeferredBilling, "deferred-billing", env("TOLLGATE_DEFERRED_BILLING", "refuse"), "requests whose cost is billed later, out of the enforcer's sight (batches, background responses, Assistants runs, fine-tuning jobs, videos, Realtime sessions, eval runs, agent sessions, context caches, file indexing, containers: docs/enforcer.md): refuse answers 403, allow lets them through at about no charge (TOLLGATE_DEFERRED_BILLING)")
	fs.StringVar(&c.DeferredBillingAllow, "deferred-billing-allow", env("TOLLGATE_DEFERRED_BILLING_ALLOW", ""), "with refuse, the endpoints billed later that are let through all the same, comma-separated (context_caches,batches; the names of docs/enforcer.md, \"Deferred billing\") (TOLLGATE_DEFERRED_BILLING_ALLOW)")
	fs.StringVar(&c.LogFormat, "log-format", env("TOLLGATE_LOG_FORMAT", "text"), "log format: text or json (TOLLGATE_LOG_FORMAT)")
	fs.StringVar(&c.LogLevel, "log-level", env("TOLLGATE_LOG_LEVEL", "info"), "log level: debug, info, warn or error (TOLLGATE_LOG_LEVEL)")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", durationEnv("TOLLGATE_SHUTDOWN_TIMEOUT", 20*time.Second), "how long to drain on SIGTERM, TOLLGATE_SHUTDOWN_DELAY included (TOLLGATE_SHUTDOWN_TIMEOUT)")
	fs.DurationVar(&c.ShutdownDelay, "shutdown-delay", durationEnv("TOLLGATE_SHUTDOWN_DELAY", lifecycle.DefaultShutdownDelay), lifecycle.ShutdownDelayHelp)
	fs.DurationVar(&c.IdentityTTL, "identity-ttl", durationEnv("TOLLGATE_ENFORCER_IDENTITY_TTL", 30*time.Second), "how long a credential's identity is cached; invalidations usually end it sooner (TOLLGATE_ENFORCER_IDENTITY_TTL)")
	fs.StringVar(&c.MemberAPIURL, "member-api-url", getenv("TOLLGATE_ENFORCER_MEMBER_API_URL"), "the control plane's REST API as members reach it (https://tollgate.example.com): the usage-limit 429's message names where to ask for more under it; empty: the path alone (TOLLGATE_ENFORCER_MEMBER_API_URL)")
	fs.DurationVar(&c.BlockedTTL, "blocked-ttl", durationEnv("TOLLGATE_ENFORCER_BLOCKED_TTL", time.Second), "longest a blocked member is refused from memory without reading their record; window resets and invalidations end it sooner; 0 turns it off (TOLLGATE_ENFORCER_BLOCKED_TTL)")
	fs.StringVar(&c.SpeculativeStarts, "speculative-starts", env("TOLLGATE_ENFORCER_SPECULATIVE_STARTS", "on"), "on: a check sends its durable start beside its record read, on the member's last-known record, and voids it uncharged when the fresh record refuses or differs; off: after it (TOLLGATE_ENFORCER_SPECULATIVE_STARTS)")
	fs.IntVar(&c.StartCapacity, "start-capacity", intEnv("TOLLGATE_ENFORCER_START_CAPACITY", 4096), "most write-ahead starts queued at once (TOLLGATE_ENFORCER_START_CAPACITY)")
	fs.IntVar(&c.StartPerMember, "start-per-member", intEnv("TOLLGATE_ENFORCER_START_PER_MEMBER", 256), "most write-ahead starts of one member queued at once (TOLLGATE_ENFORCER_START_PER_MEMBER)")
	fs.DurationVar(&c.CheckTimeout, "check-timeout", durationEnv("TOLLGATE_ENFORCER_CHECK_TIMEOUT", gate.DefaultCheckTimeout), "longest a check waits on Redis and the control plane altogether, when its caller sends no deadline (HTTP /check, the gateway; a gRPC check's deadline, Envoy's grpc-timeout, less a margin bounds it otherwise); past it the check is answered by the failure mode (503 in closed mode, admitted in open mode); keep it under the proxy's check timeout (TOLLGATE_ENFORCER_CHECK_TIMEOUT)")
	fs.DurationVar(&c.StartDeadline, "start-deadline", durationEnv("TOLLGATE_ENFORCER_START_DEADLINE", 500*time.Millisecond), "longest wait for a durable start; keep it under the proxy's check timeout (TOLLGATE_ENFORCER_START_DEADLINE)")
	fs.IntVar(&c.MemberCapacity, "member-capacity", intEnv("TOLLGATE_ENFORCER_MEMBER_CAPACITY", record.DefaultConfig.LastKnown), "most members and credentials whose state is kept (last-read usage records, identities, kept blocks; about 4 KB each at most); past it an entry is dropped and read or asked for again when needed (TOLLGATE_ENFORCER_MEMBER_CAPACITY)")
	fs.IntVar(&c.SettleCapacity, "settle-capacity", intEnv("TOLLGATE_ENFORCER_SETTLE_CAPACITY", settleq.DefaultConfig.Capacity), "most settlements queued plus reserved (TOLLGATE_ENFORCER_SETTLE_CAPACITY)")
	fs.DurationVar(&c.SettleLinger, "settle-linger", durationEnv("TOLLGATE_ENFORCER_SETTLE_LINGER", settleq.DefaultConfig.Linger), "how long a settlement call waits to gather more settlements; later spend in the mirror for less control-plane CPU; 0 sends at once (TOLLGATE_ENFORCER_SETTLE_LINGER)")
	fs.StringVar(&c.SettleSpoolDir, "settle-spool-dir", env("TOLLGATE_ENFORCER_SETTLE_SPOOL_DIR", ""), "directory of the settlement spool: settlements are written there before they are queued and sent again after a crash; empty turns it off (TOLLGATE_ENFORCER_SETTLE_SPOOL_DIR)")
	fs.IntVar(&c.SettleSpoolMaxBytes, "settle-spool-max-bytes", intEnv("TOLLGATE_ENFORCER_SETTLE_SPOOL_MAX_BYTES", int(spool.DefaultConfig.MaxBytes)), "most bytes the settlement spool takes on disk; settlements past it are queued unspooled and counted (TOLLGATE_ENFORCER_SETTLE_SPOOL_MAX_BYTES)")
	fs.DurationVar(&c.SettleResendWindow, "settle-resend-window", durationEnv("TOLLGATE_ENFORCER_SETTLE_RESEND_WINDOW", settleq.DefaultConfig.ResendWindow), "how long settlements the control plane answered are kept, to be sent again when the mirror is rebuilt under a new generation (Postgres replaced: a failover's lost tail, a restore); at most the settle capacity, about 300 bytes each; 0 keeps none (TOLLGATE_ENFORCER_SETTLE_RESEND_WINDOW)")
	fs.IntVar(&c.InflightCapacity, "inflight-capacity", intEnv("TOLLGATE_ENFORCER_INFLIGHT_CAPACITY", 0), "most admitted requests kept until reported; past it the oldest unreported one is settled as incomplete at once; 0: half the settle capacity (TOLLGATE_ENFORCER_INFLIGHT_CAPACITY)")
	fs.DurationVar(&c.AbandonAfter, "abandon-after", durationEnv("TOLLGATE_ENFORCER_ABANDON_AFTER", 15*time.Minute), "settle as incomplete an admitted request that nobody reported within this (TOLLGATE_ENFORCER_ABANDON_AFTER)")
	fs.DurationVar(&c.GenerationPoll, "generation-poll", durationEnv("TOLLGATE_ENFORCER_GENERATION_POLL", time.Second), "how often to check the mirror's generation marker (TOLLGATE_ENFORCER_GENERATION_POLL)")
	fs.DurationVar(&c.SettleWait, "settle-wait", durationEnv("TOLLGATE_ENFORCER_SETTLE_WAIT", 10*time.Second), "how long POST /settle waits for the receipt before answering 202 (TOLLGATE_ENFORCER_SETTLE_WAIT)")
	// The provider's credentials: the environment is read after parsing, not as the
	// flags' defaults, so that -h never prints a secret.
	var authFile, keyFile string
	fs.StringVar(&c.UpstreamAuthorization, "upstream-authorization", "", "the provider's Authorization header value (e.g. \"Bearer sk-...\") set on admitted requests in place of the member's credential; empty sets none (TOLLGATE_UPSTREAM_AUTHORIZATION)")
	fs.StringVar(&authFile, "upstream-authorization-file", "", "file holding the upstream Authorization value, read at start (TOLLGATE_UPSTREAM_AUTHORIZATION_FILE)")
	fs.StringVar(&c.UpstreamAPIKey, "upstream-api-key", "", "the provider's x-api-key value (Anthropic) set on admitted requests in place of the member's key; empty sets none (TOLLGATE_UPSTREAM_API_KEY)")
	fs.StringVar(&keyFile, "upstream-api-key-file", "", "file holding the upstream x-api-key value, read at start (TOLLGATE_UPSTREAM_API_KEY_FILE)")
	var gw gatewayFlags
	gw.register(fs, e)
	if err := fs.Parse(args); err != nil {
		return c, envflag.Explain(fs, err)
	}
	problems := e.Problems
	problems = append(problems, gw.finish(&c, getenv)...)
	problems = append(problems, upstreamCredential(&c.UpstreamAuthorization, authFile, "TOLLGATE_UPSTREAM_AUTHORIZATION", getenv)...)
	problems = append(problems, upstreamCredential(&c.UpstreamAPIKey, keyFile, "TOLLGATE_UPSTREAM_API_KEY", getenv)...)
	if fs.NArg() > 0 {
		problems = append(problems, envflag.Unexpected(fs.Args()))
	}
	c.Redis.Finish()
	c.ShutdownDelay = lifecycle.FitDefaultDelay(c.ShutdownDelay, c.ShutdownTimeout, lifecycle.ShutdownDelaySet(fs, getenv))
	problems = append(problems, c.validate()...)
	// The files are read now, so a missing or unreadable one is reported with the rest
	// rather than as a failing connection later.
	if loaded, err := c.ControlPlaneTLS.Load(); err != nil {
		problems = append(problems, err.Error())
	} else {
		c.controlPlaneTLS = loaded
	}
	if len(problems) > 0 {
		return c, errors.New("invalid configuration:\n  " + strings.Join(problems, "\n  "))
	}
	return c, nil
}

// upstreamCredential settles one provider credential from its flags (value, file) and
// environment (NAME, NAME_FILE), flags first: a value and a file together are refused,
// a file is read now (one that cannot be read is a start-up problem) and its trailing
// line break dropped. The value must be a valid header value.
func upstreamCredential(v *string, file, name string, getenv func(string) string) []string {
	if *v == "" && file == "" {
		*v, file = getenv(name), getenv(name+"_FILE")
	}
	if *v != "" && file != "" {
		return []string{fmt.Sprintf("%s and %s_FILE: set one, not both", name, name)}
	}
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return []string{fmt.Sprintf("%s_FILE: %v", name, redact.FileError("", err))}
		}
		*v = strings.TrimRight(string(b), "\r\n")
		if *v == "" {
			return []string{fmt.Sprintf("%s_FILE: %s is empty", name, file)}
		}
	}
	if !credential.ValidHeaderValue(*v) {
		// Never the value itself in the message: it is a secret.
		return []string{fmt.Sprintf("%s: not a valid header value (leading or trailing space, or a control character)", name)}
	}
	return nil
}

// listenAddrs are the enforcer's sockets, in the order Listen opens them; the gateway's
// last, when it is on.
func (c Config) listenAddrs() []listen.Addr {
	addrs := []listen.Addr{
		{Server: "grpc", Env: "TOLLGATE_ENFORCER_GRPC_ADDR", Addr: c.GRPCAddr},
		{Server: "http", Env: "TOLLGATE_ENFORCER_HTTP_ADDR", Addr: c.HTTPAddr},
		{Server: "admin", Env: "TOLLGATE_ENFORCER_ADMIN_ADDR", Addr: c.AdminAddr},
	}
	if c.GatewayAddr != "" {
		addrs = append(addrs, listen.Addr{Server: "gateway", Env: "TOLLGATE_GATEWAY_ADDR", Addr: c.GatewayAddr})
	}
	return addrs
}

func (c Config) validate() []string {
	var p []string
	p = append(p, c.Redis.Validate()...)
	p = append(p, listen.Validate(append(c.listenAddrs(), listen.Addr{Env: "TOLLGATE_CONTROLPLANE_ADDR", Addr: c.ControlPlaneAddr})...)...)
	if problem := internaltoken.Validate(c.InternalToken); problem != "" {
		p = append(p, problem)
	}
	if problem := validateMemberAPIURL(c.MemberAPIURL); problem != "" {
		p = append(p, problem)
	}
	if c.FailureMode != "closed" && c.FailureMode != "open" {
		p = append(p, "TOLLGATE_FAILURE_MODE: must be closed or open")
	}
	if c.SpeculativeStarts != "on" && c.SpeculativeStarts != "off" {
		p = append(p, "TOLLGATE_ENFORCER_SPECULATIVE_STARTS: must be on or off")
	}
	if c.DeferredBilling != "refuse" && c.DeferredBilling != "allow" {
		p = append(p, "TOLLGATE_DEFERRED_BILLING: must be refuse or allow")
	}
	if _, err := requestbody.AllowDeferred(envflag.List(c.DeferredBillingAllow)...); err != nil {
		p = append(p, "TOLLGATE_DEFERRED_BILLING_ALLOW: "+err.Error())
	} else if c.DeferredBilling == "allow" && c.DeferredBillingAllow != "" {
		p = append(p, "TOLLGATE_DEFERRED_BILLING_ALLOW: only with TOLLGATE_DEFERRED_BILLING=refuse (allow lets every endpoint through)")
	}
	p = append(p, logging.Validate(c.LogFormat, c.LogLevel)...)
	if problem := lifecycle.ValidateShutdownDelay(c.ShutdownDelay, c.ShutdownTimeout); problem != "" {
		p = append(p, problem)
	}
	positive := []struct {
		name string
		ok   bool
	}{
		{"TOLLGATE_SHUTDOWN_TIMEOUT: must be positive", c.ShutdownTimeout > 0},
		{"TOLLGATE_ENFORCER_HTTP_MAX_CONNECTION_AGE: must be 0 (for ever) or at least 1s", c.HTTPMaxConnectionAge == 0 || c.HTTPMaxConnectionAge >= time.Second},
		{"TOLLGATE_ENFORCER_GRPC_MAX_CONNECTION_AGE: must be 0 (for ever) or at least 1s", c.GRPCMaxConnectionAge == 0 || c.GRPCMaxConnectionAge >= time.Second},
		{"TOLLGATE_ENFORCER_IDENTITY_TTL: must be positive", c.IdentityTTL > 0},
		{"TOLLGATE_REDIS_CHECK_TIMEOUT: must be between 10ms and 10s", c.RedisCheckTimeout >= 10*time.Millisecond && c.RedisCheckTimeout <= 10*time.Second},
		{"TOLLGATE_ENFORCER_BLOCKED_TTL: must be between 0 and 1m", c.BlockedTTL >= 0 && c.BlockedTTL <= time.Minute},
		{"TOLLGATE_ENFORCER_START_CAPACITY: must be positive", c.StartCapacity > 0},
		{"TOLLGATE_ENFORCER_START_PER_MEMBER: must be positive and at most the start capacity", c.StartPerMember > 0 && c.StartPerMember <= c.StartCapacity},
		{"TOLLGATE_ENFORCER_START_DEADLINE: must be positive", c.StartDeadline > 0},
		{"TOLLGATE_ENFORCER_CHECK_TIMEOUT: must be between 50ms and 1m", c.CheckTimeout >= 50*time.Millisecond && c.CheckTimeout <= time.Minute},
		{"TOLLGATE_ENFORCER_SETTLE_CAPACITY: must be at least the start capacity (every queued start reserves a settlement)", c.SettleCapacity >= c.StartCapacity},
		{"TOLLGATE_ENFORCER_MEMBER_CAPACITY: must be at least 1000 (a smaller one would send most checks back to the control plane)", c.MemberCapacity >= 1000},
		{"TOLLGATE_ENFORCER_ABANDON_AFTER: must be at least 1m", c.AbandonAfter >= time.Minute},
		{"TOLLGATE_ENFORCER_SETTLE_SPOOL_MAX_BYTES: must be at least 1048576 (1 MiB)", c.SettleSpoolMaxBytes >= 1<<20},
		{"TOLLGATE_ENFORCER_INFLIGHT_CAPACITY: must be 0 (half the settle capacity) or positive and at most the settle capacity minus the start capacity (each unreported request holds a settlement reservation; the rest is for queued settlements and starts)",
			c.InflightCapacity == 0 || c.InflightCapacity > 0 && c.InflightCapacity <= c.SettleCapacity-c.StartCapacity},
		{"TOLLGATE_ENFORCER_SETTLE_WAIT: must be positive", c.SettleWait > 0},
		{"TOLLGATE_ENFORCER_SETTLE_LINGER: must be between 0 and 1s", c.SettleLinger >= 0 && c.SettleLinger <= time.Second},
		{"TOLLGATE_ENFORCER_GENERATION_POLL: must be between 10ms and 1m", c.GenerationPoll >= 10*time.Millisecond && c.GenerationPoll <= time.Minute},
		{"TOLLGATE_ENFORCER_SETTLE_RESEND_WINDOW: must be between 0 and 1h", c.SettleResendWindow >= 0 && c.SettleResendWindow <= time.Hour},
	}
	for _, x := range positive {
		if !x.ok {
			p = append(p, x.name)
		}
	}
	return p
}

// validateMemberAPIURL: empty, or an absolute http(s) URL with a host and nothing a
// request's path cannot follow (no query, no fragment): the 429 appends the route to it.
func validateMemberAPIURL(v string) string {
	if v == "" {
		return ""
	}
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return "TOLLGATE_ENFORCER_MEMBER_API_URL: must be an http or https URL with a host and no query, fragment or user (the control plane's REST API as members reach it, such as https://tollgate.example.com)"
	}
	return ""
}
