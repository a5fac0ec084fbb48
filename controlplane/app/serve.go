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
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	"github.com/tollgate-dev/tollgate/controlplane/httpapi"
	"github.com/tollgate-dev/tollgate/controlplane/internalapi"
	"github.com/tollgate-dev/tollgate/controlplane/ledger"
	"github.com/tollgate-dev/tollgate/controlplane/metrics"
	"github.com/tollgate-dev/tollgate/controlplane/mirrorsync"
	"github.com/tollgate-dev/tollgate/controlplane/platform"
	"github.com/tollgate-dev/tollgate/controlplane/retention"
	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/pkg/admin"
	"github.com/tollgate-dev/tollgate/pkg/clock"
	"github.com/tollgate-dev/tollgate/pkg/lifecycle"
	"github.com/tollgate-dev/tollgate/pkg/listen"
	"github.com/tollgate-dev/tollgate/pkg/logging"
	"github.com/tollgate-dev/tollgate/pkg/tlsreload"
)

// serve is the serve subcommand: configuration, the store (schema checked, platform
// admins seeded) and Redis, then New, Listen and Serve; the Redis client and then the
// pool close last, once everything that uses them has stopped.
// parseServe is serve's configuration, checked as far as it can be without connecting
// to anything: its flags and environment, and an internal API an enforcer can
// authenticate to.
func parseServe(args []string, getenv func(string) string, stdio IO) (Config, error) {
	var autoMigrate bool
	cfg, err := parseConfig("serve", args, getenv, stdio, func(fs *flag.FlagSet) {
		fs.BoolVar(&autoMigrate, "auto-migrate", false, "apply pending migrations at start instead of refusing to serve")
	})
	if err != nil {
		return cfg, err
	}
	cfg.AutoMigrate = autoMigrate
	return cfg, checkInternalAuth(cfg)
}

// CheckServe reports what `serve` with args would refuse of its configuration (getenv)
// before it connects to anything, as its start does, without starting: `tollgate dev
// --reset` asks it before it empties the database, so that a typo costs no demo data.
func CheckServe(args []string, getenv func(string) string) error {
	_, err := parseServe(args, getenv, IO{Stdout: io.Discard, Stderr: io.Discard})
	return err
}

