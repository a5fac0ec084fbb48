package app

import (
	"bytes"
	"crypto/tls"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/enforcer/gateway"
	"github.com/tollgate-dev/tollgate/internal/testtls"
)

// The gateway's knobs: off by default; an upstream, a routes file, or both (the file's
// "/" wins); defaults and overrides; every inconsistency refused at start, with the
// variable named and never a secret shown.
func TestGatewayConfig(t *testing.T) {
	dir := t.TempDir()
	routes := writeFile(t, dir, "routes.yaml", "routes:\n  - prefix: /v1/messages\n    upstream: https://api.anthropic.com\n    header: x-api-key\n    credentialEnv: ANTHROPIC_KEY\n")
	bad := writeFile(t, dir, "bad.yaml", "routes:\n  - prefix: nope\n    upstream: https://x\n")
	authFile := writeFile(t, dir, "auth", "Bearer sk-from-file\n")
	for _, tc := range []struct {
		name    string
		env     map[string]string
		routes  []string // "prefix upstream header credential"
		problem string
	}{
		{name: "off by default"},
		{name: "one upstream", env: map[string]string{"TOLLGATE_GATEWAY_ADDR": "127.0.0.1:0", "TOLLGATE_GATEWAY_UPSTREAM": "https://api.openai.com",
			"TOLLGATE_GATEWAY_UPSTREAM_AUTHORIZATION": "Bearer sk-env"}, routes: []string{"/ https://api.openai.com Authorization Bearer sk-env"}},
		{name: "its credential from a file", env: map[string]string{"TOLLGATE_GATEWAY_ADDR": "127.0.0.1:0", "TOLLGATE_GATEWAY_UPSTREAM": "https://api.openai.com",
			"TOLLGATE_GATEWAY_UPSTREAM_AUTHORIZATION_FILE": authFile}, routes: []string{"/ https://api.openai.com Authorization Bearer sk-from-file"}},
		{name: "a routes file and the upstream", env: map[string]string{"TOLLGATE_GATEWAY_ADDR": "127.0.0.1:0", "TOLLGATE_GATEWAY_ROUTES": routes,
			"ANTHROPIC_KEY": "sk-ant", "TOLLGATE_GATEWAY_UPSTREAM": "http://127.0.0.1:1"},
			routes: []string{"/v1/messages https://api.anthropic.com X-Api-Key sk-ant", "/ http://127.0.0.1:1  "}},
		{name: "an upstream without the gateway", env: map[string]string{"TOLLGATE_GATEWAY_UPSTREAM": "https://api.openai.com"}, problem: "without TOLLGATE_GATEWAY_ADDR"},
		{name: "a gateway without an upstream", env: map[string]string{"TOLLGATE_GATEWAY_ADDR": "127.0.0.1:0"}, problem: "needs TOLLGATE_GATEWAY_UPSTREAM or TOLLGATE_GATEWAY_ROUTES"},
		{name: "a credential without an upstream", env: map[string]string{"TOLLGATE_GATEWAY_ADDR": "127.0.0.1:0", "TOLLGATE_GATEWAY_ROUTES": routes,
			"ANTHROPIC_KEY": "k", "TOLLGATE_GATEWAY_UPSTREAM_AUTHORIZATION": "Bearer sk-x"}, problem: "UPSTREAM_AUTHORIZATION is set without TOLLGATE_GATEWAY_UPSTREAM"},
		{name: "a bad upstream", env: map[string]string{"TOLLGATE_GATEWAY_ADDR": "127.0.0.1:0", "TOLLGATE_GATEWAY_UPSTREAM": "api.openai.com"}, problem: "TOLLGATE_GATEWAY_UPSTREAM:"},
		{name: "a bad routes file", env: map[string]string{"TOLLGATE_GATEWAY_ADDR": "127.0.0.1:0", "TOLLGATE_GATEWAY_ROUTES": bad}, problem: "TOLLGATE_GATEWAY_ROUTES: routes[0]"},
		{name: "a missing routes file", env: map[string]string{"TOLLGATE_GATEWAY_ADDR": "127.0.0.1:0", "TOLLGATE_GATEWAY_ROUTES": filepath.Join(dir, "nope")}, problem: "TOLLGATE_GATEWAY_ROUTES:"},
		{name: "a bad address", env: map[string]string{"TOLLGATE_GATEWAY_ADDR": "nowhere", "TOLLGATE_GATEWAY_UPSTREAM": "https://x"}, problem: "TOLLGATE_GATEWAY_ADDR"},
		{name: "a header injection", env: map[string]string{"TOLLGATE_GATEWAY_ADDR": "127.0.0.1:0", "TOLLGATE_GATEWAY_UPSTREAM": "https://x",
			"TOLLGATE_GATEWAY_UPSTREAM_AUTHORIZATION": "Bearer sk-a\r\nX-Evil: 1"}, problem: "TOLLGATE_GATEWAY_UPSTREAM_AUTHORIZATION: not a valid header value"},
		{name: "zero streams", env: map[string]string{"TOLLGATE_GATEWAY_ADDR": "127.0.0.1:0", "TOLLGATE_GATEWAY_UPSTREAM": "https://x",
			"TOLLGATE_GATEWAY_MAX_STREAMS": "0"}, problem: "TOLLGATE_GATEWAY_MAX_STREAMS: must be positive"},
		{name: "no time for a body", env: map[string]string{"TOLLGATE_GATEWAY_ADDR": "127.0.0.1:0", "TOLLGATE_GATEWAY_UPSTREAM": "https://x",
			"TOLLGATE_GATEWAY_BODY_TIMEOUT": "0s"}, problem: "TOLLGATE_GATEWAY_BODY_TIMEOUT: must be positive"},
		{name: "a connection age too short", env: map[string]string{"TOLLGATE_GATEWAY_ADDR": "127.0.0.1:0", "TOLLGATE_GATEWAY_UPSTREAM": "https://x",
			"TOLLGATE_GATEWAY_MAX_CONNECTION_AGE": "100ms"}, problem: "TOLLGATE_GATEWAY_MAX_CONNECTION_AGE: must be 0 (for ever) or at least 1s"},
		{name: "a bad Server-Timing switch", env: map[string]string{"TOLLGATE_GATEWAY_ADDR": "127.0.0.1:0", "TOLLGATE_GATEWAY_UPSTREAM": "https://x",
			"TOLLGATE_GATEWAY_SERVER_TIMING": "sometimes"}, problem: "TOLLGATE_GATEWAY_SERVER_TIMING"},
		{name: "a bad access-log switch", env: map[string]string{"TOLLGATE_GATEWAY_ADDR": "127.0.0.1:0", "TOLLGATE_GATEWAY_UPSTREAM": "https://x",
			"TOLLGATE_GATEWAY_ACCESS_LOG": "loud"}, problem: "TOLLGATE_GATEWAY_ACCESS_LOG"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseConfig(nil, func(k string) string { return tc.env[k] }, io.Discard)
			if tc.problem != "" {
				if err == nil || !strings.Contains(err.Error(), tc.problem) {
					t.Fatalf("err %v, want %q", err, tc.problem)
				}
				if strings.Contains(err.Error(), "sk-") {
					t.Fatalf("the error shows a secret: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.GatewayAddr != tc.env["TOLLGATE_GATEWAY_ADDR"] {
				t.Fatalf("addr %q", c.GatewayAddr)
			}
			var got []string
			for _, r := range c.Gateway.Routes {
				got = append(got, strings.Join([]string{r.Prefix, r.Upstream.String(), r.Header, r.Credential}, " "))
			}
			if strings.Join(got, "|") != strings.Join(tc.routes, "|") {
				t.Fatalf("routes %q, want %q", got, tc.routes)
			}
			if c.GatewayAddr != "" && (c.Gateway.MaxBodyBytes != gateway.DefaultMaxBodyBytes || c.Gateway.MaxStreams != gateway.DefaultMaxStreams ||
				c.Gateway.IdleTimeout != gateway.DefaultIdleTimeout || c.Gateway.HeaderTimeout != gateway.DefaultHeaderTimeout ||
				c.Gateway.ConnectTimeout != gateway.DefaultConnectTimeout || c.Gateway.BodyTimeout != gateway.DefaultBodyTimeout || c.Gateway.ServerTiming || c.Gateway.AccessLog) {
				t.Fatalf("defaults %+v", c.Gateway)
			}
		})
	}
	c, err := parseConfig([]string{"--gateway-addr", "127.0.0.1:0", "--gateway-upstream", "https://x", "--gateway-idle-timeout", "30s",
		"--gateway-max-body-bytes", "1024", "--gateway-access-log", "--gateway-body-timeout", "5s"}, func(k string) string {
		return map[string]string{"TOLLGATE_GATEWAY_SERVER_TIMING": "true"}[k]
	}, io.Discard)
	if err != nil || c.Gateway.IdleTimeout != 30*time.Second || c.Gateway.BodyTimeout != 5*time.Second || c.Gateway.MaxBodyBytes != 1024 || !c.Gateway.ServerTiming || !c.Gateway.AccessLog {
		t.Fatalf("flags: %+v %v", c.Gateway, err)
	}
	// -h lists the gateway's knobs and shows no secret from the environment.
	var help bytes.Buffer
	_, _ = parseConfig([]string{"-h"}, func(k string) string {
		return map[string]string{"TOLLGATE_GATEWAY_UPSTREAM_AUTHORIZATION": "Bearer sk-hidden"}[k]
	}, &help)
	if !strings.Contains(help.String(), "TOLLGATE_GATEWAY_IDLE_TIMEOUT") || !strings.Contains(help.String(), "TOLLGATE_GATEWAY_BODY_TIMEOUT") || strings.Contains(help.String(), "sk-hidden") {
		t.Fatalf("help:\n%s", help.String())
	}
}

// An upstream URL that carries a secret is refused (parseUpstream: no user, no query),
// and the refusal names the variable without the secret: the problems are printed to
// stderr, which is the log. Operators do write a provider's key into a URL
// (https://user:key@host, Google's ?key=), or swap TOLLGATE_GATEWAY_UPSTREAM and its
// _AUTHORIZATION. Before 2026-12-02 the message quoted the URL whole.
func TestGatewayUpstreamSecretIsNotShown(t *testing.T) {
	dir := t.TempDir()
	for _, upstream := range []string{
		"https://apikey:sk-userinfo@api.openai.com",                  // refused: a user
		"https://generativelanguage.googleapis.com/?key=sk-querykey", // refused: a query
		"https://u:sk-badport@api.openai.com:port",                   // does not parse
		"Bearer sk-swapped",                     // the credential in the URL's variable
		"https://api.openai.com/v1#sk-fragment", // refused: a fragment
	} {
		routes := writeFile(t, dir, "routes.yaml", "routes:\n  - prefix: /v1\n    upstream: \""+upstream+"\"\n")
		for name, env := range map[string]map[string]string{
			"TOLLGATE_GATEWAY_UPSTREAM": {"TOLLGATE_GATEWAY_ADDR": "127.0.0.1:0", "TOLLGATE_GATEWAY_UPSTREAM": upstream},
			"TOLLGATE_GATEWAY_ROUTES":   {"TOLLGATE_GATEWAY_ADDR": "127.0.0.1:0", "TOLLGATE_GATEWAY_ROUTES": routes},
		} {
			_, err := parseConfig(nil, func(k string) string { return env[k] }, io.Discard)
			if err == nil || !strings.Contains(err.Error(), name+":") {
				t.Fatalf("%s=%q: err %v, want a problem naming it", name, upstream, err)
			}
			if strings.Contains(err.Error(), "sk-") {
				t.Errorf("%s=%q: the error shows the secret: %v", name, upstream, err)
			}
		}
	}
}

// The gateway's TLS knobs: a pair that loads is served (from the first handshake the
// server makes); half a pair, files that do not load, or a pair without the gateway are
// refused at start, the variable named.
func TestGatewayTLSConfig(t *testing.T) {
	ca := testtls.NewCA(t, "gateway config test CA")
	pair := ca.Server(t)
	other := testtls.NewCA(t, "another CA").Server(t)
	base := map[string]string{"TOLLGATE_GATEWAY_ADDR": "127.0.0.1:0", "TOLLGATE_GATEWAY_UPSTREAM": "https://x"}
	with := func(kv ...string) map[string]string {
		env := maps.Clone(base)
		for i := 0; i < len(kv); i += 2 {
			env[kv[i]] = kv[i+1]
		}
		return env
	}
	for _, tc := range []struct {
		name    string
		env     map[string]string
		problem string
	}{
		{"no TLS", base, ""},
		{"a pair", with("TOLLGATE_GATEWAY_TLS_CERT", pair.CertFile, "TOLLGATE_GATEWAY_TLS_KEY", pair.KeyFile), ""},
		{"a certificate without its key", with("TOLLGATE_GATEWAY_TLS_CERT", pair.CertFile), "TOLLGATE_GATEWAY_TLS_CERT and TOLLGATE_GATEWAY_TLS_KEY: set both or neither"},
		{"a key without its certificate", with("TOLLGATE_GATEWAY_TLS_KEY", pair.KeyFile), "set both or neither"},
		{"a missing file", with("TOLLGATE_GATEWAY_TLS_CERT", filepath.Join(t.TempDir(), "nope.pem"), "TOLLGATE_GATEWAY_TLS_KEY", pair.KeyFile),
			"TOLLGATE_GATEWAY_TLS_CERT/KEY: open "},
		{"a key of another certificate", with("TOLLGATE_GATEWAY_TLS_CERT", pair.CertFile, "TOLLGATE_GATEWAY_TLS_KEY", other.KeyFile),
			"TOLLGATE_GATEWAY_TLS_CERT/KEY: " + pair.CertFile + " and " + other.KeyFile + ": tls: private key does not match public key"},
		{"a pair without the gateway", map[string]string{"TOLLGATE_GATEWAY_TLS_CERT": pair.CertFile, "TOLLGATE_GATEWAY_TLS_KEY": pair.KeyFile},
			"TOLLGATE_GATEWAY_TLS_CERT or TOLLGATE_GATEWAY_TLS_KEY is set without TOLLGATE_GATEWAY_ADDR"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseConfig(nil, func(k string) string { return tc.env[k] }, io.Discard)
			if tc.problem != "" {
				if err == nil || !strings.Contains(err.Error(), tc.problem) {
					t.Fatalf("err %v, want %q", err, tc.problem)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (c.GatewayTLS != nil) != (tc.env["TOLLGATE_GATEWAY_TLS_CERT"] != "") {
				t.Fatalf("GatewayTLS %v with TOLLGATE_GATEWAY_TLS_CERT %q", c.GatewayTLS, tc.env["TOLLGATE_GATEWAY_TLS_CERT"])
			}
			srv := newGatewayServer(http.NotFoundHandler(), c.GatewayTLS, 0, slog.New(slog.DiscardHandler))
			if c.GatewayTLS == nil {
				if srv.TLSConfig != nil || !srv.Protocols.UnencryptedHTTP2() || srv.Protocols.HTTP2() {
					t.Fatalf("a gateway without TLS: TLS config %v, protocols %v; want h2c and HTTP/1.1", srv.TLSConfig, srv.Protocols)
				}
				return
			}
			if c.GatewayTLS.Leaf().Subject.CommonName != testtls.ServerName {
				t.Errorf("serving %q", c.GatewayTLS.Leaf().Subject)
			}
			if srv.TLSConfig == nil || srv.TLSConfig.MinVersion != tls.VersionTLS12 || srv.Protocols.UnencryptedHTTP2() || !srv.Protocols.HTTP2() || !srv.Protocols.HTTP1() {
				t.Fatalf("a gateway with TLS: TLS config %v, protocols %v; want TLS 1.2 at least, HTTP/2 and HTTP/1.1, no h2c", srv.TLSConfig, srv.Protocols)
			}
			got, err := srv.TLSConfig.GetCertificate(&tls.ClientHelloInfo{})
			if err != nil || got.Leaf.SerialNumber.Cmp(c.GatewayTLS.Leaf().SerialNumber) != 0 {
				t.Fatalf("GetCertificate: %v, %v", got, err)
			}
		})
	}
}
