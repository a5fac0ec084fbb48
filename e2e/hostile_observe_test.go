package e2e_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	prommodel "github.com/prometheus/common/model"

	"github.com/tollgate-dev/tollgate/e2e/fakellm"
	"github.com/tollgate-dev/tollgate/internal/testio"
)

// hostileUpstream is fakellm, except that a request naming a status in X-Test-Status is
// answered with that status and a JSON error (the provider's error codes vary with the
// client's input: the gateway must not turn them into series).
type hostileUpstream struct{ fake *fakellm.Server }

func (u hostileUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("X-Test-Status") == "cut" || strings.HasSuffix(r.URL.Path, "/realtime") {
		panic(http.ErrAbortHandler) // the connection is broken off before an answer
	}
	if s, err := strconv.Atoi(r.Header.Get("X-Test-Status")); err == nil && s >= 200 && s <= 999 {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(s)
		fmt.Fprintf(w, `{"error":{"type":"t%d","code":"c%d","message":"m %s"}}`, s, s, r.Header.Get("X-Test-Status"))
		return
	}
	u.fake.ServeHTTP(w, r)
}

// seriesCount reads an admin /metrics with the Prometheus text parser and returns the
// number of series of each family (a histogram's or summary's series counted once per
// label set), and every label value.
func seriesCount(t testing.TB, admin string) (map[string]int, map[string]bool) {
	t.Helper()
	res, err := http.Get(admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	p := expfmt.NewTextParser(prommodel.UTF8Validation)
	fams, err := p.TextToMetricFamilies(res.Body)
	if err != nil {
		t.Fatalf("parsing %s/metrics: %v", admin, err)
	}
	out, values := map[string]int{}, map[string]bool{}
	for name, f := range fams {
		out[name] = len(f.GetMetric())
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				values[l.GetValue()] = true
			}
		}
	}
	return out, values
}

// grown lists the families whose series count grew from before to after, and by how
// many series in all.
func grown(before, after map[string]int) ([]string, int) {
	var g []string
	total := 0
	for name, n := range after {
		if n > before[name] {
			g = append(g, fmt.Sprintf("%s: %d -> %d", name, before[name], n))
			total += n - before[name]
		}
	}
	sort.Strings(g)
	return g, total
}

// waitSettled waits until the stack's enforcer has no start and no settlement that the
// control plane has not acknowledged. The gateway queues a request's settlement before
// its client reads the answer's end, so after a round whose answers were all read, every
// settlement of the round has then landed. (The in-flight gauge is not waited for: an
// ext_authz check admitted with nothing following it stays there until it is abandoned.)
func waitSettled(t *testing.T, s *stack) {
	t.Helper()
	waitFor(t, 30*time.Second, "the enforcer's start and settle queues empty", func() bool {
		return s.metric(t, "tollgate_enforcer_start_queue_depth") == 0 && s.metric(t, "tollgate_enforcer_settle_queue_depth") == 0
	})
}

