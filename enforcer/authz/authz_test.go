package authz

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"

	"github.com/tollgate-dev/tollgate/enforcer/gate"
	"github.com/tollgate-dev/tollgate/enforcer/requestbody"
	"github.com/tollgate-dev/tollgate/pkg/credential"
	"github.com/tollgate-dev/tollgate/pkg/pricecatalog"
)

func TestCredentialsFromBothHeaderShapes(t *testing.T) {
	for _, tc := range []struct {
		name string
		http *authv3.AttributeContext_HttpRequest
	}{
		{"headers map", &authv3.AttributeContext_HttpRequest{Headers: map[string]string{"x-api-key": "tgk_k", "authorization": "Bearer tgs_s",
			"x-goog-api-key": "tgk_g", "api-key": "tgk_z", ":path": "/"}}},
		{"header_map with raw values (encode_raw_headers)", &authv3.AttributeContext_HttpRequest{HeaderMap: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
			{Key: ":path", RawValue: []byte("/")}, {Key: "x-api-key", RawValue: []byte("tgk_k")}, {Key: "authorization", RawValue: []byte("Bearer tgs_s")},
			{Key: "X-Goog-Api-Key", RawValue: []byte("tgk_g")}, {Key: "Api-Key", RawValue: []byte("tgk_z")}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Credentials(tc.http); got != (gate.Credentials{APIKey: "tgk_k", Authorization: "Bearer tgs_s", GoogAPIKey: "tgk_g", AzureAPIKey: "tgk_z"}) {
				t.Fatalf("%+v", got)
			}
		})
	}
}

