package gateway_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tollgate-dev/tollgate/enforcer/gateway"
	"github.com/tollgate-dev/tollgate/enforcer/responseusage"
	"github.com/tollgate-dev/tollgate/enforcer/tokencache"
	"github.com/tollgate-dev/tollgate/internal/awsfake"
	"github.com/tollgate-dev/tollgate/internal/googlefake"
	"github.com/tollgate-dev/tollgate/internal/oauthfake"
)

// A route with a google credential (Vertex AI): each request goes with a Google access
// token in Authorization, fetched with the service account's key and cached, never
// with the member's key. While no token can be had, requests are answered 502 with
// their own code, never sent, and settled at a known 0; once Google answers again,
// they go through.
func TestGoogleTokenRoute(t *testing.T) {
	t.Setenv("HOME", t.TempDir()) // no gcloud credentials of this machine's
	g := googlefake.Start(t)
	var mu sync.Mutex
	var auths []string
	vertex := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auths = append(auths, strings.Join(r.Header.Values("Authorization"), "|"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"type":"message","model":"claude-sonnet-4-5","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":7,"output_tokens":2}}`)
	}))
	defer vertex.Close()
	routes, err := gateway.ParseRoutes([]byte(`
routes:
  - prefix: /v1/projects/
    upstream: `+vertex.URL+`
    google:
      credentialsFile: `+g.ServiceAccountFile(t)+`
`), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if g.Asked() != 0 {
		t.Fatal("parsing the routes fetched a token")
	}
	m, req := newMetrics()
	tr := newTracker()
	gw, err := gateway.New(gateway.Config{Routes: routes}, &fakeGate{}, tr, responseusage.Limits{}, m, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	gw.WarmCredentials(context.Background())
	if got := g.Issued(); len(got) != 1 {
		t.Fatalf("WarmCredentials: issued %v, want the first token", got)
	}
	front := httptest.NewServer(gw)
	defer front.Close()
	const path = "/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929:rawPredict"
	body := `{"anthropic_version":"vertex-2023-10-16","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`
	for range 2 {
		proxiedAndSettled(t, post(t, front.URL+path, "tgk_good", body), tr, 7, 2)
	}
	mu.Lock()
	got := append([]string(nil), auths...)
	mu.Unlock()
	if len(got) != 2 || got[0] != "Bearer ya29.fake-1" || got[1] != "Bearer ya29.fake-1" {
		t.Fatalf("Vertex got Authorization %q, want the one cached token twice", got)
	}

	// A fresh source (a restarted enforcer) while Google's token endpoint fails.
	g.SetFailing(true)
	routes, err = gateway.ParseRoutes([]byte("routes:\n  - prefix: /\n    upstream: "+vertex.URL+"\n    google:\n      credentialsFile: "+
		filepath.ToSlash(g.ServiceAccountFile(t))+"\n"), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	gw, err = gateway.New(gateway.Config{Routes: routes}, &fakeGate{}, tr, responseusage.Limits{}, m, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	front2 := httptest.NewServer(gw)
	defer front2.Close()
	before := testutil.ToFloat64(req.WithLabelValues(gateway.OutcomeNoCredential))
	res := post(t, front2.URL+path, "tgk_good", body)
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusBadGateway || !strings.Contains(string(b), "service_gateway_upstream_credential") ||
		res.Header.Get("X-Service-Request-Id") != "req_test" {
		t.Fatalf("without a token: %d %v %s", res.StatusCode, res.Header, b)
	}
	if u := tr.settledOnce(t); !u.Complete || u.UpstreamStatus != http.StatusBadGateway || u.UpstreamCostMicroUSD == nil || *u.UpstreamCostMicroUSD != 0 {
		t.Fatalf("settled %+v, want complete at a known 0 with status 502", u)
	}
	if got := testutil.ToFloat64(req.WithLabelValues(gateway.OutcomeNoCredential)) - before; got != 1 {
		t.Fatalf("no_credential counted %v times, want 1", got)
	}
	mu.Lock()
	n := len(auths)
	mu.Unlock()
	if n != 2 {
		t.Fatalf("a request without a token reached the upstream (%d calls)", n)
	}
	g.SetFailing(false)
	time.Sleep(tokencache.FailureHold) // the failure answers for a second
	res = post(t, front2.URL+path, "tgk_good", body)
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("after Google recovered: %d", res.StatusCode)
	}
	tr.settledOnce(t)
}

func TestParseGoogleRoutesRefuses(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", filepath.Join(t.TempDir(), "missing.json"))
	for name, doc := range map[string]string{
		"google and credentialEnv":    "routes:\n  - prefix: /\n    upstream: http://x\n    credentialEnv: A\n    google: {}",
		"google and credentialFile":   "routes:\n  - prefix: /\n    upstream: http://x\n    credentialFile: /b\n    google: {}",
		"missing credentials file":    "routes:\n  - prefix: /\n    upstream: http://x\n    google:\n      credentialsFile: /nonexistent/key.json",
		"default credentials missing": "routes:\n  - prefix: /\n    upstream: http://x\n    google: {}",
		"unknown google field":        "routes:\n  - prefix: /\n    upstream: http://x\n    google:\n      keyFile: /k",
	} {
		_, err := gateway.ParseRoutes([]byte(doc), func(k string) string { return "x" })
		if err == nil {
			t.Errorf("%s: accepted", name)
		} else if !strings.Contains(err.Error(), "routes") {
			t.Errorf("%s: %v, want the route named", name, err)
		}
	}
}

// A route with aws (Amazon Bedrock with IAM credentials): each request goes signed with
// SigV4 for the route's region by the enforcer's AWS credentials (here the
// environment's), its body hashed, never with the member's key.
func TestAWSSignedRoute(t *testing.T) {
	dir := t.TempDir()
	for k, v := range map[string]string{"AWS_ACCESS_KEY_ID": "AKIDGATEWAY", "AWS_SECRET_ACCESS_KEY": "gateway-secret", "AWS_SESSION_TOKEN": "",
		"AWS_CONFIG_FILE": filepath.Join(dir, "config"), "AWS_SHARED_CREDENTIALS_FILE": filepath.Join(dir, "credentials"), "AWS_PROFILE": "",
		"AWS_EC2_METADATA_DISABLED": "true"} {
		t.Setenv(k, v)
	}
	var mu sync.Mutex
	var problems []string
	calls := 0
	bedrock := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		calls++
		if p := awsfake.SigV4Problem(r, body, "AKIDGATEWAY", "gateway-secret", "us-east-1", "bedrock"); p != "" {
			problems = append(problems, p)
		}
		if strings.Contains(strings.Join(flattenHeader(r.Header), "\n"), "tgk_") {
			problems = append(problems, "the member's key reached Bedrock")
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"output":{"message":{"content":[{"text":"hi"}]}},"usage":{"inputTokens":7,"outputTokens":2,"totalTokens":9}}`)
	}))
	defer bedrock.Close()
	routes, err := gateway.ParseRoutes([]byte("routes:\n  - prefix: /model/\n    upstream: "+bedrock.URL+"\n    aws:\n      region: us-east-1\n"), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	front, tr := routesFront(t, routes)
	proxiedAndSettled(t, post(t, front.URL+"/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse", "tgk_good",
		`{"messages":[{"role":"user","content":[{"text":"hi"}]}],"inferenceConfig":{"maxTokens":10}}`, "X-Amz-Date", "20000101T000000Z"), tr, 7, 2)
	mu.Lock()
	defer mu.Unlock()
	if calls != 1 || len(problems) > 0 {
		t.Fatalf("Bedrock got %d calls; problems: %v", calls, problems)
	}
}

func flattenHeader(h http.Header) []string {
	var out []string
	for k, vs := range h {
		for _, v := range vs {
			out = append(out, k+": "+v)
		}
	}
	return out
}

// A route with oauth2 (Azure OpenAI with Entra ID): each request goes with the OAuth
// client's access token in the route's header, its secret from the environment.
func TestOAuthClientRoute(t *testing.T) {
	f := oauthfake.Start(t, "tollgate-gateway", "entra-secret")
	var mu sync.Mutex
	var auths []string
	azure := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auths = append(auths, strings.Join(r.Header.Values("Authorization"), "|")+" api-key="+r.Header.Get("Api-Key"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"model":"gpt-4o-mini-2024-07-18","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1}}`)
	}))
	defer azure.Close()
	routes, err := gateway.ParseRoutes([]byte(`
routes:
  - prefix: /openai/
    upstream: `+azure.URL+`
    oauth2:
      tokenURL: `+f.URL+`
      clientID: tollgate-gateway
      clientSecretEnv: ENTRA_SECRET
      scopes: [https://cognitiveservices.azure.com/.default]
`), func(k string) string { return map[string]string{"ENTRA_SECRET": "entra-secret"}[k] })
	if err != nil {
		t.Fatal(err)
	}
	front, tr := routesFront(t, routes)
	for range 2 {
		proxiedAndSettled(t, send(t, "POST", front.URL+"/openai/deployments/gpt-4o-mini/chat/completions?api-version=2024-10-21", "",
			strings.NewReader(`{"messages":[{"role":"user","content":"hi"}]}`), "Api-Key", "tgk_good"), tr, 5, 1)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(auths) != 2 || auths[0] != "Bearer oauth-token-1 api-key=" || auths[1] != auths[0] {
		t.Fatalf("Azure got %q, want the one client token and no api-key", auths)
	}
}