func serve(ctx context.Context, args []string, getenv func(string) string, stdio IO) error {
	cfg, err := parseServe(args, getenv, stdio)
	if err != nil {
		return err
	}
	log := logging.New(cfg.LogFormat, cfg.LogLevel, stdio.Stderr)
	logging.RouteRedis(log)
	st, err := store.Open(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer st.Close() // last: everything else has stopped
	if err := checkSchema(ctx, st, log, cfg.AutoMigrate); err != nil {
		return err
	}
	clk := clock.System{}
	if err := seedPlatformAdmins(ctx, st, cfg.PlatformAdminEmails, clk.Now(), log); err != nil {
		return err
	}
	rdb, err := newRedis(cfg)
	if err != nil {
		return err
	}
	defer rdb.Close() // after Serve: the ledger's mirror refreshes have finished
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cp, err := New(Deps{Config: cfg, Store: st, Redis: rdb, Clock: clk, Log: log, Registry: reg})
	if err != nil {
		return err
	}
	lns, err := Listen(cfg, log)
	if err != nil {
		return err
	}
	err = cp.Serve(ctx, lns)
	log.Info("stopped")
	return err
}

// Deps are what New needs. The serve subcommand opens the store and the Redis client
// and closes them after Serve.
type Deps struct {
	Config Config
	Store  *store.Store
	Redis  redis.UniversalClient
	Clock  clock.Clock
	Log    *slog.Logger
	// Registry serves /metrics; New registers the control plane's metrics on it (a new
	// registry when nil).
	Registry *prometheus.Registry
}

// ControlPlane is the assembled serve program. Nothing runs until Serve.
type ControlPlane struct {
	cfg Config
	log *slog.Logger
	// grpcTLS is the internal API's certificate and client CA bundle (each nil:
	// plaintext, no mTLS), read again every tlsreload.Interval while Serve runs.
	grpcTLS internalTLS

	Metrics *metrics.Metrics
	// Mirror writes the Redis mirror; its maintenance loop runs in Serve.
	Mirror *mirrorsync.Writer
	// Ledger commits starts and settlements; its lanes run in Serve.
	Ledger *ledger.Ledger
	// Internal is the internal API for enforcers, served on GRPC with Health.
	Internal *internalapi.Server
	GRPC     *grpc.Server
	Health   *health.Server
	// RESTDatabase is the REST API's share of the store's pool
	// (TOLLGATE_REST_DATABASE_CONNS): the rest of the pool is accounting's.
	RESTDatabase *store.Share
	// API is the REST API; Admin serves /healthz, /readyz and /metrics.
	API   http.Handler
	Admin *admin.Handler
	// Retention runs retention on a schedule in Serve; nil when
	// TOLLGATE_RETENTION_INTERVAL is 0.
	Retention *retention.Schedule
}

// New wires the control plane from an open store and Redis client.
func New(d Deps) (*ControlPlane, error) {
	cfg := d.Config
	creds, grpcTLS, err := grpcCredentials(cfg)
	if err != nil {
		return nil, err
	}
	if d.Registry == nil {
		d.Registry = prometheus.NewRegistry()
	}
	if d.Clock == nil {
		d.Clock = clock.System{}
	}
	st, log := d.Store, d.Log
	c := &ControlPlane{cfg: cfg, log: log, Metrics: metrics.New(d.Registry), grpcTLS: grpcTLS} // every metric, on the registry /metrics serves
	c.Mirror = newMirrorWriter(cfg, st, d.Redis, log, c.Metrics)
	c.Ledger = ledger.New(ledger.Deps{Store: st, Clock: d.Clock, Log: log, Metrics: c.Metrics, Mirror: c.Mirror,
		Config: ledger.Config{Lanes: cfg.AccountingLanes, MaxBatch: cfg.AccountingMaxBatch, MaxDelay: cfg.AccountingMaxDelay}})
	c.Internal = internalapi.New(internalapi.Deps{Store: st, Ledger: c.Ledger, Mirror: c.Mirror, Clock: d.Clock, Log: log, Metrics: c.Metrics,
		Token: cfg.InternalToken, PreviousToken: cfg.InternalTokenPrevious, RequireClientCert: cfg.GRPCClientCA != ""})
	if c.RESTDatabase, err = st.Share(cfg.RESTDatabaseConns); err != nil {
		return nil, ConfigError{fmt.Errorf("TOLLGATE_REST_DATABASE_CONNS: %w", err)}
	}
	c.Metrics.ObserveRESTDatabase(func() metrics.PoolShare { return metrics.PoolShare(c.RESTDatabase.Stat()) })
	c.API = httpapi.New(httpapi.Deps{Store: st, DB: c.RESTDatabase, Clock: d.Clock, Log: log, Metrics: c.Metrics, SessionTTL: cfg.SessionTTL,
		TrustForwardedFor: cfg.TrustForwardedFor, Events: c.Mirror})

	// A connection that never completes its handshake is dropped after
	// handshakeTimeout: until then it would hold up GracefulStop and even Stop (grpc's
	// default is 2 minutes), so a port scan could not delay a shutdown past it.
	grpcOpts := append(c.Internal.ServerOptions(), grpc.ConnectionTimeout(handshakeTimeout))
	if age := cfg.GRPCMaxConnectionAge; age > 0 {
		// gRPC sends the client a GOAWAY at the age (jittered by a tenth, so that
		// enforcers started together do not reconnect together); the calls on the
		// connection have maxConnectionAgeGrace to finish, and the enforcer's next call
		// opens a new connection, which the Service may give to another replica.
		grpcOpts = append(grpcOpts, grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionAge: age, MaxConnectionAgeGrace: maxConnectionAgeGrace}))
	}
	if creds != nil {
		grpcOpts = append(grpcOpts, grpc.Creds(creds))
	}
	c.GRPC = grpc.NewServer(grpcOpts...)
	c.Health = health.NewServer()
	healthpb.RegisterHealthServer(c.GRPC, c.Health)
	c.Internal.Register(c.GRPC)

	if cfg.RetentionInterval > 0 {
		c.Retention = &retention.Schedule{Deps: retention.Deps{Store: st, Clock: d.Clock, Log: log.With("job", "retention"), Metrics: c.Metrics},
			Options: cfg.retentionOptions(true), Interval: cfg.RetentionInterval}
	}

	c.Admin = admin.New(d.Registry, func(ctx context.Context) error { return databaseReady(ctx, st) })
	return c, nil
}

