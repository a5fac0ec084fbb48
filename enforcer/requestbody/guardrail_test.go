package requestbody

import (
	"net/http"
	"testing"
)

// A Converse request's guardrail is asked for its trace, which reports its usage: added
// where absent, turned on where disabled, left alone where on; every other byte kept.
func TestWithGuardrailTrace(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"messages":[],"guardrailConfig":{"guardrailIdentifier":"gr1","guardrailVersion":"1"}}`,
			`{"messages":[],"guardrailConfig":{"trace":"enabled","guardrailIdentifier":"gr1","guardrailVersion":"1"}}`},
		{`{"guardrailConfig": { "guardrailIdentifier":"gr1", "trace" : "disabled" }, "x":1.50}`,
			`{"guardrailConfig": { "guardrailIdentifier":"gr1", "trace" : "enabled" }, "x":1.50}`},
		{`{"guardrailConfig":{ }}`, `{"guardrailConfig":{"trace":"enabled" }}`},
		{`{"guardrailConfig":{"trace":"enabled"},"guardrailConfig":{"guardrailIdentifier":"g"}}`,
			`{"guardrailConfig":{"trace":"enabled"},"guardrailConfig":{"trace":"enabled","guardrailIdentifier":"g"}}`},
		{`{"guardrailConfig":{"guardrailIdentifier":"gr1","streamProcessingMode":"async","trace":"enabled_full"}}`, ""},
		{`{"guardrailConfig":{"guardrailIdentifier":"gr1","trace":"enabled"}}`, ""},
		{`{"guardrailConfig":{"trace":"disabled","trace":"enabled"}}`, ""},
		{`{"guardrailConfig":null}`, ""},
		{`{"messages":[{"role":"user","content":[{"text":"guardrailConfig"}]}]}`, ""},
		{`{"guardrailConfig":{"trace":"disabled"}`, ""}, // not JSON
		{`["guardrailConfig"]`, ""},
	} {
		got, ok := WithGuardrailTrace([]byte(tc.in))
		if ok != (tc.want != "") || string(got) != tc.want {
			t.Errorf("%s: got %q, %v; want %q", tc.in, got, ok, tc.want)
		}
	}
}

// InvokeModel's guardrail is named by a header, its trace asked for by another.
func TestGuardrailTraceHeader(t *testing.T) {
	for _, tc := range []struct {
		h         http.Header
		set       string
		guardrail bool
	}{
		{http.Header{}, "", false},
		{http.Header{"X-Amzn-Bedrock-Trace": {"ENABLED"}}, "", false},
		{http.Header{"X-Amzn-Bedrock-Guardrailidentifier": {"gr1"}}, "ENABLED", true},
		{http.Header{"X-Amzn-Bedrock-Guardrailidentifier": {"gr1"}, "X-Amzn-Bedrock-Trace": {"DISABLED"}}, "ENABLED", true},
		{http.Header{"X-Amzn-Bedrock-Guardrailidentifier": {"gr1"}, "X-Amzn-Bedrock-Trace": {"enabled_full"}}, "", true},
		{http.Header{"X-Amzn-Bedrock-Guardrailidentifier": {" "}}, "", false},
	} {
		if set, g := GuardrailTraceHeader(tc.h); set != tc.set || g != tc.guardrail {
			t.Errorf("%v: got %q, %v", tc.h, set, g)
		}
	}
}

// ApplyGuardrail's path, and nothing like it.
func TestGuardrailCheck(t *testing.T) {
	for path, want := range map[string]bool{
		"/guardrail/gr1/version/1/apply":     true,
		"/guardrail/gr1/version/DRAFT/apply": true,
		"/guardrail/arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Aguardrail%2Fgr1/version/2/apply": true,
		"/bedrock/guardrail/gr1/version/1/apply":                                                      true, // behind a route's prefix
		"/guardrail/gr1/version/1/apply/x":                                                            false,
		"/guardrail//version/1/apply":                                                                 false,
		"/guardrail/gr1/version//apply":                                                               false,
		"/guardrail/gr1/apply":                                                                        false,
		"/model/m/converse":                                                                           false,
		"/guardrail-checks/invoke":                                                                    true, // InvokeGuardrailChecks
		"/guardrail-checks/invoke/x":                                                                  false,
	} {
		if got := GuardrailCheck("POST", path); got != want {
			t.Errorf("%s: %v", path, got)
		}
	}
	if GuardrailCheck("GET", "/guardrail/gr1/version/1/apply") {
		t.Error("a GET calls a guardrail")
	}
}

// The headers are looked up on every request through the gateway: in canonical form, a
// lookup allocates nothing.
func TestGuardrailHeadersAreCanonical(t *testing.T) {
	for _, h := range []string{HeaderGuardrailIdentifier, HeaderBedrockTrace} {
		if http.CanonicalHeaderKey(h) != h {
			t.Errorf("%s is not canonical", h)
		}
	}
	h := http.Header{"Content-Type": {"application/json"}}
	if n := testing.AllocsPerRun(100, func() { GuardrailTraceHeader(h) }); n != 0 {
		t.Errorf("a request without a guardrail: %v allocations", n)
	}
}
