package extproc_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/tollgate-dev/tollgate/enforcer/app"
	"github.com/tollgate-dev/tollgate/enforcer/estimate"
	"github.com/tollgate-dev/tollgate/enforcer/extproc"
	"github.com/tollgate-dev/tollgate/enforcer/internal/enforcertest"
	"github.com/tollgate-dev/tollgate/enforcer/requestbody"
	"github.com/tollgate-dev/tollgate/internal/testaudio"
	"github.com/tollgate-dev/tollgate/internal/testio"
	"github.com/tollgate-dev/tollgate/pkg/pricecatalog"
)

type bodySpec struct {
	requestID, path, body string
	// stringValues: Envoy sends header values in value, as older Envoy does (recent
	// Envoy sends raw_value, and reads only raw_value from mutations then).
	stringValues bool
	// noContentLength: the request came without one (chunked, or HTTP/2).
	noContentLength bool
	// contentEncoding: the request's Content-Encoding ("": none).
	contentEncoding string
	// authority: the request's :authority ("": llm.example.test).
	authority string
	// attributes: the request attributes Envoy sends with the headers (request_attributes).
	attributes map[string]*structpb.Struct
	// headers: more request headers, name/value pairs.
	headers []string
	// trailers: the request has trailers, so Envoy's buffered body ends with
	// end_of_stream false (the trailers after it, or none at all when it skips them).
	trailers bool
	// singleFilter: the stream carries no role (one filter for the request and the
	// response, as Envoy Gateway configures it); protocolBuffered: its first message's
	// protocol_config says the request body is BUFFERED.
	singleFilter, protocolBuffered bool
}

// sendRequestBody plays the request-body filter of deploy/envoy/envoy.yaml: a stream
// marked with the request role, request headers, then the whole body (BUFFERED). It
// returns the answer to the body.
func sendRequestBody(t *testing.T, e *enforcertest.Env, s bodySpec) *extprocv3.BodyResponse {
	t.Helper()
	resp := answerRequestBody(t, e, s)
	if resp.GetRequestBody() == nil {
		t.Fatalf("request body answered %v", resp)
	}
	return resp.GetRequestBody()
}

// answerRequestBody is sendRequestBody's exchange, answering whatever the body got.
func answerRequestBody(t *testing.T, e *enforcertest.Env, s bodySpec) *extprocv3.ProcessingResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if !s.singleFilter {
		ctx = metadata.AppendToOutgoingContext(ctx, extproc.RoleMetadata, extproc.RoleRequest)
	}
	st, err := e.ExtProc.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	authority := s.authority
	if authority == "" {
		authority = "llm.example.test"
	}
	kv := []string{":method", "POST", ":path", s.path, ":authority", authority, "content-type", "application/json"}
	if !s.noContentLength {
		kv = append(kv, "content-length", strconv.Itoa(len(s.body)))
	}
	if s.requestID != "" {
		kv = append(kv, "x-service-request-id", s.requestID)
	}
	if s.contentEncoding != "" {
		kv = append(kv, "content-encoding", s.contentEncoding)
	}
	kv = append(kv, s.headers...)
	hm := enforcertest.HeaderMap(kv...)
	if s.stringValues {
		for _, h := range hm.GetHeaders() {
			h.Value, h.RawValue = string(h.GetRawValue()), nil
		}
	}
	headers := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: hm}},
		Attributes: s.attributes}
	if s.protocolBuffered {
		headers.ProtocolConfig = &extprocv3.ProtocolConfiguration{RequestBodyMode: extprocfilterv3.ProcessingMode_BUFFERED,
			ResponseBodyMode: extprocfilterv3.ProcessingMode_STREAMED}
	}
	for _, req := range []*extprocv3.ProcessingRequest{
		headers,
		{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: []byte(s.body), EndOfStream: !s.trailers}}},
	} {
		if err := st.Send(req); err != nil {
			t.Fatal(err)
		}
	}
	if resp, err := st.Recv(); err != nil || resp.GetRequestHeaders() == nil || resp.GetRequestHeaders().GetResponse() != nil {
		t.Fatalf("request headers answered %v %v", resp, err)
	}
	resp, err := st.Recv()
	if err != nil {
		t.Fatalf("request body answered %v", err)
	}
	// Response modes are SKIP: Envoy ends the stream here.
	_ = st.CloseSend()
	return resp
}

// legacyStreamBody is a legacy completion streamed (OpenAI's /v1/completions).
const legacyStreamBody = `{"model":"gpt-3.5-turbo-instruct","stream":true,"max_tokens":64,"prompt":"package main\n\n// add returns the sum\n"}`

const chatStreamBody = `{"model":"gpt-4o-mini","stream":true,"temperature":0.7,"messages":[{"role":"user","content":"Write a haiku about the sea."}]}`

func TestExtProcRequestBodyAsksStreamsForUsage(t *testing.T) {
	e := enforcertest.New(t, enforcertest.Options{})
	w := e.NewMember(enforcertest.DayLimit(1*enforcertest.USD, true))
	withUsage := `{"stream_options":{"include_usage":true},` + chatStreamBody[1:]
	legacyWithUsage := `{"stream_options":{"include_usage":true},` + legacyStreamBody[1:]
	for _, tc := range []struct {
		name    string
		spec    bodySpec
		mutated string // "" = not mutated
	}{
		{"OpenAI stream without include_usage", bodySpec{path: "/v1/chat/completions", body: chatStreamBody}, withUsage},
		{"the same with header values as strings", bodySpec{path: "/v1/chat/completions", body: chatStreamBody, stringValues: true}, withUsage},
		{"the same without content-length", bodySpec{path: "/openai/v1/chat/completions?api-version=1", body: chatStreamBody, noContentLength: true}, withUsage},
		{"include_usage already set", bodySpec{path: "/v1/chat/completions", body: withUsage}, ""},
		{"not streamed", bodySpec{path: "/v1/chat/completions", body: strings.Replace(chatStreamBody, `"stream":true`, `"stream":false`, 1)}, ""},
		{"another API", bodySpec{path: "/v1/messages", body: chatStreamBody}, ""},
		// A legacy completion's stream reports its usage only when asked too.
		{"a legacy completion stream", bodySpec{path: "/v1/completions", body: legacyStreamBody}, legacyWithUsage},
		{"Azure OpenAI's legacy completion stream", bodySpec{path: "/openai/deployments/instruct/completions?api-version=2024-10-21",
			body: legacyStreamBody}, legacyWithUsage},
		// Azure OpenAI answers stream_options 400 on its API versions before 2024-08-01.
		{"Azure OpenAI's stream of api-version 2024-06-01", bodySpec{path: "/openai/deployments/gpt-4o/chat/completions?api-version=2024-06-01",
			body: chatStreamBody}, ""},
		// Mistral's fill-in-the-middle sends its usage unasked, on any of its hosts.
		{"Mistral's fill-in-the-middle", bodySpec{path: "/v1/fim/completions", body: legacyStreamBody, authority: "codestral.mistral.ai"}, ""},
		{"not JSON", bodySpec{path: "/v1/chat/completions", body: "stream=true"}, ""},
		// Mistral's API refuses stream_options (422) and sends the usage unasked.
		{"a stream to Mistral's API", bodySpec{path: "/v1/chat/completions", body: chatStreamBody, authority: "api.mistral.ai"}, ""},
		// The route's upstream host, where Envoy sends it, is the host: a client that
		// called the proxy by its own name reaches Mistral's API.
		{"a stream whose route goes to Mistral's API", bodySpec{path: "/v1/chat/completions", body: chatStreamBody,
			attributes: routeHost("api.mistral.ai")}, ""},
		{"a stream whose route goes elsewhere", bodySpec{path: "/v1/chat/completions", body: chatStreamBody, authority: "api.mistral.ai",
			attributes: routeHost("api.groq.com")}, withUsage},
		// The route's include_usage metadata decides, as a routes file's includeUsage does.
		{"a route whose metadata says include_usage false", bodySpec{path: "/v1/chat/completions", body: chatStreamBody,
			attributes: routeMetadata("include_usage", structpb.NewBoolValue(false))}, ""},
		{"the same as a string", bodySpec{path: "/v1/chat/completions", body: chatStreamBody,
			attributes: routeMetadata("include_usage", structpb.NewStringValue("false"))}, ""},
		{"a route to Mistral's API whose metadata says include_usage true", bodySpec{path: "/v1/chat/completions", body: chatStreamBody,
			authority: "api.mistral.ai", attributes: routeMetadata("include_usage", structpb.NewBoolValue(true))}, withUsage},
		{"the same with the route's upstream host", bodySpec{path: "/v1/chat/completions", body: chatStreamBody,
			attributes: routeMetadata("include_usage", structpb.NewStringValue("true"), "upstream_host", structpb.NewStringValue("api.mistral.ai"))}, withUsage},
		{"a value neither true nor false leaves it to the host", bodySpec{path: "/v1/chat/completions", body: chatStreamBody,
			attributes: routeMetadata("include_usage", structpb.NewStringValue("no"))}, withUsage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.spec.requestID, _ = e.Admit(t, w.Key)
			resp := sendRequestBody(t, e, tc.spec)
			if tc.mutated == "" {
				if resp.GetResponse() != nil {
					t.Fatalf("mutated: %v", resp)
				}
				return
			}
			cr := resp.GetResponse()
			if got := string(cr.GetBodyMutation().GetBody()); got != tc.mutated {
				t.Fatalf("body %s\nwant %s", got, tc.mutated)
			}
			sets := cr.GetHeaderMutation().GetSetHeaders()
			if tc.spec.noContentLength {
				if cr.GetHeaderMutation() != nil {
					t.Fatalf("header mutation without a content-length: %v", cr.GetHeaderMutation())
				}
				return
			}
			want := strconv.Itoa(len(tc.mutated))
			if len(sets) != 1 || sets[0].GetHeader().GetKey() != "content-length" || len(cr.GetHeaderMutation().GetRemoveHeaders()) != 0 {
				t.Fatalf("header mutation %v", cr.GetHeaderMutation())
			}
			h := sets[0].GetHeader()
			if !tc.spec.stringValues && (string(h.GetRawValue()) != want || h.GetValue() != "") ||
				tc.spec.stringValues && (h.GetValue() != want || len(h.GetRawValue()) != 0) {
				t.Fatalf("content-length %v, want %s in the encoding Envoy used", h, want)
			}
		})
	}
	if e.Metric("tollgate_enforcer_extproc_request_bodies_total", "result", "include_usage_set") != 9 ||
		e.Metric("tollgate_enforcer_extproc_request_bodies_total", "result", "not_json") != 1 {
		t.Fatal("request bodies not counted")
	}
	// A request-body stream never settles: the response's stream does.
	if e.CP.SettleItems.Load() != 0 || e.Enforcer.Tracker.Len() != 19 {
		t.Fatalf("settled %d, tracked %d", e.CP.SettleItems.Load(), e.Enforcer.Tracker.Len())
	}
}

