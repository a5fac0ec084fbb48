package extproc_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/metadata"

	"github.com/tollgate-dev/tollgate/enforcer/extproc"
	"github.com/tollgate-dev/tollgate/enforcer/internal/enforcertest"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// The request-body filter of deploy/envoy/envoy.yaml runs with failure_mode_allow and a
// message_timeout of 0.5s: a refusal that reaches Envoy late (a large compressed body
// takes long to decode), or a side stream that breaks before it arrives, is ignored, and
// the request goes upstream. The refusal's settlement says it is one (SettleItem.refused):
// the answer the response filter then reads promotes it, once, to the answer's cost. A
// refusal Envoy applied stays at 0, settled at once. Before 2026-12-03 the refusal was a
// final receipt of a known 0: the answer's settlement was a duplicate, and a request
// served upstream was free.
func TestRefusalEnvoyIgnoredIsChargedFromTheAnswer(t *testing.T) {
	e, w := deferredBillingEnv(t, "refuse")
	e.CP.SetPrice("gpt-5", 2, 8)
	body := `{"model":"gpt-5","background":true,"input":"write a novel"}`

	// Applied: refused, settled at once at 0, and nothing follows.
	applied, _ := e.Admit(t, w.Key)
	if resp := answerRequestBody(t, e, bodySpec{requestID: applied, path: "/v1/responses", body: body}); resp.GetImmediateResponse() == nil {
		t.Fatalf("not refused: %v", resp)
	}
	enforcertest.WaitFor(t, "the applied refusal settled", func() bool { return e.CP.Receipt(applied) != nil })
	if r := e.CP.Receipt(applied); r.Cost != 0 || !r.Item.GetRefused() || r.Item.GetUpstreamStatus() != 403 {
		t.Fatalf("applied refusal: cost %d, refused %v, status %d; want 0, true, 403", r.Cost, r.Item.GetRefused(), r.Item.GetUpstreamStatus())
	}

	// Ignored: Envoy sends the headers and the buffered body, then resets the side
	// stream (message_timeout) before the refusal comes.
	id, _ := e.Admit(t, w.Key)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	st, err := e.ExtProc.Process(metadata.AppendToOutgoingContext(ctx, extproc.RoleMetadata, extproc.RoleRequest))
	if err != nil {
		t.Fatal(err)
	}
	hm := enforcertest.HeaderMap(":method", "POST", ":path", "/v1/responses", ":authority", "llm.example.test",
		"content-type", "application/json", "content-length", strconv.Itoa(len(body)), "x-service-request-id", id)
	for _, req := range []*extprocv3.ProcessingRequest{
		{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: hm}}},
		{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: []byte(body), EndOfStream: true}}},
	} {
		if err := st.Send(req); err != nil {
			t.Fatal(err)
		}
	}
	enforcertest.WaitFor(t, "the refusal settled", func() bool { return e.CP.Receipt(id) != nil })
	cancel()
	before := e.CP.Spend(w.ID, window.Day)

	// The request went upstream; its answer, with its usage, passes the response filter.
	runStream(t, e, streamSpec{requestID: id, path: "/v1/responses", contentType: "application/json",
		chunks: [][]byte{[]byte(`{"id":"resp_1","object":"response","model":"gpt-5","status":"completed","output":[],"usage":{"input_tokens":1000,"output_tokens":500,"total_tokens":1500}}`)}})
	want := int64(2*1000 + 8*500)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && e.CP.Spend(w.ID, window.Day) < before+want {
		time.Sleep(20 * time.Millisecond)
	}
	r := e.CP.Receipt(id)
	if r.Cost != want || r.Item.GetRefused() {
		t.Fatalf("a request served upstream (1000 in / 500 out of gpt-5, %d micro-USD) is charged %d (source %s, refused %v)",
			want, r.Cost, r.CostSource, r.Item.GetRefused())
	}
	// Charged once: the day's spend moved by the answer's cost alone, and stays there.
	time.Sleep(300 * time.Millisecond)
	if got := e.CP.Spend(w.ID, window.Day) - before; got != want {
		t.Fatalf("the day's spend moved by %d, want %d", got, want)
	}
}

// Every refusal of the body phase says it is one, whatever refused it: billing deferred,
// a model nobody priced, a body that does not decode, a WebSocket.
func TestEveryRefusalIsSettledAsRefused(t *testing.T) {
	e, w := deferredBillingEnv(t, "refuse")
	e.CP.RefuseUnpriced(w.ID, true)
	for _, c := range []struct {
		name string
		spec bodySpec
	}{
		{"billing deferred", bodySpec{path: "/v1/batches", body: `{"input_file_id":"file-1","endpoint":"/v1/chat/completions","completion_window":"24h"}`}},
		{"model not priced", bodySpec{path: "/v1/chat/completions", body: `{"model":"acme-house-model","messages":[]}`}},
		{"undecodable", bodySpec{path: "/v1/chat/completions", body: "not gzip", contentEncoding: "gzip"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			spec := c.spec
			spec.requestID, _ = e.Admit(t, w.Key)
			if resp := answerRequestBody(t, e, spec); resp.GetImmediateResponse() == nil {
				t.Fatalf("not refused: %v", resp)
			}
			enforcertest.WaitFor(t, "settled", func() bool { return e.CP.Receipt(spec.requestID) != nil })
			if r := e.CP.Receipt(spec.requestID); !r.Item.GetRefused() || r.Cost != 0 {
				t.Fatalf("settled with refused %v at %d", r.Item.GetRefused(), r.Cost)
			}
		})
	}
	t.Run("websocket", func(t *testing.T) {
		id, _ := e.Admit(t, w.Key)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := e.ExtProc.Process(metadata.AppendToOutgoingContext(ctx, extproc.RoleMetadata, extproc.RoleRequest))
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
			Headers: enforcertest.HeaderMap(":method", "GET", ":path", "/v1/realtime", "upgrade", "websocket", "x-service-request-id", id)}}}); err != nil {
			t.Fatal(err)
		}
		if resp, err := st.Recv(); err != nil || resp.GetImmediateResponse() == nil {
			t.Fatalf("not refused: %v %v", resp, err)
		}
		enforcertest.WaitFor(t, "settled", func() bool { return e.CP.Receipt(id) != nil })
		if r := e.CP.Receipt(id); !r.Item.GetRefused() {
			t.Fatal("a refused WebSocket settled without refused")
		}
	})
}

