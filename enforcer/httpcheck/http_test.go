package httpcheck_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/enforcer/app"
	"github.com/tollgate-dev/tollgate/enforcer/authz"
	"github.com/tollgate-dev/tollgate/enforcer/gate"
	"github.com/tollgate-dev/tollgate/enforcer/internal/enforcertest"
	"github.com/tollgate-dev/tollgate/enforcer/internal/fakecp"
	"github.com/tollgate-dev/tollgate/internal/testio"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/typeid"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

func httpCheck(t *testing.T, e *enforcertest.Env, method string, headers map[string]string) (*http.Response, string) {
	t.Helper()
	res, b := testio.Send(t, method, e.HTTPURL+"/check", headers, "")
	return res, string(b)
}

func TestHTTPCheckMatchesTheGRPCAnswers(t *testing.T) {
	e := enforcertest.New(t, enforcertest.Options{})
	ok := e.NewMember(enforcertest.DayLimit(1*enforcertest.USD, true))
	blocked := e.NewMember(enforcertest.DayLimit(1*enforcertest.USD, true))
	e.CP.SetSpend(blocked.ID, window.Day, 1*enforcertest.USD)
	suspended := e.NewMember(enforcertest.DayLimit(1*enforcertest.USD, true))
	e.CP.SetCapture(suspended.ID, false)

	for _, method := range []string{"GET", "POST", "HEAD"} {
		res, _ := httpCheck(t, e, method, map[string]string{"X-Api-Key": ok.Key, "X-Forwarded-Method": "POST", "X-Forwarded-Uri": "/v1/messages"})
		if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("X-Service-Request-Id"), "req_") || res.Header.Get("X-Service-Usage-State") != "within_limit" {
			t.Fatalf("%s: %d %v", method, res.StatusCode, res.Header)
		}
	}
	res, body := httpCheck(t, e, "GET", map[string]string{"Authorization": "Bearer " + blocked.Key})
	grpcBody := e.Check(t, map[string]string{"authorization": "Bearer " + blocked.Key}).GetDeniedResponse().GetBody()
	if res.StatusCode != 429 || res.Header.Get("X-Service-Error-Code") != "service_gateway_usage_limit_exceeded" ||
		res.Header.Get("X-Service-Usage-State") != "blocked" || res.Header.Get("Retry-After") != "61200" ||
		res.Header.Get("X-Should-Retry") != "false" || res.Header.Get("Content-Type") != "application/json" || body != grpcBody {
		t.Fatalf("429: %v %s", res.Header, body)
	}
	res, body = httpCheck(t, e, "GET", nil)
	if res.StatusCode != 401 || !enforcertest.UnauthorizedBody(body) {
		t.Fatalf("401: %d %s", res.StatusCode, body)
	}
	res, _ = httpCheck(t, e, "GET", map[string]string{"X-Api-Key": suspended.Key})
	if res.StatusCode != 503 || res.Header.Get("X-Service-Error-Code") != "service_gateway_accounting_unavailable" || res.Header.Get("X-Service-Usage-State") != "" {
		t.Fatalf("503: %d %v", res.StatusCode, res.Header)
	}
}

func postSettle(t *testing.T, h http.Handler, remote, auth, body string) (int, map[string]any) {
	t.Helper()
	req := httptest.NewRequest("POST", "/settle", strings.NewReader(body))
	req.RemoteAddr = remote
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var out map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatalf("body %q: %v", rec.Body.String(), err)
	}
	return rec.Code, out
}