// routeHost is the attribute deploy/envoy/envoy.yaml's request-body filter may ask Envoy
// for: the route's metadata's upstream host, keyed by its expression, as Envoy sends it.
// A stream is asked for no content coding when the client offered some: the enforcer
// would hold a coded stream's decoder for the stream's whole life
// (responseusage.StreamAcceptEncoding). Envoy holds the headers until the body's answer,
// which sets accept-encoding, with or without a body mutation.
func TestExtProcAsksStreamsForNoContentCoding(t *testing.T) {
	e := enforcertest.New(t, enforcertest.Options{})
	w := e.NewMember(enforcertest.DayLimit(1*enforcertest.USD, true))
	withUsage := `{"stream_options":{"include_usage":true},` + chatStreamBody[1:]
	notStreamed := strings.Replace(chatStreamBody, `"stream":true`, `"stream":false`, 1)
	for _, tc := range []struct {
		name, path, body, offered string
		wantBody                  string // "" = the body as it came
		wantHeaders               map[string]string
	}{
		{"an Anthropic stream", "/v1/messages", chatStreamBody, "gzip, deflate, br", "",
			map[string]string{"accept-encoding": "identity"}},
		{"an OpenAI stream asked for its usage too", "/v1/chat/completions", chatStreamBody, "gzip, br", withUsage,
			map[string]string{"accept-encoding": "identity", "content-length": strconv.Itoa(len(withUsage))}},
		{"Gemini's stream", "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", `{"contents":[]}`, "gzip", "",
			map[string]string{"accept-encoding": "identity"}},
		{"a stream whose client refuses identity", "/v1/messages", chatStreamBody, "gzip, identity;q=0", "", nil},
		{"a stream, nothing offered", "/v1/messages", chatStreamBody, "", "", nil},
		{"not a stream", "/v1/chat/completions", notStreamed, "gzip, br", "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := bodySpec{path: tc.path, body: tc.body}
			if tc.offered != "" {
				spec.headers = []string{"accept-encoding", tc.offered}
			}
			spec.requestID, _ = e.Admit(t, w.Key)
			cr := sendRequestBody(t, e, spec).GetResponse()
			if got := string(cr.GetBodyMutation().GetBody()); got != tc.wantBody {
				t.Fatalf("body mutated to %q, want %q", got, tc.wantBody)
			}
			got := map[string]string{}
			for _, h := range cr.GetHeaderMutation().GetSetHeaders() {
				got[h.GetHeader().GetKey()] = string(h.GetHeader().GetRawValue())
			}
			if len(tc.wantHeaders) == 0 && cr != nil {
				t.Fatalf("answered %v, want the request as it came", cr)
			}
			if len(got) != len(tc.wantHeaders) {
				t.Fatalf("headers set %v, want %v", got, tc.wantHeaders)
			}
			for k, v := range tc.wantHeaders {
				if got[k] != v {
					t.Fatalf("headers set %v, want %v", got, tc.wantHeaders)
				}
			}
		})
	}
}

// routeMetadata is the attributes deploy/envoy/envoy.yaml's request-body filter may ask
// Envoy for, of the route's tollgate metadata: name and value pairs.
func routeMetadata(pairs ...any) map[string]*structpb.Struct {
	fields := map[string]*structpb.Value{}
	for i := 0; i+1 < len(pairs); i += 2 {
		fields["xds.route_metadata.filter_metadata['tollgate']['"+pairs[i].(string)+"']"] = pairs[i+1].(*structpb.Value)
	}
	return map[string]*structpb.Struct{"envoy.filters.http.ext_proc": {Fields: fields}}
}

func routeHost(host string) map[string]*structpb.Struct {
	return map[string]*structpb.Struct{"envoy.filters.http.ext_proc": {Fields: map[string]*structpb.Value{
		"xds.route_metadata.filter_metadata['tollgate']['upstream_host']": structpb.NewStringValue(host)}}}
}

// A compressed body (gzip, deflate, br) is read decoded and sent decoded: the body
// mutation carries it (a chat stream's asked for its usage too), content-encoding is
// removed and content-length set to its length; its estimate is recorded. A body of
// another coding, or corrupt, is refused as the gateway refuses it (415, 400, with the
// error code) and settled at 0 with that status: unread, it would go uncharged.
func TestExtProcDecodesCompressedBodies(t *testing.T) {
	e := enforcertest.New(t, enforcertest.Options{})
	w := e.NewMember(enforcertest.DayLimit(1*enforcertest.USD, true))
	gz := func(b string) string {
		var buf bytes.Buffer
		z := gzip.NewWriter(&buf)
		_, _ = z.Write([]byte(b))
		_ = z.Close()
		return buf.String()
	}
	messages := `{"model":"claude-sonnet-4-5","max_tokens":100,"messages":[{"role":"user","content":"hello"}]}`
	withUsage := `{"stream_options":{"include_usage":true},` + chatStreamBody[1:]
	for _, tc := range []struct {
		name    string
		spec    bodySpec
		mutated string
	}{
		{"a gzip chat stream: decoded and asked for its usage", bodySpec{path: "/v1/chat/completions", body: gz(chatStreamBody), contentEncoding: "gzip"}, withUsage},
		{"gzip messages: decoded", bodySpec{path: "/v1/messages", body: gz(messages), contentEncoding: "gzip"}, messages},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.spec.requestID, _ = e.Admit(t, w.Key)
			cr := sendRequestBody(t, e, tc.spec).GetResponse()
			if got := string(cr.GetBodyMutation().GetBody()); got != tc.mutated {
				t.Fatalf("body %q\nwant %s", got, tc.mutated)
			}
			hm := cr.GetHeaderMutation()
			if !slices.Equal(hm.GetRemoveHeaders(), []string{"content-encoding"}) || len(hm.GetSetHeaders()) != 1 ||
				string(hm.GetSetHeaders()[0].GetHeader().GetRawValue()) != strconv.Itoa(len(tc.mutated)) {
				t.Fatalf("header mutation %v", hm)
			}
		})
	}
	for _, tc := range []struct {
		name   string
		spec   bodySpec
		status int
		code   string
	}{
		{"zstd: refused", bodySpec{path: "/v1/messages", body: "(\xb5/\xfd", contentEncoding: "zstd"}, 415, "service_gateway_request_encoding_unsupported"},
		{"corrupt gzip: refused", bodySpec{path: "/v1/messages", body: "not gzip", contentEncoding: "gzip"}, 400, "service_gateway_request_body_corrupt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.spec.requestID, _ = e.Admit(t, w.Key)
			ir := answerRequestBody(t, e, tc.spec).GetImmediateResponse()
			var code string
			for _, h := range ir.GetHeaders().GetSetHeaders() {
				if h.GetHeader().GetKey() == "x-service-error-code" {
					code = string(h.GetHeader().GetRawValue())
				}
			}
			if int(ir.GetStatus().GetCode()) != tc.status || code != tc.code || !strings.Contains(string(ir.GetBody()), tc.code) {
				t.Fatalf("answered %v, want %d %s", ir, tc.status, tc.code)
			}
			enforcertest.WaitFor(t, "receipt", func() bool { return e.CP.Receipt(tc.spec.requestID) != nil })
			if rc := e.CP.Receipt(tc.spec.requestID); rc.Cost != 0 || rc.Item.GetUpstreamStatus() != int32(tc.status) || !rc.Item.GetComplete() {
				t.Fatalf("settled %v at %d", rc.Item, rc.Cost)
			}
		})
	}
	if e.Metric("tollgate_enforcer_extproc_request_bodies_total", "result", "decoded") != 2 ||
		e.Metric("tollgate_enforcer_extproc_request_bodies_total", "result", "undecodable") != 2 ||
		e.Metric("tollgate_enforcer_extproc_request_bodies_total", "result", "estimated") != 2 {
		t.Fatal("request bodies not counted")
	}
}

func TestExtProcRequestBodyOfAnUntrackedRequestIsLeftAlone(t *testing.T) {
	e := enforcertest.New(t, enforcertest.Options{})
	if resp := sendRequestBody(t, e, bodySpec{path: "/v1/chat/completions", body: chatStreamBody}); resp.GetResponse() != nil {
		t.Fatalf("mutated without a request id: %v", resp)
	}
}