// A request Envoy gives up before its body reaches the request-body filter (its 413 for a
// body past the listener's buffer limit, a client gone during the upload) never goes
// upstream, and the response filter never sees it (Envoy holds a BUFFERED body's headers
// until the body's answer). The request-body stream, ended after the headers, settles it
// at once as a refusal: before, it waited for the reaper, counted in flight with its
// reservation for TOLLGATE_ENFORCER_ABANDON_AFTER (15 minutes), and a member at a cap of
// one was refused all that time. A request without a body (its headers end it) is left
// to the response filter, as is one whose body came.
func TestRequestEndedBeforeItsBodyIsSettled(t *testing.T) {
	e, w := deferredBillingEnv(t, "refuse")
	// stream plays the request-body filter's stream up to the request's headers, then
	// ends it.
	stream := func(id string, headersEnd bool) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := e.ExtProc.Process(metadata.AppendToOutgoingContext(ctx, extproc.RoleMetadata, extproc.RoleRequest))
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
			Headers: enforcertest.HeaderMap(":method", "POST", ":path", "/v1/chat/completions", ":authority", "llm.example.test",
				"content-type", "application/json", "content-length", "8388608", "x-service-request-id", id),
			EndOfStream: headersEnd}}}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); err != nil {
			t.Fatal(err)
		}
		if err := st.CloseSend(); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); err == nil {
			t.Fatal("the stream went on after its end")
		}
	}

	id, _ := e.Admit(t, w.Key)
	stream(id, false)
	enforcertest.WaitFor(t, "the request ended before its body settled", func() bool { return e.CP.Receipt(id) != nil })
	if r := e.CP.Receipt(id); r.Cost != 0 || !r.Item.GetRefused() {
		t.Fatalf("settled at %d, refused %v; want 0, true", r.Cost, r.Item.GetRefused())
	}

	// Without a body, the response filter settles it: nothing here.
	bodiless, _ := e.Admit(t, w.Key)
	stream(bodiless, true)
	time.Sleep(200 * time.Millisecond)
	if r := e.CP.Receipt(bodiless); r != nil {
		t.Fatalf("a request without a body was settled by the request-body filter: %v", r.Item)
	}
}

// A refusal's headers are written as the stream's Envoy reads them: Envoy reads a
// mutation's raw_value, or its value, as its runtime guard send_header_raw_value says (the
// guard by which it sends the request's headers), and takes the other field as empty. An
// Envoy that sends values in value (the guard off) got every refusal with empty headers:
// no X-Service-Error-Code, an empty Content-Type, no Retry-After.
func TestRefusalHeadersAsEnvoySendsThem(t *testing.T) {
	e, w := deferredBillingEnv(t, "refuse")
	e.CP.RefuseUnpriced(w.ID, true)
	for _, c := range []struct {
		name string
		spec bodySpec
		code string
	}{
		{"malformed", bodySpec{path: "/v1/chat/completions", body: `{"model":"gpt-4o-mini","temperature":NaN}`}, "service_gateway_request_body_malformed"},
		{"billing deferred", bodySpec{path: "/v1/batches", body: `{"input_file_id":"file-1","endpoint":"/v1/chat/completions","completion_window":"24h"}`}, "service_gateway_billing_deferred"},
	} {
		for _, stringValues := range []bool{false, true} {
			spec := c.spec
			spec.stringValues = stringValues
			spec.requestID, _ = e.Admit(t, w.Key)
			ir := answerRequestBody(t, e, spec).GetImmediateResponse()
			if ir == nil {
				t.Fatalf("%s: not refused", c.name)
			}
			var code string
			for _, h := range ir.GetHeaders().GetSetHeaders() {
				hv := h.GetHeader()
				if stringValues && len(hv.GetRawValue()) > 0 || !stringValues && hv.GetValue() != "" {
					t.Fatalf("%s (values as strings %v): header %s written in the other field", c.name, stringValues, hv.GetKey())
				}
				if hv.GetKey() == "x-service-error-code" {
					code = hv.GetValue() + string(hv.GetRawValue())
				}
			}
			if code != c.code {
				t.Fatalf("%s (values as strings %v): x-service-error-code %q, want %q", c.name, stringValues, code, c.code)
			}
		}
	}
}
