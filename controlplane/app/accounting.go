package app

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/credentials"

	"github.com/tollgate-dev/tollgate/controlplane/metrics"
	"github.com/tollgate-dev/tollgate/controlplane/mirrorsync"
	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/pkg/clock"
	"github.com/tollgate-dev/tollgate/pkg/internaltoken"
	"github.com/tollgate-dev/tollgate/pkg/logging"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
	"github.com/tollgate-dev/tollgate/pkg/redact"
	"github.com/tollgate-dev/tollgate/pkg/redisconf"
	"github.com/tollgate-dev/tollgate/pkg/tlsreload"
)

// checkInternalAuth refuses to serve an internal API that would accept no one: a token
// is required unless enforcers authenticate with client certificates. (A token too
// short is a configuration problem of every subcommand: pkg/internaltoken.)
func checkInternalAuth(c Config) error {
	if c.InternalToken == "" && c.GRPCClientCA == "" {
		return fmt.Errorf("%s is empty and mTLS is not configured (TOLLGATE_GRPC_CLIENT_CA): "+
			"enforcers could not authenticate; set a random token of at least %d characters (the same in every enforcer)",
			internaltoken.Env, internaltoken.MinLength)
	}
	return nil
}

// newRedis builds the mirror's Redis client. Writes after commit must not hold a lane
// for long when Redis is slow or gone: the repair loop rewrites what failed.
func newRedis(c Config) (redis.UniversalClient, error) {
	return c.Redis.NewClient(redisconf.Timeouts{Dial: 2 * time.Second, Read: time.Second, Write: time.Second})
}

// internalTLS is what the internal API serves TLS with, each part read again every
// tlsreload.Interval while Serve runs (grpcCredentials): the certificate, so that a
// renewed Secret is served without a restart, and the bundle of CAs whose client
// certificates it accepts (nil without mTLS), so that a change of CA is too.
type internalTLS struct {
	cert     *tlsreload.Pair
	clientCA *tlsreload.Pool
}

// grpcCredentials are the internal API's transport credentials: nil for plaintext
// (loopback, or a mesh that encrypts), TLS with the configured pair, and mTLS when a
// client CA is configured. Each handshake presents the pair and verifies the client
// against the bundle as last loaded.
func grpcCredentials(c Config) (credentials.TransportCredentials, internalTLS, error) {
	if c.GRPCTLSCert == "" {
		return nil, internalTLS{}, nil
	}
	var it internalTLS
	var err error
	if it.cert, err = tlsreload.Load(c.GRPCTLSCert, c.GRPCTLSKey); err != nil {
		return nil, internalTLS{}, fmt.Errorf("TOLLGATE_GRPC_TLS_CERT/KEY: %w", err)
	}
	cfg := &tls.Config{GetCertificate: it.cert.GetCertificate, MinVersion: tls.VersionTLS12}
	if c.GRPCClientCA != "" {
		if it.clientCA, err = tlsreload.LoadPool(c.GRPCClientCA); err != nil {
			return nil, internalTLS{}, fmt.Errorf("TOLLGATE_GRPC_CLIENT_CA: %w", err)
		}
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
		// A tls.Config's ClientCAs cannot change under a running server: each handshake
		// gets a copy holding the bundle loaded last (handshakes are rare, as enforcers
		// keep their connection).
		base := cfg.Clone()
		cfg.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
			c := base.Clone()
			c.ClientCAs = it.clientCA.CertPool()
			return c, nil
		}
	}
	return credentials.NewTLS(cfg), it, nil
}

// resync rebuilds the Redis mirror once: a new generation, then every mirrored member's
// record from Postgres.
func resync(ctx context.Context, args []string, getenv func(string) string, stdio IO) error {
	cfg, err := parseConfig("resync", args, getenv, stdio, nil)
	if err != nil {
		return err
	}
	log := newLogger(cfg, stdio.Stderr)
	logging.RouteRedis(log)
	st, err := store.Open(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer st.Close()
	if err := checkSchema(ctx, st, log, false); err != nil {
		return err
	}
	rdb, err := newRedis(cfg)
	if err != nil {
		return err
	}
	defer rdb.Close()
	// Redis first, named: the rebuild's own error would be a bare "dial tcp ...:
	// connection refused", which says neither which server nor which setting.
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("resync: cannot reach Redis (TOLLGATE_REDIS_URL, --redis-url): %s; nothing was rebuilt", redact.Reason(cfg.Redis.URL, err))
	}
	w := newMirrorWriter(cfg, st, rdb, log, metrics.Discard())
	if err := w.Resync(ctx); err != nil {
		return fmt.Errorf("resync: %w", err)
	}
	// Where, too: a shell without the deployment's TOLLGATE_REDIS_PREFIX (or Redis)
	// rebuilds a mirror no enforcer reads, and only this line can show it.
	where := redact.URL(cfg.Redis.URL)
	if cfg.Redis.Mode != "" && cfg.Redis.Mode != "single" {
		where = cfg.Redis.Mode + " " + strings.Join(cfg.Redis.Addrs, ",")
	}
	fmt.Fprintf(stdio.Stdout, "mirror rebuilt under generation %s, key prefix %q, on %s (the enforcers read it only with the same TOLLGATE_REDIS_PREFIX)\n",
		w.Generation(), cfg.Redis.Prefix, where)
	return nil
}

func newMirrorWriter(cfg Config, st *store.Store, rdb redis.UniversalClient, log *slog.Logger, m *metrics.Metrics) *mirrorsync.Writer {
	return mirrorsync.New(mirrorsync.Deps{Store: st, Redis: rdb, Layout: mirror.Layout{Prefix: cfg.Redis.Prefix}, Clock: clock.System{},
		Log: log, Metrics: m, CheckInterval: cfg.MirrorCheckInterval})
}
