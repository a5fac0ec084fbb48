package extproc_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/tollgate-dev/tollgate/enforcer/app"
	"github.com/tollgate-dev/tollgate/enforcer/internal/enforcertest"
	"github.com/tollgate-dev/tollgate/internal/testio"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

const openAISSE = `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini-2024-07-18","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini-2024-07-18","choices":[{"index":0,"delta":{"content":"Hello"},"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini-2024-07-18","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null}

data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini-2024-07-18","choices":[],"usage":{"prompt_tokens":1200,"completion_tokens":300,"total_tokens":1500,"prompt_tokens_details":{"cached_tokens":200}}}

data: [DONE]

`

const anthropicSSE = `event: message_start
data: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-3-5-haiku-20241022","content":[],"usage":{"input_tokens":400,"cache_creation_input_tokens":100,"cache_read_input_tokens":50,"output_tokens":1}}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":70}}

event: message_stop
data: {"type":"message_stop"}

`

const responsesSSE = `event: response.created
data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_1","object":"response","model":"gpt-4o-mini-2024-07-18","status":"in_progress","usage":null}}

event: response.output_text.delta
data: {"type":"response.output_text.delta","sequence_number":1,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"Hello"}

event: response.completed
data: {"type":"response.completed","sequence_number":2,"response":{"id":"resp_1","object":"response","model":"gpt-4o-mini-2024-07-18","status":"completed","usage":{"input_tokens":1200,"input_tokens_details":{"cached_tokens":200},"output_tokens":300,"total_tokens":1500}}}

`

const openAIJSON = `{"id":"chatcmpl-2","object":"chat.completion","model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"Hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}`

type streamSpec struct {
	requestID   string
	path        string // "/v1/chat/completions" when empty
	method      string // "POST" when empty
	status      string // "200" when empty
	contentType string
	headers     []string // extra response headers, name/value pairs
	chunks      [][]byte
	// breakOff cuts the stream after the chunks instead of ending it.
	breakOff bool
	// bodyInHeaders: the response has no body (end_of_stream on the headers).
	bodyless bool
	// requestBody, when set, goes in the same stream after the request headers, whole
	// (BUFFERED): one filter for the request body and the response, as Envoy
	// Gateway's EnvoyExtensionPolicy of deploy/envoy-gateway/tollgate.yaml configures
	// it, where deploy/envoy/envoy.yaml has a filter of its own for the body.
	requestBody string
	// attributes go with the response headers, as Envoy sends a filter's
	// response_attributes (ProcessingRequest.attributes).
	attributes map[string]*structpb.Struct
}

// runStream plays one response through ext_proc the way Envoy does, checking that
// every message is answered at once with an unmodified "continue", but the request
// body's (spec.requestBody), which it returns.
func runStream(t *testing.T, e *enforcertest.Env, s streamSpec) (requestBody *extprocv3.BodyResponse) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := e.ExtProc.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	exchange := func(req *extprocv3.ProcessingRequest, check func(*extprocv3.ProcessingResponse) bool) {
		t.Helper()
		if err := st.Send(req); err != nil {
			t.Fatal(err)
		}
		resp, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if !check(resp) {
			t.Fatalf("unexpected answer %v", resp)
		}
	}
	path := s.path
	if path == "" {
		path = "/v1/chat/completions"
	}
	method := s.method
	if method == "" {
		method = "POST"
	}
	reqHeaders := []string{":method", method, ":path", path, ":authority", "llm.example.test", "content-type", "application/json"}
	if s.requestID != "" {
		reqHeaders = append(reqHeaders, "x-service-request-id", s.requestID)
	}
	if s.requestBody != "" {
		reqHeaders = append(reqHeaders, "content-length", strconv.Itoa(len(s.requestBody)))
	}
	exchange(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
		Headers: enforcertest.HeaderMap(reqHeaders...)}}}, func(r *extprocv3.ProcessingResponse) bool {
		return r.GetRequestHeaders() != nil && r.GetRequestHeaders().GetResponse() == nil
	})
	if s.requestBody != "" {
		exchange(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{
			Body: []byte(s.requestBody), EndOfStream: true}}}, func(r *extprocv3.ProcessingResponse) bool {
			requestBody = r.GetRequestBody()
			return requestBody != nil
		})
	}
	status := s.status
	if status == "" {
		status = "200"
	}
	respHeaders := append([]string{":status", status, "content-type", s.contentType}, s.headers...)
	exchange(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
		Headers: enforcertest.HeaderMap(respHeaders...), EndOfStream: s.bodyless}}, Attributes: s.attributes}, func(r *extprocv3.ProcessingResponse) bool {
		return r.GetResponseHeaders() != nil && r.GetResponseHeaders().GetResponse() == nil
	})
	for i, c := range s.chunks {
		last := i == len(s.chunks)-1 && !s.breakOff
		exchange(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{
			Body: c, EndOfStream: last}}}, func(r *extprocv3.ProcessingResponse) bool {
			// Nothing mutated, nothing held: the chunk goes on as it was.
			return r.GetResponseBody() != nil && r.GetResponseBody().GetResponse() == nil
		})
	}
	if s.breakOff {
		cancel() // the client went away: Envoy resets the stream
		return requestBody
	}
	_ = st.CloseSend()
	return requestBody
}