// Charged for what was seen: counts the upstream did not report are estimated from the
// request body and the streamed text, and marked so.
func TestExtProcChargesWhatWasSeen(t *testing.T) {
	prompt := strings.Repeat("x", 400) // 100 tokens of text
	body := `{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"` + prompt + `"}]}`
	inEst := estimate.Tokens(400) + estimate.PerMessage + estimate.Priming
	events := strings.SplitAfter(openAISSE, "\n\n")
	textOnly := strings.Join(events[:3], "") // role, "Hello", finish: no usage
	mp3, _ := testaudio.Speech("mp3")        // 2,568 ms of audio: 52 tokens at 20 a second
	for _, tc := range []struct {
		name            string
		spec            streamSpec
		in, out         int64
		model           string
		estimated       bool
		complete        bool
		cost            int64
		basis, costSrc  string
		skipRequestBody bool
	}{
		{name: "cut off after text", spec: streamSpec{contentType: "text/event-stream", chunks: testio.Chunks(textOnly, 4), breakOff: true},
			in: inEst, out: 2, model: "gpt-4o-mini-2024-07-18", estimated: true, cost: inEst*2 + 2*8, basis: "estimate", costSrc: "catalog_estimate"},
		{name: "ended without usage", spec: streamSpec{contentType: "text/event-stream", chunks: testio.Chunks(textOnly+"data: [DONE]\n\n", 3)},
			in: inEst, out: 2, model: "gpt-4o-mini-2024-07-18", estimated: true, cost: inEst*2 + 2*8, basis: "estimate", costSrc: "catalog_estimate"},
		{name: "2xx with no bytes at all: the input estimate", spec: streamSpec{contentType: "text/event-stream", bodyless: true},
			in: inEst, model: "gpt-4o-mini", estimated: true, cost: inEst * 2, basis: "estimate", costSrc: "catalog_estimate"},
		{name: "cut before the response began", spec: streamSpec{contentType: "text/event-stream", breakOff: true},
			in: inEst, model: "gpt-4o-mini", estimated: true, cost: inEst * 2, basis: "estimate", costSrc: "catalog_estimate"},
		{name: "upstream error without usage costs nothing", spec: streamSpec{status: "400", contentType: "application/json",
			chunks: [][]byte{[]byte(`{"error":{"message":"bad request","type":"invalid_request_error"}}`)}},
			model: "gpt-4o-mini", basis: "none", costSrc: "unknown"},
		{name: "upstream 503 without a body costs nothing", spec: streamSpec{status: "503", contentType: "text/plain", bodyless: true},
			model: "gpt-4o-mini", basis: "none", costSrc: "unknown"},
		{name: "reported usage wins", spec: streamSpec{contentType: "text/event-stream", chunks: testio.Chunks(openAISSE, 5)},
			in: 1200, out: 300, model: "gpt-4o-mini-2024-07-18", complete: true, cost: 1200*2 + 300*8, basis: "reported_usage", costSrc: "catalog_estimate"},
		{name: "an upstream cost needs no estimate", spec: streamSpec{contentType: "text/event-stream", chunks: testio.Chunks(textOnly, 2), breakOff: true,
			headers: []string{"x-upstream-cost-micro-usd", "4321"}}, model: "gpt-4o-mini-2024-07-18", cost: 4321, basis: "upstream_cost", costSrc: "upstream"},
		{name: "Anthropic cut after text: input reported, output from the text", skipRequestBody: true,
			spec: streamSpec{contentType: "text/event-stream", chunks: testio.Chunks(strings.Join(strings.SplitAfter(anthropicSSE, "\n\n")[:2], "")+
				"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\""+strings.Repeat("y", 4000)+"\"}}\n\n", 9),
				breakOff: true},
			in: 550, out: 1000 + 1, model: "claude-3-5-haiku-20241022", estimated: true, cost: 550*2 + 1001*8, basis: "estimate", costSrc: "catalog_estimate"},
		{name: "an answer in audio: its duration as output tokens", spec: streamSpec{contentType: "audio/mpeg", chunks: testio.Chunks(string(mp3.Bytes), 7)},
			in: inEst, out: 52, model: "gpt-4o-mini", estimated: true, cost: inEst*2 + 52*8, basis: "estimate", costSrc: "catalog_estimate"},
		{name: "no request body seen: output only", skipRequestBody: true,
			spec: streamSpec{contentType: "text/event-stream", chunks: testio.Chunks(textOnly, 4), breakOff: true},
			out:  2, model: "gpt-4o-mini-2024-07-18", estimated: true, cost: 2 * 8, basis: "estimate", costSrc: "catalog_estimate"},
	} {
		// The request body in a filter of its own (deploy/envoy/envoy.yaml), or in the
		// response's (Envoy Gateway's one ext_proc, deploy/envoy-gateway): the same charge.
		for _, oneFilter := range []bool{false, true} {
			name := tc.name
			if oneFilter {
				name += " (one filter)"
			}
			t.Run(name, func(t *testing.T) {
				e := enforcertest.New(t, enforcertest.Options{})
				for _, m := range []string{"gpt-4o-mini-2024-07-18", "gpt-4o-mini", "claude-3-5-haiku-20241022"} {
					e.CP.SetPrice(m, 2, 8)
				}
				w := e.NewMember(enforcertest.DayLimit(1*enforcertest.USD, true))
				reqID, _ := e.Admit(t, w.Key)
				if !tc.skipRequestBody && !oneFilter {
					if resp := sendRequestBody(t, e, bodySpec{requestID: reqID, path: "/v1/chat/completions", body: body}); resp.GetResponse() == nil {
						t.Fatal("include_usage not asked for")
					}
				}
				spec := tc.spec
				spec.requestID = reqID
				if !tc.skipRequestBody && oneFilter {
					spec.requestBody = body
				}
				if answer := runStream(t, e, spec); spec.requestBody != "" && answer.GetResponse() == nil {
					t.Fatal("include_usage not asked for")
				}
				enforcertest.WaitFor(t, "receipt", func() bool { return e.CP.Receipt(reqID) != nil })
				rc := e.CP.Receipt(reqID)
				it := rc.Item
				if it.GetInputTokens() != tc.in || it.GetOutputTokens() != tc.out || it.GetModel() != tc.model ||
					it.GetUsageEstimated() != tc.estimated || it.GetComplete() != tc.complete {
					t.Fatalf("settled %v", it)
				}
				if rc.Cost != tc.cost || rc.CostBasis != tc.basis || rc.CostSource != tc.costSrc {
					t.Fatalf("cost %d, basis %s, source %s", rc.Cost, rc.CostBasis, rc.CostSource)
				}
				if e.Enforcer.Tracker.Len() != 0 || e.CP.Pending(w.ID) != 0 {
					t.Fatal("left pending")
				}
			})
		}
	}
}

// TestExtProcChargesContainers: behind Envoy too, the container a Responses call's code
// interpreter ran in is charged its minutes at the memory the request asked for (its own
// length, 90 s here, and the 20 idle minutes: 22 minutes of a 16 GB container), and a
// later call on the same container, streamed, the 2 minutes its idle window moved.
func TestExtProcChargesContainers(t *testing.T) {
	e := enforcertest.New(t, enforcertest.Options{})
	e.CP.SetPrice("gpt-5", 2, 8)
	w := e.NewMember(enforcertest.DayLimit(10*enforcertest.USD, true))
	body := `{"model":"gpt-5","input":"6 x 7?","tools":[{"type":"code_interpreter","container":{"type":"auto","memory_limit":"16g"}}]}`
	call := `{"type":"code_interpreter_call","id":"ci_1","status":"completed","code":"print(6*7)","container_id":"cntr_extproc1","outputs":null}`
	usage := `"usage":{"input_tokens":100,"output_tokens":20,"total_tokens":120}`
	answer := `{"id":"resp_1","object":"response","status":"completed","model":"gpt-5","output":[` + call + `],` + usage + `}`
	stream := "event: response.output_item.done\ndata: {\"type\":\"response.output_item.done\",\"output_index\":0,\"item\":" + call + "}\n\n" +
		"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":" + answer + "}\n\n"
	for i, tc := range []struct {
		contentType, answer string
		minutes             int64
	}{
		{"application/json", answer, 22},
		{"text/event-stream", stream, 2},
	} {
		reqID, _ := e.Admit(t, w.Key)
		sendRequestBody(t, e, bodySpec{requestID: reqID, path: "/v1/responses", body: body})
		e.Clock.Advance(90 * time.Second) // the call runs
		runStream(t, e, streamSpec{requestID: reqID, path: "/v1/responses", contentType: tc.contentType, chunks: testio.Chunks(tc.answer, 3)})
		enforcertest.WaitFor(t, "receipt", func() bool { return e.CP.Receipt(reqID) != nil })
		it := e.CP.Receipt(reqID).Item
		if it.GetContainerKind() != "openai-16g" || it.GetContainerMinutes() != tc.minutes || !it.GetComplete() || it.GetInputTokens() != 100 {
			t.Fatalf("call %d: settled %v, want %d minutes of openai-16g", i+1, it, tc.minutes)
		}
	}
}