func TestHTTPSettle(t *testing.T) {
	e := enforcertest.New(t, enforcertest.Options{Config: func(c *app.Config) { c.SettleWait = 300 * time.Millisecond }})
	e.CP.SetPrice("gpt-4o", 3, 10)
	w := e.NewMember(enforcertest.DayLimit(1*enforcertest.USD, true))
	res, _ := httpCheck(t, e, "GET", map[string]string{"X-Api-Key": w.Key})
	reqID := res.Header.Get("X-Service-Request-Id")
	h := e.Enforcer.HTTP
	body := `{"requestId":"` + reqID + `","model":"gpt-4o","inputTokens":100,"outputTokens":20,"cachedInputTokens":0}`

	t.Run("refuses callers that are neither local nor holders of the token", func(t *testing.T) {
		for _, auth := range []string{"", "Bearer wrong", "Bearer " + w.Key} {
			if code, out := postSettle(t, h, "10.1.2.3:4444", auth, body); code != 401 || out["error"] != "unauthorized" {
				t.Fatalf("%q: %d %v", auth, code, out)
			}
		}
		// Istio's sidecar forwards inbound traffic from other pods to the enforcer from
		// 127.0.0.6: loopback, but not a local caller.
		for _, remote := range []string{"127.0.0.6:4444", "127.1.2.3:4444", "[::ffff:127.0.0.6]:4444"} {
			if code, out := postSettle(t, h, remote, "", body); code != 401 || out["error"] != "unauthorized" {
				t.Fatalf("%s: %d %v", remote, code, out)
			}
		}
		if e.CP.SettleItems.Load() != 0 {
			t.Fatal("refused caller settled")
		}
	})
	t.Run("validates", func(t *testing.T) {
		for _, bad := range []string{`{}`, `{"requestId":"nope"}`, `{"requestId":"` + reqID + `","inputTokens":-1}`,
			`{"requestId":"` + reqID + `","extra":1}`, `{"requestId":"` + reqID + `"} {}`, `[1]`, `{"requestId":"` + reqID + `","inputTokens":"5"}`,
			`{"requestId":"` + reqID + `","audioInputMillis":-1}`, `{"requestId":"` + reqID + `","cacheCreationOneHourInputTokens":-1}`,
			`{"requestId":"` + reqID + `","audioInputMillis":1.5}`, `{"requestId":"` + reqID + `","webSearchRequests":-1}`,
			`{"requestId":"` + reqID + `","fileSearchCalls":-2}`, `{"requestId":"` + reqID + `","audioInputTokens":-1}`,
			`{"requestId":"` + reqID + `","audioOutputTokens":-3}`, `{"requestId":"` + reqID + `","cachedAudioInputTokens":-4}`,
			`{"requestId":"` + reqID + `","serviceTier":"priority"}`, `{"requestId":"` + reqID + `","serviceTier":true}`,
			`{"requestId":"` + reqID + `","imageGenerationCalls":-1}`, `{"requestId":"` + reqID + `","imageOutputTokens":-1}`,
			`{"requestId":"` + reqID + `","imageToolInputTokens":-1}`, `{"requestId":"` + reqID + `","imageToolCachedInputTokens":-1}`,
			`{"requestId":"` + reqID + `","imageToolInputTokens":1.5}`,
			`{"requestId":"` + reqID + `","imageModel":"` + strings.Repeat("m", 257) + `"}`, `{"requestId":"` + reqID + `","imageModel":1}`,
			`{"requestId":"` + reqID + `","advisorInputTokens":-1}`, `{"requestId":"` + reqID + `","advisorCachedInputTokens":-1}`,
			`{"requestId":"` + reqID + `","advisorModel":"` + strings.Repeat("m", 257) + `"}`,
			`{"requestId":"` + reqID + `","mapsGroundedPrompts":2}`, `{"requestId":"` + reqID + `","mapsGroundedPrompts":-1}`,
			`{"requestId":"` + reqID + `","imageInputTokens":-1}`, `{"requestId":"` + reqID + `","cachedImageInputTokens":-2}`,
			`{"requestId":"` + reqID + `","ocrPages":-1}`, `{"requestId":"` + reqID + `","ocrPages":1.5}`,
			`{"requestId":"` + reqID + `","containerMinutes":-1}`, `{"requestId":"` + reqID + `","containerMinutes":2.5}`,
			`{"requestId":"` + reqID + `","containerKind":"` + strings.Repeat("k", 65) + `"}`, `{"requestId":"` + reqID + `","containerKind":"OpenAI-1G"}`,
			`{"requestId":"` + reqID + `","containerKind":5}`,
			`{"requestId":"` + reqID + `","guardrailUnits":{"contentText":-1}}`, `{"requestId":"` + reqID + `","guardrailUnits":{"deniedTopics":1.5}}`,
			`{"requestId":"` + reqID + `","guardrailUnits":{"wordFilter":3}}`, `{"requestId":"` + reqID + `","guardrailUnits":[1]}`} {
			if code, out := postSettle(t, h, "127.0.0.1:5555", "", bad); code != 400 || out["error"] != "invalid_request" || out["details"] == nil {
				t.Fatalf("%s: %d %v", bad, code, out)
			}
		}
	})
	t.Run("answers the receipt, from loopback", func(t *testing.T) {
		code, out := postSettle(t, h, "127.0.0.1:5555", "", body)
		if code != 200 || out["outcome"] != "settled" || out["costMicroUsd"] != float64(500) || out["costSource"] != "catalog_estimate" || out["requestId"] != reqID ||
			out["costBasis"] != "reported_usage" || out["priceSource"] != "organization" {
			t.Fatalf("%d %v", code, out)
		}
		if it := e.CP.Receipt(reqID).Item; it.GetUsageEstimated() || !it.GetComplete() {
			t.Fatalf("settled %v", it)
		}
		if e.CP.Pending(w.ID) != 0 {
			t.Fatal("pending not settled")
		}
	})
	t.Run("idempotent by request id, from anywhere with the token", func(t *testing.T) {
		code, out := postSettle(t, h, "10.1.2.3:4444", "Bearer "+fakecp.Token, body)
		if code != 200 || out["outcome"] != "duplicate" || out["costMicroUsd"] != float64(500) {
			t.Fatalf("%d %v", code, out)
		}
		if e.CP.Spend(w.ID, window.Day) != 500 {
			t.Fatalf("charged twice: %d", e.CP.Spend(w.ID, window.Day))
		}
	})
	t.Run("a lower cost is a conflict", func(t *testing.T) {
		code, out := postSettle(t, h, "[::1]:5555", "", `{"requestId":"`+reqID+`","upstreamCostMicroUsd":1}`)
		if code != 409 || out["error"] != "cost_conflict" {
			t.Fatalf("%d %v", code, out)
		}
	})
	t.Run("estimated counts say so, and are never complete", func(t *testing.T) {
		res, _ := httpCheck(t, e, "GET", map[string]string{"X-Api-Key": w.Key})
		id := res.Header.Get("X-Service-Request-Id")
		code, out := postSettle(t, h, "127.0.0.1:5555", "", `{"requestId":"`+id+`","model":"gpt-4o","inputTokens":10,"outputTokens":2,"complete":true,"estimated":true}`)
		if code != 200 || out["outcome"] != "settled" || out["costMicroUsd"] != float64(50) || out["costBasis"] != "estimate" {
			t.Fatalf("%d %v", code, out)
		}
		if it := e.CP.Receipt(id).Item; !it.GetUsageEstimated() || it.GetComplete() {
			t.Fatalf("settled %v", it)
		}
		if e.Metric("tollgate_enforcer_settled_cost_basis_total", "basis", "estimate") != 1 ||
			e.Metric("tollgate_enforcer_settled_cost_basis_total", "basis", "reported_usage") != 1 {
			t.Fatal("cost basis not counted")
		}
	})
	// Fields beyond the tokens reach the control plane as sent, the settlement complete.
	for _, f := range []struct {
		name, fields string
		reached      func(*internalv1.SettleItem) bool
	}{
		{"a priority-tier report (its name before serviceTier): fast", `"model":"gpt-4o","inputTokens":10,"outputTokens":2,"priorityTier":true`,
			func(it *internalv1.SettleItem) bool {
				return it.GetPriorityTier() && it.GetServiceTier() == internalv1.ServiceTier_SERVICE_TIER_FAST
			}},
		{"a fast-tier report", `"model":"claude-opus-5","inputTokens":10,"outputTokens":2,"serviceTier":"fast"`,
			func(it *internalv1.SettleItem) bool {
				return it.GetPriorityTier() && it.GetServiceTier() == internalv1.ServiceTier_SERVICE_TIER_FAST
			}},
		{"an ultrafast-tier report", `"model":"gpt-6-astra","inputTokens":10,"outputTokens":2,"serviceTier":"ultrafast","priorityTier":false`,
			func(it *internalv1.SettleItem) bool {
				return it.GetPriorityTier() && it.GetServiceTier() == internalv1.ServiceTier_SERVICE_TIER_ULTRAFAST
			}},
		{"a latency-optimized report (Bedrock's)", `"model":"us.amazon.nova-pro-v1:0","inputTokens":10,"outputTokens":2,"serviceTier":"latency_optimized"`,
			func(it *internalv1.SettleItem) bool {
				return it.GetPriorityTier() && it.GetServiceTier() == internalv1.ServiceTier_SERVICE_TIER_LATENCY_OPTIMIZED
			}},
		{"a flex report: discount_tier alone, which an older control plane ignores", `"model":"gpt-5","inputTokens":10,"outputTokens":2,"serviceTier":"flex"`,
			func(it *internalv1.SettleItem) bool {
				return !it.GetPriorityTier() && it.GetServiceTier() == internalv1.ServiceTier_SERVICE_TIER_UNSPECIFIED &&
					it.GetDiscountTier() == internalv1.DiscountTier_DISCOUNT_TIER_FLEX
			}},
		{"the standard tier, said", `"model":"gpt-4o","inputTokens":10,"outputTokens":2,"serviceTier":""`,
			func(it *internalv1.SettleItem) bool {
				return !it.GetPriorityTier() && it.GetServiceTier() == internalv1.ServiceTier_SERVICE_TIER_UNSPECIFIED
			}},
		{"a regional endpoint's report", `"model":"claude-sonnet-4-5","inputTokens":10,"outputTokens":2,"regionalEndpoint":true`,
			func(it *internalv1.SettleItem) bool { return it.GetRegionalEndpoint() }},
		{"the upstream's host, as the catalog compares it", `"model":"openai/gpt-oss-120b","inputTokens":10,"outputTokens":2,"upstreamHost":"API.Groq.com:443"`,
			func(it *internalv1.SettleItem) bool { return it.GetUpstreamHost() == "api.groq.com" }},
		{"audio billed by duration", `"model":"whisper-1","audioInputMillis":9500`,
			func(it *internalv1.SettleItem) bool { return it.GetAudioInputMillis() == 9500 }},
		{"web searches", `"model":"claude-sonnet-4-5","inputTokens":10,"outputTokens":2,"webSearchRequests":3`,
			func(it *internalv1.SettleItem) bool { return it.GetWebSearchRequests() == 3 }},
		{"file search calls", `"model":"gpt-5","inputTokens":10,"outputTokens":2,"fileSearchCalls":4`,
			func(it *internalv1.SettleItem) bool { return it.GetFileSearchCalls() == 4 }},
		{"image generation calls", `"model":"gpt-5","inputTokens":10,"outputTokens":2,"imageGenerationCalls":2,"imageModel":"gpt-image-1-mini","imageOutputTokens":544`,
			func(it *internalv1.SettleItem) bool {
				return it.GetImageGenerationCalls() == 2 && it.GetImageModel() == "gpt-image-1-mini" && it.GetImageOutputTokens() == 544
			}},
		{"the image model's input", `"model":"gpt-5","inputTokens":10,"imageGenerationCalls":1,"imageModel":"gpt-image-1.5","imageToolInputTokens":900,"imageToolCachedInputTokens":100`,
			func(it *internalv1.SettleItem) bool {
				return it.GetImageModel() == "gpt-image-1.5" && it.GetImageToolInputTokens() == 900 && it.GetImageToolCachedInputTokens() == 100 &&
					it.GetInputTokens() == 10
			}},
		{"the image model's input alone is usage", `"model":"gpt-5","imageToolInputTokens":900`,
			func(it *internalv1.SettleItem) bool {
				return it.GetImageToolInputTokens() == 900 && it.GetImageModel() == ""
			}},
		{"an advisor's counts", `"model":"claude-haiku-4-5","inputTokens":10,"outputTokens":2,"advisorModel":"claude-opus-4-7","advisorInputTokens":700,"advisorOutputTokens":90,"advisorCachedInputTokens":300,"advisorCacheCreationInputTokens":40`,
			func(it *internalv1.SettleItem) bool {
				return it.GetAdvisorModel() == "claude-opus-4-7" && it.GetAdvisorInputTokens() == 700 && it.GetAdvisorOutputTokens() == 90 &&
					it.GetAdvisorCachedInputTokens() == 300 && it.GetAdvisorCacheCreationInputTokens() == 40 && it.GetInputTokens() == 10
			}},
		{"a prompt grounded with Google Maps", `"model":"gemini-2.5-flash","inputTokens":10,"outputTokens":2,"mapsGroundedPrompts":1`,
			func(it *internalv1.SettleItem) bool {
				return it.GetMapsGroundedPrompts() == 1 && it.GetInputTokens() == 10
			}},
		{"an OCR model's pages", `"model":"mistral-ocr-latest","ocrPages":12`,
			func(it *internalv1.SettleItem) bool {
				return it.GetOcrPages() == 12 && it.GetModel() == "mistral-ocr-latest"
			}},
		{"a container's minutes and kind", `"model":"gpt-5","inputTokens":10,"containerKind":"openai-4g","containerMinutes":25`,
			func(it *internalv1.SettleItem) bool {
				return it.GetContainerKind() == "openai-4g" && it.GetContainerMinutes() == 25 && it.GetInputTokens() == 10
			}},
		{"a guardrail's units", `"model":"anthropic.claude-haiku-4-5","inputTokens":10,"guardrailUnits":{"contentText":3,"deniedTopics":2,"sensitiveInformation":1,"contextualGrounding":4,"automatedReasoning":6,"contentImages":1}`,
			func(it *internalv1.SettleItem) bool {
				g := it.GetGuardrailUnits()
				return g.GetContentText() == 3 && g.GetDeniedTopics() == 2 && g.GetSensitiveInformation() == 1 && g.GetContextualGrounding() == 4 &&
					g.GetAutomatedReasoning() == 6 && g.GetContentImages() == 1 && it.GetInputTokens() == 10 && it.GetComplete()
			}},
		{"a guardrail's units alone are usage (it refused the prompt)", `"model":"anthropic.claude-haiku-4-5","guardrailUnits":{"deniedTopics":1}`,
			func(it *internalv1.SettleItem) bool {
				return it.GetGuardrailUnits().GetDeniedTopics() == 1 && it.GetComplete()
			}},
		{"container minutes alone are usage", `"model":"claude-sonnet-4-5","containerMinutes":5`,
			func(it *internalv1.SettleItem) bool {
				return it.GetContainerKind() == "" && it.GetContainerMinutes() == 5
			}},
		{"the audio parts of the counts", `"model":"gpt-realtime","inputTokens":10,"outputTokens":20,"audioInputTokens":0,"audioOutputTokens":15`,
			func(it *internalv1.SettleItem) bool {
				return it.AudioInputTokens != nil && it.GetAudioInputTokens() == 0 && it.GetAudioOutputTokens() == 15
			}},
		{"no audio or image parts: unknown, not 0", `"model":"gpt-realtime","inputTokens":10,"outputTokens":20`,
			func(it *internalv1.SettleItem) bool {
				return it.AudioInputTokens == nil && it.AudioOutputTokens == nil && it.CachedAudioInputTokens == nil &&
					it.ImageInputTokens == nil && it.CachedImageInputTokens == nil
			}},
		{"the image parts", `"model":"gpt-realtime","inputTokens":900,"cachedInputTokens":300,"imageInputTokens":500,"cachedImageInputTokens":0`,
			func(it *internalv1.SettleItem) bool {
				return it.GetImageInputTokens() == 500 && it.CachedImageInputTokens != nil && it.GetCachedImageInputTokens() == 0
			}},
		{"the cached audio part", `"model":"gemini-2.5-flash","inputTokens":10,"cachedInputTokens":8,"cachedAudioInputTokens":6`,
			func(it *internalv1.SettleItem) bool {
				return it.CachedAudioInputTokens != nil && it.GetCachedAudioInputTokens() == 6
			}},
	} {
		t.Run(f.name+" reaches the control plane", func(t *testing.T) {
			res, _ := httpCheck(t, e, "GET", map[string]string{"X-Api-Key": w.Key})
			id := res.Header.Get("X-Service-Request-Id")
			code, out := postSettle(t, h, "127.0.0.1:5555", "", `{"requestId":"`+id+`",`+f.fields+`}`)
			if code != 200 || out["outcome"] != "settled" {
				t.Fatalf("%d %v", code, out)
			}
			if it := e.CP.Receipt(id).Item; !f.reached(it) || !it.GetComplete() {
				t.Fatalf("settled %v", it)
			}
		})
	}
	t.Run("202 while the control plane is down, delivered later", func(t *testing.T) {
		res, _ := httpCheck(t, e, "GET", map[string]string{"X-Api-Key": w.Key})
		id := res.Header.Get("X-Service-Request-Id")
		e.CP.Fail("Settle", true)
		code, out := postSettle(t, h, "127.0.0.1:5555", "", `{"requestId":"`+id+`"}`)
		if code != 202 || out["outcome"] != "queued" {
			t.Fatalf("%d %v", code, out)
		}
		e.CP.Fail("Settle", false)
		enforcertest.WaitFor(t, "late delivery", func() bool { return e.CP.Receipt(id) != nil })
		if e.CP.Receipt(id).Item.GetComplete() {
			t.Fatal("a bare requestId settled as complete")
		}
	})
}

