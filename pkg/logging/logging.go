// Package logging owns how both programs log: the slog logger built from
// TOLLGATE_LOG_FORMAT (text or json) and TOLLGATE_LOG_LEVEL, the validation of those two
// knobs, and the routing of go-redis's own log lines into that logger, so that a JSON
// log stays JSON when the Redis client complains. It does not decide what is logged.
package logging

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Validate lists the problems of a format and a level, named by their variables.
func Validate(format, level string) []string {
	var p []string
	if format != "text" && format != "json" {
		p = append(p, "TOLLGATE_LOG_FORMAT: must be text or json")
	}
	switch level {
	case "debug", "info", "warn", "error":
	default:
		p = append(p, "TOLLGATE_LOG_LEVEL: must be debug, info, warn or error")
	}
	return p
}

// New builds a logger writing to w in format (json, else text) at level (info when it
// does not parse; Validate reports it).
func New(format, level string, w io.Writer) *slog.Logger {
	var lv slog.Level
	_ = lv.UnmarshalText([]byte(level))
	opts := &slog.HandlerOptions{Level: lv}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// RouteRedis makes go-redis log through log, as warnings with component=redis. go-redis
// has one logger per process (redis.SetLogger): in a process running both programs
// (tollgate dev, the end-to-end tests) the last call wins.
func RouteRedis(log *slog.Logger) {
	redis.SetLogger(RedisLogger{Log: log})
}

// RedisLogger adapts a slog.Logger to go-redis's logger interface (Printf with a
// context). go-redis logs no level of its own: what it prints is a failure it recovered
// from (a dial, a dropped connection, a pub/sub reconnection), hence warnings.
type RedisLogger struct{ Log *slog.Logger }

// Printf logs one go-redis line.
func (l RedisLogger) Printf(ctx context.Context, format string, v ...any) {
	if !l.Log.Enabled(ctx, slog.LevelWarn) {
		return
	}
	msg := strings.TrimRight(fmt.Sprintf(format, v...), "\n")
	l.Log.WarnContext(ctx, strings.TrimPrefix(msg, "redis: "), "component", "redis")
}
