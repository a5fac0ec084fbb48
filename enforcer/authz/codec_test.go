package authz

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/tollgate-dev/tollgate/enforcer/gate"
	"github.com/tollgate-dev/tollgate/pkg/pricecatalog"
)

// checkRequest is a request as Envoy fills it, with the given headers map and
// header_map.
func checkRequest(headers map[string]string, headerMap ...*corev3.HeaderValue) *authv3.CheckRequest {
	http := &authv3.AttributeContext_HttpRequest{Id: "1", Method: "POST", Path: "/v1/chat/completions", Host: "llm", Headers: headers}
	if headerMap != nil {
		http.HeaderMap = &corev3.HeaderMap{Headers: headerMap}
	}
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source:  &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{Address: "10.0.0.7"}}}},
		Request: &authv3.AttributeContext_Request{Http: http},
	}}
}

func encode(t testing.TB, m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkSameReads decodes b fully and with the codec: whenever the full decode succeeds,
// the codec's must too, and Check must read the same of both (inputOf: credentials,
// hint, Accept-Encoding, whether a stream) and answer an admission with the same
// upstream header mutations. It returns the codec's request.
func checkSameReads(t *testing.T, b []byte) *authv3.AttributeContext_HttpRequest {
	t.Helper()
	var full authv3.CheckRequest
	if proto.Unmarshal(b, &full) != nil {
		return nil
	}
	var partial authv3.CheckRequest
	if err := New(nil, Upstream{}).Codec().Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &partial); err != nil {
		t.Fatalf("codec refused what proto decodes: %v", err)
	}
	fh, ph := full.GetAttributes().GetRequest().GetHttp(), partial.GetAttributes().GetRequest().GetHttp()
	want, got := inputOf(fh, RouteMetadata(&full)), inputOf(ph, RouteMetadata(&partial))
	if got.cred != want.cred {
		t.Fatalf("codec read %+v, a full decode %+v", got.cred, want.cred)
	}
	if wb, gb := RequestBody(fh), RequestBody(ph); !bytes.Equal(wb, gb) {
		t.Fatalf("codec read the body %q, a full decode %q", gb, wb)
	}
	if !reflect.DeepEqual(got.hint, want.hint) {
		t.Fatalf("codec's hint %+v, a full decode's %+v", got.hint.Body, want.hint.Body)
	}
	if got.acceptEncoding != want.acceptEncoding || got.streamed != want.streamed || got.unreadable != want.unreadable {
		t.Fatalf("codec read accept-encoding %q streamed %v unreadable %q, a full decode %q %v %q", got.acceptEncoding, got.streamed,
			got.unreadable, want.acceptEncoding, want.streamed, want.unreadable)
	}
	// What goes upstream: the same answer admitted from either decode.
	s := New(nil, Upstream{})
	a := gate.Answer{Status: 200, Decision: gate.Admitted, Reason: gate.ReasonWithinLimit, RequestID: "req_1", UsageState: "within_limit"}
	if wr, gr := s.admitted(&a, &want), s.admitted(&a, &got); !proto.Equal(wr, gr) {
		t.Fatalf("admitted from the codec's decode %v, from a full decode %v", gr, wr)
	}
	return ph
}

// checkSameCredentials is checkSameReads for the cases that only check agreement.
func checkSameCredentials(t *testing.T, b []byte) { checkSameReads(t, b) }

// at is req sent to path on host.
func at(req *authv3.CheckRequest, path, host string) *authv3.CheckRequest {
	h := req.GetAttributes().GetRequest().GetHttp()
	h.Path, h.Host = path, host
	return req
}

// withBody is req with a body as Envoy sends it: body (a string), or raw_body with
// pack_as_bytes.
func withBody(req *authv3.CheckRequest, body string, raw bool) *authv3.CheckRequest {
	h := req.GetAttributes().GetRequest().GetHttp()
	if raw {
		h.RawBody = []byte(body)
	} else {
		h.Body = body
	}
	return req
}