// Both front doors of a forward-auth or Envoy deployment (/check and ext_authz) read the
// member's key from each header clients send it in: x-api-key, x-goog-api-key (Google's
// Gen AI SDK), api-key (Azure OpenAI clients) and Authorization: Bearer. Two different
// keys are a 401 whichever headers hold them; ext_authz removes the header the key came
// in from the upstream request.
func TestEveryKeyHeaderAtBothFrontDoors(t *testing.T) {
	e := enforcertest.New(t, enforcertest.Options{})
	w := e.NewMember(enforcertest.DayLimit(1*enforcertest.USD, true))
	other := e.NewMember(enforcertest.DayLimit(1*enforcertest.USD, true))
	blocked := e.NewMember(enforcertest.DayLimit(1*enforcertest.USD, true))
	e.CP.SetSpend(blocked.ID, window.Day, 1*enforcertest.USD)
	for _, tc := range []struct {
		name    string
		headers map[string]string
		status  int
		removed string // ext_authz's headers_to_remove on admission
	}{
		{"x-api-key", map[string]string{"X-Api-Key": w.Key}, 200, "x-api-key"},
		{"x-goog-api-key", map[string]string{"X-Goog-Api-Key": w.Key}, 200, "x-goog-api-key"},
		{"api-key", map[string]string{"Api-Key": w.Key}, 200, "api-key"},
		{"bearer", map[string]string{"Authorization": "Bearer " + w.Key}, 200, "authorization"},
		{"the same key in api-key and x-api-key", map[string]string{"Api-Key": w.Key, "X-Api-Key": w.Key}, 200, "x-api-key,api-key"},
		{"two keys in api-key and x-api-key", map[string]string{"Api-Key": w.Key, "X-Api-Key": other.Key}, 401, ""},
		{"two keys in api-key and x-goog-api-key", map[string]string{"Api-Key": other.Key, "X-Goog-Api-Key": w.Key}, 401, ""},
		{"two keys in api-key and Authorization", map[string]string{"Api-Key": w.Key, "Authorization": "Bearer " + other.Key}, 401, ""},
		{"a provider key in api-key", map[string]string{"Api-Key": "0123456789abcdef0123456789abcdef"}, 401, ""},
		{"a blocked member's key in api-key", map[string]string{"Api-Key": blocked.Key}, 429, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if res, body := httpCheck(t, e, "POST", tc.headers); res.StatusCode != tc.status {
				t.Fatalf("/check: %d %s, want %d", res.StatusCode, body, tc.status)
			}
			resp := e.Check(t, tc.headers)
			if tc.status != 200 {
				enforcertest.Denied(t, resp, tc.status)
				return
			}
			// Every admission removes authz.NeverUpstream too, last (the field mask, the
			// method overrides, the billing-scope headers, Envoy's router controls).
			if got := strings.Join(enforcertest.OK(t, resp).GetHeadersToRemove(), ","); got != tc.removed+","+strings.Join(authz.NeverUpstream(), ",") {
				t.Fatalf("ext_authz removes %q, want %q", got, tc.removed)
			}
		})
	}
}