// A credential header on two lines of header_map (encode_raw_headers) reads as Envoy's
// headers map joins them: two values, which no credential parses (gate.Credentials.Add);
// the same value twice is that value.
func TestCredentialsOnTwoLines(t *testing.T) {
	lines := func(kv ...string) *authv3.AttributeContext_HttpRequest {
		m := &corev3.HeaderMap{}
		for i := 0; i+1 < len(kv); i += 2 {
			m.Headers = append(m.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
		}
		return &authv3.AttributeContext_HttpRequest{HeaderMap: m}
	}
	if got := Credentials(lines("x-api-key", "tgk_a", "x-api-key", "tgk_b")); got.APIKey != "tgk_a, tgk_b" {
		t.Fatalf("two keys read as %+v", got)
	}
	if got := Credentials(lines("authorization", "Bearer tgk_a", "authorization", "Bearer tgk_a")); got.Authorization != "Bearer tgk_a" {
		t.Fatalf("one key twice read as %+v", got)
	}
}

func TestDenialIsACheckResponseNotAnError(t *testing.T) {
	a := gate.Refusal(gate.ReasonRedis)
	r := Denied(&a)
	if r.GetDeniedResponse().GetStatus().GetCode() != 503 || r.GetStatus().GetCode() == 0 {
		t.Fatalf("%v", r)
	}
}

// The usage-limit 429 tells the SDKs not to retry (they would otherwise sleep for
// Retry-After, hours), next to the specification's headers, and is never cached, as
// the gateway's is (Cache-Control: no-store; before 2026-12-03, ext_authz's had none).
func TestUsageLimitRefusalSaysDoNotRetry(t *testing.T) {
	a := gate.Refusal(gate.ReasonUsageLimit)
	a.RetryAfter, a.Body = "61866", []byte(`{"error":{}}`)
	got := map[string]string{}
	for _, h := range Denied(&a).GetDeniedResponse().GetHeaders() {
		got[h.GetHeader().GetKey()] = h.GetHeader().GetValue()
	}
	want := map[string]string{"Content-Type": "application/json", "X-Service-Error-Code": gate.CodeUsageLimitExceeded,
		"X-Service-Usage-State": "blocked", "Retry-After": "61866", "X-Should-Retry": "false", "Cache-Control": "no-store"}
	if len(got) != len(want) {
		t.Fatalf("headers %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("headers %v, want %v", got, want)
		}
	}
}

// alwaysRemoved are the headers every admission removes from the upstream request, after
// the credentials (a contract: docs/enforcer.md, "Credentials stay home").
var alwaysRemoved = []string{"openai-organization", "openai-project", "x-goog-user-project", "cookie", "x-goog-fieldmask", "x-http-method-override", "x-http-method", "x-method-override",
	"x-envoy-retry-on", "x-envoy-retry-grpc-on", "x-envoy-max-retries", "x-envoy-retriable-status-codes", "x-envoy-retriable-header-names", "x-envoy-upstream-rq-timeout-ms", "x-envoy-upstream-rq-per-try-timeout-ms", "x-envoy-hedge-on-per-try-timeout", "x-envoy-upstream-stream-duration-ms"}

// On admit the member's Tollgate credential never goes upstream, and the provider's
// credential, when configured, replaces it; an Accept-Encoding offering codings the
// usage extractor cannot read is narrowed.
func TestAdmissionSwapsCredentials(t *testing.T) {
	const provider = "Bearer sk-provider"
	type mutation struct {
		set    map[string]string
		remove []string
	}
	for _, tc := range []struct {
		name           string
		up             Upstream
		cred           gate.Credentials
		acceptEncoding string
		want           mutation
	}{
		{"x-api-key, nothing configured", Upstream{}, gate.Credentials{APIKey: "tgk_k"}, "",
			mutation{set: map[string]string{"x-service-request-id": "req_1"}, remove: []string{"x-api-key"}}},
		{"bearer key, nothing configured", Upstream{}, gate.Credentials{Authorization: "Bearer tgk_k"}, "",
			mutation{set: map[string]string{"x-service-request-id": "req_1"}, remove: []string{"authorization"}}},
		{"bearer session and x-api-key", Upstream{}, gate.Credentials{APIKey: "tgk_k", Authorization: "Bearer tgs_s"}, "",
			mutation{set: map[string]string{"x-service-request-id": "req_1"}, remove: []string{"x-api-key", "authorization"}}},
		{"another Authorization is not ours: left alone", Upstream{}, gate.Credentials{APIKey: "tgk_k", Authorization: "Bearer sk-theirs"}, "",
			mutation{set: map[string]string{"x-service-request-id": "req_1"}, remove: []string{"x-api-key"}}},
		{"provider Authorization configured", Upstream{Authorization: provider}, gate.Credentials{Authorization: "Bearer tgk_k"}, "gzip, deflate, br",
			mutation{set: map[string]string{"x-service-request-id": "req_1", "authorization": provider}}},
		{"provider Authorization, member used x-api-key", Upstream{Authorization: provider}, gate.Credentials{APIKey: "tgk_k"}, "",
			mutation{set: map[string]string{"x-service-request-id": "req_1", "authorization": provider}, remove: []string{"x-api-key"}}},
		{"provider x-api-key configured (Anthropic)", Upstream{APIKey: "sk-ant-provider"}, gate.Credentials{APIKey: "tgk_k", Authorization: "Bearer tgs_s"}, "",
			mutation{set: map[string]string{"x-service-request-id": "req_1", "x-api-key": "sk-ant-provider"}, remove: []string{"authorization"}}},
		{"x-goog-api-key (Google's Gen AI SDK)", Upstream{}, gate.Credentials{GoogAPIKey: "tgk_k"}, "",
			mutation{set: map[string]string{"x-service-request-id": "req_1"}, remove: []string{"x-goog-api-key"}}},
		{"api-key (Azure OpenAI clients)", Upstream{}, gate.Credentials{AzureAPIKey: "tgk_k"}, "",
			mutation{set: map[string]string{"x-service-request-id": "req_1"}, remove: []string{"api-key"}}},
		// The provider's key set in x-api-key replaces the member's there, never in api-key.
		{"api-key and x-api-key, provider x-api-key configured", Upstream{APIKey: "sk-ant-provider"}, gate.Credentials{APIKey: "tgk_k", AzureAPIKey: "tgk_k"}, "",
			mutation{set: map[string]string{"x-service-request-id": "req_1", "x-api-key": "sk-ant-provider"}, remove: []string{"api-key"}}},
		// A coding the extractor cannot read is not offered upstream (zstd: curl
		// --compressed, browsers); one it reads all of is left alone (above).
		{"zstd offered: narrowed", Upstream{}, gate.Credentials{APIKey: "tgk_k"}, "deflate, gzip, br, zstd",
			mutation{set: map[string]string{"x-service-request-id": "req_1", "accept-encoding": "deflate, gzip, br"}, remove: []string{"x-api-key"}}},
		{"only zstd offered: identity", Upstream{}, gate.Credentials{APIKey: "tgk_k"}, "zstd",
			mutation{set: map[string]string{"x-service-request-id": "req_1", "accept-encoding": "identity"}, remove: []string{"x-api-key"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := New(nil, tc.up)
			a := gate.Answer{Status: 200, Decision: gate.Admitted, Reason: gate.ReasonWithinLimit, RequestID: "req_1", UsageState: "within_limit"}
			ok := s.admitted(&a, &checkInput{cred: tc.cred, acceptEncoding: tc.acceptEncoding}).GetOkResponse()
			got := mutation{set: map[string]string{}, remove: ok.GetHeadersToRemove()}
			for _, h := range ok.GetHeaders() {
				if h.GetAppendAction() != corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD {
					t.Fatalf("%s is not overwritten: %v", h.GetHeader().GetKey(), h.GetAppendAction())
				}
				got.set[h.GetHeader().GetKey()] = h.GetHeader().GetValue()
			}
			// Every admission removes the field mask and the method overrides, last.
			want := append(tc.want.remove, alwaysRemoved...)
			if !maps.Equal(got.set, tc.want.set) || !slices.Equal(got.remove, want) {
				t.Fatalf("set %v remove %v, want set %v remove %v", got.set, got.remove, tc.want.set, want)
			}
			for k := range got.set {
				if slices.Contains(got.remove, k) {
					t.Fatalf("%s both set and removed", k)
				}
			}
			if rh := ok.GetResponseHeadersToAdd(); len(rh) != 1 || rh[0].GetHeader().GetValue() != "within_limit" {
				t.Fatalf("client response headers %v", rh)
			}
		})
	}
}

// An admission's client response headers are its usage state and the member's limits in
// Codex's headers (gate.Answer.AdmittedHeaders), each overwriting one of the same name
// the upstream sends.
func TestAdmittedResponseHeadersNameTheLimits(t *testing.T) {
	s := New(nil, Upstream{})
	a := gate.Answer{Status: 200, Decision: gate.Admitted, Reason: gate.ReasonWithinLimit, RequestID: "req_1", UsageState: "within_limit",
		Limits: gate.Limits{Primary: gate.LimitWindow{Used: 5, Allowance: 1_000, Start: 1_800_000_000, End: 1_800_086_400},
			Secondary: gate.LimitWindow{Used: 700, Allowance: 1_000, Start: 1_799_913_600, End: 1_800_518_400}}}
	ok := s.admitted(&a, &checkInput{cred: gate.Credentials{APIKey: "tgk_k"}}).GetOkResponse()
	var got []string
	for _, h := range ok.GetResponseHeadersToAdd() {
		if h.GetAppendAction() != corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD {
			t.Errorf("%s is not overwritten: %v", h.GetHeader().GetKey(), h.GetAppendAction())
		}
		got = append(got, h.GetHeader().GetKey()+": "+h.GetHeader().GetValue())
	}
	want := []string{"X-Service-Usage-State: within_limit",
		"X-Codex-Primary-Used-Percent: 0.5", "X-Codex-Primary-Window-Minutes: 1440", "X-Codex-Primary-Reset-At: 1800086400",
		"X-Codex-Secondary-Used-Percent: 70.0", "X-Codex-Secondary-Window-Minutes: 10080", "X-Codex-Secondary-Reset-At: 1800518400",
		"X-Codex-Limit-Name: Tollgate"}
	if !slices.Equal(got, want) {
		t.Errorf("client response headers\n%q\nwant\n%q", got, want)
	}
}

// An InvokeModel request asks for Bedrock's priority tier and its latency-optimized
// inference by headers: the check's worst case is priced at the dearer, as the gateway's
// is; a body without the headers, or no body, asks for nothing.
// A stream the check knows of is asked for no content coding: ext_proc would hold its
// decoder for as long as it lasts (responseusage.StreamAcceptEncoding).
func TestAdmittedStreamIsAskedForNoCoding(t *testing.T) {
	s := New(nil, Upstream{})
	a := gate.Answer{Status: 200, Decision: gate.Admitted, Reason: gate.ReasonWithinLimit, RequestID: "req_1", UsageState: "within_limit"}
	for _, tc := range []struct {
		offered string
		want    string // "" when the header is left as it came
	}{
		{"gzip, deflate, br", "identity"},
		{"", ""},
		{"identity", ""},
		{"gzip, zstd, identity;q=0", "gzip, identity;q=0"},
		{"gzip, identity;q=0", ""},
	} {
		got := ""
		for _, h := range s.admitted(&a, &checkInput{cred: gate.Credentials{APIKey: "tgk_k"}, acceptEncoding: tc.offered, streamed: true}).GetOkResponse().GetHeaders() {
			if h.GetHeader().GetKey() == "accept-encoding" {
				got = h.GetHeader().GetValue()
			}
		}
		if got != tc.want {
			t.Errorf("a stream offering %q: accept-encoding set to %q, want %q", tc.offered, got, tc.want)
		}
	}
}

func TestHintReadsBedrocksTierHeaders(t *testing.T) {
	req := func(body string, headers map[string]string) *authv3.AttributeContext_HttpRequest {
		return &authv3.AttributeContext_HttpRequest{Path: "/model/us.amazon.nova-pro-v1:0/invoke", Host: "bedrock-runtime.us-east-1.amazonaws.com",
			Headers: headers, Body: body}
	}
	const body = `{"messages":[{"role":"user","content":[{"text":"hi"}]}],"inferenceConfig":{"maxTokens":50}}`
	latency := map[string]string{"x-amzn-bedrock-performanceconfig-latency": "optimized"}
	for _, tc := range []struct {
		name string
		req  *authv3.AttributeContext_HttpRequest
		want pricecatalog.Tier
		body bool
	}{
		{"the header", req(body, latency), pricecatalog.LatencyOptimized, true},
		{"the priority tier", req(body, map[string]string{"x-amzn-bedrock-service-tier": "priority"}), pricecatalog.Fast, true},
		{"the priority tier and optimized latency", req(body, map[string]string{"x-amzn-bedrock-service-tier": "priority",
			"x-amzn-bedrock-performanceconfig-latency": "optimized"}), pricecatalog.Fast, true},
		{"the flex tier", req(body, map[string]string{"x-amzn-bedrock-service-tier": "flex"}), pricecatalog.Standard, true},
		{"standard latency", req(body, map[string]string{"x-amzn-bedrock-performanceconfig-latency": "standard"}), pricecatalog.Standard, true},
		{"no header", req(body, nil), pricecatalog.Standard, true},
		{"no body", req("", latency), pricecatalog.Standard, false},
		// Vertex AI's Priority PayGo, asked by a header (its answer's trafficType
		// ON_DEMAND_PRIORITY is charged the fast tier).
		{"Vertex AI's priority", req(body, map[string]string{"x-vertex-ai-llm-shared-request-type": "priority"}), pricecatalog.Fast, true},
		{"Vertex AI's flex", req(body, map[string]string{"x-vertex-ai-llm-shared-request-type": "flex"}), pricecatalog.Standard, true},
	} {
		h := inputOf(tc.req, nil).hint
		if (h.Body != nil) != tc.body || h.Body != nil && h.Body.AskedTier() != tc.want {
			t.Errorf("%s: %+v, want the tier %v", tc.name, h.Body, tc.want)
		}
	}
}

// Behind Envoy the query is read as the gateway reads it (docs/gateway.md, "Per request"
// 3; before 2026-12-02 ext_authz read no query): the keys in key, $key and api-key, in
// any encoding, are credentials (a key there alone is admitted, a second different key
// is a 401), and every parameter that never goes upstream (a Tollgate key under any
// name, Google's field mask in any spelling) is named in query_parameters_to_remove as
// sent, once, for Envoy to remove; a provider's key beside a header's stays.
func TestQueryKeysAndFieldMasksNeverGoUpstream(t *testing.T) {
	const gen = "/v1beta/models/gemini-2.5-pro:generateContent"
	for _, tc := range []struct {
		name, path string
		headers    map[string]string
		cred       gate.Credentials
		removed    []string
	}{
		{"a key in ?key= alone", gen + "?key=tgk_k", nil, gate.Credentials{GoogAPIKey: "tgk_k"}, []string{"key"}},
		{"a key in an encoded name", gen + "?alt=sse&k%65y=tgk_k", nil, gate.Credentials{GoogAPIKey: "tgk_k"}, []string{"k%65y"}},
		{"a key in $key beside the header's", gen + "?%24key=tgk_k", map[string]string{"x-goog-api-key": "tgk_k"},
			gate.Credentials{GoogAPIKey: "tgk_k"}, []string{"%24key"}},
		{"a second key in the query", gen + "?key=tgk_other", map[string]string{"x-api-key": "tgk_k"},
			gate.Credentials{APIKey: "tgk_k", GoogAPIKey: "tgk_other"}, []string{"key"}},
		{"two keys in the query", gen + "?key=tgk_k&$key=tgk_other", nil, gate.Credentials{GoogAPIKey: "tgk_k, tgk_other"}, []string{"key", "$key"}},
		{"Azure's api-key", "/openai/realtime?api-key=tgk_k&deployment=gpt", nil, gate.Credentials{AzureAPIKey: "tgk_k"}, []string{"api-key"}},
		{"a Tollgate key under any name", gen + "?token=tgk_k&token=tgk_k", map[string]string{"x-api-key": "tgk_k"},
			gate.Credentials{APIKey: "tgk_k"}, []string{"token"}},
		{"a provider's key beside the header's", gen + "?key=AIza-provider", map[string]string{"x-api-key": "tgk_k"},
			gate.Credentials{APIKey: "tgk_k"}, nil},
		{"the field mask in every spelling", gen + "?fields=a&f%69elds=b&%24fields=c&$fields=d&fieldsx=e", map[string]string{"x-api-key": "tgk_k"},
			gate.Credentials{APIKey: "tgk_k"}, []string{"fields", "f%69elds", "%24fields", "$fields"}},
		// Google's method override in the query ($httpMethod, X-HTTP-Method-Override's
		// form there), removed as the header is (requestbody.MethodOverride).
		{"the method override in every spelling", "/v1alpha/auth_tokens?$httpMethod=POST&%24httpMethod=POST&httpMethod=x",
			map[string]string{"x-api-key": "tgk_k"}, gate.Credentials{APIKey: "tgk_k"}, []string{"$httpMethod", "%24httpMethod"}},
		{"no query", gen, map[string]string{"x-api-key": "tgk_k"}, gate.Credentials{APIKey: "tgk_k"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := inputOf(&authv3.AttributeContext_HttpRequest{Method: "POST", Path: tc.path, Headers: tc.headers}, nil)
			if in.cred != tc.cred || in.unreadable != "" {
				t.Fatalf("read %+v (unreadable %q), want %+v", in.cred, in.unreadable, tc.cred)
			}
			a := gate.Answer{Status: 200, Decision: gate.Admitted, Reason: gate.ReasonWithinLimit, RequestID: "req_1"}
			if got := New(nil, Upstream{}).admitted(&a, &in).GetOkResponse().GetQueryParametersToRemove(); !slices.Equal(got, tc.removed) {
				t.Fatalf("query_parameters_to_remove %q, want %q", got, tc.removed)
			}
		})
	}
}

// A query asking for an answer the usage reader cannot read is refused as the gateway
// refuses it, 400 service_gateway_response_format_unsupported, before the check (the
// server's gate is nil here: a check would panic); the formats it reads pass to it.
func TestUnreadableAnswersAreRefusedBeforeTheCheck(t *testing.T) {
	s := New(nil, Upstream{})
	for _, tc := range []struct{ method, path, param string }{
		{"POST", "/v1beta/models/gemini-2.5-pro:generateContent?alt=proto", "alt"},
		{"POST", "/v1beta/models/gemini-2.5-pro:generateContent?%24alt=proto", "$alt"},
		{"POST", "/v1beta/models/gemini-2.5-pro:generateContent?alt=media", "alt"},
		{"POST", "/v1beta/models/gemini-2.5-pro:generateContent?c%61llback=f", "callback"},
		{"POST", "/v1beta/models/gemini-2.5-pro:generateContent?$ct=application%2Fx-protobuf", "$ct"},
		{"GET", "/v1beta/files/abc?%24callback=f", "$callback"},
	} {
		req := &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{
			Http: &authv3.AttributeContext_HttpRequest{Method: tc.method, Path: tc.path, Headers: map[string]string{"x-goog-api-key": "tgk_k"}}}}}
		resp, err := s.Check(context.Background(), req)
		d := resp.GetDeniedResponse()
		if err != nil || d.GetStatus().GetCode() != 400 || !strings.Contains(d.GetBody(), `"parameter":"`+tc.param+`"`) {
			t.Fatalf("%s %s: %v %v", tc.method, tc.path, resp, err)
		}
		headers := map[string]string{}
		for _, h := range d.GetHeaders() {
			headers[h.GetHeader().GetKey()] = h.GetHeader().GetValue()
		}
		if headers["X-Service-Error-Code"] != gate.CodeResponseFormatUnsupported || headers["Content-Type"] != "application/json" {
			t.Fatalf("%s %s: headers %v", tc.method, tc.path, headers)
		}
	}
	for _, path := range []string{"/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse", "/v1beta/models/gemini-2.5-pro:generateContent?$alt=json"} {
		if in := inputOf(&authv3.AttributeContext_HttpRequest{Method: "POST", Path: path}, nil); in.unreadable != "" {
			t.Errorf("%s: refused for %q", path, in.unreadable)
		}
	}
	if in := inputOf(&authv3.AttributeContext_HttpRequest{Method: "GET", Path: "/v1beta/files/abc:download?alt=media"}, nil); in.unreadable != "" {
		t.Errorf("a file's download refused for %q", in.unreadable)
	}
}