var codecCases = []struct {
	name string
	req  *authv3.CheckRequest
}{
	{"headers map", checkRequest(map[string]string{"x-api-key": "tgk_k", "authorization": "Bearer tgs_s", ":path": "/"})},
	{"api key alone", checkRequest(map[string]string{"x-api-key": "tgk_k", "user-agent": "sdk"})},
	{"Google's key header", checkRequest(map[string]string{"x-goog-api-key": "tgk_g", "x-api-key": "tgk_k"})},
	{"Google's key header in header_map", checkRequest(nil, &corev3.HeaderValue{Key: "X-Goog-Api-Key", RawValue: []byte("tgk_g")},
		&corev3.HeaderValue{Key: "x-goog-api-key", Value: "tgk_h"})},
	{"Azure's key header", checkRequest(map[string]string{"api-key": "tgk_z", "x-api-key": "tgk_k"})},
	{"Azure's key header in header_map", checkRequest(nil, &corev3.HeaderValue{Key: "Api-Key", RawValue: []byte("tgk_z")},
		&corev3.HeaderValue{Key: "api-key", Value: "tgk_y"})},
	{"every credential header", checkRequest(map[string]string{"x-api-key": "tgk_k", "authorization": "Bearer tgs_s",
		"x-goog-api-key": "tgk_g", "api-key": "tgk_z", ":path": "/"})},
	// More credential entries than the decode's preallocated values.
	{"every credential header in header_map, twice", checkRequest(nil, &corev3.HeaderValue{Key: "x-api-key", Value: "tgk_k"},
		&corev3.HeaderValue{Key: "Authorization", RawValue: []byte("Bearer tgs_s")}, &corev3.HeaderValue{Key: "X-Goog-Api-Key", Value: "tgk_g"},
		&corev3.HeaderValue{Key: "API-KEY", Value: "tgk_z"}, &corev3.HeaderValue{Key: "api-key", RawValue: []byte("tgk_y")},
		&corev3.HeaderValue{Key: "x-api-key", Value: "tgk_j"})},
	{"api-key-ish names are not credentials", checkRequest(map[string]string{"x-api-key": "tgk_k", "apikey": "tgk_a", "api_key": "tgk_b"})},
	{"empty api key", checkRequest(map[string]string{"x-api-key": "", "authorization": "Bearer tgs_s"})},
	{"map without credentials hides header_map", checkRequest(map[string]string{":path": "/"}, &corev3.HeaderValue{Key: "x-api-key", Value: "tgk_k"})},
	{"upper-case map key is not a credential", checkRequest(map[string]string{"X-Api-Key": "tgk_k"})},
	{"header_map raw values", checkRequest(nil, &corev3.HeaderValue{Key: ":path", RawValue: []byte("/")},
		&corev3.HeaderValue{Key: "x-api-key", RawValue: []byte("tgk_k")}, &corev3.HeaderValue{Key: "authorization", RawValue: []byte("Bearer tgs_s")})},
	{"header_map values and mixed case", checkRequest(nil, &corev3.HeaderValue{Key: "X-API-KEY", Value: "tgk_a"},
		&corev3.HeaderValue{Key: "x-api-key", Value: "", RawValue: []byte("tgk_b")}, &corev3.HeaderValue{Key: "Authorization", Value: "Bearer x"})},
	{"no headers", checkRequest(nil)},
	{"body", withBody(checkRequest(map[string]string{"x-api-key": "tgk_k"}), `{"model":"gpt-4o","max_tokens":9}`, false)},
	{"raw body", withBody(checkRequest(map[string]string{"x-api-key": "tgk_k"}), `{"model":"gpt-4o","max_tokens":9}`, true)},
	{"no attributes", &authv3.CheckRequest{}},
	// The method and the query: keys and field masks removed, answers refused by them.
	{"keys and a field mask in the query", at(checkRequest(map[string]string{"x-api-key": "tgk_k"}),
		"/v1beta/models/gemini-2.5-pro:generateContent?k%65y=tgk_k&%24fields=a&key=AIza", "llm")},
	{"alt=proto", at(checkRequest(nil, &corev3.HeaderValue{Key: "x-goog-api-key", RawValue: []byte("tgk_g")}),
		"/v1beta/models/gemini-2.5-pro:generateContent?alt=proto", "llm")},
	{"a GET's alt=media", func() *authv3.CheckRequest {
		req := at(checkRequest(map[string]string{"x-goog-api-key": "tgk_g"}), "/v1beta/files/abc:download?alt=media", "llm")
		req.GetAttributes().GetRequest().GetHttp().Method = "GET"
		return req
	}()},
	// The route's metadata (route_metadata_context_namespaces): its tollgate namespace
	// read, others skipped, the last entry of a namespace winning.
	{"route metadata: an Azure deployment and the upstream host", withRoute(withBody(at(checkRequest(map[string]string{"api-key": "tgk_z"}),
		"/openai/deployments/big/chat/completions?api-version=2024-10-21", "proxy.internal"), `{"model":"gpt-4o-mini","max_tokens":9}`, true),
		map[string]any{"deployments": map[string]any{"big": "gpt-4o"}, "upstream_host": "acme.openai.azure.com"},
		map[string]any{"upstream_host": "api.groq.com"})},
	{"route metadata without a body", withRoute(at(checkRequest(map[string]string{"api-key": "tgk_z"}),
		"/openai/deployments/big/images/generations", "proxy.internal"), map[string]any{"deployments": map[string]any{"big": "gpt-image-1"}}, nil)},
	{"route metadata: the last entry wins", func() *authv3.CheckRequest {
		req := withRoute(withBody(at(checkRequest(map[string]string{"api-key": "tgk_z"}), "/openai/deployments/big/chat/completions", "h"),
			`{"model":"gpt-4o-mini"}`, false), map[string]any{"deployments": map[string]any{"big": "gpt-4o-mini"}}, nil)
		b, err := proto.Marshal(req)
		if err != nil {
			panic(err)
		}
		last, err := proto.Marshal(withRoute(&authv3.CheckRequest{}, map[string]any{"deployments": map[string]any{"big": "gpt-4o"}}, nil))
		if err != nil {
			panic(err)
		}
		var merged authv3.CheckRequest
		if err := proto.Unmarshal(append(b, last...), &merged); err != nil {
			panic(err)
		}
		return &merged
	}()},
}