// Behind Envoy, an Amazon Bedrock request's guardrail is asked for its trace as the
// gateway asks it (Converse: the body's guardrailConfig.trace; InvokeModel: the
// X-Amzn-Bedrock-Trace header, set with the body's answer, the body unchanged), and the
// units its answer's trace reports are settled.
func TestExtProcChargesGuardrails(t *testing.T) {
	e := enforcertest.New(t, enforcertest.Options{})
	e.CP.SetPrice("amazon.nova-pro-v1:0", 2, 8)
	w := e.NewMember(enforcertest.DayLimit(10*enforcertest.USD, true))
	usage := func(units int) string {
		return `{"invocationMetrics":{"usage":{"topicPolicyUnits":` + strconv.Itoa(units) + `,"contentPolicyUnits":` + strconv.Itoa(units) + `,"wordPolicyUnits":0}}}`
	}
	converse := `{"messages":[{"role":"user","content":[{"text":"How are tolls paid?"}]}],"guardrailConfig":{"guardrailIdentifier":"gr1","guardrailVersion":"1"}}`
	invoke := `{"anthropic_version":"bedrock-2023-05-31","max_tokens":100,"messages":[{"role":"user","content":"How are tolls paid?"}]}`
	for _, tc := range []struct {
		name, path, body, answer string
		headers                  []string
		mutated                  string // the body sent upstream
		traceHeader              bool   // X-Amzn-Bedrock-Trace: ENABLED set
		units                    int64  // of the content filter, and of the denied topics
	}{
		{name: "Converse", path: "/model/amazon.nova-pro-v1:0/converse", body: converse,
			mutated: strings.Replace(converse, `"guardrailConfig":{`, `"guardrailConfig":{"trace":"enabled",`, 1),
			answer: `{"output":{"message":{"content":[{"text":"By card."}]}},"stopReason":"end_turn","trace":{"guardrail":{"inputAssessment":{"gr1":` + usage(2) +
				`},"outputAssessments":{"gr1":[` + usage(1) + `]}}},"usage":{"inputTokens":10,"outputTokens":3}}`, units: 3},
		{name: "InvokeModel", path: "/model/anthropic.claude-haiku-4-5-20251001-v1:0/invoke", body: invoke,
			headers: []string{"x-amzn-bedrock-guardrailidentifier", "gr1", "x-amzn-bedrock-guardrailversion", "1"}, mutated: invoke, traceHeader: true,
			answer: `{"id":"msg_1","type":"message","model":"claude-haiku-4-5","content":[{"type":"text","text":"By card."}],"usage":{"input_tokens":10,"output_tokens":3},` +
				`"amazon-bedrock-trace":{"guardrail":{"input":{"gr1":` + usage(2) + `},"outputs":[{"gr1":` + usage(2) + `}]}}}`, units: 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reqID, _ := e.Admit(t, w.Key)
			cr := sendRequestBody(t, e, bodySpec{requestID: reqID, path: tc.path, body: tc.body, headers: tc.headers}).GetResponse()
			if got := string(cr.GetBodyMutation().GetBody()); got != tc.mutated {
				t.Fatalf("body sent %s\nwant %s", got, tc.mutated)
			}
			sets := map[string]string{}
			for _, h := range cr.GetHeaderMutation().GetSetHeaders() {
				sets[h.GetHeader().GetKey()] = string(h.GetHeader().GetRawValue())
			}
			if sets["content-length"] != strconv.Itoa(len(tc.mutated)) || (sets["x-amzn-bedrock-trace"] == "ENABLED") != tc.traceHeader {
				t.Fatalf("headers set %v", sets)
			}
			runStream(t, e, streamSpec{requestID: reqID, path: tc.path, contentType: "application/json", chunks: testio.Chunks(tc.answer, 3)})
			enforcertest.WaitFor(t, "receipt", func() bool { return e.CP.Receipt(reqID) != nil })
			it := e.CP.Receipt(reqID).Item
			if g := it.GetGuardrailUnits(); g.GetContentText() != tc.units || g.GetDeniedTopics() != tc.units || !it.GetComplete() || it.GetInputTokens() != 10 {
				t.Fatalf("settled %v, want %d units of each", it, tc.units)
			}
		})
	}
}

// A request for OpenAI's data residency endpoint ({region}.api.openai.com, its
// :authority) is settled as a regional endpoint's (10% more on the newest models); one
// for another host is not.
func TestExtProcRegionalHost(t *testing.T) {
	for authority, want := range map[string]bool{"eu.api.openai.com": true, "api.openai.com": false} {
		t.Run(authority, func(t *testing.T) {
			e := enforcertest.New(t, enforcertest.Options{})
			w := e.NewMember(enforcertest.DayLimit(1*enforcertest.USD, true))
			reqID, _ := e.Admit(t, w.Key)
			sendRequestBody(t, e, bodySpec{requestID: reqID, path: "/v1/chat/completions", body: chatStreamBody, authority: authority})
			runStream(t, e, streamSpec{requestID: reqID, contentType: "text/event-stream", chunks: testio.Chunks(openAISSE, 3)})
			enforcertest.WaitFor(t, "receipt", func() bool { return e.CP.Receipt(reqID) != nil })
			if it := e.CP.Receipt(reqID).Item; it.GetRegionalEndpoint() != want || !it.GetComplete() {
				t.Fatalf("settled %v, want regional_endpoint %v", it, want)
			}
		})
	}
}

// A request's settlement names the host it went to where Envoy sends the route's upstream
// host as a request attribute; never the request's authority, which the client chooses
// (a client of a route to a dear host could name a cheap one).
func TestExtProcUpstreamHost(t *testing.T) {
	for name, tc := range map[string]struct {
		authority string
		attrs     map[string]*structpb.Struct
		want      string
	}{
		"the route's upstream host":                {"llm.example.test", routeHost("API.Groq.com:443"), "api.groq.com"},
		"not the authority, without the attribute": {"api.groq.com", nil, ""},
		"none, when the attribute is bad":          {"api.groq.com", routeHost("api.groq.com/v1"), ""},
	} {
		t.Run(name, func(t *testing.T) {
			e := enforcertest.New(t, enforcertest.Options{})
			w := e.NewMember(enforcertest.DayLimit(1*enforcertest.USD, true))
			reqID, _ := e.Admit(t, w.Key)
			sendRequestBody(t, e, bodySpec{requestID: reqID, path: "/v1/chat/completions", body: chatStreamBody, authority: tc.authority, attributes: tc.attrs})
			runStream(t, e, streamSpec{requestID: reqID, contentType: "text/event-stream", chunks: testio.Chunks(openAISSE, 3)})
			enforcertest.WaitFor(t, "receipt", func() bool { return e.CP.Receipt(reqID) != nil })
			if it := e.CP.Receipt(reqID).Item; it.GetUpstreamHost() != tc.want {
				t.Fatalf("settled %v, want upstream_host %q", it, tc.want)
			}
		})
	}
}

// A request whose body went upstream but whose response nobody reported is charged its
// input estimate when it is reaped.
func TestReapedRequestIsChargedItsInputEstimate(t *testing.T) {
	e := enforcertest.New(t, enforcertest.Options{})
	e.CP.SetPrice("gpt-4o-mini", 2, 8)
	w := e.NewMember(enforcertest.DayLimit(1*enforcertest.USD, true))
	seen, _ := e.Admit(t, w.Key)
	unseen, _ := e.Admit(t, w.Key)
	sendRequestBody(t, e, bodySpec{requestID: seen, path: "/v1/chat/completions", body: chatStreamBody})
	est, err := estimate.Input([]byte(chatStreamBody))
	if err != nil {
		t.Fatal(err)
	}
	reapAll(t, e, seen, unseen)
	if it := e.CP.Receipt(seen).Item; it.GetInputTokens() != est.InputTokens || it.GetModel() != "gpt-4o-mini" || !it.GetUsageEstimated() || it.GetComplete() {
		t.Fatalf("reaped after its body was seen: %v", it)
	}
	if rc := e.CP.Receipt(seen); rc.Cost != est.InputTokens*2 || rc.CostBasis != "estimate" {
		t.Fatalf("cost %d %s", rc.Cost, rc.CostBasis)
	}
	if it := e.CP.Receipt(unseen).Item; it.GetInputTokens() != 0 || it.GetUsageEstimated() {
		t.Fatalf("reaped without a body seen: %v", it)
	}
}

// reapAll has the tracker reap the requests ids (admitted, their answers never reported)
// and waits for their receipts.
func reapAll(t *testing.T, e *enforcertest.Env, ids ...string) {
	t.Helper()
	after := 15 * time.Minute
	e.Clock.Advance(after + time.Second)
	if n := e.Enforcer.Tracker.Reap(after); n != len(ids) {
		t.Fatalf("reaped %d, want %d", n, len(ids))
	}
	enforcertest.WaitFor(t, "receipts", func() bool {
		for _, id := range ids {
			if e.CP.Receipt(id) == nil {
				return false
			}
		}
		return true
	})
}

// A guarded Amazon Bedrock request and a guardrail called on its own (ApplyGuardrail)
// whose answers this replica never saw (another replica's response stream) are charged,
// when reaped, their guardrail's estimate: the units of the prompt and of the check's
// body, at the four billed text policies. Before, the guarded request was charged its
// tokens alone and the check nothing.
func TestReapedGuardrailsAreChargedTheirEstimate(t *testing.T) {
	e := enforcertest.New(t, enforcertest.Options{})
	w := e.NewMember(enforcertest.DayLimit(1*enforcertest.USD, true))
	converse := `{"messages":[{"role":"user","content":[{"text":"` + strings.Repeat("How are tolls paid? ", 100) + `"}]}],"guardrailConfig":{"guardrailIdentifier":"gr1","guardrailVersion":"1"}}`
	apply := `{"source":"INPUT","content":[{"text":{"text":"` + strings.Repeat("Is this allowed? ", 150) + `"}}]}`
	guarded, _ := e.Admit(t, w.Key)
	check, _ := e.Admit(t, w.Key)
	sendRequestBody(t, e, bodySpec{requestID: guarded, path: "/model/amazon.nova-pro-v1:0/converse", body: converse})
	sendRequestBody(t, e, bodySpec{requestID: check, path: "/guardrail/gr1/version/1/apply", body: apply})
	est, err := estimate.Input([]byte(converse))
	if err != nil {
		t.Fatal(err)
	}
	reapAll(t, e, guarded, check)
	for id, want := range map[string]struct{ input, units int64 }{
		guarded: {input: est.InputTokens, units: pricecatalog.EstimatedGuardrailUnits(estimate.Bytes(est.InputTokens)).ContentText},
		check:   {units: pricecatalog.EstimatedGuardrailUnits(int64(len(apply))).ContentText},
	} {
		it := e.CP.Receipt(id).Item
		g := it.GetGuardrailUnits()
		if want.units < 2 || it.GetInputTokens() != want.input || g.GetContentText() != want.units || g.GetDeniedTopics() != want.units ||
			g.GetSensitiveInformation() != want.units || g.GetContextualGrounding() != want.units || !it.GetUsageEstimated() || it.GetComplete() {
			t.Errorf("reaped %v, want %d input tokens and %d units of each billed text policy, estimated", it, want.input, want.units)
		}
	}
}