// TRACE and TRACK have the upstream echo the request, which carries the provider's
// credential ext_authz sets: refused 405 as the gateway refuses them, before the check
// (the server's gate is nil here: a check would panic).
func TestEchoingMethodsAreRefusedBeforeTheCheck(t *testing.T) {
	s := New(nil, Upstream{})
	for _, method := range []string{"TRACE", "trace", "TRACK"} {
		req := &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{
			Http: &authv3.AttributeContext_HttpRequest{Method: method, Path: "/v1/chat/completions", Headers: map[string]string{"x-api-key": "tgk_k"}}}}}
		resp, err := s.Check(context.Background(), req)
		d := resp.GetDeniedResponse()
		if err != nil || d.GetStatus().GetCode() != 405 {
			t.Fatalf("%s: %v %v", method, resp, err)
		}
		headers := map[string]string{}
		for _, h := range d.GetHeaders() {
			headers[h.GetHeader().GetKey()] = h.GetHeader().GetValue()
		}
		if headers["X-Service-Error-Code"] != gate.CodeMethodUnsupported || headers["Allow"] == "" {
			t.Fatalf("%s: headers %v", method, headers)
		}
	}
}

// Envoy's router obeys retry and timeout headers from a client it deems internal (any
// RFC 1918 address by default: every pod and compose container): x-envoy-retry-on with
// x-envoy-upstream-rq-per-try-timeout-ms and x-envoy-max-retries had Envoy send one
// admitted request upstream again and again, each try abandoned after the per-try
// timeout but run (and billed) by the provider, and x-envoy-hedge-on-per-try-timeout
// sent the tries at once; the enforcer saw one request and charged it once. Every
// admission removes them, so the router never sees them.
func TestEnvoyRouterControlHeadersNeverReachTheRouter(t *testing.T) {
	in := inputOf(&authv3.AttributeContext_HttpRequest{Method: "POST", Path: "/v1/chat/completions",
		Headers: map[string]string{"x-api-key": "tgk_k", "x-envoy-retry-on": "5xx,reset", "x-envoy-max-retries": "10",
			"x-envoy-upstream-rq-per-try-timeout-ms": "1000", "x-envoy-hedge-on-per-try-timeout": "true"}}, nil)
	a := gate.Answer{Status: 200, Decision: gate.Admitted, Reason: gate.ReasonWithinLimit, RequestID: "req_1"}
	removed := New(nil, Upstream{}).admitted(&a, &in).GetOkResponse().GetHeadersToRemove()
	for _, h := range []string{"x-envoy-retry-on", "x-envoy-retry-grpc-on", "x-envoy-max-retries", "x-envoy-retriable-status-codes",
		"x-envoy-retriable-header-names", "x-envoy-upstream-rq-timeout-ms", "x-envoy-upstream-rq-per-try-timeout-ms",
		"x-envoy-hedge-on-per-try-timeout", "x-envoy-upstream-stream-duration-ms"} {
		if !slices.Contains(removed, h) {
			t.Errorf("headers_to_remove %v: %s reaches Envoy's router", removed, h)
		}
	}
}

