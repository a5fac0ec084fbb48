// Package app is the enforcer program: its configuration, the wiring of its parts and
// the lifecycle of its servers (gRPC ext_authz + ext_proc + health, HTTP forward-auth,
// admin). cmd/enforcer only calls Run; tests and the end-to-end harness either call Run
// too or build an Enforcer with New from their own Redis and control-plane client.
package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/tollgate-dev/tollgate/pkg/redisconf"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	"github.com/tollgate-dev/tollgate/enforcer/authz"
	"github.com/tollgate-dev/tollgate/enforcer/containersession"
	"github.com/tollgate-dev/tollgate/enforcer/cpclient"
	"github.com/tollgate-dev/tollgate/enforcer/extproc"
	"github.com/tollgate-dev/tollgate/enforcer/gate"
	"github.com/tollgate-dev/tollgate/enforcer/gateway"
	"github.com/tollgate-dev/tollgate/enforcer/httpcheck"
	"github.com/tollgate-dev/tollgate/enforcer/identity"
	"github.com/tollgate-dev/tollgate/enforcer/inflight"
	"github.com/tollgate-dev/tollgate/enforcer/invalidation"
	"github.com/tollgate-dev/tollgate/enforcer/metrics"
	"github.com/tollgate-dev/tollgate/enforcer/record"
	"github.com/tollgate-dev/tollgate/enforcer/requestbody"
	"github.com/tollgate-dev/tollgate/enforcer/responseusage"
	"github.com/tollgate-dev/tollgate/enforcer/settleq"
	"github.com/tollgate-dev/tollgate/enforcer/spool"
	"github.com/tollgate-dev/tollgate/enforcer/startq"
	"github.com/tollgate-dev/tollgate/enforcer/streamoptions"
	"github.com/tollgate-dev/tollgate/pkg/admin"
	"github.com/tollgate-dev/tollgate/pkg/clock"
	"github.com/tollgate-dev/tollgate/pkg/connage"
	"github.com/tollgate-dev/tollgate/pkg/envflag"
	"github.com/tollgate-dev/tollgate/pkg/grpcflow"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/lifecycle"
	"github.com/tollgate-dev/tollgate/pkg/listen"
	"github.com/tollgate-dev/tollgate/pkg/logging"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
	"github.com/tollgate-dev/tollgate/pkg/tlsreload"
)

// IO is what the program reads and writes.
type IO struct {
	Stdout io.Writer
	Stderr io.Writer
	// Environ lists the environment (os.Environ) so that a TOLLGATE_* variable the
	// enforcer does not read, a typo most likely, is named in a warning at start. Nil
	// checks nothing: a harness that runs both programs in one process (tollgate dev)
	// shares one environment between them.
	Environ func() []string
}