// The mutated body is what an OpenAI upstream must accept: valid JSON, the same request.
func TestIncludeUsageBodyIsTheSameRequest(t *testing.T) {
	got, ok := requestbody.WithIncludeUsage([]byte(chatStreamBody))
	if !ok {
		t.Fatal("not rewritten")
	}
	var a, b map[string]any
	if json.Unmarshal([]byte(chatStreamBody), &a) != nil || json.Unmarshal(got, &b) != nil {
		t.Fatal("invalid JSON")
	}
	if b["stream_options"].(map[string]any)["include_usage"] != true || len(b) != len(a)+1 {
		t.Fatalf("%s", got)
	}
}

// An organization that refuses unpriced models: a request body naming a model neither
// the organization nor the catalog prices is answered 403 at once (never upstream) and
// settled at no cost; priced models, and the same model elsewhere, go on.
func TestExtProcRefusesUnpricedModels(t *testing.T) {
	e := enforcertest.New(t, enforcertest.Options{})
	refusing := e.NewMember(enforcertest.DayLimit(1*enforcertest.USD, true))
	e.CP.RefuseUnpriced(refusing.ID, true, pricecatalog.Key("Acme/House-Model"))
	charging := e.NewMember(enforcertest.DayLimit(1*enforcertest.USD, true))
	body := func(model string) string {
		return `{"model":"` + model + `","messages":[{"role":"user","content":"hi"}]}`
	}
	for _, tc := range []struct {
		name    string
		w       enforcertest.Member
		model   string
		refused bool
	}{
		{"a model nobody priced", refusing, "mystery-model-9", true},
		{"a catalog model, dated", refusing, "gpt-4o-mini-2024-07-18", false},
		{"the organization's own model, as a provider names it", refusing, "house-model-2025-01-01", false},
		{"no model named", refusing, "", false},
		{"the same unknown model where the organization charges it", charging, "mystery-model-9", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, _ := e.Admit(t, tc.w.Key)
			resp := answerRequestBody(t, e, bodySpec{requestID: id, path: "/v1/chat/completions", body: body(tc.model)})
			if !tc.refused {
				if resp.GetRequestBody() == nil {
					t.Fatalf("not let through: %v", resp)
				}
				if e.CP.Receipt(id) != nil {
					t.Fatal("settled before any response")
				}
				return
			}
			ir := resp.GetImmediateResponse()
			if ir == nil || ir.GetStatus().GetCode() != 403 {
				t.Fatalf("want a 403 immediate response, got %v", resp)
			}
			headers := map[string]string{}
			for _, h := range ir.GetHeaders().GetSetHeaders() {
				headers[h.GetHeader().GetKey()] = string(h.GetHeader().GetRawValue())
			}
			if headers["x-service-error-code"] != "service_gateway_model_not_priced" || headers["content-type"] != "application/json" {
				t.Fatalf("headers %v", headers)
			}
			var b struct {
				Error struct {
					Code    string            `json:"code"`
					Details map[string]string `json:"details"`
				} `json:"error"`
			}
			if err := json.Unmarshal(ir.GetBody(), &b); err != nil || b.Error.Code != "service_gateway_model_not_priced" ||
				b.Error.Details["model"] != tc.model {
				t.Fatalf("body %s (%v)", ir.GetBody(), err)
			}
			enforcertest.WaitFor(t, "the refused request settled", func() bool { return e.CP.Receipt(id) != nil })
			r := e.CP.Receipt(id)
			if r.Cost != 0 || !r.Item.GetComplete() || r.Item.GetUpstreamStatus() != 403 || r.Item.GetModel() != tc.model {
				t.Fatalf("receipt %+v of %v", r, r.Item)
			}
		})
	}
	if n := e.Metric("tollgate_enforcer_extproc_request_bodies_total", "result", "model_not_priced"); n != 1 {
		t.Fatalf("model_not_priced counted %v times", n)
	}
}

// The model a request's path names is the one checked, as the gateway checks it: Gemini,
// Vertex AI and Amazon Bedrock run it, whatever model the body names, and a body that is
// no JSON object (Google's binary protobuf) still has it checked. Here the organization
// refuses models nobody priced: a path naming one is refused whatever the body says, and
// a path naming a priced one is let through whatever the body says.
func TestExtProcChecksThePathModel(t *testing.T) {
	e := enforcertest.New(t, enforcertest.Options{})
	w := e.NewMember(enforcertest.DayLimit(1*enforcertest.USD, true))
	e.CP.RefuseUnpriced(w.ID, true)
	for _, tc := range []struct {
		name, path, body string
		refused          string // the model refused, "" when let through
	}{
		{"Gemini's unpriced path model over a priced body model", "/v1beta/models/mystery-model-9:generateContent",
			`{"model":"models/gemini-2.5-flash-lite","contents":[{"parts":[{"text":"hi"}]}]}`, "mystery-model-9"},
		{"Bedrock's unpriced path model over a priced body model", "/model/mystery.model-v1%3A0/converse",
			`{"model":"amazon.nova-micro-v1:0","messages":[{"role":"user","content":[{"text":"hi"}]}]}`, "mystery.model-v1:0"},
		{"a protobuf body to an unpriced path model", "/v1beta/models/mystery-model-9:generateContent?alt=proto",
			"\x12\x0b\x0a\x09\x12\x07\x0a\x05hello", "mystery-model-9"},
		{"a priced path model over an unpriced body model", "/v1beta/models/gemini-2.5-pro:generateContent",
			`{"model":"mystery-model-9","contents":[{"parts":[{"text":"hi"}]}]}`, ""},
		{"a protobuf body to a priced path model", "/v1beta/models/gemini-2.5-pro:generateContent?alt=proto",
			"\x12\x0b\x0a\x09\x12\x07\x0a\x05hello", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, _ := e.Admit(t, w.Key)
			resp := answerRequestBody(t, e, bodySpec{requestID: id, path: tc.path, body: tc.body})
			if tc.refused == "" {
				if resp.GetRequestBody() == nil {
					t.Fatalf("not let through: %v", resp)
				}
				return
			}
			if ir := resp.GetImmediateResponse(); ir == nil || ir.GetStatus().GetCode() != 403 {
				t.Fatalf("want a 403 immediate response, got %v", resp)
			}
			enforcertest.WaitFor(t, "the refused request settled", func() bool { return e.CP.Receipt(id) != nil })
			if got := e.CP.Receipt(id).Item.GetModel(); got != tc.refused {
				t.Fatalf("refused as %q, want the path's %q", got, tc.refused)
			}
		})
	}
	// The protobuf body let through was checked by its path's model alone: nothing was
	// estimated from it.
	if e.Metric("tollgate_enforcer_extproc_request_bodies_total", "result", "not_json") != 1 ||
		e.Metric("tollgate_enforcer_extproc_request_bodies_total", "result", "model_not_priced") != 3 {
		t.Fatal("request bodies not counted")
	}
}

// A request whose cost the provider bills later is refused on its body with 403
// service_gateway_billing_deferred and settled at a known 0; with
// TOLLGATE_DEFERRED_BILLING=allow it goes on; with TOLLGATE_DEFERRED_BILLING_ALLOW, those
// of the endpoints it lists go on and the others are refused.
func TestExtProcRefusesDeferredBilling(t *testing.T) {
	for _, mode := range []string{"refuse", "allow", "interactions,context_caches"} {
		e, w := deferredBillingEnv(t, mode)
		refused := 0.0
		for _, tc := range []struct{ path, body, endpoint string }{
			{"/v1/batches", `{"input_file_id":"file-1","endpoint":"/v1/chat/completions","completion_window":"24h"}`, "batches"},
			{"/v1/responses", `{"model":"gpt-5","background":true,"input":"write a novel"}`, "background_responses"},
			{"/v1beta/interactions", `{"model":"gemini-3-pro-preview","input":"write a novel","background":true}`, "interactions"},
			{"/v1beta/cachedContents", `{"model":"models/gemini-3-pro-preview","contents":[{"parts":[{"text":"a long book"}]}],"ttl":"86400s"}`, "context_caches"},
			{"/v1/responses", `{"model":"gpt-5","input":"x","tools":[{"type":"code_interpreter","container":"cntr_made_apart"}]}`, "containers"},
		} {
			id, _ := e.Admit(t, w.Key)
			resp := answerRequestBody(t, e, bodySpec{requestID: id, path: tc.path, body: tc.body})
			if mode == "allow" || strings.Contains(mode, tc.endpoint) {
				if resp.GetRequestBody() == nil || e.CP.Receipt(id) != nil {
					t.Fatalf("%s allowed: answered %v", tc.path, resp)
				}
				continue
			}
			refusedAsBilledLater(t, e, id, tc.path, tc.endpoint, resp)
			refused++
		}
		want := map[string]float64{"refuse": 5, "allow": 0}[mode]
		if mode != "refuse" && mode != "allow" {
			want = 3 // the batch, the background response and the container made apart
		}
		if n := e.Metric("tollgate_enforcer_extproc_request_bodies_total", "result", "billing_deferred"); n != want || refused != want {
			t.Fatalf("%s: billing_deferred counted %v times, %v refused, want %v", mode, n, refused, want)
		}
	}
}

