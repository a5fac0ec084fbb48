package extproc_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/enforcer/internal/enforcertest"
)

// ext_proc reads a JSON body as the gateway does (requestbody.TrimBOM,
// MalformedRefusal): one leading UTF-8 BOM is dropped, the body read (a chat stream
// asked for its usage) and sent upstream without it, its content-length set to match;
// a body that opens as a JSON object and is not one (NaN, which Python's json reads) is
// refused 400 service_gateway_request_body_malformed, never sent, and settled at 0 as
// an undecodable body is. Before, a BOM body went upstream unread (no usage asked, no
// input estimated) and a NaN body went as it came.
func TestExtProcReadsJSONAsTheUpstreamDoes(t *testing.T) {
	e := enforcertest.New(t, enforcertest.Options{})
	w := e.NewMember(enforcertest.DayLimit(1*enforcertest.USD, true))
	withUsage := `{"stream_options":{"include_usage":true},` + chatStreamBody[1:]
	for _, tc := range []struct{ name, body, want string }{
		{"a BOM before a chat stream", "\ufeff" + chatStreamBody, withUsage},
		{"a BOM and white space before messages", "\ufeff\n" + `{"model":"claude-sonnet-4-5","max_tokens":100,"messages":[]}`, "\n" + `{"model":"claude-sonnet-4-5","max_tokens":100,"messages":[]}`},
		{"a number beyond float64", strings.Replace(chatStreamBody, `"temperature":0.7`, `"temperature":1e400`, 1), `{"stream_options":{"include_usage":true},` + strings.Replace(chatStreamBody, `"temperature":0.7`, `"temperature":1e400`, 1)[1:]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, _ := e.Admit(t, w.Key)
			path := "/v1/chat/completions"
			if strings.Contains(tc.body, "claude") {
				path = "/v1/messages"
			}
			cr := sendRequestBody(t, e, bodySpec{requestID: id, path: path, body: tc.body}).GetResponse()
			if got := string(cr.GetBodyMutation().GetBody()); got != tc.want {
				t.Fatalf("body %q\nwant %q", got, tc.want)
			}
			hm := cr.GetHeaderMutation()
			if len(hm.GetSetHeaders()) != 1 || string(hm.GetSetHeaders()[0].GetHeader().GetRawValue()) != strconv.Itoa(len(tc.want)) {
				t.Fatalf("header mutation %v", hm)
			}
		})
	}
	for _, body := range []string{
		strings.Replace(chatStreamBody, `"temperature":0.7`, `"temperature":NaN`, 1),
		"\ufeff" + strings.Replace(chatStreamBody, `"temperature":0.7`, `"temperature":Infinity`, 1),
		chatStreamBody + "{}",
	} {
		id, _ := e.Admit(t, w.Key)
		ir := answerRequestBody(t, e, bodySpec{requestID: id, path: "/v1/chat/completions", body: body}).GetImmediateResponse()
		var code string
		for _, h := range ir.GetHeaders().GetSetHeaders() {
			if h.GetHeader().GetKey() == "x-service-error-code" {
				code = string(h.GetHeader().GetRawValue())
			}
		}
		if ir.GetStatus().GetCode() != 400 || code != "service_gateway_request_body_malformed" || !strings.Contains(string(ir.GetBody()), `"type":"invalid_request_error"`) {
			t.Fatalf("%q answered %v", body, ir)
		}
		enforcertest.WaitFor(t, "receipt", func() bool { return e.CP.Receipt(id) != nil })
		if rc := e.CP.Receipt(id); rc.Cost != 0 || rc.Item.GetUpstreamStatus() != 400 {
			t.Fatalf("settled %v at %d", rc.Item, rc.Cost)
		}
	}
	if e.Metric("tollgate_enforcer_extproc_request_bodies_total", "result", "bom_dropped") != 3 ||
		e.Metric("tollgate_enforcer_extproc_request_bodies_total", "result", "malformed") != 3 {
		t.Fatal("request bodies not counted")
	}
}
