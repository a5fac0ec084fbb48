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
	return pageSees(t, `
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
`+mainOverKeys("call", keys))
}

// pageSees has the real headless Chromium load a page running script, which defines
// `async function main()`, and returns the string main resolved to ("error <message>"
// when it threw). The page posts it to its own server, and an image of the page that
// server holds until then keeps the page loading, so that Chromium dumps it (and exits)
// only once main is done, however long its network waits take: virtual time
// (--virtual-time-budget) runs on while a WebSocket waits for messages.
func pageSees(t testing.TB, script string) string {
	t.Helper()
	chromium := LookTool(t, "chromium", "apt-get install chromium")
	result := make(chan string, 1)
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/result":
			b, _ := io.ReadAll(r.Body)
			select {
			case result <- string(b):
			default:
			}
		case "/hold":
			select {
			case got := <-result:
				result <- got // for the test to read
			case <-r.Context().Done():
			case <-time.After(50 * time.Second):
			}
			w.Header().Set("Content-Type", "image/gif")
		default:
			w.Header().Set("Content-Type", "text/html")
			_, _ = io.WriteString(w, `<html><body><script>`+script+`
(async () => {
  let out;
  try { out = await main(); } catch (err) { out = "error " + err; }
  await fetch("/result", {method: "POST", body: out});
})();
</script><img src="/hold"></body></html>`)
		}
	}))
	defer page.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := exec.CommandContext(ctx, chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--user-data-dir="+t.TempDir(), "--dump-dom", page.URL).Output(); err != nil {
		t.Fatalf("chromium: %v", err)
	}
	select {
	case got := <-result:
		return got
	default:
		t.Fatal("the page reported nothing before Chromium was done with it")
		return ""
	}
}

// BrowserRealtime runs a page in the real headless Chromium that opens a Realtime
// session at endpoint (a ws:// URL naming the model) for each key in turn, as a
// browser's Realtime client does: its key in a subprotocol ("realtime" and
// "openai-insecure-api-key.<key>"), since a page cannot set a WebSocket's headers. Once
// the server's session.created came, it asks for one response and waits for its
// response.done, then closes (1000). It returns what the page saw of each session,
// joined by "|": "open <the subprotocol the handshake chose> <responses done>", or
// "closed <code>" when the session closed before it opened (a browser is told no HTTP
// status of a refused handshake: 1006), or "timeout".
func BrowserRealtime(t testing.TB, endpoint string, keys ...string) string {
	t.Helper()
	return pageSees(t, `
function session(key) {
  return new Promise((resolve) => {
    const ws = new WebSocket("`+endpoint+`", ["realtime", "openai-insecure-api-key." + key]);
    let opened = false, done = 0;
    const timer = setTimeout(() => { resolve("timeout"); ws.close(); }, 20000);
    ws.onopen = () => { opened = true; };
    ws.onmessage = (m) => {
      const ev = JSON.parse(m.data);
      if (ev.type === "session.created") ws.send(JSON.stringify({type: "response.create"}));
      if (ev.type === "response.done") { done++; ws.close(1000, "done"); }
    };
    ws.onclose = (e) => { clearTimeout(timer); resolve(opened ? "open " + (ws.protocol || "-") + " " + done : "closed " + e.code); };
  });
}
`+mainOverKeys("session", keys))
}

// mainOverKeys is a page's main: it awaits the page's function fn for each key in turn
// and returns their results joined by "|".
func mainOverKeys(fn string, keys []string) string {
	calls := make([]string, len(keys))
	for i, k := range keys {
		calls[i] = `await ` + fn + `("` + k + `")`
	}
	return `async function main() { return [` + strings.Join(calls, ", ") + `].join("|"); }`
}