// gzipped compresses b as an upstream does.
func gzipped(b []byte) []byte {
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	zw.Write(b)
	zw.Close()
	return out.Bytes()
}

func TestExtProcSettlesStreams(t *testing.T) {
	for _, tc := range []struct {
		name       string
		spec       streamSpec
		complete   bool
		model      string
		in, out    int64
		cached     int64
		creation   int64
		costSource string
		cost       int64
		estimated  bool
	}{
		{name: "OpenAI SSE with include_usage", spec: streamSpec{contentType: "text/event-stream", chunks: testio.Chunks(openAISSE, 7)},
			complete: true, model: "gpt-4o-mini-2024-07-18", in: 1200, out: 300, cached: 200, costSource: "catalog_estimate", cost: 1200*2 + 300*8},
		{name: "Anthropic SSE", spec: streamSpec{contentType: "text/event-stream; charset=utf-8", chunks: testio.Chunks(anthropicSSE, 5)},
			complete: true, model: "claude-3-5-haiku-20241022", in: 550, out: 70, cached: 50, creation: 100, costSource: "catalog_estimate", cost: 550*2 + 70*8},
		{name: "OpenAI JSON, buffered", spec: streamSpec{contentType: "application/json", chunks: [][]byte{[]byte(openAIJSON)}},
			complete: true, model: "gpt-4o-mini", in: 10, out: 5, costSource: "catalog_estimate", cost: 10*2 + 5*8},
		{name: "gzipped twice, on two Content-Encoding lines", spec: streamSpec{contentType: "application/json",
			chunks: [][]byte{gzipped(gzipped([]byte(openAIJSON)))}, headers: []string{"content-encoding", "gzip", "content-encoding", "gzip"}},
			complete: true, model: "gpt-4o-mini", in: 10, out: 5, costSource: "catalog_estimate", cost: 10*2 + 5*8},
		{name: "upstream cost header wins", spec: streamSpec{contentType: "application/json", chunks: [][]byte{[]byte(openAIJSON)},
			headers: []string{"x-upstream-cost-micro-usd", "777"}},
			complete: true, model: "gpt-4o-mini", in: 10, out: 5, costSource: "upstream", cost: 777},
		{name: "broken off mid-stream is incomplete", spec: streamSpec{contentType: "text/event-stream", chunks: testio.Chunks(openAISSE, 7)[:3], breakOff: true},
			complete: false, model: "gpt-4o-mini-2024-07-18", costSource: "unknown"},
		// openai-go closes the response as soon as it reads "data: [DONE]", before the
		// body's end reaches Envoy, which then resets the stream: no end_of_stream
		// comes, yet nothing was cut. Before 2026-12-03 it was settled incomplete.
		{name: "the client left after [DONE]: complete", spec: streamSpec{contentType: "text/event-stream", chunks: testio.Chunks(openAISSE, 7), breakOff: true},
			complete: true, model: "gpt-4o-mini-2024-07-18", in: 1200, out: 300, cached: 200, costSource: "catalog_estimate", cost: 1200*2 + 300*8},
		{name: "broken off after the usage, before [DONE]: incomplete", spec: streamSpec{contentType: "text/event-stream",
			chunks: testio.Chunks(strings.TrimSuffix(openAISSE, "data: [DONE]\n\n"), 7), breakOff: true},
			complete: false, model: "gpt-4o-mini-2024-07-18", in: 1200, out: 300, cached: 200, costSource: "catalog_estimate", cost: 1200*2 + 300*8},
		// A client may leave as soon as it reads its stream's terminal event (an agent
		// breaking out of its SDK's loop aborts the request), before the body's end
		// reaches Envoy: Anthropic's message_stop after message_delta, the Responses API's
		// response.completed. Before 2026-12-03 it was settled incomplete.
		{name: "the client left after message_stop: complete", spec: streamSpec{contentType: "text/event-stream; charset=utf-8",
			chunks: testio.Chunks(anthropicSSE, 5), breakOff: true},
			complete: true, model: "claude-3-5-haiku-20241022", in: 550, out: 70, cached: 50, creation: 100, costSource: "catalog_estimate", cost: 550*2 + 70*8},
		{name: "broken off after message_delta, before message_stop: incomplete", spec: streamSpec{contentType: "text/event-stream; charset=utf-8",
			chunks: testio.Chunks(strings.Split(anthropicSSE, "event: message_stop")[0], 5), breakOff: true},
			complete: false, model: "claude-3-5-haiku-20241022", in: 550, out: 70, cached: 50, creation: 100, costSource: "catalog_estimate", cost: 550*2 + 70*8},
		{name: "the client left after response.completed: complete", spec: streamSpec{path: "/v1/responses", contentType: "text/event-stream",
			chunks: testio.Chunks(responsesSSE, 6), breakOff: true},
			complete: true, model: "gpt-4o-mini-2024-07-18", in: 1200, out: 300, cached: 200, costSource: "catalog_estimate", cost: 1200*2 + 300*8},
		{name: "stream without usage is incomplete", spec: streamSpec{contentType: "text/event-stream",
			chunks: testio.Chunks(strings.Split(openAISSE, "\n\ndata: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4o-mini-2024-07-18\",\"choices\":[],")[0]+"\n\ndata: [DONE]\n\n", 3)},
			complete: false, model: "gpt-4o-mini-2024-07-18", out: 2, estimated: true, costSource: "catalog_estimate", cost: 2 * 8},
		{name: "bodyless response is incomplete", spec: streamSpec{contentType: "application/json", bodyless: true},
			complete: false, costSource: "unknown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := enforcertest.New(t, enforcertest.Options{})
			for _, m := range []string{"gpt-4o-mini-2024-07-18", "gpt-4o-mini", "claude-3-5-haiku-20241022"} {
				e.CP.SetPrice(m, 2, 8)
			}
			w := e.NewMember(enforcertest.DayLimit(1*enforcertest.USD, true))
			reqID, _ := e.Admit(t, w.Key)
			tc.spec.requestID = reqID
			runStream(t, e, tc.spec)
			enforcertest.WaitFor(t, "receipt", func() bool { return e.CP.Receipt(reqID) != nil })
			rc := e.CP.Receipt(reqID)
			it := rc.Item
			if it.GetComplete() != tc.complete || it.GetModel() != tc.model || it.GetInputTokens() != tc.in || it.GetOutputTokens() != tc.out ||
				it.GetCachedInputTokens() != tc.cached || it.GetCacheCreationInputTokens() != tc.creation || it.GetUpstreamStatus() != 200 {
				t.Fatalf("settled %v", it)
			}
			if it.GetOrganizationId() != w.Org || it.GetMemberId() != w.ID || it.GetSnapshot() != nil {
				t.Fatalf("attribution %v (a durable start needs no snapshot)", it)
			}
			if rc.CostSource != tc.costSource || rc.Cost != tc.cost || it.GetUsageEstimated() != tc.estimated {
				t.Fatalf("cost %d %s, estimated %v", rc.Cost, rc.CostSource, it.GetUsageEstimated())
			}
			if e.CP.Pending(w.ID) != 0 || e.Enforcer.Tracker.Len() != 0 {
				t.Fatalf("pending %d tracked %d", e.CP.Pending(w.ID), e.Enforcer.Tracker.Len())
			}
		})
	}
}