// A WebSocket upgrade (the Realtime API) is relayed past ext_proc once upgraded, its
// usage never seen: it is refused on its headers as billed out of sight (403
// service_gateway_billing_deferred, endpoint realtime_sessions) and settled at a known 0;
// with TOLLGATE_DEFERRED_BILLING=allow it goes on.
func TestExtProcRefusesWebSockets(t *testing.T) {
	for _, allow := range []bool{false, true} {
		e, w := deferredBillingEnv(t, map[bool]string{false: "refuse", true: "allow"}[allow])
		id, _ := e.Admit(t, w.Key)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := e.ExtProc.Process(metadata.AppendToOutgoingContext(ctx, extproc.RoleMetadata, extproc.RoleRequest))
		if err != nil {
			t.Fatal(err)
		}
		hm := enforcertest.HeaderMap(":method", "GET", ":path", "/v1/realtime?model=gpt-realtime", ":authority", "llm.example.test",
			"connection", "Upgrade", "upgrade", "websocket", "x-service-request-id", id)
		if err := st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
			RequestHeaders: &extprocv3.HttpHeaders{Headers: hm}}}); err != nil {
			t.Fatal(err)
		}
		resp, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if allow {
			if resp.GetRequestHeaders() == nil || e.CP.Receipt(id) != nil {
				t.Fatalf("allowed: answered %v", resp)
			}
			continue
		}
		ir := resp.GetImmediateResponse()
		if ir == nil || ir.GetStatus().GetCode() != 403 || !strings.Contains(string(ir.GetBody()), `"endpoint":"realtime_sessions"`) {
			t.Fatalf("want a 403 naming realtime_sessions, got %v", resp)
		}
		enforcertest.WaitFor(t, "the refused request settled", func() bool { return e.CP.Receipt(id) != nil })
		if r := e.CP.Receipt(id); r.Cost != 0 || !r.Item.GetComplete() || r.Item.GetUpstreamStatus() != 403 {
			t.Fatalf("receipt %+v of %v", r, r.Item)
		}
	}
}

// A POST billed later that carries no body (a paused fine-tuning job resumed, a
// Fireworks deployment undeleted, an Anthropic deployment run) ends the request with its
// headers: no request-body phase follows, where such requests are refused. It is refused
// on its headers (403 service_gateway_billing_deferred naming its endpoint) and settled
// at a known 0; allowed, it goes on. Before, it went upstream past the refusal.
func TestExtProcRefusesABodylessRequestBilledLater(t *testing.T) {
	for _, c := range []struct{ path, endpoint string }{
		{"/v1/fine_tuning/jobs/ftjob_1/resume", "fine_tuning"},
		{"/v1/accounts/acct-1/deployments/dep-1:undelete", "dedicated_deployments"},
	} {
		for _, allow := range []bool{false, true} {
			e, w := deferredBillingEnv(t, map[bool]string{false: "refuse", true: c.endpoint}[allow])
			id, _ := e.Admit(t, w.Key)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			st, err := e.ExtProc.Process(metadata.AppendToOutgoingContext(ctx, extproc.RoleMetadata, extproc.RoleRequest))
			if err != nil {
				t.Fatal(err)
			}
			hm := enforcertest.HeaderMap(":method", "POST", ":path", c.path, ":authority", "llm.example.test", "x-service-request-id", id)
			if err := st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
				RequestHeaders: &extprocv3.HttpHeaders{Headers: hm, EndOfStream: true}}}); err != nil {
				t.Fatal(err)
			}
			resp, err := st.Recv()
			if err != nil {
				t.Fatal(err)
			}
			if allow {
				if resp.GetRequestHeaders() == nil || e.CP.Receipt(id) != nil {
					t.Fatalf("%s allowed: answered %v", c.path, resp)
				}
				continue
			}
			refusedAsBilledLater(t, e, id, c.path, c.endpoint, resp)
		}
	}
}

// deferredBillingEnv is an enforcer whose deferred billing is refused (mode "refuse",
// the default), allowed (TOLLGATE_DEFERRED_BILLING=allow) or refused but for the
// endpoints mode lists (TOLLGATE_DEFERRED_BILLING_ALLOW), and a member with a 1 USD day
// limit.
func deferredBillingEnv(t *testing.T, mode string) (*enforcertest.Env, enforcertest.Member) {
	t.Helper()
	e := enforcertest.New(t, enforcertest.Options{Config: func(c *app.Config) {
		switch mode {
		case "allow":
			c.DeferredBilling = "allow"
		case "refuse":
		default:
			c.DeferredBillingAllow = mode
		}
	}})
	return e, e.NewMember(enforcertest.DayLimit(1*enforcertest.USD, true))
}

// A request with trailers (any HTTP/2 client may send them) ends its buffered body with
// end_of_stream false. Where the body is known to be BUFFERED (deploy/envoy's request
// filter, whose role says it, or a filter whose protocol_config says it) that first
// message is the whole body all the same: a batch is refused and a chat stream asked for
// its usage, as without trailers. Read by end_of_stream alone, both went upstream unread.
// Where the mode is not known, a body that does not end the stream is not taken whole
// (a streamed one's first chunk is not).
func TestExtProcBodyBeforeTrailersIsReadWhole(t *testing.T) {
	e := enforcertest.New(t, enforcertest.Options{})
	w := e.NewMember(enforcertest.DayLimit(1*enforcertest.USD, true))
	const batch = `{"input_file_id":"file-1","endpoint":"/v1/chat/completions","completion_window":"24h"}`
	for _, c := range []struct {
		name string
		spec bodySpec
	}{
		{"the request filter's stream", bodySpec{trailers: true}},
		{"one filter, BUFFERED by its protocol_config", bodySpec{trailers: true, singleFilter: true, protocolBuffered: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			spec := c.spec
			spec.requestID, _ = e.Admit(t, w.Key)
			spec.path, spec.body = "/v1/batches", batch
			if resp := answerRequestBody(t, e, spec); resp.GetImmediateResponse() == nil {
				t.Fatalf("a batch with trailers went upstream: answered %v", resp)
			}
			spec.requestID, _ = e.Admit(t, w.Key)
			spec.path, spec.body = "/v1/chat/completions", chatStreamBody
			resp := answerRequestBody(t, e, spec)
			if m := resp.GetRequestBody().GetResponse().GetBodyMutation(); m == nil || !strings.Contains(string(m.GetBody()), `"include_usage":true`) {
				t.Fatalf("a chat stream with trailers was not asked for its usage: answered %v", resp)
			}
		})
	}
	t.Run("one filter, its body mode not said", func(t *testing.T) {
		before := e.Metric("tollgate_enforcer_extproc_request_bodies_total", "result", "not_buffered")
		id, _ := e.Admit(t, w.Key)
		resp := answerRequestBody(t, e, bodySpec{requestID: id, path: "/v1/chat/completions", body: chatStreamBody, trailers: true, singleFilter: true})
		if resp.GetRequestBody().GetResponse() != nil {
			t.Fatalf("a body whose mode is unknown and whose stream goes on was taken whole: %v", resp)
		}
		if n := e.Metric("tollgate_enforcer_extproc_request_bodies_total", "result", "not_buffered"); n != before+1 {
			t.Fatalf("not_buffered counted %v, want %v", n, before+1)
		}
	})
}

// With one filter for the request and the response (Envoy Gateway), a request the body
// phase refuses is settled once: the stream settles the refusal, and Envoy's closing it
// after the local reply does not settle it again, as an incomplete stream.
func TestExtProcSingleFilterRefusalSettlesOnce(t *testing.T) {
	e := enforcertest.New(t, enforcertest.Options{})
	w := e.NewMember(enforcertest.DayLimit(1*enforcertest.USD, true))
	for _, c := range []struct{ name, path, body, coding string }{
		{"billing deferred", "/v1/batches", `{"input_file_id":"file-1","endpoint":"/v1/chat/completions","completion_window":"24h"}`, ""},
		{"undecodable body", "/v1/chat/completions", "not gzip", "gzip"},
	} {
		t.Run(c.name, func(t *testing.T) {
			id, _ := e.Admit(t, w.Key)
			before := e.CP.SettleItems.Load()
			incomplete := e.Metric("tollgate_enforcer_extproc_streams_total", "result", "incomplete")
			resp := answerRequestBody(t, e, bodySpec{requestID: id, path: c.path, body: c.body, contentEncoding: c.coding, singleFilter: true,
				protocolBuffered: true})
			if resp.GetImmediateResponse() == nil {
				t.Fatalf("not refused: %v", resp)
			}
			enforcertest.WaitFor(t, "receipt", func() bool { return e.CP.Receipt(id) != nil })
			// The stream's end is handled after its close: give a second settlement time
			// to show, as the old code sent one.
			time.Sleep(300 * time.Millisecond)
			if n := e.CP.SettleItems.Load() - before; n != 1 {
				t.Fatalf("settled %d times, want once", n)
			}
			if n := e.Metric("tollgate_enforcer_extproc_streams_total", "result", "incomplete"); n != incomplete {
				t.Fatalf("a refused request counted as an incomplete stream (%v, was %v)", n, incomplete)
			}
		})
	}
}