// withRoute is req with the route metadata Envoy sends ext_authz: tollgate's
// namespace, and another's (nil: none).
func withRoute(req *authv3.CheckRequest, tollgate, other map[string]any) *authv3.CheckRequest {
	meta := &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{}}
	for ns, fields := range map[string]map[string]any{RouteNamespace: tollgate, "other": other} {
		if fields == nil {
			continue
		}
		s, err := structpb.NewStruct(fields)
		if err != nil {
			panic(err)
		}
		meta.FilterMetadata[ns] = s
	}
	if req.Attributes == nil {
		req.Attributes = &authv3.AttributeContext{}
	}
	req.Attributes.RouteMetadataContext = meta
	return req
}

func TestCodecDecodesWhatCheckReads(t *testing.T) {
	for _, tc := range codecCases {
		t.Run(tc.name, func(t *testing.T) { checkSameCredentials(t, encode(t, tc.req)) })
	}
	// Protobuf's merge rules: a message seen twice merges, the last map entry wins, the
	// headers of a second header_map come after the first's.
	first := encode(t, checkRequest(map[string]string{"x-api-key": "tgk_first", "authorization": "Bearer a"}))
	second := encode(t, checkRequest(map[string]string{"x-api-key": "tgk_second"}))
	checkSameCredentials(t, append(append([]byte{}, first...), second...))
	hm := encode(t, checkRequest(nil, &corev3.HeaderValue{Key: "x-api-key", Value: "tgk_1"}))
	hm2 := encode(t, checkRequest(nil, &corev3.HeaderValue{Key: "x-api-key", Value: "tgk_2"}))
	checkSameCredentials(t, append(append([]byte{}, hm...), hm2...))
	az := encode(t, checkRequest(map[string]string{"api-key": "tgk_z1", "x-api-key": "tgk_k"}))
	az2 := encode(t, checkRequest(map[string]string{"api-key": "tgk_z2"}))
	checkSameCredentials(t, append(append([]byte{}, az...), az2...))
	// A body seen twice: the last wins, as with proto; an empty last one too.
	b1 := encode(t, withBody(checkRequest(nil), `{"a":1}`, false))
	b2 := encode(t, withBody(checkRequest(nil), `{"b":2}`, false))
	checkSameCredentials(t, append(append([]byte{}, b1...), b2...))
	checkSameCredentials(t, append(append([]byte{}, b1...), encode(t, withBody(checkRequest(nil), "", false))...))
	// What the codec keeps does not alias the wire buffer, which gRPC reuses.
	wire := encode(t, withBody(at(checkRequest(map[string]string{"accept-encoding": "zstd"}), geminiPath, "h"), `{"model":"m"}`, true))
	var kept authv3.CheckRequest
	if err := New(nil, Upstream{}).Codec().Unmarshal(mem.BufferSlice{mem.SliceBuffer(wire)}, &kept); err != nil {
		t.Fatal(err)
	}
	clear(wire)
	kh := kept.GetAttributes().GetRequest().GetHttp()
	if got := string(RequestBody(kh)); got != `{"model":"m"}` {
		t.Fatalf("kept body %q after the buffer was reused", got)
	}
	if in := inputOf(kh, nil); kh.GetPath() != geminiPath || kh.GetHost() != "h" || in.acceptEncoding != "zstd" {
		t.Fatalf("kept path %q host %q accept-encoding %q after the buffer was reused", kh.GetPath(), kh.GetHost(), in.acceptEncoding)
	}
	// Unknown fields and other wire types on the way are skipped.
	odd := protowire.AppendTag(nil, 99, protowire.VarintType)
	odd = protowire.AppendVarint(odd, 7)
	odd = protowire.AppendTag(odd, checkRequestAttributes, protowire.Fixed32Type)
	odd = protowire.AppendFixed32(odd, 1)
	checkSameCredentials(t, append(odd, first...))
	// Malformed input is an error, as with proto.
	var r authv3.CheckRequest
	if err := New(nil, Upstream{}).Codec().Unmarshal(mem.BufferSlice{mem.SliceBuffer(first[:len(first)-3])}, &r); err == nil {
		t.Fatal("truncated request decoded")
	}
}