func TestExtProcUntrackedStreamSettlesNothing(t *testing.T) {
	e := enforcertest.New(t, enforcertest.Options{})
	runStream(t, e, streamSpec{contentType: "application/json", chunks: [][]byte{[]byte(openAIJSON)}})
	enforcertest.WaitFor(t, "stream end", func() bool {
		return e.Metric("tollgate_enforcer_extproc_streams_total", "result", "untracked") == 1
	})
	if e.CP.SettleItems.Load() != 0 {
		t.Fatal("settled a request nobody admitted")
	}
}

func TestSettlementsReachTheNextCheck(t *testing.T) {
	// The loop of the end-to-end test, against the fake: admitted, spend
	// reported through ext_proc past the limit, then 429.
	e := enforcertest.New(t, enforcertest.Options{})
	e.CP.SetPrice("gpt-4o-mini", 2_000, 8_000) // micro-USD per token: 1 USD = 500 input tokens
	w := e.NewMember(enforcertest.DayLimit(1*enforcertest.USD, true))
	for i := 0; ; i++ {
		resp := e.Check(t, map[string]string{"x-api-key": w.Key})
		if resp.GetDeniedResponse() != nil {
			d := enforcertest.Denied(t, resp, 429)
			if hs := enforcertest.DeniedHeaders(d); hs["X-Service-Usage-State"] != "blocked" || hs["X-Service-Error-Code"] != "service_gateway_usage_limit_exceeded" {
				t.Fatalf("headers %v", hs)
			}
			// Each response costs 100*2000 + 5*8000 = 240,000 micro-USD: four leave
			// 960,000 (< 1 USD, admitted), the fifth overshoots (in-flight work may).
			if i != 5 {
				t.Fatalf("blocked after %d admissions, want 5", i)
			}
			break
		}
		if i > 50 {
			t.Fatal("never blocked")
		}
		reqID := enforcertest.OK(t, resp).GetHeaders()[0].GetHeader().GetValue()
		body := strings.Replace(openAIJSON, `"prompt_tokens":10`, `"prompt_tokens":100`, 1)
		runStream(t, e, streamSpec{requestID: reqID, contentType: "application/json", chunks: [][]byte{[]byte(body)}})
		enforcertest.WaitFor(t, "settled", func() bool { return e.CP.Receipt(reqID) != nil })
	}
	if used := e.CP.Spend(w.ID, window.Day); used < 1*enforcertest.USD {
		t.Fatalf("blocked at %d", used)
	}
}

