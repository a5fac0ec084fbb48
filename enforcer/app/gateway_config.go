package app

import (
	"crypto/tls"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/tollgate-dev/tollgate/enforcer/gateway"
	"github.com/tollgate-dev/tollgate/pkg/connage"
	"github.com/tollgate-dev/tollgate/pkg/envflag"
	"github.com/tollgate-dev/tollgate/pkg/logging"
	"github.com/tollgate-dev/tollgate/pkg/tlsreload"
)

// gatewayFlags are the gateway's knobs as parsed, before they become Config.Gateway.
type gatewayFlags struct {
	addr, upstream, authorization, authorizationFile, routesFile string
	tlsCert, tlsKey                                              string
	maxBody, maxStreams                                          int
	maxConnAge                                                   time.Duration
	cfg                                                          gateway.Config
}

func (g *gatewayFlags) register(fs *flag.FlagSet, e *envflag.Env) {
	fs.StringVar(&g.addr, "gateway-addr", e.String("TOLLGATE_GATEWAY_ADDR", ""), "the inference gateway's listen address; empty: no gateway (TOLLGATE_GATEWAY_ADDR)")
	fs.StringVar(&g.upstream, "gateway-upstream", e.String("TOLLGATE_GATEWAY_UPSTREAM", ""), "the gateway's upstream base URL, e.g. https://api.openai.com: the route of every path no routes-file prefix takes (TOLLGATE_GATEWAY_UPSTREAM)")
	// Secrets are read from the environment after parsing, never as flag defaults, so
	// that -h never prints one.
	fs.StringVar(&g.authorization, "gateway-upstream-authorization", "", "the Authorization value the gateway sends to TOLLGATE_GATEWAY_UPSTREAM, e.g. \"Bearer sk-...\" (TOLLGATE_GATEWAY_UPSTREAM_AUTHORIZATION)")
	fs.StringVar(&g.authorizationFile, "gateway-upstream-authorization-file", "", "file holding that value, read at start (TOLLGATE_GATEWAY_UPSTREAM_AUTHORIZATION_FILE)")
	fs.StringVar(&g.tlsCert, "gateway-tls-cert", e.String("TOLLGATE_GATEWAY_TLS_CERT", ""), "PEM certificate (chain) of the gateway; with --gateway-tls-key, the gateway serves HTTPS (HTTP/1.1 and HTTP/2), the files read again every 10s (TOLLGATE_GATEWAY_TLS_CERT)")
	fs.StringVar(&g.tlsKey, "gateway-tls-key", e.String("TOLLGATE_GATEWAY_TLS_KEY", ""), "PEM private key of --gateway-tls-cert (TOLLGATE_GATEWAY_TLS_KEY)")
	fs.StringVar(&g.routesFile, "gateway-routes", e.String("TOLLGATE_GATEWAY_ROUTES", ""), "YAML or JSON file of upstreams by path prefix, each with its own credential (TOLLGATE_GATEWAY_ROUTES; docs/gateway.md)")
	fs.IntVar(&g.maxBody, "gateway-max-body-bytes", e.Int("TOLLGATE_GATEWAY_MAX_BODY_BYTES", gateway.DefaultMaxBodyBytes), "largest request body the gateway accepts; larger is 413 (TOLLGATE_GATEWAY_MAX_BODY_BYTES)")
	fs.DurationVar(&g.cfg.ConnectTimeout, "gateway-connect-timeout", e.Duration("TOLLGATE_GATEWAY_CONNECT_TIMEOUT", gateway.DefaultConnectTimeout), "longest upstream connection set-up, TLS included (TOLLGATE_GATEWAY_CONNECT_TIMEOUT)")
	fs.DurationVar(&g.cfg.HeaderTimeout, "gateway-header-timeout", e.Duration("TOLLGATE_GATEWAY_HEADER_TIMEOUT", gateway.DefaultHeaderTimeout), "longest wait for the upstream's response headers; 504 after it (TOLLGATE_GATEWAY_HEADER_TIMEOUT)")
	fs.DurationVar(&g.cfg.IdleTimeout, "gateway-idle-timeout", e.Duration("TOLLGATE_GATEWAY_IDLE_TIMEOUT", gateway.DefaultIdleTimeout), "longest silence between two chunks of a response, the stream cut after it; for a Realtime session, the longest its provider may take to answer a ping (TOLLGATE_GATEWAY_IDLE_TIMEOUT)")
	fs.DurationVar(&g.cfg.BodyTimeout, "gateway-body-timeout", e.Duration("TOLLGATE_GATEWAY_BODY_TIMEOUT", gateway.DefaultBodyTimeout), "longest wait for a request's body, read before its check; 408 after it, the request's slot freed (an upload streams after its check without it) (TOLLGATE_GATEWAY_BODY_TIMEOUT)")
	fs.BoolVar(&g.cfg.ServerTiming, "gateway-server-timing", e.Bool("TOLLGATE_GATEWAY_SERVER_TIMING"), "add a Server-Timing header (the admission check's, the usage record read's and the durable start's milliseconds) to the gateway's answers (TOLLGATE_GATEWAY_SERVER_TIMING)")
	fs.BoolVar(&g.cfg.AccessLog, "gateway-access-log", e.Bool("TOLLGATE_GATEWAY_ACCESS_LOG"), "log a line, at level info, for every request the gateway answers: method, path, status, outcome, request id, member, timings and the usage the upstream reported; never a credential or a body (TOLLGATE_GATEWAY_ACCESS_LOG)")
	fs.DurationVar(&g.maxConnAge, "gateway-max-connection-age", e.Duration("TOLLGATE_GATEWAY_MAX_CONNECTION_AGE", DefaultGatewayMaxConnectionAge), "how long a client's connection to the gateway lasts (give or take a tenth) before its next response closes it (HTTP/1.1: Connection: close; HTTP/2: a GOAWAY, its streams finished), so that clients spread over the enforcers behind a Service; 0: for ever (TOLLGATE_GATEWAY_MAX_CONNECTION_AGE)")
	fs.IntVar(&g.maxStreams, "gateway-max-streams", e.Int("TOLLGATE_GATEWAY_MAX_STREAMS", gateway.DefaultMaxStreams), "most requests the gateway proxies at once; more are 503 (TOLLGATE_GATEWAY_MAX_STREAMS)")
}