// The bug the codec had: it decoded the credentials and the body only, so through the
// gRPC server Check saw no path, host, Accept-Encoding or Bedrock tier header. Each
// case says what Check must make of the codec's decode, besides agreeing with a full
// decode.
const (
	chatPath    = "/v1/chat/completions"
	geminiPath  = "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
	bedrockPath = "/model/us.anthropic.claude-sonnet-4-5-20250929-v1:0/invoke"
	bedrockHost = "bedrock-runtime.us-east-1.amazonaws.com"
	bedrockBody = `{"messages":[{"role":"user","content":[{"text":"hi"}]}],"inferenceConfig":{"maxTokens":50}}`
)

type hintWant struct {
	model            string
	regional         bool
	tier, latency    pricecatalog.Tier
	stream, wantBody bool
}

var checkReadCases = []struct {
	name string
	req  *authv3.CheckRequest
	// acceptEncoding is the accept-encoding an admission sets upstream ("" none).
	acceptEncoding string
	hint           hintWant
}{
	{"gzip and zstd offered: narrowed to gzip", at(checkRequest(map[string]string{"x-api-key": "tgk_k", "accept-encoding": "gzip, zstd"}), chatPath, "llm"),
		"gzip", hintWant{}},
	{"only zstd offered: identity", at(checkRequest(map[string]string{"x-api-key": "tgk_k", "accept-encoding": "zstd"}), chatPath, "llm"),
		"identity", hintWant{}},
	{"readable codings: left alone", at(checkRequest(map[string]string{"x-api-key": "tgk_k", "accept-encoding": "gzip, br"}), chatPath, "llm"),
		"", hintWant{}},
	{"Gemini's stream path: identity", at(checkRequest(map[string]string{"x-goog-api-key": "tgk_g", "accept-encoding": "gzip, br"}), geminiPath,
		"generativelanguage.googleapis.com"), "identity", hintWant{}},
	{"Gemini's stream path with a query: identity", at(checkRequest(map[string]string{"x-goog-api-key": "tgk_g", "accept-encoding": "gzip"}),
		geminiPath+"?alt=sse", "generativelanguage.googleapis.com"), "identity", hintWant{}},
	{"a body asking for a stream: identity", withBody(at(checkRequest(map[string]string{"x-api-key": "tgk_k", "accept-encoding": "gzip, br"}), chatPath, "llm"),
		`{"model":"gpt-4o","stream":true,"messages":[]}`, false), "identity", hintWant{model: "gpt-4o", stream: true, wantBody: true}},
	{"Bedrock's latency header, the model and region in the path", withBody(at(checkRequest(map[string]string{"authorization": "Bearer tgk_k",
		"x-amzn-bedrock-performanceconfig-latency": "optimized"}), bedrockPath, bedrockHost), bedrockBody, false),
		"", hintWant{model: "us.anthropic.claude-sonnet-4-5-20250929-v1:0", regional: true, latency: pricecatalog.LatencyOptimized, wantBody: true}},
	{"Bedrock's service tier header, raw body", withBody(at(checkRequest(map[string]string{"authorization": "Bearer tgk_k",
		"x-amzn-bedrock-service-tier": "priority"}), bedrockPath, bedrockHost), bedrockBody, true),
		"", hintWant{model: "us.anthropic.claude-sonnet-4-5-20250929-v1:0", regional: true, tier: pricecatalog.Fast, wantBody: true}},
	{"OpenAI's regional host", withBody(at(checkRequest(map[string]string{"x-api-key": "tgk_k"}), chatPath, "us.api.openai.com"),
		`{"model":"gpt-4o","messages":[]}`, false), "", hintWant{model: "gpt-4o", regional: true, wantBody: true}},
	// encode_raw_headers: the same headers in header_map, names in any case, values raw.
	{"header_map: zstd narrowed", at(checkRequest(nil, &corev3.HeaderValue{Key: "x-api-key", RawValue: []byte("tgk_k")},
		&corev3.HeaderValue{Key: "Accept-Encoding", RawValue: []byte("gzip, zstd")}), chatPath, "llm"), "gzip", hintWant{}},
	{"header_map: Accept-Encoding on two lines", at(checkRequest(nil, &corev3.HeaderValue{Key: "accept-encoding", RawValue: []byte("gzip")},
		&corev3.HeaderValue{Key: "accept-encoding", Value: "zstd"}), chatPath, "llm"), "gzip", hintWant{}},
	{"header_map: Gemini's stream", at(checkRequest(nil, &corev3.HeaderValue{Key: "accept-encoding", RawValue: []byte("gzip, br")}), geminiPath,
		"generativelanguage.googleapis.com"), "identity", hintWant{}},
	{"header_map: Bedrock's tier headers", withBody(at(checkRequest(nil, &corev3.HeaderValue{Key: "X-Amzn-Bedrock-Service-Tier", RawValue: []byte("priority")},
		&corev3.HeaderValue{Key: "x-amzn-bedrock-performanceconfig-latency", Value: "optimized"}), bedrockPath, bedrockHost), bedrockBody, false),
		"", hintWant{model: "us.anthropic.claude-sonnet-4-5-20250929-v1:0", regional: true, tier: pricecatalog.Fast, latency: pricecatalog.LatencyOptimized, wantBody: true}},
	// More kept headers than the decode has room for (keptValues).
	{"every header Check reads", withBody(at(checkRequest(map[string]string{"x-api-key": "tgk_k", "authorization": "Bearer tgk_k",
		"x-goog-api-key": "tgk_k", "api-key": "tgk_k", "accept-encoding": "zstd", "x-amzn-bedrock-service-tier": "priority",
		"x-amzn-bedrock-performanceconfig-latency": "optimized"}), bedrockPath, bedrockHost), bedrockBody, false),
		"identity", hintWant{model: "us.anthropic.claude-sonnet-4-5-20250929-v1:0", regional: true, tier: pricecatalog.Fast, latency: pricecatalog.LatencyOptimized, wantBody: true}},
	// A headers map hides header_map, whatever it holds.
	{"the map's Accept-Encoding, not header_map's", at(checkRequest(map[string]string{"accept-encoding": "gzip"},
		&corev3.HeaderValue{Key: "accept-encoding", RawValue: []byte("zstd")}), chatPath, "llm"), "", hintWant{}},
	{"a map without Accept-Encoding hides header_map's", at(checkRequest(map[string]string{"user-agent": "sdk"},
		&corev3.HeaderValue{Key: "accept-encoding", RawValue: []byte("zstd")}), chatPath, "llm"), "", hintWant{}},
}