func TestShutdownSettlesCutStreamsAsIncomplete(t *testing.T) {
	e := enforcertest.New(t, enforcertest.Options{Config: func(c *app.Config) { c.ShutdownTimeout = 300 * time.Millisecond }})
	e.CP.SetPrice("gpt-4o-mini-2024-07-18", 1, 1)
	w := e.NewMember(enforcertest.DayLimit(1*enforcertest.USD, true))
	reqID, _ := e.Admit(t, w.Key)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := e.ExtProc.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, req := range []*extprocv3.ProcessingRequest{
		{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: enforcertest.HeaderMap("x-service-request-id", reqID)}}},
		{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{Headers: enforcertest.HeaderMap(":status", "200", "content-type", "text/event-stream")}}},
		{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: []byte(openAISSE[:300])}}},
	} {
		if err := st.Send(req); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	// SIGTERM while the response is still streaming: the drain waits, then cuts it.
	e.Stop()
	rc := e.CP.Receipt(reqID)
	if rc == nil || rc.Item.GetComplete() || rc.Item.GetModel() != "gpt-4o-mini-2024-07-18" || e.CP.Pending(w.ID) != 0 {
		t.Fatalf("cut stream: %+v", rc)
	}
}

// A token-counting request (Anthropic's count_tokens) through Envoy: its body's input
// estimate is not recorded, and its answer, which reports no usage, is settled complete
// at no cost, nothing estimated: the provider does not charge it.
func TestExtProcTokenCountIsNotEstimated(t *testing.T) {
	e := enforcertest.New(t, enforcertest.Options{})
	e.CP.SetPrice("claude-sonnet-4-5", 2, 8)
	w := e.NewMember(enforcertest.DayLimit(1*enforcertest.USD, true))
	reqID, _ := e.Admit(t, w.Key)
	const path = "/v1/messages/count_tokens"
	body := `{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"` + strings.Repeat("count me ", 1000) + `"}]}`
	if r := sendRequestBody(t, e, bodySpec{requestID: reqID, path: path, body: body}); r.GetResponse() != nil {
		t.Fatalf("the body was changed: %v", r)
	}
	runStream(t, e, streamSpec{requestID: reqID, path: path, contentType: "application/json", chunks: [][]byte{[]byte(`{"input_tokens":2095}`)}})
	enforcertest.WaitFor(t, "receipt", func() bool { return e.CP.Receipt(reqID) != nil })
	rc := e.CP.Receipt(reqID)
	it := rc.Item
	if !it.GetComplete() || it.GetUsageEstimated() || it.GetInputTokens() != 0 || it.GetOutputTokens() != 0 || rc.Cost != 0 ||
		rc.CostSource != "upstream" {
		t.Fatalf("settled %v at %d micro-USD (%s), want complete, not estimated, no tokens, a known cost of 0", it, rc.Cost, rc.CostSource)
	}
	if n := e.Metric("tollgate_enforcer_extproc_request_bodies_total", "result", "unbilled"); n != 1 {
		t.Fatalf("unbilled bodies %v, want 1", n)
	}
}

