package gateway_test

import (
	"bytes"
	"compress/gzip"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tollgate-dev/tollgate/enforcer/gateway"
	"github.com/tollgate-dev/tollgate/enforcer/metrics"
	"github.com/tollgate-dev/tollgate/enforcer/requestbody"
	"github.com/tollgate-dev/tollgate/enforcer/responseusage"
	"github.com/tollgate-dev/tollgate/internal/alerttest"
	"github.com/tollgate-dev/tollgate/internal/testio"
)

// catalogueMetrics are the gateway's metrics from the enforcer's catalogue, as the
// enforcer wires them (enforcer/app).
func catalogueMetrics(m *metrics.Metrics) gateway.Metrics {
	return gateway.Metrics{Requests: m.GatewayRequests, Active: m.GatewayActive, FirstByte: m.GatewayFirstByte,
		Upstream: m.GatewayUpstreamResponses}
}

// TestUpstreamAnswersAreCountedLoggedAndAlerted: a provider that rejects the route's
// credential (a revoked or rotated key: 401, 403) or fails (503, Anthropic's 529
// overloaded) answers every request, which the gateway proxies (outcome="proxied").
// Until 2026-12-03 nothing told them from a 200: no metric carried the status, nothing
// was logged, no alert fired. Now tollgate_enforcer_gateway_upstream_responses_total
// counts them by code, a 401 or 403 is logged (throttled: once here, naming the route
// and the status, never the credential), and alerts.yaml, run by promtool on the
// enforcer's real registry's change repeated for 90 minutes, fires
// TollgateGatewayCredentialRejected (401, 403) or TollgateGatewayUpstreamFailing (5xx,
// 529); a provider answering 200 fires neither.
func TestUpstreamAnswersAreCountedLoggedAndAlerted(t *testing.T) {
	for _, tc := range []struct {
		status int
		code   string
		alert  string // "": none of the gateway's upstream alerts
		logged bool
	}{
		{401, "401", "TollgateGatewayCredentialRejected", true},
		{403, "403", "TollgateGatewayCredentialRejected", true},
		{503, "503", "TollgateGatewayUpstreamFailing", false},
		{529, "529", "TollgateGatewayUpstreamFailing", false},
		{200, "2xx", "", false},
	} {
		t.Run(strconv.Itoa(tc.status), func(t *testing.T) {
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tc.status)
				if tc.status == 200 {
					_, _ = io.WriteString(w, `{"model":"gpt-4o-mini","usage":{"prompt_tokens":7,"completion_tokens":5}}`)
					return
				}
				_, _ = io.WriteString(w, `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}`)
			}))
			defer up.Close()
			reg := prometheus.NewRegistry()
			m := metrics.New(reg)
			rt, err := gateway.NewRoute("/openai", up.URL, "", "Bearer sk-provider-secret")
			if err != nil {
				t.Fatal(err)
			}
			logs := &testio.SyncBuffer{}
			tr := newTracker()
			gw, err := gateway.New(gateway.Config{Routes: []gateway.Route{rt}}, &fakeGate{}, tr, responseusage.Limits{},
				catalogueMetrics(m), slog.New(slog.NewTextHandler(logs, nil)))
			if err != nil {
				t.Fatal(err)
			}
			front := httptest.NewServer(gw)
			defer front.Close()
			before := alerttest.Scrape(t, reg, "enforcer")
			const n = 20
			for range n {
				res := post(t, front.URL+"/openai/v1/chat/completions", "tgk_good", chatBody)
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode != tc.status {
					t.Fatalf("status %d, want the provider's %d", res.StatusCode, tc.status)
				}
				<-tr.done
			}
			if got := testutil.ToFloat64(m.GatewayUpstreamResponses.WithLabelValues("/openai", tc.code)); got != n {
				t.Errorf("upstream_responses_total{route=\"/openai\",code=%q} = %v, want %d", tc.code, got, n)
			}
			line := `msg="gateway: upstream rejected the route's credential"`
			if got := strings.Count(logs.String(), line); tc.logged && got != 1 || !tc.logged && got != 0 {
				t.Errorf("%d lines %s (logged: %v, throttled to one)\n%s", got, line, tc.logged, logs)
			}
			if tc.logged && (!strings.Contains(logs.String(), "route=/openai") || !strings.Contains(logs.String(), "status="+tc.code)) {
				t.Errorf("the line names neither the route nor the status:\n%s", logs)
			}
			if strings.Contains(logs.String(), "sk-provider-secret") {
				t.Fatalf("the credential is logged:\n%s", logs)
			}
			after := alerttest.Scrape(t, reg, "enforcer")
			firing := alerttest.Firing(t, before, after)
			for _, a := range []string{"TollgateGatewayCredentialRejected", "TollgateGatewayUpstreamFailing"} {
				if want := a == tc.alert; slices.Contains(firing, a) != want {
					t.Errorf("the provider answers %d to every request for 90 minutes: %s firing %v, want %v (firing: %v)", tc.status, a, !want, want, firing)
				}
			}
		})
	}
}

