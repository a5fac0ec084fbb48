package e2e_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/e2e/fakellm"
)

// TestCodexShowsTheMembersLimit: Codex reads the rate-limit headers of every response
// (x-codex-primary-*), and in a Responses WebSocket session its codex.rate_limits
// events, and announces where its user's limits stand (the account/rateLimits/updated
// notification its app server sends its clients, the IDE extensions among them).
// Through the gateway they are the member's Tollgate limit. Codex's app server (`codex
// app-server`, the JSON-RPC over standard input and output that Codex's IDE extensions
// speak), with a provider of its own at the gateway as docs/gateway.md shows, over HTTP
// and over the Responses WebSocket, runs two turns of one thread. A turn is one call
// or more (the second over HTTP is two: Codex's answer, and a call of its own after
// it; over the WebSocket a warmup and the turn); Codex announces the limits as the
// calls are admitted or answered. Each says the day's limit is used no less than the
// member's usage status said before the turn and no more than after it, the window a
// day long and resetting when the status says; the second turn's first says exactly
// what the status said before it (the first turn's charges all applied: over HTTP 0%,
// then what the first turn cost). (Over the WebSocket Codex sends the session's warmup
// as the thread starts, so its first turn may already see the warmup's cost.) Over HTTP
// the limits are named Tollgate (X-Codex-Limit-Name); a session's event names none. A
// third turn, after the member spent the day, is refused, and Codex announces the day
// spent over both (the refusal is an HTTP 429 either way), unnamed: named, Codex's
// error would leave out the way to ask for more (TestCodexThroughTheGateway holds it).
func TestCodexShowsTheMembersLimit(t *testing.T) {
	t.Parallel()
	awayFromDayBoundary(t, 3*time.Minute)
	// A few percent of a 1 USD day a call.
	fake, up := fixedUsageUpstream(t, fakellm.Usage{InputTokens: 100_000, OutputTokens: 20_000})
	s := startStack(t, gatewayEnv(up.URL))
	for _, tc := range []struct {
		name, model, provider string
	}{
		{"HTTP", model, `wire_api="responses"`},
		// A model Codex knows: its session opens with a warmup.
		{"the Responses WebSocket", "gpt-5.5", `wire_api="responses",supports_websockets=true`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// answered counts the provider's answers: its HTTP calls, and the responses
			// it sent over the WebSocket; each is charged.
			answered := func() int {
				n := fake.ResponsesAnswered()
				for _, c := range fake.Calls() {
					if c.API != fakellm.OpenAIResponsesWebSocket {
						n++
					}
				}
				return n
			}
			base := answered()
			o := s.setUpOrg(t)
			// The price of model for any model, so that a call is a few percent.
			s.must(t, 200, "PUT", "/v1/gateway/model-prices", o.owner.token, o.id, map[string]any{"prices": []map[string]any{{
				"model": tc.model, "inputMicroUsdPerMillion": inputPrice, "outputMicroUsdPerMillion": outputPrice,
				"cachedInputMicroUsdPerMillion": cachedPrice}}}, nil)
			app := startCodexAppServer(t, []string{"HOME=" + t.TempDir(), "CODEX_HOME=" + t.TempDir(), "TOLLGATE_API_KEY=" + o.key},
				"-c", `model_providers.tollgate={name="Tollgate",base_url="`+s.gateway+`/v1",env_key="TOLLGATE_API_KEY",`+tc.provider+`}`,
				"-c", "model_provider=tollgate")
			var thread struct{ Thread struct{ ID string } }
			app.result(app.call("thread/start", map[string]any{"model": tc.model}), &thread)
			used := int64(0)
			for turn := range 2 {
				b := s.status(t, o).Buckets[0]
				if b.UsedMicroUsd != used {
					t.Fatalf("turn %d: the status says %d used, want %d", turn+1, b.UsedMicroUsd, used)
				}
				announced := app.turn(thread.Thread.ID, "How are tolls paid?")
				after := chargedSum(t, s, o, answered()-base)
				percent := func(used int64) float64 { return math.Round(float64(used) * 100 / float64(b.AllowanceMicroUsd)) }
				if len(announced) == 0 {
					t.Fatalf("turn %d: Codex did not announce the limits", turn+1)
				}
				for i, l := range announced {
					// Named over HTTP (X-Codex-Limit-Name); a WebSocket session's event can
					// name none.
					if l.Primary == nil || l.Secondary != nil || l.LimitID != "codex" || (tc.name == "HTTP") != (l.LimitName == "Tollgate") {
						t.Fatalf("turn %d: Codex says the limits are %+v, want the day's only (named Tollgate over HTTP)", turn+1, l)
					}
					got := *l.Primary
					t.Logf("turn %d: Codex announces %+v (%s, %q)", turn+1, got, l.LimitID, l.LimitName)
					if got.WindowDurationMins != int64(b.ResetAt.Sub(b.WindowStart)/time.Minute) || got.ResetsAt != b.ResetAt.Unix() {
						t.Errorf("turn %d: Codex says the window is %d minutes long and resets at %d; the status says %s - %s",
							turn+1, got.WindowDurationMins, got.ResetsAt, b.WindowStart, b.ResetAt)
					}
					if got.UsedPercent < percent(used) || got.UsedPercent > percent(after) ||
						(turn == 1 && i == 0 && got.UsedPercent != percent(used)) {
						t.Errorf("turn %d: Codex's announcement %d says %v%% used; the status said %v%% before the turn, %v%% after it",
							turn+1, i+1, got.UsedPercent, percent(used), percent(after))
					}
				}
				used = after
			}
			if used >= 1_000_000 || percent0(used) == 0 {
				t.Fatalf("the turns cost %d micro-USD: the second turn's percentage proves nothing", used)
			}

			// The rest of the day spent by a call of the member's to a dearer model, the
			// next turn is refused, and Codex shows the day spent: the 429 carries the
			// limits too.
			s.must(t, 200, "PUT", "/v1/gateway/model-prices", o.owner.token, o.id, map[string]any{"prices": []map[string]any{
				{"model": tc.model, "inputMicroUsdPerMillion": inputPrice, "outputMicroUsdPerMillion": outputPrice, "cachedInputMicroUsdPerMillion": cachedPrice},
				{"model": "dear", "inputMicroUsdPerMillion": 10 * usd, "outputMicroUsdPerMillion": 0, "cachedInputMicroUsdPerMillion": 0}}}, nil)
			if code, _, _ := postJSON(t, s.gateway, "/v1/responses", "Authorization", o.key, `{"model":"dear","input":"Spend it."}`); code != 200 {
				t.Fatalf("the dear call answered %d", code)
			}
			s.waitBlocked(t, o)
			b := s.status(t, o).Buckets[0]
			limits, status, errorInfo, _ := app.run(thread.Thread.ID, "And when they are spent?")
			for _, l := range limits {
				t.Logf("the refused turn: %s (%s), Codex announces %+v", status, errorInfo, l.Primary)
			}
			if status != "failed" || errorInfo != "usageLimitExceeded" {
				t.Errorf("the refused turn ended %s (%s), want failed (usageLimitExceeded)", status, errorInfo)
			}
			// The header's one decimal, which Codex rounds to a whole percent.
			spent := math.Round(math.Floor(float64(b.UsedMicroUsd)*1000/float64(b.AllowanceMicroUsd)) / 10)
			if spent < 100 {
				t.Fatalf("the status says %d of %d used: not spent", b.UsedMicroUsd, b.AllowanceMicroUsd)
			}
			if n := len(limits); n == 0 || limits[n-1].Primary == nil || limits[n-1].Primary.UsedPercent != spent || limits[n-1].LimitName != "" ||
				limits[n-1].Primary.ResetsAt != b.ResetAt.Unix() {
				t.Errorf("Codex's last announcement %+v, want the day %v%% used (the status: %d of %d), resetting at %d",
					limits, spent, b.UsedMicroUsd, b.AllowanceMicroUsd, b.ResetAt.Unix())
			}
		})
	}
}

