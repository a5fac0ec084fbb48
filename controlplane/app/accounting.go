package app

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
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

// grpcCredentials are the internal API's transport credentials: nil for plaintext
// (loopback, or a mesh that encrypts), TLS with the configured pair, and mTLS when a
// client CA is configured. The pair (nil for plaintext) is presented at every
// handshake as last loaded: Serve reads its files again every tlsreload.Interval, so a renewed
// Secret is served without a restart. The client CA is read once, at start.
func grpcCredentials(c Config) (credentials.TransportCredentials, *tlsreload.Pair, error) {
	if c.GRPCTLSCert == "" {
		return nil, nil, nil
	}
	pair, err := tlsreload.Load(c.GRPCTLSCert, c.GRPCTLSKey)
	if err != nil {
		return nil, nil, fmt.Errorf("TOLLGATE_GRPC_TLS_CERT/KEY: %w", err)
	}
	cfg := &tls.Config{GetCertificate: pair.GetCertificate, MinVersion: tls.VersionTLS12}
	if c.GRPCClientCA != "" {
		pem, err := os.ReadFile(c.GRPCClientCA)
		if err != nil {
			return nil, nil, fmt.Errorf("TOLLGATE_GRPC_CLIENT_CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, nil, errors.New("TOLLGATE_GRPC_CLIENT_CA: no PEM certificate in the file")
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return credentials.NewTLS(cfg), pair, nil
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
	w := newMirrorWriter(cfg, st, rdb, log, metrics.Discard())
	if err := w.Resync(ctx); err != nil {
		return fmt.Errorf("resync: %w", err)
	}
	fmt.Fprintf(stdio.Stdout, "mirror rebuilt under generation %s\n", w.Generation())
	return nil
}

func newMirrorWriter(cfg Config, st *store.Store, rdb redis.UniversalClient, log *slog.Logger, m *metrics.Metrics) *mirrorsync.Writer {
	return mirrorsync.New(mirrorsync.Deps{Store: st, Redis: rdb, Layout: mirror.Layout{Prefix: cfg.Redis.Prefix}, Clock: clock.System{},
		Log: log, Metrics: m, CheckInterval: cfg.MirrorCheckInterval})
}