// A stored response read again (GET) shows the usage it was charged when it was
// generated: settled at a known 0, not charged twice.
func TestExtProcRetrievalIsNotChargedAgain(t *testing.T) {
	e := enforcertest.New(t, enforcertest.Options{})
	e.CP.SetPrice("gpt-5", 2, 8)
	w := e.NewMember(enforcertest.DayLimit(1*enforcertest.USD, true))
	reqID, _ := e.Admit(t, w.Key)
	runStream(t, e, streamSpec{requestID: reqID, method: "GET", path: "/v1/responses/resp_123", contentType: "application/json",
		chunks: [][]byte{[]byte(`{"object":"response","model":"gpt-5","status":"completed","usage":{"input_tokens":900,"output_tokens":90}}`)}})
	enforcertest.WaitFor(t, "receipt", func() bool { return e.CP.Receipt(reqID) != nil })
	if rc := e.CP.Receipt(reqID); rc.Cost != 0 || rc.CostSource != "upstream" || !rc.Item.GetComplete() {
		t.Fatalf("settled %v at %d micro-USD (%s), want a known 0", rc.Item, rc.Cost, rc.CostSource)
	}
}

// A stored chat completion's metadata updated (POST /v1/chat/completions/{id}) through
// Envoy answers the completion, usage and all: settled at a known 0, not charged
// again, its body not estimated (requestbody.Unbilled, as the gateway reads it).
func TestExtProcStoredChatCompletionUpdateIsNotChargedAgain(t *testing.T) {
	e := enforcertest.New(t, enforcertest.Options{})
	e.CP.SetPrice("gpt-4o", 2, 8)
	w := e.NewMember(enforcertest.DayLimit(1*enforcertest.USD, true))
	reqID, _ := e.Admit(t, w.Key)
	const path = "/v1/chat/completions/chatcmpl-abc123"
	if r := sendRequestBody(t, e, bodySpec{requestID: reqID, path: path, body: `{"metadata":{"topic":"tolls"}}`}); r.GetResponse() != nil {
		t.Fatalf("the body was changed: %v", r)
	}
	runStream(t, e, streamSpec{requestID: reqID, path: path, contentType: "application/json",
		chunks: [][]byte{[]byte(`{"id":"chatcmpl-abc123","object":"chat.completion","model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":"A long answer."}}],` +
			`"usage":{"prompt_tokens":90000,"completion_tokens":9000,"total_tokens":99000}}`)}})
	enforcertest.WaitFor(t, "receipt", func() bool { return e.CP.Receipt(reqID) != nil })
	if rc := e.CP.Receipt(reqID); rc.Cost != 0 || rc.CostSource != "upstream" || !rc.Item.GetComplete() || rc.Item.GetInputTokens() != 0 {
		t.Fatalf("settled %v at %d micro-USD (%s), want a known 0", rc.Item, rc.Cost, rc.CostSource)
	}
	if n := e.Metric("tollgate_enforcer_extproc_request_bodies_total", "result", "unbilled"); n != 1 {
		t.Fatalf("unbilled bodies %v, want 1", n)
	}
}

// TestGuardedResponseEndWaitsForItsSettlement: a request under the in-flight guard
// counts in flight until its settlement commits, so the end of its response (the last
// chunk, which Envoy holds until ext_proc answers it when not in observability mode)
// is answered only once the control plane applied the settlement. Before, the
// settlement lingered in the settle queue after the answer, and a client's next
// request met its own finished one still in flight (e2e
// TestSequentialClientIsNotRefusedByItsOwnFinishedRequests, through the gateway).
func TestGuardedResponseEndWaitsForItsSettlement(t *testing.T) {
	e := enforcertest.New(t, enforcertest.Options{})
	e.CP.SetPrice("gpt-4o-mini", 1, 1)
	capped := enforcertest.DayLimit(1*enforcertest.USD, true)
	capped.MaxInFlight = 1
	w := e.NewMember(capped)
	for range 3 {
		reqID := enforcertest.OK(t, e.Check(t, map[string]string{"x-api-key": w.Key})).GetHeaders()[0].GetHeader().GetValue()
		runStream(t, e, streamSpec{requestID: reqID, contentType: "application/json", chunks: [][]byte{[]byte(openAIJSON)}})
		if e.CP.Receipt(reqID) == nil {
			t.Fatal("the guarded response's end was answered before its settlement was applied")
		}
	}
}