// percent0 is the whole percent of a 1 USD day that used is.
func percent0(used int64) int64 { return used * 100 / 1_000_000 }

// chargedSum waits until o has n charged receipts and the member's usage status says
// what they add up to, and returns the sum. (A settlement is written to the enforcers'
// mirror before it is answered.)
func chargedSum(t *testing.T, s *stack, o org, n int) int64 {
	t.Helper()
	var sum int64
	waitFor(t, 15*time.Second, fmt.Sprintf("%d charges settled", n), func() bool {
		charged := chargedReceipts(t, s, o)
		sum = 0
		for _, r := range charged {
			var cost int64
			if _, err := fmt.Sscan(r, &cost); err != nil {
				t.Fatalf("receipt %q: %v", r, err)
			}
			sum += cost
		}
		return len(charged) == n && s.status(t, o).Buckets[0].UsedMicroUsd == sum
	})
	return sum
}

// startCodexAppServer starts `codex app-server` (args after it) with env, initialized,
// and ends it when the test ends.
func startCodexAppServer(t *testing.T, env []string, args ...string) *codexAppServer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	cmd, _, stderr := clientCommand(ctx, t, "codex", env, append([]string{"app-server"}, args...)...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, w := io.Pipe()
	cmd.Stdout = w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = w.CloseWithError(cmd.Wait()) }()
	t.Cleanup(func() {
		_ = stdin.Close()
		cancel()
		if t.Failed() {
			t.Logf("codex app-server's standard error:\n%s", stderr)
		}
	})
	app := &codexAppServer{t: t, in: stdin, out: bufio.NewScanner(stdout)}
	app.out.Buffer(make([]byte, 0, 64*1024), 4<<20)
	app.call("initialize", map[string]any{"clientInfo": map[string]string{"name": "tollgate-e2e", "title": "Tollgate e2e", "version": "1"}})
	app.notify("initialized")
	return app
}

