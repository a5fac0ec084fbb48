package gateway

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/tollgate-dev/tollgate/enforcer/gate"
	"github.com/tollgate-dev/tollgate/enforcer/inflight"
	"github.com/tollgate-dev/tollgate/pkg/redact"
)

// access is one request's access-log line (Config.AccessLog), filled in as the request
// goes and written when it ends. It wraps the request's ResponseWriter to see the status
// and the body bytes sent; http.ResponseController reaches the writer beneath through
// Unwrap, so flushing is unchanged.
type access struct {
	http.ResponseWriter
	start  time.Time
	status int
	bytes  int64
	// outcome is the Requests metric's label; the rest is set once known: upstream is
	// the host a request was sent to.
	outcome string
	// req is the request's state once routed (nil when it was answered before: no
	// route, busy), whose admission names the member and organization charged.
	req              *proxied
	check, startWait time.Duration
	upstream         string
	firstByte        time.Duration
	// usage is what the request was settled with, when settled says it was.
	usage   inflight.Usage
	settled bool
}

func (a *access) WriteHeader(status int) {
	if a.status == 0 {
		a.status = status
	}
	a.ResponseWriter.WriteHeader(status)
}

func (a *access) Write(b []byte) (int, error) {
	if a.status == 0 {
		a.status = http.StatusOK
	}
	n, err := a.ResponseWriter.Write(b)
	a.bytes += int64(n)
	return n, err
}

// Unwrap is for http.ResponseController.
func (a *access) Unwrap() http.ResponseWriter { return a.ResponseWriter }

// unwrapped is the server's own writer beneath an access-log wrapper: what
// http.MaxBytesReader needs to tell the server to close a connection whose body was too
// large (it looks for an unexported method).
func unwrapped(w http.ResponseWriter) http.ResponseWriter {
	if a, ok := w.(*access); ok {
		return a.ResponseWriter
	}
	return w
}

// answered counts the request's outcome (Metrics.Requests) and notes it for its line.
func (gw *Gateway) answered(w http.ResponseWriter, outcome string) {
	gw.count(outcome)
	if a, ok := w.(*access); ok {
		a.outcome = outcome
	}
}

// logAccess writes the line of a request that ended: what was asked, what was answered
// and how long it took, who was charged and what the upstream reported. It names no
// credential and logs no body.
func (gw *Gateway) logAccess(a *access, r *http.Request) {
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }
	h := a.Header()
	attrs := make([]slog.Attr, 0, 20)
	attrs = append(attrs, slog.String("method", clip(r.Method)), slog.String("path", clip(r.URL.Path)),
		slog.Int("status", a.status), slog.String("outcome", a.outcome), slog.Int64("bytes", a.bytes),
		slog.Float64("duration_ms", ms(time.Since(a.start))))
	if id := h.Get(gate.HeaderRequestID); id != "" {
		attrs = append(attrs, slog.String("request_id", id))
	}
	if code := h.Get(gate.HeaderErrorCode); code != "" && a.outcome != OutcomeProxied {
		attrs = append(attrs, slog.String("code", code)) // the gateway's or the gate's own answer
	}
	if a.req != nil && a.req.member != "" {
		attrs = append(attrs, slog.String("member_id", a.req.member), slog.String("organization_id", a.req.org))
	}
	if a.check > 0 {
		attrs = append(attrs, slog.Float64("check_ms", ms(a.check)), slog.Float64("start_ms", ms(a.startWait)))
	}
	if a.upstream != "" {
		attrs = append(attrs, slog.String("upstream", a.upstream))
	}
	if a.firstByte > 0 {
		attrs = append(attrs, slog.Float64("upstream_first_byte_ms", ms(a.firstByte)))
	}
	if u := &a.usage; a.settled {
		attrs = append(attrs, slog.String("model", clip(u.Model)), slog.Int64("input_tokens", u.InputTokens),
			slog.Int64("output_tokens", u.OutputTokens), slog.Bool("usage_complete", u.Complete))
	}
	gw.log.LogAttrs(r.Context(), slog.LevelInfo, "gateway request", attrs...)
}

// maxAccessField is the most an access-log line quotes of a value the client chose (its
// method, its path, the model the response named): the server takes a request line up
// to its 1 MiB header limit, and one line per request must not be a megabyte.
const maxAccessField = 256

// clip is v as the access log quotes it (redact.Clip at maxAccessField).
func clip(v string) string { return redact.Clip(v, maxAccessField) }
