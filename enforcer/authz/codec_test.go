package authz

import (
	"bytes"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate-dev/tollgate/enforcer/gate"
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

// checkSameCredentials decodes b fully and with the codec: whenever the full decode
// succeeds, the codec's must too, and Check must read the same credentials from both.
func checkSameCredentials(t *testing.T, b []byte) {
	t.Helper()
	var full authv3.CheckRequest
	if proto.Unmarshal(b, &full) != nil {
		return
	}
	var partial authv3.CheckRequest
	if err := New(nil, Upstream{}).Codec().Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &partial); err != nil {
		t.Fatalf("codec refused what proto decodes: %v", err)
	}
	want, got := Credentials(full.GetAttributes().GetRequest().GetHttp()), Credentials(partial.GetAttributes().GetRequest().GetHttp())
	if got != want {
		t.Fatalf("codec read %+v, a full decode %+v", got, want)
	}
	if wb, gb := RequestBody(full.GetAttributes().GetRequest().GetHttp()), RequestBody(partial.GetAttributes().GetRequest().GetHttp()); !bytes.Equal(wb, gb) {
		t.Fatalf("codec read the body %q, a full decode %q", gb, wb)
	}
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
	// The body the codec keeps does not alias the wire buffer, which gRPC reuses.
	wire := encode(t, withBody(checkRequest(nil), `{"model":"m"}`, true))
	var kept authv3.CheckRequest
	if err := New(nil, Upstream{}).Codec().Unmarshal(mem.BufferSlice{mem.SliceBuffer(wire)}, &kept); err != nil {
		t.Fatal(err)
	}
	clear(wire)
	if got := string(RequestBody(kept.GetAttributes().GetRequest().GetHttp())); got != `{"model":"m"}` {
		t.Fatalf("kept body %q after the buffer was reused", got)
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

func FuzzCodecDecodesWhatCheckReads(f *testing.F) {
	for _, tc := range codecCases {
		f.Add(encode(f, tc.req))
	}
	f.Fuzz(checkSameCredentials)
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