// Through Tollgate the provider's credential is the operator's: a member who sent
// OpenAI-Organization, OpenAI-Project or X-Goog-User-Project chose which of the
// operator's organizations or projects paid (the OpenAI SDKs send the first two from
// OPENAI_ORG_ID and OPENAI_PROJECT_ID), and the browser's cookies for Envoy's host went to
// the provider. Every admission removes them; an operator's route sets its own after.
func TestBillingScopeHeadersNeverReachTheProvider(t *testing.T) {
	in := inputOf(&authv3.AttributeContext_HttpRequest{Method: "POST", Path: "/v1/chat/completions",
		Headers: map[string]string{"x-api-key": "tgk_k", "openai-organization": "org-members-own", "openai-project": "proj_other",
			"x-goog-user-project": "someone-elses", "cookie": "session=abc"}}, nil)
	a := gate.Answer{Status: 200, Decision: gate.Admitted, Reason: gate.ReasonWithinLimit, RequestID: "req_1"}
	removed := New(nil, Upstream{Authorization: "Bearer sk-provider"}).admitted(&a, &in).GetOkResponse().GetHeadersToRemove()
	for _, h := range append(slices.Clone(credential.BillingScopeHeaders), "Cookie") {
		if !slices.Contains(removed, strings.ToLower(h)) {
			t.Errorf("headers_to_remove %v: the client's %s reaches the provider", removed, h)
		}
	}
}