func TestCodecKeepsWhatAdmissionReads(t *testing.T) {
	for _, tc := range checkReadCases {
		t.Run(tc.name, func(t *testing.T) {
			h := checkSameReads(t, encode(t, tc.req))
			in := inputOf(h, nil)
			a := gate.Answer{Status: 200, Decision: gate.Admitted, Reason: gate.ReasonWithinLimit, RequestID: "req_1"}
			got := ""
			for _, o := range New(nil, Upstream{}).admitted(&a, &in).GetOkResponse().GetHeaders() {
				if o.GetHeader().GetKey() == "accept-encoding" {
					got = o.GetHeader().GetValue()
				}
			}
			if got != tc.acceptEncoding {
				t.Errorf("accept-encoding set to %q, want %q", got, tc.acceptEncoding)
			}
			b := in.hint.Body
			if (b != nil) != tc.hint.wantBody {
				t.Fatalf("hint %+v, want one: %v", b, tc.hint.wantBody)
			}
			if b == nil {
				return
			}
			if got := (hintWant{model: b.Model, regional: b.Regional, tier: b.ServiceTier, latency: b.Latency, stream: b.Stream, wantBody: true}); got != tc.hint {
				t.Errorf("hint %+v, want %+v", got, tc.hint)
			}
		})
	}
}

