package gateway_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/enforcer/gateway"
)

// A route's upstream may have a base path (a tenant's or a gateway's, such as Cloudflare
// AI Gateway's /v1/{account}/{gateway}/openai), to which the request's path is joined. A
// dot segment in the request's path ("..", ".", in any encoding, %2F included) climbed
// out of it: the upstream resolves it (RFC 3986, 5.2.4; nginx, CDNs and Go's ServeMux
// do), and ran the request elsewhere on its host with the route's credential. Such a
// path is refused 400 before anything is read or checked; no SDK sends one (their URL
// libraries resolve dot segments, as curl does). Before 2026-12-03 it went upstream as
// it came.
func TestDotSegmentsNeverClimbOutOfTheUpstreamsBasePath(t *testing.T) {
	var mu sync.Mutex
	var targets []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		targets = append(targets, r.RequestURI)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"model":"gpt-4o-mini","usage":{"prompt_tokens":1,"completion_tokens":1}}`)
	}))
	defer up.Close()
	e := newEnv(t, up.URL+"/tenant-a", gateway.Config{})
	addr := strings.TrimPrefix(e.front.URL, "http://")
	const body = `{"model":"gpt-4o-mini","messages":[]}`
	send := func(target string) string {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer tgk_good\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
			target, len(body), body)
		b, _ := io.ReadAll(c)
		return string(b)
	}
	for _, target := range []string{
		"/../tenant-b/v1/chat/completions",
		"/v1/../../tenant-b/v1/chat/completions",
		"/v1/%2e%2e/%2E%2E/tenant-b/v1/chat/completions",
		"/v1/..%2F..%2Ftenant-b/v1/chat/completions",
		"/v1/./chat/completions",
		"/v1/chat/completions/..",
		// Servlet containers (Tomcat, Jetty) drop a segment's ";" parameters before they
		// resolve dot segments: "..;" is "..", "..;x=1" too (before 2026-12-07 it passed).
		"/..;/tenant-b/v1/chat/completions",
		"/v1/..;x=1/..;/tenant-b/v1/chat/completions",
		"/v1/.;/chat/completions",
		"/v1/%2e%2e%3b/%2e%2e;/tenant-b/v1/chat/completions",
	} {
		got := send(target)
		status, _, _ := strings.Cut(got, "\r\n")
		if status != "HTTP/1.1 400 Bad Request" || !strings.Contains(got, "X-Service-Error-Code: service_gateway_path_unsupported") {
			t.Errorf("%s: %s", target, got)
		}
	}
	mu.Lock()
	reached := targets
	targets = nil
	mu.Unlock()
	e.gate.mu.Lock()
	checked := len(e.gate.hints)
	e.gate.mu.Unlock()
	if len(reached) != 0 || checked != 0 {
		t.Fatalf("the upstream got %q, %d checks; want none", reached, checked)
	}
	// What SDKs send passes, under the base path; dots within a segment are no dot segment.
	for _, target := range []string{"/v1/chat/completions", "/model/anthropic.claude-3-5-sonnet-20240620-v1:0/converse", "/v1/files/..abc",
		"/v1/files/a;..", "/v1/files/...;x"} {
		if got := send(target); !strings.HasPrefix(got, "HTTP/1.1 200 ") {
			t.Errorf("%s: %s", target, got)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(targets) != 5 || targets[0] != "/tenant-a/v1/chat/completions" {
		t.Fatalf("the upstream got %q", targets)
	}
}