// What the gateway and ext_authz take out of a request, a forward-auth answer cannot (it
// changes nothing of the request): /check refuses it instead (docs/enforcer.md,
// "Non-Envoy gateways"), judged as the gateway judges it, from X-Forwarded-Uri and
// X-Forwarded-Method (Caddy, Traefik) or the check's own path after /check (Envoy's HTTP
// ext_authz): a Tollgate key in the query under any name (the proxy would pass it to the
// provider: 401 saying to send it in a header; before 2026-12-02 one beside a header's
// key was admitted and went upstream), an answer the usage reader cannot read and
// Google's response field mask (400 service_gateway_response_format_unsupported), a
// method override (400 service_gateway_method_override_unsupported). None is checked.
func TestCheckRefusesWhatTheProxyCannotRemove(t *testing.T) {
	e := enforcertest.New(t, enforcertest.Options{})
	w := e.NewMember(enforcertest.DayLimit(1*enforcertest.USD, true))
	const gen = "/v1beta/models/gemini-2.5-pro:generateContent"
	for _, tc := range []struct {
		name    string
		path    string // after /check
		headers map[string]string
		status  int
		code    string
	}{
		{"the key in ?key= beside the header's", "", map[string]string{"X-Goog-Api-Key": w.Key, "X-Forwarded-Uri": gen + "?key=" + w.Key}, 401, ""},
		{"the key in %24key alone", "", map[string]string{"X-Forwarded-Uri": gen + "?alt=sse&%24key=" + w.Key}, 401, ""},
		{"the key under another name", "", map[string]string{"X-Api-Key": w.Key, "X-Forwarded-Uri": "/v1/chat/completions?token=" + w.Key}, 401, ""},
		{"the key in the query Envoy appends", gen + "?key=" + w.Key, map[string]string{"X-Goog-Api-Key": w.Key}, 401, ""},
		{"alt=proto", "", map[string]string{"X-Goog-Api-Key": w.Key, "X-Forwarded-Uri": gen + "?%24alt=proto"}, 400, "service_gateway_response_format_unsupported"},
		{"callback", gen + "?c%61llback=f", map[string]string{"X-Goog-Api-Key": w.Key}, 400, "service_gateway_response_format_unsupported"},
		{"alt=media on a POST", "", map[string]string{"X-Goog-Api-Key": w.Key, "X-Forwarded-Method": "POST", "X-Forwarded-Uri": gen + "?alt=media"},
			400, "service_gateway_response_format_unsupported"},
		{"an encoded field mask", "", map[string]string{"X-Goog-Api-Key": w.Key, "X-Forwarded-Uri": gen + "?f%69elds=candidates"},
			400, "service_gateway_response_format_unsupported"},
		{"the field mask header", "", map[string]string{"X-Goog-Api-Key": w.Key, "X-Goog-FieldMask": "candidates", "X-Forwarded-Uri": gen},
			400, "service_gateway_response_format_unsupported"},
		{"X-HTTP-Method-Override", "", map[string]string{"X-Goog-Api-Key": w.Key, "X-HTTP-Method-Override": "POST",
			"X-Forwarded-Method": "PUT", "X-Forwarded-Uri": "/v1alpha/auth_tokens"}, 400, "service_gateway_method_override_unsupported"},
		{"X-Method-Override", "", map[string]string{"X-Api-Key": w.Key, "X-Method-Override": "POST"}, 400, "service_gateway_method_override_unsupported"},
		{"$httpMethod in the query", "", map[string]string{"X-Goog-Api-Key": w.Key, "X-Forwarded-Method": "PUT",
			"X-Forwarded-Uri": "/v1alpha/auth_tokens?x=1&%24httpMethod=POST"}, 400, "service_gateway_method_override_unsupported"},
		// TRACE has the upstream echo the request, the provider's credential the proxy set
		// in it (gate.MethodRefusal).
		{"TRACE", "", map[string]string{"X-Api-Key": w.Key, "X-Forwarded-Method": "TRACE", "X-Forwarded-Uri": "/v1/chat/completions"}, 405, "service_gateway_method_unsupported"},
		{"trace in lower case", "", map[string]string{"X-Api-Key": w.Key, "X-Forwarded-Method": "trace"}, 405, "service_gateway_method_unsupported"},
		// Traefik sends the query on with each ";" turned into "&" (its forwardAuth sends
		// /check the query as it came): judged as the upstream gets it.
		{"alt=proto after a semicolon", "", map[string]string{"X-Goog-Api-Key": w.Key, "X-Forwarded-Uri": gen + "?x=1;alt=proto"},
			400, "service_gateway_response_format_unsupported"},
		{"a field mask after a semicolon", "", map[string]string{"X-Goog-Api-Key": w.Key, "X-Forwarded-Uri": gen + "?x=1;fields=candidates"},
			400, "service_gateway_response_format_unsupported"},
		{"the key after a semicolon", "", map[string]string{"X-Goog-Api-Key": w.Key, "X-Forwarded-Uri": gen + "?key=AIza-provider;token=" + w.Key}, 401, ""},
		// What passes.
		{"alt=sse", "", map[string]string{"X-Goog-Api-Key": w.Key, "X-Forwarded-Uri": gen + "?alt=sse"}, 200, ""},
		{"a file's download", "", map[string]string{"X-Goog-Api-Key": w.Key, "X-Forwarded-Method": "GET", "X-Forwarded-Uri": "/v1beta/files/a:download?alt=media"}, 200, ""},
		{"a provider's key in the query", "", map[string]string{"X-Goog-Api-Key": w.Key, "X-Forwarded-Uri": gen + "?key=AIza-provider"}, 200, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, b := askCheck(t, e, "POST", tc.path, tc.headers)
			if res.StatusCode != tc.status || res.Header.Get("X-Service-Error-Code") != tc.code {
				t.Fatalf("%d %s %s, want %d %q", res.StatusCode, res.Header.Get("X-Service-Error-Code"), b, tc.status, tc.code)
			}
			switch {
			case tc.status == 401 && (!strings.Contains(string(b), "Send it in a header") || !enforcertest.UnauthorizedBody(string(b))):
				t.Fatalf("401 without saying where the key goes: %s", b)
			case (tc.status == 400 || tc.status == 405) && !strings.Contains(string(b), `"code":"`+tc.code+`"`):
				t.Fatalf("%d body %s", tc.status, b)
			case tc.status == 405 && res.Header.Get("Allow") == "":
				t.Fatal("405 without Allow")
			case tc.status != 200 && res.Header.Get("X-Service-Request-Id") != "":
				t.Fatal("a refused request was admitted")
			}
		})
	}
}