// databaseReady is /readyz's check of Postgres: a ping on a pooled connection within
// the check's timeout. When it fails with every connection of the pool taken (slow
// requests, a lock they all wait for), the reason says so: Postgres answers, and an
// operator told "database unreachable" looked for the fault in the wrong place. A
// database that refuses writes (a standby during a failover) is still ready: reads are
// served, and writes are answered 503 (docs/admin.md, "When Postgres is in trouble").
func databaseReady(ctx context.Context, st *store.Store) error {
	if err := st.Pool.Ping(ctx); err != nil {
		if s := st.Pool.Stat(); s.AcquiredConns() >= s.MaxConns() {
			return errors.New("database connections all in use")
		}
		return errors.New("database unreachable")
	}
	return nil
}

// handshakeTimeout bounds a gRPC connection's handshake (TLS included).
const handshakeTimeout = 10 * time.Second

// DefaultGRPCMaxConnectionAge is TOLLGATE_GRPC_MAX_CONNECTION_AGE's default: a replica
// added behind the Service gets its share of the enforcers within about five minutes,
// at the cost of one reconnection an enforcer in that time (a TCP and TLS handshake
// before one call).
const DefaultGRPCMaxConnectionAge = 5 * time.Minute

// maxConnectionAgeGrace is how long the calls on a connection past its age have to
// finish: every internal call is unary and bounded by its caller's deadline (5 s for a
// settlement batch, less for the others).
const maxConnectionAgeGrace = 30 * time.Second

// Listeners are the three sockets the control plane serves.
type Listeners struct{ REST, GRPC, Admin net.Listener }

// Listen opens the configured addresses, logging each as `msg=listening server=<name>
// addr=<host:port>` (tests read the chosen ports from that line; pkg/listen).
func Listen(cfg Config, log *slog.Logger) (Listeners, error) {
	lns, err := listen.Open(log, cfg.listenAddrs()...)
	if err != nil {
		return Listeners{}, err
	}
	return Listeners{REST: lns[0], GRPC: lns[1], Admin: lns[2]}, nil
}

// initialCheckTimeout bounds the mirror check before serving.
const initialCheckTimeout = 30 * time.Second