// finish validates the gateway's knobs and fills c.GatewayAddr and c.Gateway.
func (g *gatewayFlags) finish(c *Config, getenv func(string) string) []string {
	var p []string
	p = append(p, upstreamCredential(&g.authorization, g.authorizationFile, "TOLLGATE_GATEWAY_UPSTREAM_AUTHORIZATION", getenv)...)
	if g.addr == "" {
		if g.upstream != "" || g.routesFile != "" {
			p = append(p, "TOLLGATE_GATEWAY_UPSTREAM or TOLLGATE_GATEWAY_ROUTES is set without TOLLGATE_GATEWAY_ADDR: the gateway is off")
		}
		if g.tlsCert != "" || g.tlsKey != "" {
			p = append(p, "TOLLGATE_GATEWAY_TLS_CERT or TOLLGATE_GATEWAY_TLS_KEY is set without TOLLGATE_GATEWAY_ADDR: the gateway is off")
		}
		return p
	}
	c.GatewayAddr = g.addr
	switch {
	case (g.tlsCert == "") != (g.tlsKey == ""):
		p = append(p, "TOLLGATE_GATEWAY_TLS_CERT and TOLLGATE_GATEWAY_TLS_KEY: set both or neither")
	case g.tlsCert != "":
		pair, err := tlsreload.Load(g.tlsCert, g.tlsKey)
		if err != nil {
			p = append(p, fmt.Sprintf("TOLLGATE_GATEWAY_TLS_CERT/KEY: %v", err))
		}
		c.GatewayTLS = pair
	}
	cfg := g.cfg
	if g.routesFile != "" {
		data, err := os.ReadFile(g.routesFile)
		if err != nil {
			p = append(p, fmt.Sprintf("TOLLGATE_GATEWAY_ROUTES: %v", err))
		} else if rs, err := gateway.ParseRoutes(data, getenv); err != nil {
			p = append(p, fmt.Sprintf("TOLLGATE_GATEWAY_ROUTES: %v", err))
		} else {
			cfg.Routes = rs
		}
	}
	if g.upstream != "" {
		rt, err := gateway.NewRoute("/", g.upstream, "", g.authorization)
		switch {
		case err != nil:
			p = append(p, fmt.Sprintf("TOLLGATE_GATEWAY_UPSTREAM: %v", err))
		case !hasPrefix(cfg.Routes, "/"):
			cfg.Routes = append(cfg.Routes, rt)
		}
	} else if g.authorization != "" {
		p = append(p, "TOLLGATE_GATEWAY_UPSTREAM_AUTHORIZATION is set without TOLLGATE_GATEWAY_UPSTREAM")
	}
	if g.upstream == "" && g.routesFile == "" {
		p = append(p, "TOLLGATE_GATEWAY_ADDR: the gateway needs TOLLGATE_GATEWAY_UPSTREAM or TOLLGATE_GATEWAY_ROUTES")
	}
	for _, x := range []struct {
		ok   bool
		name string
	}{{g.maxBody > 0, "TOLLGATE_GATEWAY_MAX_BODY_BYTES"}, {g.maxStreams > 0, "TOLLGATE_GATEWAY_MAX_STREAMS"},
		{cfg.ConnectTimeout > 0, "TOLLGATE_GATEWAY_CONNECT_TIMEOUT"}, {cfg.HeaderTimeout > 0, "TOLLGATE_GATEWAY_HEADER_TIMEOUT"},
		{cfg.IdleTimeout > 0, "TOLLGATE_GATEWAY_IDLE_TIMEOUT"}, {cfg.BodyTimeout > 0, "TOLLGATE_GATEWAY_BODY_TIMEOUT"}} {
		if !x.ok {
			p = append(p, x.name+": must be positive")
		}
	}
	if g.maxConnAge != 0 && g.maxConnAge < time.Second {
		p = append(p, "TOLLGATE_GATEWAY_MAX_CONNECTION_AGE: must be 0 (for ever) or at least 1s")
	}
	cfg.MaxBodyBytes, cfg.MaxStreams = int64(g.maxBody), g.maxStreams
	c.Gateway, c.GatewayMaxConnectionAge = cfg, g.maxConnAge
	return p
}

