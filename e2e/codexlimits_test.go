package e2e_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"math"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/e2e/fakellm"
)

// TestCodexShowsTheMembersLimit: Codex reads the rate-limit headers of every response
// (x-codex-primary-*) and shows where its user's limits stand (its status line, /status,
// and the account/rateLimits/updated notification its app server sends to IDE
// extensions). Through the gateway they are the member's Tollgate limit: Codex's app
// server (`codex app-server`, the JSON-RPC over standard input and output that Codex's
// IDE extensions speak), with a provider of its own at the gateway as docs/gateway.md
// shows, runs two turns of one thread. A turn is one call or more (the second here is
// two: Codex's answer, and a call of its own after it); Codex announces the limits
// as the calls' responses come. The first it announces in a turn says the day's limit is used as much as
// the member's usage status said before the turn (0%, then what the first turn cost),
// the window a day long and resetting when the status says; any later one, no less
// and no more than the turn's calls had cost by the end.
func TestCodexShowsTheMembersLimit(t *testing.T) {
	t.Parallel()
	awayFromDayBoundary(t, 3*time.Minute)
	// 0.15 USD a call at the organization's price of model, of a 1 USD day.
	const in, out = 500_000, 125_000
	fake, up := fixedUsageUpstream(t, fakellm.Usage{InputTokens: in, OutputTokens: out})
	s := startStack(t, gatewayEnv(up.URL))
	o := s.setUpOrg(t)
	env := []string{"HOME=" + t.TempDir(), "CODEX_HOME=" + t.TempDir(), "TOLLGATE_API_KEY=" + o.key}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd, _, stderr := clientCommand(ctx, t, "codex", env, "app-server",
		"-c", `model_providers.tollgate={name="Tollgate",base_url="`+s.gateway+`/v1",env_key="TOLLGATE_API_KEY",wire_api="responses"}`,
		"-c", "model_provider=tollgate")
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
	defer func() {
		_ = stdin.Close()
		cancel()
		if t.Failed() {
			t.Logf("codex app-server's standard error:\n%s", stderr)
		}
	}()
	app := &codexAppServer{t: t, in: stdin, out: bufio.NewScanner(stdout)}
	app.out.Buffer(make([]byte, 0, 64*1024), 4<<20)
	app.call("initialize", map[string]any{"clientInfo": map[string]string{"name": "tollgate-e2e", "title": "Tollgate e2e", "version": "1"}})
	app.notify("initialized")
	var thread struct{ Thread struct{ ID string } }
	app.result(app.call("thread/start", map[string]any{"model": model}), &thread)

	settled, used := 0, int64(0)
	for turn := range 2 {
		st := s.status(t, o)
		b := st.Buckets[0]
		if b.UsedMicroUsd != used {
			t.Fatalf("turn %d: the status says %d used, want %d", turn+1, b.UsedMicroUsd, used)
		}
		before := len(fake.Calls())
		announced := app.turn(thread.Thread.ID, "How are tolls paid?")
		n, cost := clientCalls(t, s, fake, before, o.key, catalogCost(in, 0, out))
		percent := func(used int64) float64 { return math.Round(float64(used) * 100 / float64(b.AllowanceMicroUsd)) }
		want := codexWindow{UsedPercent: percent(used), WindowDurationMins: int64(b.ResetAt.Sub(b.WindowStart) / time.Minute), ResetsAt: b.ResetAt.Unix()}
		if len(announced) == 0 {
			t.Fatalf("turn %d: Codex did not announce the limits (%d calls)", turn+1, n)
		}
		for i, l := range announced {
			if l.Primary == nil || l.Secondary != nil {
				t.Fatalf("turn %d: Codex says the limits are %+v, want the day's only", turn+1, l)
			}
			got := *l.Primary
			t.Logf("turn %d: Codex announces %+v", turn+1, got)
			if i > 0 && got.UsedPercent >= want.UsedPercent && got.UsedPercent <= percent(used+cost) {
				got.UsedPercent = want.UsedPercent // used by the turn's earlier calls, or not yet
			}
			if got != want {
				t.Errorf("turn %d: Codex's announcement %d of the limits says %+v, want %+v", turn+1, i+1, *l.Primary, want)
			}
		}
		settled, used = settled+n, used+cost
		s.waitUsed(t, o, settled, used)
	}
	if used == 0 || used >= 1_000_000 {
		t.Fatalf("the turns cost %d micro-USD: the second turn's percentage proves nothing", used)
	}
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
	a.call("turn/start", map[string]any{"threadId": thread, "input": []map[string]any{{"type": "text", "text": text}}})
	var limits []codexRateLimits
	var answer string
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
			a.t.Errorf("codex app-server: %s", m.Params)
		case "turn/completed":
			var p struct{ Turn struct{ Status string } }
			if err := json.Unmarshal(m.Params, &p); err != nil || p.Turn.Status != "completed" || answer != fakellm.Text {
				a.t.Fatalf("the turn ended %s with the answer %q, want completed with %q", m.Params, answer, fakellm.Text)
			}
			return limits
		}
	}
}