// Compressed bodies are decoded a few at a time: a member's few kilobytes of gzip
// decode to tens of megabytes each, and nothing bounded how many ext_proc decoded at
// once (sixteen grew the heap by about 1 GiB). Each decode holds a share of one budget
// (requestbody.DecodeBudget; here two of this body) until its answer is sent; a body
// that cannot have its share within requestbody.DecodeWait is refused 503
// service_gateway_busy, retryable, and settled at 0 (passed on unread it could be
// neither estimated nor refused). The decodes are counted, not timed: the first two hold
// their shares until every other body has been answered.
func TestExtProcDecodesFewCompressedBodiesAtOnce(t *testing.T) {
	var active, most atomic.Int64
	entered := make(chan struct{}, 16)
	hold := make(chan struct{})
	e := enforcertest.New(t, enforcertest.Options{})
	big := strings.Repeat("abcdefgh ijklmnop", 1<<16) // about 1 MiB decoded
	plain := []byte(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"` + big + `"}]}`)
	body := string(gzipped(plain))
	// A budget of two such bodies (each holds what its gzip trailer says it decodes
	// to): the process's 64 MiB holds sixty of them.
	dec := e.Enforcer.Decoding
	*dec = *requestbody.NewDecoding(int64(2*len(plain)+len(plain)/2), requestbody.DecodeWait, dec.Active)
	dec.Held = func() {
		n := active.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		entered <- struct{}{}
		<-hold
		active.Add(-1)
	}
	w := e.NewMember(enforcertest.DayLimit(1*enforcertest.USD, true))
	const n = 16
	ids := make([]string, n)
	for i := range ids {
		ids[i], _ = e.Admit(t, w.Key)
	}
	answers := make(chan *extprocv3.ProcessingResponse, n)
	for i := range n {
		go func() {
			answers <- answerBodyOffTheTest(e, ids[i], "/v1/chat/completions", body, "gzip")
		}()
	}
	<-entered
	<-entered
	var busy []*extprocv3.ProcessingResponse
	for range n - 2 { // every other body is answered while the two decodes hold the budget
		busy = append(busy, <-answers)
	}
	if got := e.Metric("tollgate_enforcer_request_decodes_active"); got != 2 {
		t.Errorf("decodes active while two hold the budget: %v", got)
	}
	close(hold)
	var decoded int
	for range 2 {
		if cr := (<-answers).GetRequestBody().GetResponse(); cr.GetBodyMutation() != nil {
			decoded++
		}
	}
	if m := most.Load(); m != 2 || decoded != 2 {
		t.Fatalf("%d decodes at once (want 2: the budget holds two of these bodies), %d bodies decoded", m, decoded)
	}
	for _, resp := range busy {
		ir := resp.GetImmediateResponse()
		headers := map[string]string{}
		for _, h := range ir.GetHeaders().GetSetHeaders() {
			headers[h.GetHeader().GetKey()] = string(h.GetHeader().GetRawValue())
		}
		if ir.GetStatus().GetCode() != 503 || headers["x-service-error-code"] != "service_gateway_busy" || headers["retry-after"] != "1" ||
			!strings.Contains(string(ir.GetBody()), `"api_error"`) {
			t.Fatalf("a body without its share answered %v", resp)
		}
	}
	// The refused are settled by their streams (the decoded ones by the response's).
	enforcertest.WaitFor(t, "refusals settled", func() bool {
		settled := 0
		for _, id := range ids {
			if e.CP.Receipt(id) != nil {
				settled++
			}
		}
		return settled == n-2
	})
	refused := 0
	for _, id := range ids {
		if rc := e.CP.Receipt(id); rc != nil && rc.Item.GetUpstreamStatus() == 503 {
			refused++
			if rc.Cost != 0 || !rc.Item.GetComplete() {
				t.Fatalf("a refused body settled %v at %d", rc.Item, rc.Cost)
			}
		}
	}
	if refused != n-2 || e.Metric("tollgate_enforcer_extproc_request_bodies_total", "result", "decode_busy") != n-2 ||
		e.Metric("tollgate_enforcer_extproc_request_bodies_total", "result", "decoded") != 2 {
		t.Fatalf("refused %d, counted decode_busy %v decoded %v", refused,
			e.Metric("tollgate_enforcer_extproc_request_bodies_total", "result", "decode_busy"),
			e.Metric("tollgate_enforcer_extproc_request_bodies_total", "result", "decoded"))
	}
	// Every share was given back with its answer.
	enforcertest.WaitFor(t, "shares given back", func() bool { return e.Metric("tollgate_enforcer_request_decodes_active") == 0 })
	dec.Held = nil
	id, _ := e.Admit(t, w.Key)
	if cr := sendRequestBody(t, e, bodySpec{requestID: id, path: "/v1/chat/completions", body: body, contentEncoding: "gzip"}).GetResponse(); cr.GetBodyMutation() == nil {
		t.Fatal("a body after the others was not decoded")
	}
}

// answerBodyOffTheTest plays the request-body filter's stream (headers, the whole body)
// and returns the answer to the body, nil when the stream failed; it fails nothing, for
// use off the test's goroutine.
func answerBodyOffTheTest(e *enforcertest.Env, id, path, body, coding string) *extprocv3.ProcessingResponse {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := e.ExtProc.Process(metadata.AppendToOutgoingContext(ctx, extproc.RoleMetadata, extproc.RoleRequest))
	if err != nil {
		return nil
	}
	hm := enforcertest.HeaderMap(":method", "POST", ":path", path, ":authority", "llm.example.test", "content-type", "application/json",
		"content-length", strconv.Itoa(len(body)), "x-service-request-id", id, "content-encoding", coding)
	for _, req := range []*extprocv3.ProcessingRequest{
		{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: hm}}},
		{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: []byte(body), EndOfStream: true}}},
	} {
		if err := st.Send(req); err != nil {
			return nil
		}
	}
	if _, err := st.Recv(); err != nil {
		return nil
	}
	resp, _ := st.Recv()
	_ = st.CloseSend()
	return resp
}

// An upstream that refuses the stream_options the request filter added (its answer, seen
// by the response filter, a 400 naming the field) has the next streams of that model
// sent as their clients wrote them. Envoy cannot send the refused request again: its
// client got the refusal. A refusal of a body the client wrote itself, or a 400 for
// another reason, teaches nothing.
func TestExtProcLearnsAnUpstreamRefusesStreamOptions(t *testing.T) {
	e := enforcertest.New(t, enforcertest.Options{})
	w := e.NewMember(enforcertest.DayLimit(1*enforcertest.USD, true))
	const refusal = `{"error":{"message":"property 'stream_options' is unsupported, did you mean 'stream'?","type":"invalid_request_error"}}`
	bodyOf := func(model string) string { return strings.Replace(chatStreamBody, "gpt-4o-mini", model, 1) }
	// call sends a stream's body through the request filter, then its answer through the
	// response filter, and reports whether the body was rewritten to ask for its usage.
	call := func(body, status, answer string) (asked bool) {
		t.Helper()
		id, _ := e.Admit(t, w.Key)
		asked = sendRequestBody(t, e, bodySpec{requestID: id, path: "/v1/chat/completions", body: body}).GetResponse() != nil
		runStream(t, e, streamSpec{requestID: id, status: status, contentType: "application/json", chunks: [][]byte{[]byte(answer)}})
		return asked
	}
	refused := func() float64 {
		return e.Metric("tollgate_enforcer_extproc_request_bodies_total", "result", "include_usage_refused")
	}

	if !call(bodyOf("llama-3"), "400", refusal) {
		t.Fatal("the first stream was not asked for its usage")
	}
	if call(bodyOf("llama-3"), "200", "{}") || refused() != 1 {
		t.Fatalf("the next stream of the model was asked again (include_usage_refused %v)", refused())
	}
	if !call(bodyOf("llama-4"), "200", "{}") {
		t.Error("another model's stream was not asked")
	}

	// A refusal by the upstream of another route of the same host (Databricks', by its
	// path) leaves the model's streams on this route asked.
	id, _ := e.Admit(t, w.Key)
	sendRequestBody(t, e, bodySpec{requestID: id, path: "/serving-endpoints/chat/completions", body: bodyOf("gpt-5")})
	runStream(t, e, streamSpec{requestID: id, path: "/serving-endpoints/chat/completions", status: "400", contentType: "application/json", chunks: [][]byte{[]byte(refusal)}})
	if !call(bodyOf("gpt-5"), "200", "{}") {
		t.Error("a refusal by another route's upstream left this route's streams of the model unasked")
	}

	// The route's upstream_host given to the request-body filter alone (as
	// deploy/envoy/envoy.yaml said before 2026-12-06): the response filter, keyed by the
	// :authority and path, learns the refusal under the key the request filter looks up.
	viaHost := func(status, answer string) (asked bool) {
		t.Helper()
		id, _ := e.Admit(t, w.Key)
		asked = sendRequestBody(t, e, bodySpec{requestID: id, path: "/v1/chat/completions", body: bodyOf("mixtral"),
			attributes: routeHost("api.groq.com")}).GetResponse() != nil
		runStream(t, e, streamSpec{requestID: id, status: status, contentType: "application/json", chunks: [][]byte{[]byte(answer)}})
		return asked
	}
	if !viaHost("400", refusal) {
		t.Fatal("upstream_host: the first stream was not asked")
	}
	if viaHost("200", "{}") {
		t.Error("upstream_host on the request-body filter alone: the refusal was learned under another key, and the next stream was asked again")
	}

	// A 400 for another reason.
	call(bodyOf("m-x"), "400", `{"error":{"message":"The model m-x does not exist"}}`)
	if !call(bodyOf("m-x"), "200", "{}") {
		t.Error("a 400 for another reason left the model's streams unasked")
	}
	// The client's own stream_options refused: the upstream was not asked by the enforcer.
	own := `{"stream_options":{"include_usage":true},` + bodyOf("m-y")[1:]
	if call(own, "400", refusal) {
		t.Fatal("a body that asked itself was rewritten")
	}
	if !call(bodyOf("m-y"), "200", "{}") {
		t.Error("a refusal of the client's own body left the model's streams unasked")
	}
	// A refusal that may quote the client (OpenAI quotes an invalid value; the client's
	// words are in its body, or in its query, or escaped in JSON): asked, and refused, but
	// not learned, so that no member's streams of that model go unasked because of it.
	const quoted = `{"error":{"message":"Invalid value: 'stream_options'. Supported values are: 'system', 'assistant', 'user'.","param":"messages[0].role"}}`
	for _, c := range []struct{ name, body, query string }{
		{"a role", strings.Replace(bodyOf("o3"), `"role":"user"`, `"role":"stream_options"`, 1), ""},
		{"escaped letters", strings.Replace(bodyOf("o3"), `"role":"user"`, `"role":"STREAM_OPTIONS"`, 1), ""},
		{"a query", bodyOf("o3"), "?x=%73tream_options"},
	} {
		id, _ := e.Admit(t, w.Key)
		if sendRequestBody(t, e, bodySpec{requestID: id, path: "/v1/chat/completions" + c.query, body: c.body}).GetResponse() == nil {
			t.Fatalf("%s: the stream was not asked", c.name)
		}
		runStream(t, e, streamSpec{requestID: id, status: "400", contentType: "application/json", chunks: [][]byte{[]byte(quoted)}})
		if !call(bodyOf("o3"), "200", "{}") {
			t.Fatalf("%s: a refusal that may quote the client left o3's streams unasked", c.name)
		}
	}
	// A value the upstream quotes as the client wrote it, with a dotted capital I (U+0130,
	// which lowers to an ASCII i by Unicode's rules): not the word for MayQuote, so not
	// taken for it in the answer either.
	dotted := strings.Replace(bodyOf("o3"), `"role":"user"`, `"role":"stream_opt\u0130ons"`, 1)
	id, _ = e.Admit(t, w.Key)
	if sendRequestBody(t, e, bodySpec{requestID: id, path: "/v1/chat/completions", body: dotted}).GetResponse() == nil {
		t.Fatal("a dotted I: the stream was not asked")
	}
	runStream(t, e, streamSpec{requestID: id, status: "400", contentType: "application/json", chunks: [][]byte{[]byte(
		"{\"error\":{\"message\":\"Invalid value: 'stream_opt\u0130ons'. Supported values are: 'system', 'assistant', 'user'.\",\"param\":\"messages[0].role\"}}")}})
	if !call(bodyOf("o3"), "200", "{}") {
		t.Error("a dotted I: a refusal quoting the client left o3's streams unasked")
	}
	// An error about a field the client left out, quoting the whole body as FastAPI's
	// default 422 does (the stream_options the enforcer added with it): any member could
	// have every member's streams of that model left unasked.
	noMessages := `{"model":"qwen","stream":true}`
	id, _ = e.Admit(t, w.Key)
	if sendRequestBody(t, e, bodySpec{requestID: id, path: "/v1/chat/completions", body: noMessages}).GetResponse() == nil {
		t.Fatal("a stream without messages was not asked")
	}
	runStream(t, e, streamSpec{requestID: id, status: "422", contentType: "application/json", chunks: [][]byte{[]byte(
		`{"detail":[{"type":"missing","loc":["body","messages"],"msg":"Field required","input":{"model":"qwen","stream":true,"stream_options":{"include_usage":true}}}]}`)}})
	if !call(bodyOf("qwen"), "200", "{}") {
		t.Error("an error quoting the request it was about left qwen's streams unasked")
	}
	if refused() != 2 {
		t.Errorf("include_usage_refused counted %v, want 2", refused())
	}
}

// A route's deployments attribute (as a gateway route's deployments) names the model of
// each Azure OpenAI deployment: a request to a declared one is checked at that model,
// whatever its body names; an undeclared deployment at its body's, as before.
func TestExtProcReadsTheRoutesAzureDeployments(t *testing.T) {
	e := enforcertest.New(t, enforcertest.Options{})
	w := e.NewMember(enforcertest.DayLimit(1*enforcertest.USD, true))
	e.CP.RefuseUnpriced(w.ID, true)
	deployments, err := structpb.NewValue(map[string]any{"mystery": "mystery-model-9", "mini": "gpt-4o-mini"})
	if err != nil {
		t.Fatal(err)
	}
	attrs := routeMetadata("deployments", deployments)
	body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`
	for _, tc := range []struct{ deployment, refused string }{{"mystery", "mystery-model-9"}, {"mini", ""}, {"other", ""}} {
		id, _ := e.Admit(t, w.Key)
		resp := answerRequestBody(t, e, bodySpec{requestID: id, path: "/openai/deployments/" + tc.deployment + "/chat/completions?api-version=2024-10-21",
			body: body, attributes: attrs})
		if tc.refused == "" {
			if resp.GetRequestBody() == nil {
				t.Fatalf("%s: not let through: %v", tc.deployment, resp)
			}
			continue
		}
		if ir := resp.GetImmediateResponse(); ir == nil || ir.GetStatus().GetCode() != 403 {
			t.Fatalf("%s: want a 403 immediate response, got %v", tc.deployment, resp)
		}
		enforcertest.WaitFor(t, "the refused request settled", func() bool { return e.CP.Receipt(id) != nil })
		if got := e.CP.Receipt(id).Item.GetModel(); got != tc.refused {
			t.Fatalf("refused as %q, want the deployment's %q", got, tc.refused)
		}
	}
}