// Run runs the enforcer with the given arguments (without the program name) until ctx
// ends, then drains.
func Run(ctx context.Context, args []string, getenv func(string) string, stdio IO) error {
	if len(args) > 0 && (args[0] == "help" || args[0] == "serve") {
		if args[0] == "help" {
			args = []string{"-h"}
		} else {
			args = args[1:]
		}
	}
	read := envflag.NewRecorder(getenv)
	cfg, err := parseConfig(args, read.Getenv, envflag.HelpOutput(args, stdio.Stdout, stdio.Stderr))
	if errors.Is(err, flag.ErrHelp) {
		return nil // the flag package already printed the help
	}
	if err != nil {
		return err
	}
	log := logging.New(cfg.LogFormat, cfg.LogLevel, stdio.Stderr)
	logging.RouteRedis(log)
	if stdio.Environ != nil {
		// What this start read too: the routes file's credentialEnv names.
		warnUnknownEnv(log, envflag.Unknown(stdio.Environ(), "TOLLGATE_", KnownEnv(), read.Names()))
	}
	if cfg.InternalToken == "" {
		log.Warn("TOLLGATE_INTERNAL_TOKEN is empty: the control plane will refuse this enforcer unless it uses mTLS, and /settle accepts loopback callers only")
	}
	rdb, err := NewRedis(cfg)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := metrics.New(reg)
	var sp *spool.Spool
	var pending []spool.Pending
	if cfg.SettleSpoolDir == "" {
		log.Warn("TOLLGATE_ENFORCER_SETTLE_SPOOL_DIR is empty: a crash loses the settlements not yet acknowledged by the control plane")
	} else if sp, pending, err = spool.Open(spool.Config{Dir: cfg.SettleSpoolDir, MaxBytes: int64(cfg.SettleSpoolMaxBytes)}, m, log); err != nil {
		rdb.Close()
		return err
	} else if warning := cfg.SpoolShortfall(); warning != "" {
		log.Warn(warning)
	}
	if warning := cfg.MemoryShortfall(goMemoryLimit(), containerMemoryLimit()); warning != "" {
		log.Warn(warning)
	}
	closeSpool := func() {
		if sp != nil {
			if err := sp.Close(); err != nil {
				log.Error("closing the settlement spool", "error", err)
			}
		}
	}
	cc, err := cpclient.Dial(cfg.ControlPlaneAddr, cpclient.Options{Token: cfg.InternalToken, TLS: cfg.controlPlaneTLS.Credentials()}, m)
	if err != nil {
		closeSpool()
		rdb.Close()
		return fmt.Errorf("control plane client: %w", err)
	}
	e := New(Deps{Config: cfg, Redis: rdb, ControlPlane: cpclient.New(cc), Layout: mirror.Layout{Prefix: cfg.Redis.Prefix},
		Clock: clock.System{}, Log: log, Registry: reg, Metrics: m, Spool: sp, SpoolPending: pending})
	lns, err := Listen(cfg, log)
	if err != nil {
		closeSpool()
		cc.Close()
		rdb.Close()
		return err
	}
	err = e.Serve(ctx, lns)
	// Pools last: the servers and queues have drained. The spool keeps what the drain
	// left for the next start.
	closeSpool()
	cc.Close()
	rdb.Close()
	log.Info("stopped")
	return err
}

// CheckConfig reports what Run with args would refuse of its configuration (getenv)
// before it opens anything, as its start does, without starting: `tollgate dev --reset`
// asks it before it empties the database, so that a typo costs no demo data.
func CheckConfig(args []string, getenv func(string) string) error {
	_, err := parseConfig(args, getenv, io.Discard)
	return err
}

// NewRedis builds the Redis client of the configured topology. Checks have tight
// budgets: fail fast rather than queue behind a dead server. A check's own deadline
// (TOLLGATE_REDIS_CHECK_TIMEOUT, record.Config.RedisTimeout) bounds its dial and reads
// too, so that a hung Redis costs it that much, not the client's timeouts and retries.
func NewRedis(cfg Config) (redis.UniversalClient, error) {
	return cfg.Redis.NewClient(redisconf.Timeouts{Dial: 2 * time.Second, Read: 500 * time.Millisecond, Write: 500 * time.Millisecond,
		ContextDeadlines: true})
}

// Deps are what New needs.
type Deps struct {
	Config       Config
	Redis        redis.UniversalClient
	ControlPlane internalv1.AccountingClient
	Layout       mirror.Layout
	Clock        clock.Clock
	Log          *slog.Logger
	// Registry serves /metrics; Metrics must be registered on it (New creates both
	// when Metrics is nil).
	Registry *prometheus.Registry
	Metrics  *metrics.Metrics
	// StartWorkers and SettleWorkers override the queues' concurrency (0 = default).
	StartWorkers, SettleWorkers int
	// Spool, when not nil, is the open settlement spool and SpoolPending what it held
	// unacknowledged (spool.Open): the settle queue sends those first. The caller closes
	// the spool after Serve.
	Spool        *spool.Spool
	SpoolPending []spool.Pending
}

