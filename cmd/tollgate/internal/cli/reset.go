package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	cpapp "github.com/tollgate-dev/tollgate/controlplane/app"
	"github.com/tollgate-dev/tollgate/pkg/redact"
)

// resetLocal empties a local demo installation: it drops and recreates the database of
// TOLLGATE_DATABASE_URL and deletes the mirror keys under TOLLGATE_REDIS_PREFIX. It is for
// `tollgate dev --reset` only, and refuses any host that is not loopback. Both targets are
// checked before either is touched.
func resetLocal(ctx context.Context, getenv func(string) string, out io.Writer) error {
	// pgx.ParseConfig reads the settings the connection will use: the host query
	// parameter, PGHOST and the other PG* variables, a service file, and every
	// fallback host. The URL's own host part is none of that.
	dbURL := envOr(getenv, "TOLLGATE_DATABASE_URL", cpapp.DefaultDatabaseURL)
	// pgx's errors, and the host and database it read, quote parts of a URL whose
	// password does not read as one (an unencoded '@': host "ssW0rd@127.0.0.1"), so
	// they are printed only when redact.Quotable says so.
	quotable := redact.Quotable(dbURL)
	dbErr := func(err error) error {
		return fmt.Errorf("TOLLGATE_DATABASE_URL: %s", redact.Reason(dbURL, err))
	}
	cfg, err := pgx.ParseConfig(dbURL)
	if err != nil {
		return dbErr(err)
	}
	hosts := []string{cfg.Host}
	for _, f := range cfg.Fallbacks {
		hosts = append(hosts, f.Host)
	}
	for _, h := range hosts {
		if !localHost(h) {
			if !quotable {
				return errors.New("--reset only touches local databases, and TOLLGATE_DATABASE_URL's host is not (" + redact.Unquoted + ")")
			}
			return fmt.Errorf("--reset only touches local databases, not %q (TOLLGATE_DATABASE_URL)", h)
		}
	}
	name := cfg.Database
	if name == "" || name == "postgres" || strings.ContainsAny(name, `"; `) {
		if !quotable {
			return errors.New("--reset will not drop TOLLGATE_DATABASE_URL's database (" + redact.Unquoted + ")")
		}
		return fmt.Errorf("--reset will not drop database %q", name)
	}
	redisURL := envOr(getenv, "TOLLGATE_REDIS_URL", cpapp.DefaultRedisURL)
	opts, err := redis.ParseURL(redisURL)
	if err != nil {
		return fmt.Errorf("TOLLGATE_REDIS_URL: %s", redact.Reason(redisURL, err))
	}
	if err := localRedis(opts, redact.Quotable(redisURL), getenv); err != nil {
		return err
	}

	admin := cfg.Copy()
	admin.Database = "postgres"
	conn, err := pgx.ConnectConfig(ctx, admin)
	if err != nil {
		return dbErr(err)
	}
	defer conn.Close(ctx)
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := conn.Exec(ctx, `DROP DATABASE IF EXISTS `+ident+` WITH (FORCE)`); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, `CREATE DATABASE `+ident); err != nil {
		return err
	}
	fmt.Fprintf(out, "==> recreated database %s\n", name)

	rdb := redis.NewClient(opts)
	defer rdb.Close()
	prefix := envOr(getenv, "TOLLGATE_REDIS_PREFIX", "tg:")
	n := 0
	iter := rdb.Scan(ctx, 0, prefix+"*", 500).Iterator()
	for iter.Next(ctx) {
		if err := rdb.Del(ctx, iter.Val()).Err(); err != nil {
			return err
		}
		n++
	}
	if err := iter.Err(); err != nil {
		return err
	}
	fmt.Fprintf(out, "==> deleted %d Redis key(s) under %q\n", n, prefix)
	return nil
}

// localRedis refuses a Redis that is not on this machine: the URL's server, and the
// sentinels or cluster seeds of TOLLGATE_REDIS_ADDRS (package redisconf) when the stack
// is configured with them. The URL's server is named only when the URL is quotable (see
// redact.Quotable): read from a password with an unencoded '/', it is part of it.
func localRedis(opts *redis.Options, quotable bool, getenv func(string) string) error {
	var addrs []string
	if opts.Network != "unix" { // a unix:// URL's address is its socket path
		addrs = append(addrs, opts.Addr)
	}
	for _, a := range strings.Split(getenv("TOLLGATE_REDIS_ADDRS"), ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	for i, a := range addrs {
		h, _, err := net.SplitHostPort(a)
		if err != nil || !localHost(h) {
			if i == 0 && opts.Network != "unix" && !quotable {
				return errors.New("--reset only touches local Redis servers, and TOLLGATE_REDIS_URL's is not (" + redact.Unquoted + ")")
			}
			return fmt.Errorf("--reset only touches local Redis servers, not %q (TOLLGATE_REDIS_URL, TOLLGATE_REDIS_ADDRS)", a)
		}
	}
	return nil
}

// localHost says whether h is this machine: a loopback address (127.0.0.0/8, ::1),
// localhost, or a Unix socket path.
func localHost(h string) bool {
	if strings.HasPrefix(h, "/") || strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}