func FuzzCodecDecodesWhatCheckReads(f *testing.F) {
	for _, tc := range codecCases {
		f.Add(encode(f, tc.req))
	}
	for _, tc := range checkReadCases {
		f.Add(encode(f, tc.req))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkSameReads(t, b) })
}

// A refusal the server keeps is sent as encoded when it was kept: the same message.
func TestCodecSendsKeptRefusalsAsEncodedOnce(t *testing.T) {
	s := New(nil, Upstream{})
	a := gate.Refusal(gate.ReasonUsageLimit)
	a.RetryAfter, a.Body = "7", []byte(`{"error":{}}`)
	resp := s.denied.response(&a)
	data, err := s.Codec().Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	if wire := s.denied.encoded(resp); wire == nil || &data[0].ReadOnlyData()[0] != &wire[0] {
		t.Fatal("kept refusal encoded again")
	}
	var back authv3.CheckResponse
	if err := proto.Unmarshal(data.Materialize(), &back); err != nil || !proto.Equal(&back, Denied(&a)) {
		t.Fatalf("sent %v %v, want %v", &back, err, Denied(&a))
	}
}

// Other messages go through the proto codec untouched.
func TestCodecLeavesOtherMessagesToProto(t *testing.T) {
	resp := &authv3.CheckResponse{HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{Body: "no"}}}
	data, err := New(nil, Upstream{}).Codec().Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	var back authv3.CheckResponse
	if err := New(nil, Upstream{}).Codec().Unmarshal(data, &back); err != nil || !proto.Equal(&back, resp) {
		t.Fatalf("%v %v", &back, err)
	}
}