// docs/usage-limits.md, "A request ends when its settlement commits": under the
// in-flight guard a request counts in flight until its settlement commits, and a reporter
// answers its client once /settle answered. /settle sent such a settlement after the
// settle queue's linger, as a batch: each guarded request's end came that much later (50
// ms by default), and a reporter that settles as its client sees the end left the
// client's next request to meet the finished one still in flight, refused over a cap of
// one. It now goes at once: for a request this enforcer admitted under the guard, and
// for one it does not know (admitted by another replica, which alone knew whether it is
// guarded). The linger is 1s here, so waiting for it cannot pass for going at once.
func TestGuardedSettlementIsSentAtOnce(t *testing.T) {
	e := enforcertest.New(t, enforcertest.Options{Config: func(c *app.Config) { c.SettleLinger = time.Second }})
	e.CP.SetPrice("gpt-4o", 3, 10)
	capped := enforcertest.DayLimit(1*enforcertest.USD, true)
	capped.MaxInFlight = 1
	w := e.NewMember(capped)
	plain := e.NewMember(enforcertest.DayLimit(1*enforcertest.USD, true))
	h := e.Enforcer.HTTP
	settle := func(id string) time.Duration {
		t.Helper()
		began := time.Now()
		code, out := postSettle(t, h, "127.0.0.1:5555", "", `{"requestId":"`+id+`","model":"gpt-4o","inputTokens":10,"outputTokens":2}`)
		if code != 200 || out["outcome"] != "settled" {
			t.Fatalf("%d %v", code, out)
		}
		return time.Since(began)
	}
	for i := range 3 {
		res, body := httpCheck(t, e, "POST", map[string]string{"X-Api-Key": w.Key})
		if res.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, res.StatusCode, body)
		}
		if took := settle(res.Header.Get("X-Service-Request-Id")); took > 700*time.Millisecond {
			t.Fatalf("request %d: /settle of a guarded request answered after %v: it waited for the settle queue's linger (1s)",
				i, took.Round(time.Millisecond))
		}
	}
	// Admitted by another replica: a durable start this enforcer never saw.
	snap := gate.NoRecordSnapshot(w.Org, w.ID, e.Clock.Now())
	snap.TrackingVersion = 1 << 40 // never older than the member's
	id := typeid.New(gate.RequestPrefix)
	resp, err := e.CP.Start(context.Background(), &internalv1.StartRequest{Items: []*internalv1.StartItem{{RequestId: id,
		OrganizationId: w.Org, MemberId: w.ID, Snapshot: snap, MaxInFlight: 1}}})
	if err != nil || resp.GetResults()[0].GetOutcome() != internalv1.StartOutcome_START_OUTCOME_RECORDED {
		t.Fatalf("start: %v %v", err, resp.GetResults())
	}
	if took := settle(id); took > 700*time.Millisecond {
		t.Fatalf("/settle of a request admitted elsewhere answered after %v: it waited for the settle queue's linger (1s)",
			took.Round(time.Millisecond))
	}
	// A request outside the guard keeps the batching.
	res, _ := httpCheck(t, e, "POST", map[string]string{"X-Api-Key": plain.Key})
	if took := settle(res.Header.Get("X-Service-Request-Id")); took < 900*time.Millisecond {
		t.Fatalf("/settle of an unguarded request answered after %v: it did not linger", took)
	}
}