// hostileRound sends n requests of every kind an internet client can vary, each with
// values of its own (seed): model names, paths, API keys, organization ids, header
// values, upstream status codes, through the gateway, /check, ext_authz and the control
// plane's REST API. It returns the number of requests sent and the words it made up.
func hostileRound(t *testing.T, s *stack, o org, seed uint64, n int) (int, []string) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed))
	var words []string
	word := func() string {
		w := strconv.FormatUint(rng.Uint64(), 36)
		words = append(words, w)
		return w
	}
	client := &http.Client{Timeout: 20 * time.Second}
	var sent int
	var wg sync.WaitGroup
	jobs := make(chan func(), 64)
	for range 8 {
		wg.Go(func() {
			for j := range jobs {
				j()
			}
		})
	}
	do := func(req *http.Request) {
		res, err := client.Do(req)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
	statuses := []int{200, 201, 299, 400, 401, 402, 403, 404, 409, 418, 422, 429, 451, 499, 500, 501, 502, 503, 504, 529, 599, 600, 799, 999}
	for i := range n {
		model := "model-" + word()
		key := "tgk_" + word() + word()
		path := "/v1/" + word() + "/" + word()
		hv := word()
		status := statuses[i%len(statuses)]
		orgID := "org_" + word()
		sent += 7
		jobs <- func() {
			// The gateway, with a bad key.
			body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi"}]}`, model)
			req, _ := http.NewRequest("POST", s.gateway+path, strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+key)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-"+hv, hv)
			req.Header.Set("OpenAI-Organization", orgID)
			do(req)
			// The gateway, with the member's key: a model nobody priced, a path of its
			// own, an upstream status of its own.
			req, _ = http.NewRequest("POST", s.gateway+"/v1/chat/completions", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+o.key)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Test-Status", strconv.Itoa(status))
			req.Header.Set("Accept-Encoding", "identity")
			do(req)
			// A malformed body.
			req, _ = http.NewRequest("POST", s.gateway+"/v1/chat/completions", strings.NewReader(`{"model":"`+model+`",`))
			req.Header.Set("Authorization", "Bearer "+o.key)
			req.Header.Set("Content-Type", "application/json")
			do(req)
			// /check with a bad key and odd headers.
			req, _ = http.NewRequest("POST", s.enfHTTP+"/check", nil)
			req.Header.Set("x-api-key", key)
			req.Header.Set("X-Forwarded-Uri", path)
			req.Header.Set("X-"+hv, hv)
			do(req)
			// ext_authz with a bad key, a path and a method of its own.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			cr := checkRequest(map[string]string{"x-api-key": key, ":path": path, "x-" + hv: hv})
			cr.Attributes.Request.Http.Path = path
			cr.Attributes.Request.Http.Method = strings.ToUpper(hv[:3])
			_, _ = s.authz.Check(ctx, cr)
			cancel()
			// The REST API: an unknown path, a bad token, an organization of its own.
			req, _ = http.NewRequest([]string{"GET", "POST", "PATCH", "BREW"}[i%4], s.rest+path, strings.NewReader("{"))
			req.Header.Set("Authorization", "Bearer "+key)
			req.Header.Set("X-Organization-Id", orgID)
			do(req)
			req, _ = http.NewRequest("GET", s.rest+"/v1/organizations/"+orgID+"/members/"+word(), nil)
			req.Header.Set("Authorization", "Bearer "+o.owner.token)
			do(req)
		}
	}
	close(jobs)
	wg.Wait()
	return sent, words
}