// One route's key revoked among busier routes: every request of that route fails, but
// its 401s were a small share of the enforcer's answers, and
// TollgateGatewayCredentialRejected, which compared them with all of them, never fired.
// The answers are counted by route now and the alert's ratio is a route's: 2 requests a
// minute of a revoked Anthropic key beside 30 good OpenAI ones fire it for that route;
// the good route's answers fire nothing.
func TestOneRoutesRejectedCredentialIsAlertedAmongBusierRoutes(t *testing.T) {
	mk := func(status int) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_, _ = io.WriteString(w, `{"model":"gpt-4o-mini","usage":{"prompt_tokens":7,"completion_tokens":5}}`)
		}))
	}
	good, revoked := mk(200), mk(401)
	defer good.Close()
	defer revoked.Close()
	openai, err := gateway.NewRoute("/", good.URL, "", "Bearer sk-openai")
	if err != nil {
		t.Fatal(err)
	}
	anthropic, err := gateway.NewRoute("/v1/messages", revoked.URL, "x-api-key", "sk-ant-revoked")
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	tr := newTracker()
	gw, err := gateway.New(gateway.Config{Routes: []gateway.Route{openai, anthropic}}, &fakeGate{}, tr, responseusage.Limits{},
		catalogueMetrics(m), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(gw)
	defer front.Close()
	before := alerttest.Scrape(t, reg, "enforcer")
	for i := range 32 {
		path := "/v1/chat/completions"
		if i%16 == 0 {
			path = "/v1/messages"
		}
		res := post(t, front.URL+path, "tgk_good", chatBody)
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		<-tr.done
	}
	if got := testutil.ToFloat64(m.GatewayUpstreamResponses.WithLabelValues("/v1/messages", "401")); got != 2 {
		t.Fatalf("upstream_responses_total{route=\"/v1/messages\",code=\"401\"} = %v, want 2", got)
	}
	firing := alerttest.Firing(t, before, alerttest.Scrape(t, reg, "enforcer"))
	if !slices.Contains(firing, "TollgateGatewayCredentialRejected") {
		t.Errorf("one route's every answer a 401 for 90 minutes: TollgateGatewayCredentialRejected not firing (firing: %v)", firing)
	}
}

// TestDecodeBusyFiresTollgateGatewayBusy: compressed bodies refused 503
// service_gateway_busy because the decoding budget is taken are counted
// outcome="decode_busy"; until 2026-12-03 TollgateGatewayBusy read outcome="busy" only
// and no alert fired while clients were refused. The enforcer's real registry's change
// (3 of 7 requests refused each minute) is repeated for 90 minutes through promtool.
func TestDecodeBusyFiresTollgateGatewayBusy(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"model":"gpt-4o-mini","usage":{"prompt_tokens":7,"completion_tokens":5}}`)
	}))
	defer up.Close()
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	entered := make(chan struct{}, 8)
	hold := make(chan struct{})
	dec := requestbody.NewDecoding(requestbody.DecodeBudget, requestbody.DecodeWait, m.RequestDecodes)
	dec.Held = func() { entered <- struct{}{}; <-hold }
	rt, err := gateway.NewRoute("/", up.URL, "", "Bearer sk-provider")
	if err != nil {
		t.Fatal(err)
	}
	tr := newTracker()
	gw, err := gateway.New(gateway.Config{Routes: []gateway.Route{rt}, Decoding: dec}, &fakeGate{}, tr, responseusage.Limits{},
		catalogueMetrics(m), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(gw)
	defer front.Close()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	const decoded = 15 << 20
	_, _ = zw.Write([]byte(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"` + strings.Repeat("abcdefgh ", decoded/9-10) + `"}]}`))
	_ = zw.Close()
	before := alerttest.Scrape(t, reg, "enforcer")
	const n, fit = 7, requestbody.DecodeBudget / decoded
	statuses := make(chan int, n)
	for range n {
		go func() {
			req, _ := http.NewRequest("POST", front.URL+"/v1/chat/completions", bytes.NewReader(b.Bytes()))
			req.Header.Set("Authorization", "Bearer tgk_good")
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Content-Encoding", "gzip")
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				statuses <- 0
				return
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			statuses <- res.StatusCode
		}()
	}
	for range fit {
		<-entered
	}
	busy := 0
	for range n - fit {
		if <-statuses == http.StatusServiceUnavailable {
			busy++
		}
	}
	close(hold)
	for range fit {
		<-statuses
	}
	if busy != n-fit {
		t.Fatalf("%d of %d requests answered 503, want %d", busy, n, n-fit)
	}
	after := alerttest.Scrape(t, reg, "enforcer")
	if got := after[`tollgate_enforcer_gateway_requests_total{job="enforcer",instance="enforcer-1",outcome="decode_busy"}`].V; got != float64(busy) {
		t.Fatalf("outcome=decode_busy counted %v, want %d:\n%s", got, busy, strings.Join(alerttest.Moved(before, after), "\n"))
	}
	if firing := alerttest.Firing(t, before, after); !slices.Contains(firing, "TollgateGatewayBusy") {
		t.Fatalf("%d of %d requests answered 503 service_gateway_busy (decoding budget) every minute for 90 minutes; TollgateGatewayBusy does not fire (firing: %v)", busy, n, firing)
	}
}