// FuzzCodecReadsAsAFullDecode builds CheckRequests from their parts, which finds more
// than mutating encoded bytes: headers lines "name: value" (header_map's "name= value"
// puts the value in raw_value).
func FuzzCodecReadsAsAFullDecode(f *testing.F) {
	f.Add(chatPath, "llm", "x-api-key: tgk_k\naccept-encoding: gzip, zstd", "", []byte(nil), false)
	f.Add(chatPath, "llm", "", "X-Api-Key= tgk_k\nAccept-Encoding= zstd\naccept-encoding: br", []byte(nil), false)
	f.Add(geminiPath, "generativelanguage.googleapis.com", "x-goog-api-key: tgk_g\naccept-encoding: gzip, br", "", []byte(nil), false)
	f.Add(bedrockPath, bedrockHost, "authorization: Bearer tgk_k\nx-amzn-bedrock-performanceconfig-latency: optimized\nx-amzn-bedrock-service-tier: priority",
		"", []byte(bedrockBody), false)
	f.Add(bedrockPath, bedrockHost, "", "authorization= Bearer tgk_k\nX-Amzn-Bedrock-Service-Tier= priority\nx-amzn-bedrock-service-tier: flex",
		[]byte(bedrockBody), true)
	f.Add(chatPath, "us.api.openai.com", "api-key: tgk_z", "", []byte(`{"model":"gpt-4o","stream":true}`), true)
	f.Fuzz(func(t *testing.T, path, host, mapLines, headerMapLines string, body []byte, raw bool) {
		var m map[string]string
		for line := range strings.SplitSeq(mapLines, "\n") {
			if k, v, ok := strings.Cut(line, ": "); ok {
				if m == nil {
					m = map[string]string{}
				}
				m[k] = v
			}
		}
		var hm []*corev3.HeaderValue
		for line := range strings.SplitSeq(headerMapLines, "\n") {
			if k, v, ok := strings.Cut(line, ": "); ok {
				hm = append(hm, &corev3.HeaderValue{Key: k, Value: v})
			} else if k, v, ok := strings.Cut(line, "= "); ok {
				hm = append(hm, &corev3.HeaderValue{Key: k, RawValue: []byte(v)})
			}
		}
		req := at(checkRequest(m, hm...), path, host)
		withBody(req, string(body), raw)
		b, err := proto.Marshal(req)
		if err != nil {
			return // not valid UTF-8 where proto wants it
		}
		checkSameReads(t, b)
	})
}

// BenchmarkCodecDecode decodes a CheckRequest as Envoy sends it: a dozen headers besides
// the credential, in the headers map or in header_map (encode_raw_headers), with and
// without the body.
func BenchmarkCodecDecode(b *testing.B) {
	envoy := map[string]string{":authority": "llm.example.test", ":method": "POST", ":path": chatPath, ":scheme": "https",
		"content-type": "application/json", "content-length": "35", "x-request-id": "5f0c7a4e-envoy", "user-agent": "openai-python/1.40",
		"x-forwarded-proto": "https", "x-envoy-external-address": "10.0.0.7", "accept": "application/json", "accept-encoding": "gzip, deflate, zstd",
		"x-stainless-lang": "python", "x-api-key": "tgk_0123456789abcdef0123456789abcdef"}
	var raw []*corev3.HeaderValue
	for k, v := range envoy {
		raw = append(raw, &corev3.HeaderValue{Key: k, RawValue: []byte(v)})
	}
	for _, bc := range []struct {
		name string
		req  *authv3.CheckRequest
	}{
		{"headers map", checkRequest(envoy)},
		{"header_map", checkRequest(nil, raw...)},
		{"headers map and body", withBody(checkRequest(envoy), `{"model":"gpt-4o","max_tokens":9}`, false)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			wire := encode(b, bc.req)
			c := New(nil, Upstream{}).Codec()
			b.ReportAllocs()
			for b.Loop() {
				var req authv3.CheckRequest
				if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(wire)}, &req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAdmittedResponse builds and encodes an admission's CheckResponse: a member
// without a limit (only the usage state goes to the client) and one limited by the day
// and the month (Codex's six rate-limit headers too: gate.Limits).
//
// Run: go test -run '^$' -bench AdmittedResponse -benchmem -count 4 ./enforcer/authz
func BenchmarkAdmittedResponse(b *testing.B) {
	limited := gate.Limits{Primary: gate.LimitWindow{Used: 250_000, Allowance: 1_000_000, Start: 1_800_000_000, End: 1_800_086_400},
		Secondary: gate.LimitWindow{Used: 7_000_000, Allowance: 10_000_000, Start: 1_799_000_000, End: 1_801_592_000}}
	for _, bc := range []struct {
		name   string
		limits gate.Limits
	}{{"unlimited", gate.Limits{}}, {"day_and_month", limited}} {
		b.Run(bc.name, func(b *testing.B) {
			s := New(nil, Upstream{Authorization: "Bearer sk-provider"})
			c := s.Codec()
			a := gate.Answer{Status: 200, Decision: gate.Admitted, Reason: gate.ReasonWithinLimit, RequestID: "req_01kbx3r1b6e1r0g8f1v6m7c2qz",
				UsageState: "within_limit", Limits: bc.limits}
			in := &checkInput{cred: gate.Credentials{APIKey: "tgk_k"}}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Marshal(s.admitted(&a, in)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
