package extproc_test

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/tollgate-dev/tollgate/enforcer/internal/enforcertest"
)

// envoyReply is the response attributes Envoy's ext_proc sends with the response headers
// when the filter asks for response.flags and response.code_details
// (deploy/envoy/envoy.yaml's response_attributes): one struct under the filter's name,
// each attribute keyed by its expression, the flags a number (a bit vector).
func envoyReply(flags uint64, details string) map[string]*structpb.Struct {
	return map[string]*structpb.Struct{"envoy.filters.http.ext_proc": {Fields: map[string]*structpb.Value{
		"response.flags":        structpb.NewNumberValue(float64(flags)),
		"response.code_details": structpb.NewStringValue(details),
	}}}
}

// Envoy's response flags (response.flags: bit n is StreamInfo's CoreResponseFlag n).
const (
	flagUH = 1 << 1  // no healthy upstream
	flagUT = 1 << 2  // upstream request timeout
	flagUR = 1 << 4  // upstream remote reset
	flagUF = 1 << 5  // upstream connection failure
	flagUC = 1 << 6  // upstream connection termination
	flagSI = 1 << 16 // stream idle timeout
)

// TestEnvoysOwnAnswerAfterSendingIsCharged: an answer Envoy makes itself once it has
// sent the request upstream (the route's timeout: 504 "upstream request timeout"; the
// connection reset while the upstream worked: 503; the stream idle timeout while the
// upstream was silent: 504) passes through the response filter like any answer, an
// error without usage. The provider had the request and bills it: it is charged its
// input estimate, incomplete and estimated, as the gateway charges a request whose
// upstream timed out after it was sent (docs/gateway.md, "Failures and what they cost";
// before, it cost nothing, and a request that outlasted the route's timeout was free).
// An answer Envoy makes without having sent the request (no connection, no healthy
// upstream, a stream the upstream refused), the upstream's own error, and a local reply
// from a filter that sends no attributes (an older configuration) cost nothing.
func TestEnvoysOwnAnswerAfterSendingIsCharged(t *testing.T) {
	e := enforcertest.New(t, enforcertest.Options{})
	e.CP.SetPrice("gpt-4o-mini", 2, 8)
	w := e.NewMember(enforcertest.DayLimit(1*enforcertest.USD, true))
	body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"` + strings.Repeat("think hard about this. ", 400) + `"}]}`
	const timeoutBody, resetBody = "upstream request timeout",
		"upstream connect error or disconnect/reset before headers. reset reason: connection termination"
	for _, tc := range []struct {
		name, status, text string
		attributes         map[string]*structpb.Struct
		charged            bool
	}{
		{"route timeout", "504", timeoutBody, envoyReply(flagUT, "response_timeout"), true},
		{"route timeout, older Envoy", "504", timeoutBody, envoyReply(flagUT, "upstream_response_timeout"), true},
		{"per-try timeout", "504", timeoutBody, envoyReply(flagUT, "upstream_per_try_timeout"), true},
		{"connection terminated after sending", "503", resetBody, envoyReply(flagUC, "upstream_reset_before_response_started{connection_termination}"), true},
		{"stream reset by the upstream", "503", resetBody, envoyReply(flagUR, "upstream_reset_before_response_started{remote_reset}"), true},
		{"stream idle timeout", "504", "stream timeout", envoyReply(flagSI, "stream_idle_timeout"), true},
		{"flags alone", "504", timeoutBody, envoyReply(flagUT, ""), true},

		{"no connection", "503", "upstream connect error or disconnect/reset before headers. reset reason: connection failure",
			envoyReply(flagUF, "upstream_reset_before_response_started{connection_failure|delayed_connect_error:_Connection_refused}"), false},
		{"no healthy upstream", "503", "no healthy upstream", envoyReply(flagUH, "no_healthy_upstream"), false},
		{"stream refused by the upstream", "503", resetBody,
			envoyReply(flagUR, "upstream_reset_before_response_started{remote_refused_stream_reset}"), false},
		{"the upstream's own 504", "504", `{"error":{"message":"timeout"}}`, envoyReply(0, "via_upstream"), false},
		{"no attributes (an older configuration)", "504", timeoutBody, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, _ := e.Admit(t, w.Key)
			sendRequestBody(t, e, bodySpec{requestID: id, path: "/v1/chat/completions", body: body})
			runStream(t, e, streamSpec{requestID: id, status: tc.status, contentType: "text/plain",
				chunks: [][]byte{[]byte(tc.text)}, attributes: tc.attributes})
			enforcertest.WaitFor(t, "settled", func() bool { return e.CP.Receipt(id) != nil })
			r := e.CP.Receipt(id)
			it := r.Item
			if !tc.charged {
				if r.Cost != 0 {
					t.Errorf("charged %d (input tokens %d), want nothing: the provider never had the request, or answered it itself",
						r.Cost, it.GetInputTokens())
				}
				return
			}
			if it.GetInputTokens() <= 0 || r.Cost != 2*it.GetInputTokens() || it.GetOutputTokens() != 0 {
				t.Errorf("charged %d for %d input and %d output tokens, want the input estimate alone (2 micro-USD a token)",
					r.Cost, it.GetInputTokens(), it.GetOutputTokens())
			}
			if !it.GetUsageEstimated() || it.GetComplete() {
				t.Errorf("usage_estimated %v, complete %v: want an estimate, incomplete", it.GetUsageEstimated(), it.GetComplete())
			}
		})
	}
}

// TestEnvoysOwnAnswerToAnUnbilledRequestIsFree: a request the provider does not bill (a
// token count) costs nothing however it ends, as through the gateway.
func TestEnvoysOwnAnswerToAnUnbilledRequestIsFree(t *testing.T) {
	e := enforcertest.New(t, enforcertest.Options{})
	e.CP.SetPrice("gpt-4o-mini", 2, 8)
	w := e.NewMember(enforcertest.DayLimit(1*enforcertest.USD, true))
	id, _ := e.Admit(t, w.Key)
	sendRequestBody(t, e, bodySpec{requestID: id, path: "/v1/responses/input_tokens", body: `{"model":"gpt-4o-mini","input":"count me"}`})
	runStream(t, e, streamSpec{requestID: id, path: "/v1/responses/input_tokens", status: "504", contentType: "text/plain",
		chunks: [][]byte{[]byte("upstream request timeout")}, attributes: envoyReply(flagUT, "response_timeout")})
	enforcertest.WaitFor(t, "settled", func() bool { return e.CP.Receipt(id) != nil })
	if r := e.CP.Receipt(id); r.Cost != 0 {
		t.Errorf("a token count Envoy timed out is charged %d, want nothing", r.Cost)
	}
}