// refusedAsBilledLater requires resp to be the 403 naming the billed-later endpoint, and
// the request id it refused to be settled complete at a known 0.
func refusedAsBilledLater(t *testing.T, e *enforcertest.Env, id, path, endpoint string, resp *extprocv3.ProcessingResponse) {
	t.Helper()
	ir := resp.GetImmediateResponse()
	if ir == nil || ir.GetStatus().GetCode() != 403 || !strings.Contains(string(ir.GetBody()), `"endpoint":"`+endpoint+`"`) {
		t.Fatalf("%s: want a 403 naming %s, got %v", path, endpoint, resp)
	}
	enforcertest.WaitFor(t, "the refused request settled", func() bool { return e.CP.Receipt(id) != nil })
	if r := e.CP.Receipt(id); r.Cost != 0 || !r.Item.GetComplete() || r.Item.GetUpstreamStatus() != 403 ||
		r.Item.UpstreamCostMicroUsd == nil || *r.Item.UpstreamCostMicroUsd != 0 {
		t.Fatalf("%s: receipt %+v of %v", path, r, r.Item)
	}
}

// A WebSocket session TOLLGATE_DEFERRED_BILLING_ALLOW lets through (realtime_sessions),
// as the response filter follows it behind Envoy: the handshake's headers, the
// provider's 101, then the provider's messages as the response body (Envoy hands an
// upgraded stream's bytes to its filters as a body), then its end. The messages are not
// read: the session is settled at 0, incomplete and estimated, at the model its URL
// names, status 101. Before, it was settled as any GET: a known 0 from the provider,
// complete, as if the session had cost nothing and said so.
func TestExtProcSettlesAnAllowedWebSocketUnread(t *testing.T) {
	e, w := deferredBillingEnv(t, "realtime_sessions")
	e.CP.SetPrice("gpt-realtime", 4, 16)
	id, _ := e.Admit(t, w.Key)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := e.ExtProc.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	send := func(req *extprocv3.ProcessingRequest) {
		t.Helper()
		req.ObservabilityMode = true // "send and go", as deploy/envoy's response filter
		if err := st.Send(req); err != nil {
			t.Fatal(err)
		}
	}
	send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
		Headers: enforcertest.HeaderMap(":method", "GET", ":path", "/v1/realtime?model=gpt-realtime", ":authority", "llm.example.test",
			"connection", "Upgrade", "upgrade", "websocket", "x-service-request-id", id)}}})
	send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
		Headers: enforcertest.HeaderMap(":status", "101", "connection", "Upgrade", "upgrade", "websocket")}}})
	// A server frame (FIN, text, 127: a 64-bit length) carrying an audio delta.
	event := `{"type":"response.output_audio.delta","response_id":"resp_1","delta":"` + strings.Repeat("AAAA", 16000) + `"}`
	frame := append([]byte{0x81, 127, 0, 0, 0, 0, 0, 0, byte(len(event) >> 8), byte(len(event))}, event...)
	for range 3 {
		send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: frame}}})
	}
	send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{EndOfStream: true}}})
	_ = st.CloseSend()
	enforcertest.WaitFor(t, "the session settled", func() bool { return e.CP.Receipt(id) != nil })
	r := e.CP.Receipt(id)
	if it := r.Item; r.Cost != 0 || it.GetComplete() || !it.GetUsageEstimated() || it.UpstreamCostMicroUsd != nil ||
		it.GetUpstreamStatus() != 101 || it.GetModel() != "gpt-realtime" || it.GetOutputTokens() != 0 || it.GetInputTokens() != 0 {
		t.Fatalf("the session settled at %d (%s): %v; want 0, incomplete, estimated, gpt-realtime, 101", r.Cost, r.CostSource, it)
	}
}