// Serve checks the mirror once (a Redis that is down is not fatal: the maintenance loop
// repairs the mirror once it is back), runs the background loops and the servers until
// ctx ends (or a server or loop fails), then shuts down in this order:
//
//  1. report not-ready (/readyz "draining", gRPC health NOT_SERVING), and go on serving
//     for the shutdown delay (TOLLGATE_SHUTDOWN_DELAY), new connections included, while
//     load balancers and enforcers' health checks notice;
//  2. drain the REST and gRPC servers together within what is left of the shutdown
//     deadline (the REST requests and gRPC calls still running at the deadline are
//     cut): settlements in flight commit;
//  3. stop the ledger: its lanes stop, queued items are answered with an error (the
//     callers retry them), and the mirror refreshes of committed batches finish;
//  4. stop the mirror's maintenance loop;
//  5. stop the admin server (it answers "draining" until here).
//
// It does not close the store or the Redis client: the serve subcommand closes them
// after Serve, Redis first.
func (c *ControlPlane) Serve(ctx context.Context, lns Listeners) error {
	checkCtx, cancelCheck := context.WithTimeout(ctx, initialCheckTimeout)
	if err := c.Mirror.Check(checkCtx); err != nil {
		c.log.Warn("mirror: initial check failed; retrying in the background", "err", err)
	}
	cancelCheck()

	var loops lifecycle.Group
	mirrorLoop := loops.Go(ctx, "mirror maintenance", c.Mirror.Run)
	ledgerLoop := loops.Go(ctx, "ledger", c.Ledger.Run)
	if cert := c.grpcTLS.cert; cert != nil {
		loops.Go(ctx, "internal API TLS reload", func(ctx context.Context) error {
			cert.Watch(ctx, tlsreload.Interval, c.log, "internal API TLS", c.Metrics.GRPCTLSLoaded)
			return nil
		})
	}
	if ca := c.grpcTLS.clientCA; ca != nil {
		loops.Go(ctx, "internal API client CA reload", func(ctx context.Context) error {
			ca.Watch(ctx, tlsreload.Interval, c.log, "internal API client CA", c.Metrics.GRPCClientCALoaded)
			return nil
		})
	}
	if c.Retention != nil {
		loops.Go(ctx, "retention", c.Retention.Run)
	}

	restSrv := &http.Server{Handler: c.API, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 60 * time.Second,
		ErrorLog: logging.ServerLog(c.log, "rest")}
	adminSrv := admin.NewServer(c.Admin, c.log)
	errc := make(chan error, 3)
	go func() { errc <- listen.IgnoreClosed(restSrv.Serve(lns.REST)) }()
	go func() { errc <- listen.IgnoreClosed(adminSrv.Serve(lns.Admin)) }()
	go func() { errc <- c.GRPC.Serve(lns.GRPC) }()
	c.log.Info("control plane started", "schema_version", store.LatestVersion())

	runErr := lifecycle.WaitForStop(ctx, errc, &loops, c.log)
	// 1.
	c.Admin.Drain()
	c.Health.Shutdown()
	c.log.Info("shutting down", "timeout", c.cfg.ShutdownTimeout, "delay", c.cfg.ShutdownDelay)
	// The delay is part of the deadline (see the enforcer's Serve).
	shutCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.ShutdownTimeout)
	defer cancel()
	lifecycle.DelayShutdown(c.cfg.ShutdownDelay, c.log)
	// 2.
	restDone := make(chan struct{})
	go func() {
		defer close(restDone)
		if restSrv.Shutdown(shutCtx) != nil {
			// A request still running at the deadline is cut: closing its connection
			// ends its context and so its query. Left running, it held its pool
			// connection, and the serve subcommand's close of the pool waited for it
			// past the timeout, until the kubelet killed the pod.
			_ = restSrv.Close()
		}
	}()
	stopped := make(chan struct{})
	go func() { c.GRPC.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-shutCtx.Done():
		c.GRPC.Stop()
		<-stopped
	}
	<-restDone
	// 3. and 4.
	errs := []error{runErr, ledgerLoop.Stop(), mirrorLoop.Stop(), loops.StopAll()}
	// 5.
	_ = adminSrv.Shutdown(shutCtx)
	return errors.Join(errs...)
}

// seedPlatformAdmins puts the environment's emails (TOLLGATE_PLATFORM_ADMIN_EMAILS) on the
// platform-admin allowlist. An email that an account already uses is promoted, since the
// operator controls the environment, but with a warning: emails are not verified, so the
// account (and its password) is whoever's registered the address first, and
// bootstrap-admin, which resets the password and ends its sessions, is the safe way.
func seedPlatformAdmins(ctx context.Context, st *store.Store, emails []string, now time.Time, log *slog.Logger) error {
	for _, e := range emails {
		var promoted string
		err := st.InTx(ctx, func(tx pgx.Tx) error {
			var err error
			promoted, err = platform.SeedAdmin(ctx, tx, e, now)
			return err
		})
		if err != nil {
			return fmt.Errorf("seed platform admins: %w", err)
		}
		if promoted != "" {
			log.WarnContext(ctx, "TOLLGATE_PLATFORM_ADMIN_EMAILS promoted an existing account to platform administrator: "+
				"whoever registered this email chose its password (emails are not verified); unless that was you, run "+
				"`controlplane bootstrap-admin --email "+e+"`, which resets the password and ends the account's sessions",
				"email", e, "user_id", promoted)
		}
	}
	return nil
}
