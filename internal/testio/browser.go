package testio

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// BrowserCalls runs a page in the real headless Chromium that POSTs one chat completion
// to endpoint for each key (Authorization: Bearer, a JSON body and an SDK's header, so
// the browser sends a CORS preflight first, as a browser app's SDK does), in turn, and
// returns what the page read of each answer, joined by "|": "<status> <X-Service-Usage-State>
// <X-Service-Error-Code> <answer|refusal|other>" ("-" for a header the page could not
// read), or "error <message>" when the browser refused the call (a failed preflight, a
// CORS policy that hides the answer).
func BrowserCalls(t testing.TB, endpoint string, keys ...string) string {
	t.Helper()
	chromium := LookTool(t, "chromium", "apt-get install chromium")
	var calls []string
	for _, k := range keys {
		calls = append(calls, `await call("`+k+`")`)
	}
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = io.WriteString(w, `<html><body><script>
async function call(key) {
  try {
    const r = await fetch("`+endpoint+`", {method: "POST",
      headers: {"Authorization": "Bearer " + key, "Content-Type": "application/json", "X-Stainless-Lang": "js"},
      body: JSON.stringify({model: "gpt-4o-mini", messages: [{role: "user", content: "hi"}]})});
    const body = await r.text();
    return r.status + " " + (r.headers.get("X-Service-Usage-State") || "-") + " " + (r.headers.get("X-Service-Error-Code") || "-") +
      " " + (body.includes("hello") ? "answer" : body.includes("usage_limit") ? "refusal" : "other");
  } catch (err) {
    return "error " + err;
  }
}
(async () => { const seen = [`+strings.Join(calls, ", ")+`]; document.body.textContent = "[" + seen.join("|") + "]"; })();
</script></body></html>`)
	}))
	defer page.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--user-data-dir="+t.TempDir(), "--virtual-time-budget=10000", "--dump-dom", page.URL).Output()
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	_, got, _ := strings.Cut(string(out), "[")
	got, _, _ = strings.Cut(got, "]")
	return got
}