// TestHostileTrafficIsBoundedInSeriesAndLogs drives both programs with thousands of
// distinct model names, paths, API keys, organization ids, header values and upstream
// status codes, twice: the second round, all of its values new, must add no series to
// either program's /metrics, and its log lines must stay within a bound per request.
func TestHostileTrafficIsBoundedInSeriesAndLogs(t *testing.T) {
	t.Parallel()
	fake := &fakellm.Server{Usage: func(c fakellm.Call) fakellm.Usage { return fakellm.Usage{InputTokens: 10, OutputTokens: 5} }}
	upSrv := httptest.NewServer(hostileUpstream{fake: fake})
	t.Cleanup(upSrv.Close)
	s := startStack(t, gatewayEnv(upSrv.URL))
	o := s.setUpOrg(t)

	// One huge field per request: a header value, a model name, a path, a query name near
	// the servers' 1 MiB header limit, to an upstream that breaks the connection off; and
	// clients that leave before the answer. No line may quote a field whole. First, while
	// every throttle is fresh (nothing has failed yet on this stack), so that each kind of
	// line is logged, not counted as suppressed (the throttles' interval is 10 s).
	cpLog0, enfLog0 := len(s.cpLogs.String()), len(s.enfLogs.String())
	huge := strings.Repeat("A", 900<<10)
	client := &http.Client{Timeout: 20 * time.Second}
	do := func(req *http.Request) {
		if res, err := client.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
	}
	for i := range 2 {
		body := `{"model":"` + huge + `","messages":[{"role":"user","content":"hi"}]}`
		req, _ := http.NewRequest("POST", s.gateway+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+o.key)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Test-Status", "cut")
		do(req)
		req, _ = http.NewRequest("POST", s.gateway+"/v1/chat/completions", strings.NewReader(`{"model":"m","messages":[]}`))
		req.Header.Set("Authorization", "Bearer "+o.key)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Test-Status", "cut")
		req.Header.Set("X-Huge", huge)
		do(req)
		req, _ = http.NewRequest("POST", s.gateway+"/v1/"+huge, strings.NewReader(`{"model":"m","messages":[]}`))
		req.Header.Set("Authorization", "Bearer "+o.key)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Test-Status", "cut")
		do(req)
		req, _ = http.NewRequest("GET", s.gateway+"/v1/realtime?model=gpt-realtime&"+huge+"=1", nil)
		req.Header.Set("Authorization", "Bearer "+o.key)
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", "websocket")
		req.Header.Set("Sec-WebSocket-Version", "13")
		req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
		do(req)
		req, _ = http.NewRequest("POST", s.enfHTTP+"/check", nil)
		req.Header.Set("x-api-key", huge)
		req.Header.Set("X-Forwarded-Uri", "/v1/"+huge[:1000])
		do(req)
		req, _ = http.NewRequest("GET", s.rest+"/v1/"+huge, nil)
		req.Header.Set("Authorization", "Bearer "+huge[:500<<10])
		do(req)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, _ = s.authz.Check(ctx, checkRequest(map[string]string{"x-api-key": o.key, ":path": "/v1/" + huge, "x-huge": huge}))
		cancel()
		// A client that leaves at once.
		ctx, cancel = context.WithTimeout(context.Background(), time.Duration(i+1)*time.Millisecond)
		req, _ = http.NewRequestWithContext(ctx, "POST", s.gateway+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+o.key)
		req.Header.Set("Content-Type", "application/json")
		do(req)
		cancel()
	}
	cpLog, enfLog := s.cpLogs.String()[cpLog0:], s.enfLogs.String()[enfLog0:]
	t.Logf("huge fields: control plane logged %d lines, enforcer %d lines", strings.Count(cpLog, "\n"), strings.Count(enfLog, "\n"))
	for name, l := range map[string]string{"control plane": cpLog, "enforcer": enfLog} {
		for line := range strings.Lines(l) {
			if len(line) > 4<<10 {
				t.Errorf("the %s logged a line of %d bytes: %.300s...", name, len(line), line)
			}
		}
		if strings.Contains(l, o.key) {
			t.Errorf("the %s logged the member's API key", name)
		}
	}

	cpAdmin := "http://" + s.cp.addrs["admin"]
	_, _ = hostileRound(t, s, o, 1, 300)
	// Let the settlements of the first round land, so the second round meets every
	// series the first created.
	waitSettled(t, s)
	cpBefore, _ := seriesCount(t, cpAdmin)
	enfBefore, _ := seriesCount(t, s.enfAdmin)
	cpLog0, enfLog0 = len(s.cpLogs.String()), len(s.enfLogs.String())
	sent, words := hostileRound(t, s, o, 2, 600)
	waitSettled(t, s)
	cpAfter, cpValues := seriesCount(t, cpAdmin)
	enfAfter, enfValues := seriesCount(t, s.enfAdmin)
	// No label value carries anything the clients made up, and the second round, all
	// of its values new, adds at most the few series of a label value first met in it
	// (an internal method called for the first time, say): not one per request.
	for _, w := range words {
		for v := range cpValues {
			if strings.Contains(v, w) {
				t.Errorf("a control plane label value carries client input %q: %q", w, v)
			}
		}
		for v := range enfValues {
			if strings.Contains(v, w) {
				t.Errorf("an enforcer label value carries client input %q: %q", w, v)
			}
		}
	}
	if g, n := grown(cpBefore, cpAfter); n > 10 {
		t.Errorf("control plane series grew by %d with new client input:\n%s", n, strings.Join(g, "\n"))
	}
	if g, n := grown(enfBefore, enfAfter); n > 10 {
		t.Errorf("enforcer series grew by %d with new client input:\n%s", n, strings.Join(g, "\n"))
	}
	cpLog, enfLog = s.cpLogs.String()[cpLog0:], s.enfLogs.String()[enfLog0:]
	t.Logf("%d requests: control plane logged %d lines (%d bytes), enforcer %d lines (%d bytes)", sent,
		strings.Count(cpLog, "\n"), len(cpLog), strings.Count(enfLog, "\n"), len(enfLog))
	// Both programs' real output, every series of the traffic in it, passes promtool's
	// checks (naming, units, _total, help).
	t.Run("promtool", func(t *testing.T) {
		promtool := testio.LookTool(t, "promtool", "apt-get install --no-install-recommends prometheus")
		for name, admin := range map[string]string{"control plane": cpAdmin, "enforcer": s.enfAdmin} {
			res, err := http.Get(admin + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(promtool, "check", "metrics")
			cmd.Stdin = res.Body
			out, err := cmd.CombinedOutput()
			res.Body.Close()
			if err != nil || len(bytes.TrimSpace(out)) > 0 {
				t.Errorf("promtool check metrics on the %s: %v\n%s", name, err, out)
			}
		}
	})

	// A refused or malformed request writes no line of its own: what is logged is
	// throttled, one line per kind per interval (10 s) for the whole round.
	if n := strings.Count(enfLog, "\n") + strings.Count(cpLog, "\n"); n > 40 {
		t.Errorf("%d requests wrote %d log lines", sent, n)
	}

}
