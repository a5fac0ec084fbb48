package authz_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/tollgate-dev/tollgate/enforcer/authz"
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

// Behind Envoy with route_metadata_context_namespaces: [tollgate] (deploy/envoy/
// envoy.yaml), a route's metadata reaches the check as it reaches a gateway route: a
// request to a declared Azure OpenAI deployment reserves the deployment's model's worst
// case whatever its body names, and a route's upstream_host prices its reservation at
// that host, never at the client's :authority. Before, the check read the body's model
// and the authority: a body naming a cheap model reserved that model's worst case on a
// deployment of a dear one.
func TestCheckReservesByTheRoutesMetadata(t *testing.T) {
	e := enforcertest.New(t, enforcertest.Options{Quiet: true})
	lim := enforcertest.DayLimit(100*enforcertest.USD, true)
	lim.ReservationMicroUSD = 7
	m := e.NewMember(lim)
	reserved := func(t *testing.T, path, authority, body string, route map[string]any) int64 {
		t.Helper()
		req := enforcertest.CheckRequest(map[string]string{"api-key": m.Key})
		h := req.GetAttributes().GetRequest().GetHttp()
		h.Path, h.Host, h.RawBody = path, authority, []byte(body)
		if route != nil {
			s, err := structpb.NewStruct(route)
			if err != nil {
				t.Fatal(err)
			}
			req.Attributes.RouteMetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{authz.RouteNamespace: s,
				"other": {Fields: map[string]*structpb.Value{"upstream_host": structpb.NewStringValue("api.openai.com")}}}}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := e.Authz.Check(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		id := enforcertest.MustHeader(t, enforcertest.OK(t, resp).GetHeaders(), "x-service-request-id")
		item := e.CP.StartItem(id)
		if item == nil {
			t.Fatalf("no start for %s", id)
		}
		return item.GetReservationMicroUsd()
	}
	// A long prompt: hosts that differ in their input price alone reserve differently.
	prompt := strings.Repeat("the quick brown fox ", 2000)
	chat := func(model string) string {
		return `{"model":"` + model + `","max_tokens":4000,"messages":[{"role":"user","content":"` + prompt + `"}]}`
	}
	const azure = "/openai/deployments/big/chat/completions?api-version=2024-10-21"
	deployments := map[string]any{"deployments": map[string]any{"big": "gpt-4o"}}
	t.Run("an Azure deployment", func(t *testing.T) {
		dear, cheap := reserved(t, azure, "h", chat("gpt-4o"), nil), reserved(t, azure, "h", chat("gpt-4o-mini"), nil)
		if dear <= cheap {
			t.Fatalf("gpt-4o reserves %d, gpt-4o-mini %d: the test needs the first dearer", dear, cheap)
		}
		if got := reserved(t, azure, "h", chat("gpt-4o-mini"), deployments); got != dear {
			t.Fatalf("a body naming gpt-4o-mini to a deployment of gpt-4o reserved %d, want gpt-4o's %d", got, dear)
		}
		undeclared := strings.Replace(azure, "/big/", "/small/", 1)
		if got := reserved(t, undeclared, "h", chat("gpt-4o-mini"), deployments); got != cheap {
			t.Fatalf("an undeclared deployment reserved %d, want its body's model's %d", got, cheap)
		}
	})
	t.Run("the route's upstream host", func(t *testing.T) {
		// The client's :authority never prices a request (the client chooses it); the
		// route's upstream_host does: Groq serves this model at its own price.
		const path, model = "/openai/v1/chat/completions", "openai/gpt-oss-120b"
		general := reserved(t, path, "api.groq.com", chat(model), nil)
		atGroq := reserved(t, path, "llm.internal", chat(model), map[string]any{"upstream_host": "API.Groq.com:443"})
		if atGroq >= general {
			t.Fatalf("a route to api.groq.com reserved %d, want Groq's own price, below the general %d", atGroq, general)
		}
		if got := reserved(t, path, "api.groq.com", chat(model), map[string]any{"upstream_host": "llm.internal"}); got != general {
			t.Fatalf("a route to llm.internal called as api.groq.com reserved %d, want the general %d", got, general)
		}
	})
}