// Enforcer is the assembled program.
type Enforcer struct {
	cfg    Config
	log    *slog.Logger
	reg    *prometheus.Registry
	rdb    redis.UniversalClient
	layout mirror.Layout
	// redisRefused: the last readiness probe met NOPERM (logged once per transition).
	redisRefused atomic.Bool
	spool        *spool.Spool

	Metrics *metrics.Metrics
	// ControlPlane is the client every part calls the control plane through; it follows
	// whether the control plane accepts this enforcer (readiness).
	ControlPlane *cpclient.Health
	Gate         *gate.Gate
	Tracker      *inflight.Tracker
	Settle       *settleq.Queue
	Starts       *startq.Queue
	Identity     *identity.Cache
	Records      *record.Reader
	// Invalidations applies the control plane's invalidations to Identity and the
	// gate's blocked decisions.
	Invalidations *invalidation.Watcher
	// StreamOptions shares the refusals of stream_options the fronts learn with every
	// enforcer, through Redis.
	StreamOptions *streamoptions.Share
	// GRPC serves ext_authz, ext_proc and health; HTTP serves /check and /settle;
	// Admin serves /healthz, /readyz, /metrics.
	GRPC   *grpc.Server
	Health *health.Server
	HTTP   *httpcheck.Handler
	Admin  *admin.Handler
	// Gateway is the inference gateway; nil when it is off (no TOLLGATE_GATEWAY_ADDR).
	Gateway *gateway.Gateway
	// Decoding bounds the compressed request bodies ext_proc and the gateway decode at
	// once (requestbody.DecodeBudget, one for the process).
	Decoding *requestbody.Decoding
}