func TestParseOAuthRoutesRefuses(t *testing.T) {
	env := func(string) string { return "" }
	const head = "routes:\n  - prefix: /\n    upstream: http://x\n"
	empty := filepath.Join(t.TempDir(), "empty-secret")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, doc := range map[string]string{
		"empty secret file": head + "    oauth2: {tokenURL: 'https://l/t', clientID: c, clientSecretFile: " + empty + "}",
		"two secrets":       head + "    oauth2: {tokenURL: 'https://l/t', clientID: c, clientSecretEnv: A, clientAssertionFile: /f}",
		"empty secret env":  head + "    oauth2: {tokenURL: 'https://l/t', clientID: c, clientSecretEnv: A}",
		"no client id":      head + "    oauth2: {tokenURL: 'https://l/t', clientSecretFile: /etc/hostname}",
		"missing file":      head + "    oauth2: {tokenURL: 'https://l/t', clientID: c, clientSecretFile: /nonexistent}",
		"plain http":        head + "    oauth2: {tokenURL: 'http://login.example.com/t', clientID: c, clientAssertionFile: /etc/hostname}",
		"oauth2 and google": head + "    google: {}\n    oauth2: {tokenURL: 'https://l/t', clientID: c, clientAssertionFile: /etc/hostname}",
		"unknown field":     head + "    oauth2: {tokenUrl: 'https://l/t', clientID: c, clientAssertionFile: /etc/hostname}",
	} {
		if _, err := gateway.ParseRoutes([]byte(doc), env); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// routesFront serves a gateway of routes, with the fake gate and a tracker, until the
// test ends.
func routesFront(t *testing.T, routes []gateway.Route) (*httptest.Server, *fakeTracker) {
	t.Helper()
	m, _ := newMetrics()
	tr := newTracker()
	gw, err := gateway.New(gateway.Config{Routes: routes}, &fakeGate{}, tr, responseusage.Limits{}, m, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(gw)
	t.Cleanup(front.Close)
	return front, tr
}

// proxiedAndSettled checks that res is the upstream's 200 and its request was settled
// complete with in input and out output tokens.
func proxiedAndSettled(t *testing.T, res *http.Response, tr *fakeTracker, in, out int64) {
	t.Helper()
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("status %d: %s", res.StatusCode, b)
	}
	if u := tr.settledOnce(t); !u.Complete || u.InputTokens != in || u.OutputTokens != out {
		t.Fatalf("settled %+v", u)
	}
}

// failingSigner is a route's signer without credentials (AWS's cannot be had).
type failingSigner struct{}

func (failingSigner) Sign(context.Context, *http.Request, []byte, bool) error {
	return errors.New("no AWS credentials")
}
func (failingSigner) Warm(context.Context) error { return nil }

// A multipart upload on a route that signs (Amazon Bedrock's SigV4) while its credentials
// cannot be had is answered 502 and never sent; the form's reader, started with the
// upstream request (sniffForm), ends with it. Nothing closed its input before, and its
// goroutine waited for the form for ever, one per such request.
func TestUnsignedUploadLeavesNoFormReader(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Error("an unsigned request reached the upstream")
	}))
	defer up.Close()
	rt, err := gateway.NewRoute("/model/", up.URL, "", "")
	if err != nil {
		t.Fatal(err)
	}
	rt.Signer = failingSigner{}
	e := newEnv(t, up.URL, gateway.Config{Routes: []gateway.Route{rt}})
	const form = "--b\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhisper-1\r\n" +
		"--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.mp3\"\r\n\r\nxxxx\r\n--b--\r\n"
	for range 3 {
		res := send(t, "POST", e.front.URL+"/model/x/invoke", "tgk_good", strings.NewReader(form),
			"Content-Type", "multipart/form-data; boundary=b")
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusBadGateway || !strings.Contains(string(b), "service_gateway_upstream_credential") {
			t.Fatalf("%d %s, want 502 (no credential)", res.StatusCode, b)
		}
		if u := e.tracker.settledOnce(t); u.UpstreamStatus != http.StatusBadGateway {
			t.Fatalf("settled %+v, want 502 at a known 0", u)
		}
	}
	formReaders := func() int {
		buf := make([]byte, 1<<20)
		return strings.Count(string(buf[:runtime.Stack(buf, true)]), "gateway.(*formSniffer).parse")
	}
	for deadline := time.Now().Add(5 * time.Second); formReaders() > 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("3 uploads refused before they were sent left %d form readers waiting", formReaders())
		}
	}
}