// A request whose cost the provider bills later (a batch, a fine-tuning job: package
// requestbody, Deferred) is refused 403 at /check as the gateway and Envoy's ext_proc
// refuse it, where its path alone says so: forward-auth is told the method and path
// (X-Forwarded-Method and -Uri, or the path after /check), and nothing else would stop
// it. Before, /check admitted it, and behind the shipped Caddyfile a member's batch of
// any size went through at about no charge, TOLLGATE_DEFERRED_BILLING=refuse (the
// default) notwithstanding. The credential and a spent limit are still answered first,
// as by the others; an operator's allow list lets it through.
func TestCheckRefusesWhatIsBilledLater(t *testing.T) {
	e := enforcertest.New(t, enforcertest.Options{})
	w := e.NewMember(enforcertest.DayLimit(1*enforcertest.USD, true))
	blocked := e.NewMember(enforcertest.DayLimit(1*enforcertest.USD, true))
	e.CP.SetSpend(blocked.ID, window.Day, 1*enforcertest.USD)
	// check asks as Caddy does (GET, the original method in X-Forwarded-Method), or,
	// given a path, as Envoy's HTTP ext_authz does (the request's own method and path).
	check := func(t *testing.T, e *enforcertest.Env, path string, headers map[string]string) (*http.Response, string) {
		t.Helper()
		method := "GET"
		if path != "" {
			method = "POST"
		}
		return askCheck(t, e, method, path, headers)
	}
	batch := map[string]string{"X-Api-Key": w.Key, "X-Forwarded-Method": "POST", "X-Forwarded-Uri": "/v1/batches"}
	for _, tc := range []struct {
		name    string
		path    string
		headers map[string]string
		status  int
		code    string
	}{
		{"a batch", "", batch, 403, "service_gateway_billing_deferred"},
		{"a fine-tuning job, the path after /check (Envoy's HTTP ext_authz)", "/v1/fine_tuning/jobs", map[string]string{"X-Api-Key": w.Key}, 403, "service_gateway_billing_deferred"},
		{"a Gemini batch", "", map[string]string{"X-Goog-Api-Key": w.Key, "X-Forwarded-Method": "POST",
			"X-Forwarded-Uri": "/v1beta/models/gemini-2.5-flash:batchGenerateContent"}, 403, "service_gateway_billing_deferred"},
		{"a Together endpoint started (a PATCH)", "", map[string]string{"X-Api-Key": w.Key, "X-Forwarded-Method": "PATCH",
			"X-Forwarded-Uri": "/v1/endpoints/endpoint-1"}, 403, "service_gateway_billing_deferred"},
		{"an unknown key first", "", map[string]string{"X-Api-Key": "tgk_unknown", "X-Forwarded-Method": "POST", "X-Forwarded-Uri": "/v1/batches"}, 401, ""},
		{"a spent limit first", "", map[string]string{"X-Api-Key": blocked.Key, "X-Forwarded-Method": "POST", "X-Forwarded-Uri": "/v1/batches"},
			429, "service_gateway_usage_limit_exceeded"},
		{"listing the batches", "", map[string]string{"X-Api-Key": w.Key, "X-Forwarded-Method": "GET", "X-Forwarded-Uri": "/v1/batches"}, 200, ""},
		// A WebSocket passes the proxy unread once upgraded (a Realtime session): nobody
		// reports its usage, as ext_proc refuses it for (Caddy's forward_auth sends /check
		// the Upgrade header).
		{"a Realtime WebSocket", "", map[string]string{"X-Api-Key": w.Key, "Upgrade": "websocket", "Connection": "Upgrade",
			"X-Forwarded-Method": "GET", "X-Forwarded-Uri": "/v1/realtime?model=gpt-realtime"}, 403, "service_gateway_billing_deferred"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, b := check(t, e, tc.path, tc.headers)
			if res.StatusCode != tc.status || res.Header.Get("X-Service-Error-Code") != tc.code {
				t.Fatalf("%d %q %s, want %d %q", res.StatusCode, res.Header.Get("X-Service-Error-Code"), b, tc.status, tc.code)
			}
			if tc.status != 200 && res.Header.Get("X-Service-Request-Id") != "" {
				t.Fatal("a refused request was admitted")
			}
			if tc.status == 403 && (!strings.Contains(b, `"code":"service_gateway_billing_deferred"`) || !strings.Contains(b, `"endpoint":"`)) {
				t.Fatalf("403 body %s", b)
			}
		})
	}

	allowing := enforcertest.New(t, enforcertest.Options{Config: func(c *app.Config) { c.DeferredBillingAllow = "batches,realtime_sessions" }})
	w = allowing.NewMember(enforcertest.DayLimit(1*enforcertest.USD, true))
	batch["X-Api-Key"] = w.Key
	if res, b := check(t, allowing, "", batch); res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("X-Service-Request-Id"), "req_") {
		t.Fatalf("a batch allowed: %d %s", res.StatusCode, b)
	}
	if res, b := check(t, allowing, "", map[string]string{"X-Api-Key": w.Key, "Upgrade": "websocket", "Connection": "Upgrade",
		"X-Forwarded-Method": "GET", "X-Forwarded-Uri": "/v1/realtime?model=gpt-realtime"}); res.StatusCode != 200 {
		t.Fatalf("a WebSocket allowed: %d %s", res.StatusCode, b)
	}
	if res, _ := check(t, allowing, "/v1/fine_tuning/jobs", map[string]string{"X-Api-Key": w.Key}); res.StatusCode != 403 {
		t.Fatalf("a fine-tuning job beside an allowed batch: %d", res.StatusCode)
	}
}

// askCheck sends /check a request of method with headers, path after /check (as
// Envoy's HTTP ext_authz sends the request's own), and answers it and its body.
func askCheck(t *testing.T, e *enforcertest.Env, method, path string, headers map[string]string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(method, e.HTTPURL+"/check"+path, nil)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	return res, string(b)
}