// New wires an enforcer. Nothing runs until Serve.
func New(d Deps) *Enforcer {
	if d.Registry == nil {
		d.Registry = prometheus.NewRegistry()
	}
	if d.Metrics == nil {
		d.Metrics = metrics.New(d.Registry)
	}
	if d.Clock == nil {
		d.Clock = clock.System{}
	}
	cfg, m, log := d.Config, d.Metrics, d.Log
	e := &Enforcer{cfg: cfg, log: log, reg: d.Registry, rdb: d.Redis, layout: d.Layout, spool: d.Spool, Metrics: m}
	// parseConfig loaded the TLS files (nil: plaintext).
	e.ControlPlane = cpclient.NewHealth(d.ControlPlane, cfg.ControlPlaneAddr, cpclient.HealthConfig{TLS: cfg.controlPlaneTLS}, log)
	cp := e.ControlPlane
	// settleq takes a zero field for its default and a negative one for none (send at
	// once, keep nothing); here 0 means none.
	zeroIsNone := func(d time.Duration) time.Duration {
		if d == 0 {
			return -1
		}
		return d
	}
	e.Settle = settleq.New(cp, settleq.Config{Capacity: cfg.SettleCapacity, Workers: d.SettleWorkers, Linger: zeroIsNone(cfg.SettleLinger),
		ResendWindow: zeroIsNone(cfg.SettleResendWindow)}, m, log)
	if d.Spool != nil {
		e.Settle.UseSpool(d.Spool, d.SpoolPending)
	}
	e.Tracker = inflight.New(e.Settle, d.Clock, m, log)
	e.Tracker.SetCapacity(cfg.InflightLimit())
	// The container ledger's Redis calls are bounded as a check's are: past the bound a
	// container is charged as first seen (an estimate), and the answer's end waits no more.
	e.Tracker.UseContainerSessions(containersession.New(d.Redis, d.Layout, cfg.RedisCheckTimeout))
	e.Starts = startq.New(cp, e.Settle, startq.Config{Capacity: cfg.StartCapacity, PerMember: cfg.StartPerMember,
		Deadline: cfg.StartDeadline, Workers: d.StartWorkers}, e.Tracker.SettleOrphan, m, log)
	// An Authenticate or a Resolve call is shared by the checks that wait on it and
	// outlives the one that started it, so it gets no longer than a check may wait at all.
	// The member capacity bounds each cache of what is kept per member or credential.
	m.MemberCapacity.Set(float64(cfg.MemberCapacity))
	e.Identity = identity.New(cp, identity.Config{TTL: cfg.IdentityTTL, CallTimeout: cfg.CheckTimeout, MaxEntries: cfg.MemberCapacity}, d.Clock, m, log)
	e.Records = record.New(d.Redis, d.Layout, cp, record.Config{GenerationPoll: cfg.GenerationPoll, RedisTimeout: cfg.RedisCheckTimeout,
		ResolveTimeout: cfg.CheckTimeout, LastKnown: cfg.MemberCapacity}, m, log)
	e.Records.OnRebuild(e.Settle.MirrorRebuilt)
	e.Gate = gate.New(gate.Deps{Identity: e.Identity, Records: e.Records, Starts: e.Starts, Settle: e.Settle,
		Inflight: e.Tracker, Clock: d.Clock, Metrics: m, Log: log, FailOpen: cfg.FailOpen(), BlockedTTL: cfg.BlockedTTL, BlockedCapacity: cfg.MemberCapacity, MemberAPIURL: cfg.MemberAPIURL,
		Speculate: cfg.Speculate(), CheckTimeout: cfg.CheckTimeout})

	// ext_authz requests are decoded only as far as Check reads them (credentials,
	// Accept-Encoding, Bedrock's tier headers, path, host, body), and refusals sent as
	// encoded once (authz.Server.Codec). A stream's worker waits for its request
	// (and a check may wait on Redis or a durable start), so there are workers for many
	// streams at once: past them gRPC starts a goroutine per stream, whose stack then
	// grows (measured: about a tenth of the CPU of a cheap check).
	az := authz.New(e.Gate, authz.Upstream{Authorization: cfg.UpstreamAuthorization, APIKey: cfg.UpstreamAPIKey})
	// Fixed flow-control windows: no window-estimation PINGs (pkg/grpcflow). Stop waits
	// for the handlers to return: an ext_proc stream cut at shutdown settles what it saw
	// before the tracker settles what nobody reported (Serve). A connection that never
	// completes its HTTP/2 handshake is dropped after handshakeTimeout: until then it
	// holds up GracefulStop and even Stop (grpc's default is 2 minutes).
	grpcOpts := append(grpcflow.ServerOptions(), grpc.ForceServerCodecV2(az.Codec()),
		grpc.NumStreamWorkers(uint32(64*runtime.GOMAXPROCS(0))), grpc.WaitForHandlers(true), grpc.ConnectionTimeout(handshakeTimeout))
	if age := cfg.GRPCMaxConnectionAge; age > 0 {
		// gRPC sends the client a GOAWAY at the age (jittered by a tenth), in two steps
		// so that no stream races it; the client opens a new connection for its next
		// calls, which the Service may give to another enforcer. No grace: an ext_proc
		// stream lasts as long as its request's answer (minutes for a long generation),
		// and one cut would lose the usage it was about to read, so the old connection
		// closes when its last stream ends.
		grpcOpts = append(grpcOpts, grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionAge: age}))
	}
	e.GRPC = grpc.NewServer(grpcOpts...)
	authv3.RegisterAuthorizationServer(e.GRPC, az)
	xp := extproc.New(e.Tracker, m, responseusage.Limits{})
	e.Decoding = xp.Decoding
	xp.AllowDeferred = cfg.AllowDeferred()
	xp.Log = log
	extprocv3.RegisterExternalProcessorServer(e.GRPC, xp)
	e.Health = health.NewServer()
	healthpb.RegisterHealthServer(e.GRPC, e.Health)
	e.HTTP = httpcheck.New(e.Gate, e.Tracker, httpcheck.Config{InternalToken: cfg.InternalToken, SettleWait: cfg.SettleWait,
		AllowDeferred: cfg.AllowDeferred()}, log)

	if cfg.GatewayAddr != "" {
		gwCfg := cfg.Gateway
		gwCfg.AllowDeferred = cfg.AllowDeferred()
		gwCfg.Decoding = e.Decoding // one budget of decoded bodies for the process
		gwCfg.Clock = d.Clock       // the gate's: a session's windows are the gate's (realtime.go)
		gw, err := gateway.New(gwCfg, e.Gate, e.Tracker, responseusage.Limits{},
			gateway.Metrics{Requests: m.GatewayRequests, Active: m.GatewayActive, FirstByte: m.GatewayFirstByte,
				Upstream: m.GatewayUpstreamResponses}, log)
		if err != nil {
			panic(err) // parseConfig refuses a gateway without routes
		}
		e.Gateway = gw
	}

	e.Invalidations = invalidation.New(d.Redis, d.Layout, log, m, e.Identity, e.Gate.Blocks)
	e.StreamOptions = streamoptions.NewShare(streamoptions.ShareConfig{Redis: d.Redis, Key: d.Layout.StreamOptionsRefusalsKey(),
		Now: time.Now, Log: log, Refusals: m.StreamOptionsRefusals, Errors: m.StreamOptionsShareErrors})
	e.StreamOptions.Add("extproc", xp.StreamOptions())
	if e.Gateway != nil {
		e.StreamOptions.Add("gateway", e.Gateway.StreamOptions())
	}
	e.Admin = admin.New(d.Registry, e.redisReady, e.controlPlaneReady)
	return e
}

