package authz_test

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/enforcer/internal/enforcertest"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// Through the enforcer's own gRPC server, whose codec decodes a CheckRequest only in
// part: the admission still narrows Accept-Encoding by the header and the path
// (Check's unit tests call it with fully decoded requests, which once hid a codec that
// dropped both).
func TestCheckThroughGRPCNarrowsAcceptEncoding(t *testing.T) {
	e := enforcertest.New(t, enforcertest.Options{Quiet: true})
	m := e.NewMember(enforcertest.DayLimit(1*enforcertest.USD, true))
	for _, tc := range []struct {
		name, path, offered, want string
		raw                       bool // the headers in header_map (encode_raw_headers)
	}{
		{"gzip and zstd offered: gzip", "/v1/chat/completions", "gzip, zstd", "gzip", false},
		{"only zstd offered: identity", "/v1/chat/completions", "zstd", "identity", false},
		{"Gemini's stream: identity", "/v1beta/models/gemini-2.5-flash:streamGenerateContent", "gzip, br", "identity", false},
		{"raw headers, gzip and zstd offered: gzip", "/v1/chat/completions", "gzip, zstd", "gzip", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := enforcertest.CheckRequest(map[string]string{"x-api-key": m.Key, "accept-encoding": tc.offered, ":path": tc.path})
			h := req.GetAttributes().GetRequest().GetHttp()
			h.Path = tc.path
			if tc.raw {
				h.HeaderMap = enforcertest.HeaderMap("x-api-key", m.Key, "accept-encoding", tc.offered, ":path", tc.path)
				h.Headers = nil
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			resp, err := e.Authz.Check(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			ok := enforcertest.OK(t, resp)
			if got := enforcertest.MustHeader(t, ok.GetHeaders(), "accept-encoding"); got != tc.want {
				t.Fatalf("accept-encoding set to %q, want %q", got, tc.want)
			}
		})
	}
}

// A browser's CORS preflight (OPTIONS with Origin and Access-Control-Request-Method,
// never a key) that reaches ext_authz, in an Envoy configuration without the CORS filter
// before it (deploy/envoy/envoy.yaml has one), is refused 401 for want of a key: no call
// to the control plane, no start, nothing charged; the page's real call is not sent
// (docs/gateway.md, "Browser apps (CORS)").
func TestPreflightReachingExtAuthzIsNeitherStartedNorCharged(t *testing.T) {
	e := enforcertest.New(t, enforcertest.Options{Quiet: true})
	m := e.NewMember(enforcertest.DayLimit(1*enforcertest.USD, true))
	req := enforcertest.CheckRequest(map[string]string{":method": "OPTIONS", "origin": "https://app.example",
		"access-control-request-method": "POST", "access-control-request-headers": "authorization,content-type"})
	delete(req.GetAttributes().GetRequest().GetHttp().GetHeaders(), "content-type")
	req.GetAttributes().GetRequest().GetHttp().Method = "OPTIONS"
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := e.Authz.Check(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if code := resp.GetDeniedResponse().GetStatus().GetCode(); code != 401 {
		t.Fatalf("preflight answered %v, want ext_authz's 401", resp)
	}
	for _, method := range []string{"Authenticate", "Resolve", "Start"} {
		if n := e.CP.CallCount(method); n != 0 {
			t.Errorf("the preflight made %d %s calls", n, method)
		}
	}
	if spent := e.CP.Spend(m.ID, window.Day); spent != 0 {
		t.Errorf("the preflight was charged %d micro-USD", spent)
	}
}