// Envoy sends the path on as it came (the shipped envoy.yaml does not normalize paths),
// and ext_authz judged it as written: "/v1/batches/." named no batch (admitted), where an
// upstream that resolves dot segments (nginx, Tomcat, CDNs) ran a batch, billed later out
// of sight, the deferred-billing refusal notwithstanding. Refused 400 before the check,
// as the gateway and /check refuse it (the server's gate is nil here: a check would
// panic). Dots inside a segment are no dot segment.
func TestDotSegmentsAreRefusedBeforeTheCheck(t *testing.T) {
	s := New(nil, Upstream{})
	check := func(path string) *authv3.CheckResponse {
		req := &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{
			Http: &authv3.AttributeContext_HttpRequest{Method: "POST", Path: path, Headers: map[string]string{"x-api-key": "tgk_k"}}}}}
		resp, err := s.Check(context.Background(), req)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		return resp
	}
	for _, path := range []string{"/v1/batches/.", "/v1/batches/x/..", "/v1/batches/x/%2e%2E", "/v1/batches/x/..%2F", "/v1/batches/x/..;",
		`/v1/batches/x\..`, "/v1/batches/x/%5C..", "/v1/./chat/completions?stream=true", "/v1/batches/%zz/.."} {
		d := check(path).GetDeniedResponse()
		if d.GetStatus().GetCode() != 400 || !strings.Contains(d.GetBody(), gate.CodePathUnsupported) {
			t.Errorf("%s: %v, want 400 %s", path, d, gate.CodePathUnsupported)
		}
	}
	for _, path := range []string{"/v1/files/..abc", "/v1/files/a;..", "/v1/files/%2e%2e%2e"} {
		if requestbody.EscapedDotSegment(path) {
			t.Errorf("%s: read as a dot segment", path)
		}
	}
}