// DefaultGatewayMaxConnectionAge is TOLLGATE_GATEWAY_MAX_CONNECTION_AGE's default: an
// enforcer added behind the Service gets its share of clients that keep their
// connections within about five minutes, at the cost of one new connection a client in
// that time.
const DefaultGatewayMaxConnectionAge = 5 * time.Minute

func hasPrefix(rs []gateway.Route, prefix string) bool {
	for _, r := range rs {
		if r.Prefix == prefix {
			return true
		}
	}
	return false
}

// newGatewayServer is the gateway's HTTP server. Without TLS it speaks HTTP/1.1 and
// HTTP/2 with prior knowledge (h2c), which a proxy or a mesh sidecar may use to multiplex
// its requests over one connection. With pair it speaks HTTPS only, HTTP/2 or HTTP/1.1 as
// the client's ALPN asks (a WebSocket, OpenAI's Realtime API, takes HTTP/1.1: the server
// does not offer WebSockets over HTTP/2), TLS 1.2 at least, each handshake with the
// certificate pair holds then. It has no write or read timeout: a response streams
// as long as the upstream sends (the gateway's idle timeout cuts silent ones). Each client
// connection ends at maxAge (0: never), by its first response past it (package connage).
func newGatewayServer(h http.Handler, pair *tlsreload.Pair, maxAge time.Duration, log *slog.Logger) *http.Server {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: gateway.ServerIdleTimeout,
		Protocols: new(http.Protocols), ErrorLog: logging.ServerLog(log, "gateway")}
	connage.Apply(srv, maxAge)
	srv.Protocols.SetHTTP1(true)
	if pair == nil {
		srv.Protocols.SetUnencryptedHTTP2(true)
		return srv
	}
	srv.Protocols.SetHTTP2(true)
	srv.TLSConfig = &tls.Config{GetCertificate: pair.GetCertificate, MinVersion: tls.VersionTLS12}
	return srv
}