// controlPlaneReady: not ready while the control plane refuses this enforcer's token or
// the TLS handshake with it fails (in either failure mode: configuration errors that no
// retry fixes, and every request would be answered without accounting), nor, in closed
// mode, while it cannot be reached (every check needing it would be a 503). The reason
// is "internal token rejected", "control plane TLS handshake failed", "control plane
// unreachable" or "control plane not reached yet" (cpclient.Health; its log says more,
// once per transition).
func (e *Enforcer) controlPlaneReady(context.Context) error {
	err := e.ControlPlane.Ready()
	if err == nil || (e.cfg.FailOpen() && !errors.Is(err, cpclient.ErrTokenRejected) && !errors.Is(err, cpclient.ErrTLSFailed)) {
		return nil
	}
	return err
}

// redisReady: not ready while Redis is unreachable in closed mode (every check would be
// a 503; a load balancer should prefer another enforcer), and in either mode while Redis
// refuses the commands of a check's read (an ACL without them, or for another key
// prefix: NOPERM), which no retry fixes, as a refused internal token. The probe is what
// a check reads (the generation, a record key's fields), not a PING, which any ACL user
// may send (TestReadinessSaysWhenTheRedisACLRefusesTheMirror). The refusal is logged once
// per transition.
func (e *Enforcer) redisReady(ctx context.Context) error {
	pipe := e.rdb.Pipeline()
	gen := pipe.Get(ctx, e.layout.GenerationKey())
	rec := pipe.HMGet(ctx, e.layout.MemberKey("readyz"), "g", "r")
	_, _ = pipe.Exec(ctx)
	err := gen.Err()
	if errors.Is(err, redis.Nil) {
		err = nil
	}
	if err == nil {
		err = rec.Err()
	}
	if redis.IsPermissionError(err) {
		if !e.redisRefused.Swap(true) {
			e.log.Error("redis refuses the mirror's commands", "error", err,
				"hint", "the ACL user of TOLLGATE_REDIS_URL needs the commands and key pattern of docs/redis.md for TOLLGATE_REDIS_PREFIX "+e.layout.Prefix)
		}
		return errors.New("redis refuses the mirror's commands")
	}
	if e.redisRefused.Swap(false) {
		e.log.Info("redis accepts the mirror's commands again")
	}
	if err != nil && !e.cfg.FailOpen() {
		return errors.New("redis unreachable")
	}
	return nil
}

// handshakeTimeout bounds a gRPC connection's handshake (see New).
const handshakeTimeout = 10 * time.Second

// Listeners are the sockets the enforcer serves; Gateway is nil when the gateway is off.
type Listeners struct{ GRPC, HTTP, Admin, Gateway net.Listener }

// Listen opens the configured addresses, logging each as `msg=listening server=<name>
// addr=<host:port>` (tests read the chosen ports from that line; pkg/listen).
func Listen(cfg Config, log *slog.Logger) (Listeners, error) {
	lns, err := listen.Open(log, cfg.listenAddrs()...)
	if err != nil {
		return Listeners{}, err
	}
	out := Listeners{GRPC: lns[0], HTTP: lns[1], Admin: lns[2]}
	if len(lns) > 3 {
		out.Gateway = lns[3]
	}
	return out, nil
}