// codexAppServer speaks Codex's app server protocol: JSON-RPC 2.0 messages, one a line,
// without the "jsonrpc" member.
type codexAppServer struct {
	t      *testing.T
	in     io.Writer
	out    *bufio.Scanner
	lastID int
}

// codexMessage is a message of the app server's: a response (ID and Result or Error) or
// a notification (Method and Params).
type codexMessage struct {
	ID     *int
	Method string
	Params json.RawMessage
	Result json.RawMessage
	Error  json.RawMessage
}

// codexRateLimits is the snapshot account/rateLimits/updated carries.
type codexRateLimits struct {
	LimitID, LimitName string
	Primary, Secondary *codexWindow
}

type codexWindow struct {
	UsedPercent        float64
	WindowDurationMins int64
	ResetsAt           int64
}

func (a *codexAppServer) send(m map[string]any) {
	a.t.Helper()
	b, _ := json.Marshal(m)
	if _, err := a.in.Write(append(b, '\n')); err != nil {
		a.t.Fatal(err)
	}
}

func (a *codexAppServer) notify(method string) { a.send(map[string]any{"method": method}) }

// call sends a request and returns its response, handing the notifications before it
// to seen.
func (a *codexAppServer) call(method string, params any) codexMessage {
	a.t.Helper()
	a.lastID++
	a.send(map[string]any{"id": a.lastID, "method": method, "params": params})
	for {
		m := a.next()
		if m.ID != nil && *m.ID == a.lastID && m.Method == "" {
			if len(m.Error) > 0 {
				a.t.Fatalf("%s: %s", method, m.Error)
			}
			return m
		}
	}
}

func (a *codexAppServer) result(m codexMessage, v any) {
	a.t.Helper()
	if err := json.Unmarshal(m.Result, v); err != nil {
		a.t.Fatalf("%s: %v", m.Result, err)
	}
}

// next is the app server's next message; a request of the server's (an approval, say)
// fails the test: these turns run nothing.
func (a *codexAppServer) next() codexMessage {
	a.t.Helper()
	if !a.out.Scan() {
		a.t.Fatalf("codex app-server ended: %v", a.out.Err())
	}
	var m codexMessage
	if err := json.Unmarshal(a.out.Bytes(), &m); err != nil {
		a.t.Fatalf("codex app-server sent %q: %v", a.out.Bytes(), err)
	}
	if m.ID != nil && m.Method != "" {
		a.t.Fatalf("codex app-server asks %s: %s", m.Method, m.Params)
	}
	return m
}

// turn starts a turn of thread with text and reads until it completes, requiring it to
// have answered with the fake provider's text; it returns the rate limits Codex
// announced meanwhile, in order.
func (a *codexAppServer) turn(thread, text string) []codexRateLimits {
	a.t.Helper()
	limits, status, errorInfo, answer := a.run(thread, text)
	if status != "completed" || answer != fakellm.Text {
		a.t.Fatalf("the turn ended %s (%s) with the answer %q, want completed with %q", status, errorInfo, answer, fakellm.Text)
	}
	return limits
}

// run starts a turn of thread with text and reads until it ends: it returns the rate
// limits Codex announced meanwhile, in order, the turn's status, its error's
// codexErrorInfo if it failed, and its answer. An error Codex reports of a turn that
// completes fails the test.
func (a *codexAppServer) run(thread, text string) (limits []codexRateLimits, status, errorInfo, answer string) {
	a.t.Helper()
	a.call("turn/start", map[string]any{"threadId": thread, "input": []map[string]any{{"type": "text", "text": text}}})
	var errs []string
	for {
		m := a.next()
		switch m.Method {
		case "account/rateLimits/updated":
			var p struct{ RateLimits codexRateLimits }
			if err := json.Unmarshal(m.Params, &p); err != nil {
				a.t.Fatalf("%s: %v", m.Params, err)
			}
			limits = append(limits, p.RateLimits)
		case "item/completed":
			var p struct{ Item struct{ Type, Text string } }
			if json.Unmarshal(m.Params, &p) == nil && p.Item.Type == "agentMessage" {
				answer = p.Item.Text
			}
		case "error":
			errs = append(errs, string(m.Params))
		case "turn/completed":
			var p struct {
				Turn struct {
					Status string
					Error  *struct{ CodexErrorInfo json.RawMessage }
				}
			}
			if err := json.Unmarshal(m.Params, &p); err != nil {
				a.t.Fatalf("%s: %v", m.Params, err)
			}
			if p.Turn.Error != nil {
				// A string (usageLimitExceeded) or an object naming one.
				errorInfo = strings.Trim(string(p.Turn.Error.CodexErrorInfo), `"`)
			}
			if p.Turn.Status == "completed" && len(errs) > 0 {
				a.t.Errorf("codex app-server reported errors of a turn that completed: %s", errs)
			}
			return limits, p.Turn.Status, errorInfo, answer
		}
	}
}
