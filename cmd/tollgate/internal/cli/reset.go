package cli

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	cpapp "github.com/tollgate-dev/tollgate/controlplane/app"
)

// resetLocal empties a local demo installation: it drops and recreates the database of
// TOLLGATE_DATABASE_URL and deletes the mirror keys under TOLLGATE_REDIS_PREFIX. It is for
// `tollgate dev --reset` only, and refuses any host that is not loopback.
func resetLocal(ctx context.Context, getenv func(string) string, out io.Writer) error {
	dbURL := envOr(getenv, "TOLLGATE_DATABASE_URL", cpapp.DefaultDatabaseURL)
	u, err := url.Parse(dbURL)
	if err != nil {
		return err
	}
	if h := u.Hostname(); h != "127.0.0.1" && h != "localhost" && h != "::1" && h != "" {
		return fmt.Errorf("--reset only touches local databases, not %s", h)
	}
	name := strings.TrimPrefix(u.Path, "/")
	if name == "" || name == "postgres" || strings.ContainsAny(name, `"; `) {
		return fmt.Errorf("--reset will not drop database %q", name)
	}
	admin := *u
	admin.Path = "/postgres"
	conn, err := pgx.Connect(ctx, admin.String())
	if err != nil {
		return err
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

	opts, err := redis.ParseURL(envOr(getenv, "TOLLGATE_REDIS_URL", cpapp.DefaultRedisURL))
	if err != nil {
		return err
	}
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