// Serve runs the servers and the background loops until ctx ends (or a server or loop
// fails), then shuts down in this order:
//
//  1. report not-ready (/readyz "draining", gRPC health NOT_SERVING), and go on serving
//     for the shutdown delay (TOLLGATE_SHUTDOWN_DELAY), new connections included, while
//     load balancers notice: until their next health check they still send here;
//  2. stop taking checks: the HTTP, gateway and gRPC servers drain in-flight checks,
//     response streams and Realtime sessions within three quarters of what the delay
//     left of the shutdown deadline, then cut what is left (its ext_proc and gateway handlers settle what they
//     saw; a cut Realtime session's client gets 1001; a cut forward-auth check is waited
//     for, so that what it admitted is settled in 4, and /check refuses from then on);
//  3. stop the start queue (queued starts are refused);
//  4. settle as incomplete every admitted request nobody will report any more (those
//     without a durable start first), within half of what is left of the deadline;
//     those left have durable starts, closed by the control plane's abandonment
//     recovery;
//  5. stop the settle queue's workers after their current call, cut when half of what
//     is left of the deadline has passed (its items go back to the queue, still
//     spooled), then flush what is queued within the deadline; what is left stays in
//     the spool for the next start (without a spool it is given up, loudly);
//  6. stop the other loops, newest first: the control plane probe, the reaper, the
//     stream_options share, the invalidation watcher, the record reader;
//  7. stop the admin server (it answers "draining" until here).
//
// It does not close the Redis or control-plane clients: Run closes them after Serve.
func (e *Enforcer) Serve(ctx context.Context, lns Listeners) error {
	var loops lifecycle.Group
	starts := loops.Go(ctx, "start queue", e.Starts.Run)
	settle := loops.Go(ctx, "settle queue", e.Settle.Run)
	loops.Go(ctx, "record reader", e.Records.Run)
	loops.Go(ctx, "invalidation watcher", e.Invalidations.Run)
	loops.Go(ctx, "stream_options refusals share", e.StreamOptions.Run)
	loops.Go(ctx, "reaper", inflight.Reaper{Tracker: e.Tracker, Every: time.Minute, After: e.cfg.AbandonAfter}.Run)
	loops.Go(ctx, "control plane probe", e.ControlPlane.Run)
	if e.spool != nil {
		loops.Go(ctx, "settle spool sync", e.spool.Run)
	}
	if t := e.cfg.controlPlaneTLS; t != nil {
		loops.Go(ctx, "control plane TLS reload", func(ctx context.Context) error {
			t.Watch(ctx, tlsreload.Interval, e.log, e.Metrics.ControlPlaneTLSLoaded, e.Metrics.ControlPlaneCALoaded)
			return nil
		})
	}

	httpSrv := &http.Server{Handler: e.HTTP, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second,
		ErrorLog: logging.ServerLog(e.log, "http")}
	connage.Apply(httpSrv, e.cfg.HTTPMaxConnectionAge)
	adminSrv := admin.NewServer(e.Admin, e.log)
	errc := make(chan error, 4)
	var gwSrv *http.Server
	if e.Gateway != nil && lns.Gateway != nil {
		gwSrv = newGatewayServer(e.Gateway, e.cfg.GatewayTLS, e.cfg.GatewayMaxConnectionAge, e.log)
		if pair := e.cfg.GatewayTLS; pair != nil {
			loops.Go(ctx, "gateway TLS reload", func(ctx context.Context) error {
				pair.Watch(ctx, tlsreload.Interval, e.log, "gateway TLS", e.Metrics.GatewayTLSLoaded)
				return nil
			})
			go func() { errc <- listen.IgnoreClosed(gwSrv.ServeTLS(lns.Gateway, "", "")) }()
		} else {
			go func() { errc <- listen.IgnoreClosed(gwSrv.Serve(lns.Gateway)) }()
		}
		go e.Gateway.WarmCredentials(ctx)
	}
	go func() { errc <- listen.IgnoreClosed(httpSrv.Serve(lns.HTTP)) }()
	go func() { errc <- listen.IgnoreClosed(adminSrv.Serve(lns.Admin)) }()
	go func() { errc <- e.GRPC.Serve(lns.GRPC) }()
	for _, svc := range []string{"", authv3.Authorization_ServiceDesc.ServiceName, extprocv3.ExternalProcessor_ServiceDesc.ServiceName} {
		e.Health.SetServingStatus(svc, healthpb.HealthCheckResponse_SERVING)
	}
	// The bounds its memory is sized by, and their sum (docs/enforcer.md, "Memory"): an
	// operator reads what it may hold at most here, warned of above only when it does
	// not fit.
	e.log.Info("enforcer started", "failure_mode", e.cfg.FailureMode, "controlplane", e.cfg.ControlPlaneAddr,
		"member_capacity", e.cfg.MemberCapacity, "settle_capacity", e.cfg.SettleCapacity, "memory_need_mib", e.cfg.MemoryNeed()>>20)

	runErr := lifecycle.WaitForStop(ctx, errc, &loops, e.log)
	// 1.
	e.Admin.Drain()
	e.Health.Shutdown() // every service NOT_SERVING: Envoy's health checks move traffic away
	e.log.Info("shutting down", "timeout", e.cfg.ShutdownTimeout, "delay", e.cfg.ShutdownDelay)
	// The delay is part of the deadline, so that TOLLGATE_SHUTDOWN_TIMEOUT stays the one
	// figure to keep under the pod's grace period.
	shutCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.ShutdownTimeout)
	defer cancel()
	// Each step's end, for the line that closes the shutdown: an operator whose pod
	// was killed mid-shutdown, or whose timeout is too short, sees which step took it.
	began := time.Now()
	var steps []any
	stepDone := func(name string) { steps = append(steps, name, time.Since(began).Round(time.Millisecond).String()) }
	lifecycle.DelayShutdown(e.cfg.ShutdownDelay, e.log)
	stepDone("delay")
	// 2. Requests in flight get three quarters of what is left; the settle queue's drain
	// keeps at least the last quarter, so a slow stream cannot starve it.
	serveCtx, cancelServe := context.WithTimeout(shutCtx, (e.cfg.ShutdownTimeout-e.cfg.ShutdownDelay)*3/4)
	defer cancelServe()
	httpDone := make(chan struct{})
	go func() {
		defer close(httpDone)
		if httpSrv.Shutdown(serveCtx) != nil {
			// A check still running is cut: its proxy sees the connection close, never
			// an admission from an enforcer about to settle everything and exit.
			_ = httpSrv.Close()
		}
		// Close neither waits for the handlers nor stops one that read its request: wait
		// for them (a cut check ends once its start call is answered, within its
		// deadline), so that what each admitted, or started and then left to the
		// orphans, is tracked or queued before the settle-all below; a check arriving
		// after that is refused.
		if err := e.HTTP.Close(shutCtx); err != nil {
			e.log.Warn("forward-auth handlers still running at the shutdown deadline", "error", err)
		}
	}()
	gwDone := make(chan struct{})
	go func() {
		defer close(gwDone)
		if gwSrv == nil {
			return
		}
		if gwSrv.Shutdown(serveCtx) != nil {
			// Streams still open are cut; each handler settles what it saw.
			_ = gwSrv.Close()
		}
		// Realtime sessions are connections the gateway took over, which the server's
		// Shutdown neither waits for nor closes: they get the same time, then are cut.
		e.Gateway.DrainSessions(serveCtx)
	}()
	stopped := make(chan struct{})
	go func() { e.GRPC.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-serveCtx.Done():
		// Streams still open are cut; their ext_proc handlers settle them as incomplete.
		e.GRPC.Stop()
		<-stopped
	}
	<-httpDone
	<-gwDone
	stepDone("servers")
	// 3. and 4. No more checks: stop the start queue, then settle every admitted request
	// that nobody will report to this process any more.
	// Queueing them takes at most half of what is left of the deadline, so that the
	// drain has time to send them.
	stopErrs := []error{runErr, starts.Stop()}
	settleAllCtx, cancelSettleAll := shutCtx, context.CancelFunc(func() {})
	if dl, ok := shutCtx.Deadline(); ok {
		settleAllCtx, cancelSettleAll = context.WithTimeout(shutCtx, time.Until(dl)/2)
	}
	n, left := e.Tracker.SettleAll(settleAllCtx)
	cancelSettleAll()
	stepDone("unreported")
	if n > 0 || left > 0 {
		e.log.Warn("settling unreported requests as incomplete at shutdown", "count", n, "left_pending", left,
			"note", "left ones have durable starts: they stay pending at the control plane until its abandonment recovery closes them")
	}
	// 5. A worker's call out now may last its CallTimeout (5s) against a slow or silent
	// control plane, past the deadline: it is cut when half of what is left has passed,
	// so the drain keeps the other half (it sends the cut call's items again, answered
	// duplicate if that call was committed after all).
	cutCtx, cancelCut := shutCtx, context.CancelFunc(func() {})
	if dl, ok := shutCtx.Deadline(); ok {
		cutCtx, cancelCut = context.WithTimeout(shutCtx, time.Until(dl)/2)
	}
	e.Settle.CutCalls(cutCtx)
	stopErrs = append(stopErrs, settle.Stop())
	cancelCut()
	e.Settle.Drain(shutCtx)
	stepDone("settle_drain")
	// 6.
	stopErrs = append(stopErrs, loops.StopAll())
	stepDone("loops")
	// 7.
	_ = adminSrv.Shutdown(shutCtx)
	stepDone("admin")
	e.log.Info("shutdown done: each step's end, counted from the signal", steps...)
	return errors.Join(stopErrs...)
}
