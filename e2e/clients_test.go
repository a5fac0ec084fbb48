package e2e_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/e2e/fakellm"
	"github.com/tollgate-dev/tollgate/pkg/pricecatalog"
)

// clientRun is what an AI coding tool's one-shot run gave: its exit code, its standard
// output and error, and how long it took.
type clientRun struct {
	exit           int
	stdout, stderr string
	took           time.Duration
}

// runClient runs e2e/clients' tool (claude, codex, gemini, opencode, qwen, cline) with args in a
// scratch working directory, with only PATH and env in its environment (a HOME of its
// own among them) and nothing on its standard input. A run that hangs is killed after
// two minutes.
func runClient(t *testing.T, tool string, env []string, args ...string) clientRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd, stdout, stderr := clientCommand(ctx, t, tool, env, args...)
	start := time.Now()
	err := cmd.Run()
	r := clientRun{stdout: stdout.String(), stderr: stderr.String(), took: time.Since(start)}
	if ctx.Err() != nil {
		t.Fatalf("%s %v did not finish within two minutes\nstdout: %s\nstderr: %s", tool, args, r.stdout, r.stderr)
	}
	if exit, ok := err.(*exec.ExitError); ok {
		r.exit = exit.ExitCode()
	} else if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	t.Logf("%s (%s, exit %d): %s", tool, r.took.Round(time.Millisecond), r.exit, strings.TrimSpace(r.stdout))
	return r
}

// clientCommand is the command runClient runs (killed whole when ctx ends), with the
// buffers its output goes to.
func clientCommand(ctx context.Context, t *testing.T, tool string, env []string, args ...string) (cmd *exec.Cmd, stdout, stderr *bytes.Buffer) {
	t.Helper()
	bin := filepath.Join(npmDir(t, "clients"), "node_modules", ".bin", tool)
	cmd = exec.CommandContext(ctx, bin, args...)
	// Its own process group, killed whole: codex is a Node wrapper around the native
	// binary, which would outlive the wrapper and hold the output pipes.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	cmd.Dir = t.TempDir()
	// The Node.js of e2e/sdk's lock (22) first: Debian 12's is 18, and the Gemini CLI
	// needs 20 or later.
	path := os.Getenv("PATH")
	if node := sdkNode(sdkDir(t)); filepath.IsAbs(node) {
		path = filepath.Dir(node) + string(os.PathListSeparator) + path
	}
	cmd.Env = append([]string{"PATH=" + path}, env...)
	stdout, stderr = new(bytes.Buffer), new(bytes.Buffer)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	return cmd, stdout, stderr
}

// clientCalls waits for the receipts of the provider calls since before and requires
// each to be charged want (a token count, which a tool may make before a turn, 0),
// complete, and the member's key never to have reached the provider; it returns how many
// there were and what they cost.
func clientCalls(t *testing.T, s *stack, fake *fakellm.Server, before int, key string, want int64) (n int, cost int64) {
	t.Helper()
	calls := fake.Calls()[before:]
	if len(calls) == 0 {
		t.Fatal("the provider got no call")
	}
	checkOnlyTheProviderCredential(t, calls, key)
	for _, c := range calls {
		w := want
		if c.API == fakellm.AnthropicCountTokens || c.API == fakellm.GeminiCountTokens {
			w = 0
		}
		rec := waitReceipt(t, s, c.Header.Get("X-Service-Request-Id"))
		if rec.cost() != w || rec["complete"] != true {
			t.Errorf("%s %s: receipt %s, want %d, complete", c.API, c.Model, rec, w)
		}
		cost += w
	}
	t.Logf("%d provider calls, charged %d", len(calls), cost)
	return len(calls), cost
}

// blockedRun waits until the member is blocked, runs the tool once (run), and requires
// it to have sent its call once: one refusal at the gateway, no call reaching the
// provider. It returns the run for the caller to check what the tool showed.
func blockedRun(t *testing.T, s *stack, o org, fake *fakellm.Server, tool string, run func() clientRun) clientRun {
	t.Helper()
	return blockedRunRefused(t, s, o, fake, tool, 1, run)
}

// blockedRunRefused is blockedRun for a tool that opens more than one connection for a
// call (Codex's WebSocket: one as its session starts, one for the turn): the gateway
// must refuse refusals of them, no more.
func blockedRunRefused(t *testing.T, s *stack, o org, fake *fakellm.Server, tool string, refusals float64, run func() clientRun) clientRun {
	t.Helper()
	s.waitBlocked(t, o)
	before := len(fake.Calls())
	refused := s.metric(t, "tollgate_enforcer_gateway_requests_total", "outcome", "refused")
	r := run()
	if n := len(fake.Calls()) - before; n != 0 {
		t.Errorf("blocked, the provider got %d calls from %s", n, tool)
	}
	if n := s.metric(t, "tollgate_enforcer_gateway_requests_total", "outcome", "refused") - refused; n != refusals {
		t.Errorf("blocked, the gateway refused %v calls from %s, want %v: it sent the call again", n, tool, refusals)
	}
	return r
}

// catalogCostOf is the catalog's price of in input and out output tokens of model.
func catalogCostOf(t *testing.T, model string, in, out int64) int64 {
	t.Helper()
	e, ok := pricecatalog.Lookup(model)
	if !ok {
		t.Fatalf("%s is not in the catalog", model)
	}
	return ceilDiv(in*e.InputPerMillion+out*e.OutputPerMillion, 1_000_000)
}

// TestClaudeCodeThroughTheGateway: Anthropic's Claude Code (e2e/clients' pinned
// release, its native binary), set up as docs/gateway.md says (ANTHROPIC_BASE_URL at
// the gateway, the member's key in ANTHROPIC_API_KEY, sent as x-api-key, or in
// ANTHROPIC_AUTH_TOKEN, sent as Authorization: Bearer), answers a one-shot prompt
// (`claude -p`): every call it made charged exactly, the member's key never reaching
// the provider. Once the member's limit is spent it fails at once with the usage-limit
// 429's message, having sent the call once (it did so with the gateway's
// X-Should-Retry: false taken away too: Claude Code does not retry this 429 whatever
// that header says).
func TestClaudeCodeThroughTheGateway(t *testing.T) {
	t.Parallel()
	awayFromDayBoundary(t, 3*time.Minute)
	const claude = "claude-haiku-4-5"
	// 0.60 USD a call at the catalog's price: two calls spend the 1 USD day limit.
	fake, up := fixedUsageUpstream(t, fakellm.Usage{InputTokens: 100_000, OutputTokens: 100_000})
	s := startStack(t, gatewayEnv(up.URL))
	o := s.setUpOrg(t)
	want := catalogCostOf(t, claude, 100_000, 100_000)
	env := func(keyVar string) []string { return claudeCodeEnv(t, s, keyVar, o.key) }
	prompt := []string{"-p", "How are tolls paid?", "--model", claude, "--output-format", "json"}
	var result struct {
		Result         string
		IsError        bool `json:"is_error"`
		APIErrorStatus *int `json:"api_error_status"`
	}
	settled, used := 0, int64(0)
	for _, keyVar := range []string{"ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"} {
		t.Run(keyVar, func(t *testing.T) {
			before := len(fake.Calls())
			r := runClient(t, "claude", env(keyVar), prompt...)
			if err := json.Unmarshal([]byte(r.stdout), &result); r.exit != 0 || err != nil || result.IsError || result.Result != fakellm.Text {
				t.Fatalf("claude -p: exit %d, %+v (%v)\nstderr: %s", r.exit, result, err, r.stderr)
			}
			n, cost := clientCalls(t, s, fake, before, o.key, want)
			settled, used = settled+n, used+cost
		})
	}
	s.waitUsed(t, o, settled, used)
	r := blockedRun(t, s, o, fake, "claude", func() clientRun { return runClient(t, "claude", env("ANTHROPIC_API_KEY"), prompt...) })
	result.Result, result.APIErrorStatus = "", nil
	_ = json.Unmarshal([]byte(r.stdout), &result)
	if r.exit == 0 || !result.IsError || result.APIErrorStatus == nil || *result.APIErrorStatus != 429 ||
		!strings.Contains(result.Result, "Usage limit exceeded (day)") {
		t.Errorf("blocked, claude -p: exit %d, %+v; want the usage-limit 429's message", r.exit, result)
	}
}

// claudeCodeEnv is Claude Code's environment for calls through s's gateway with key in
// keyVar (ANTHROPIC_API_KEY or ANTHROPIC_AUTH_TOKEN), and a HOME of its own.
func claudeCodeEnv(t *testing.T, s *stack, keyVar, key string) []string {
	return []string{"HOME=" + t.TempDir(), "ANTHROPIC_BASE_URL=" + s.gateway, keyVar + "=" + key,
		// Nothing but the calls the prompt needs: no telemetry, no update check.
		"DISABLE_TELEMETRY=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_AUTOUPDATER=1"}
}

// TestClaudeCodeToolLoopThroughTheGateway: a turn of Claude Code that runs a tool is
// several provider calls: the model (the fake provider, fakellm.Server.ToolUse) asks for
// its Bash tool, Claude Code runs the command (allowed with --allowedTools) and calls
// again with its result, answered with text. Both calls go through the gateway and each
// is charged exactly, as any call is (their sum what Claude Code's own total_cost_usd
// says); the command did run.
func TestClaudeCodeToolLoopThroughTheGateway(t *testing.T) {
	t.Parallel()
	awayFromDayBoundary(t, 3*time.Minute)
	const claude = "claude-haiku-4-5"
	const in, out = 20_000, 1_000
	fake, s, o, paid := toolLoopStack(t, "Bash", in, out)
	r := runClient(t, "claude", claudeCodeEnv(t, s, "ANTHROPIC_API_KEY", o.key), "-p", "Pay the toll", "--model", claude, "--output-format", "json", "--allowedTools", "Bash")
	var result struct {
		Result    string
		IsError   bool    `json:"is_error"`
		TotalCost float64 `json:"total_cost_usd"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &result); r.exit != 0 || err != nil || result.IsError || result.Result != fakellm.Text {
		t.Fatalf("claude -p: exit %d, %+v (%v)\nstderr: %s", r.exit, result, err, r.stderr)
	}
	cost := toolLoopCharged(t, s, o, fake, paid, fakellm.AnthropicMessages, catalogCostOf(t, claude, in, out))
	if int64(math.Round(result.TotalCost*1e6)) != cost {
		t.Errorf("charged %d micro-USD; Claude Code's own count said %v USD", cost, result.TotalCost)
	}
}

// toolLoopStack is a stack whose gateway fronts a fake provider that asks for the
// client's tool (its name; its input a shell command, and a description, which writes
// "tolls" to the file paid names) before it answers, every call reporting in input and out
// output tokens, and an organization on it.
func toolLoopStack(t *testing.T, tool string, in, out int64) (fake *fakellm.Server, s *stack, o org, paid string) {
	t.Helper()
	paid = filepath.Join(t.TempDir(), "paid.txt")
	fake = &fakellm.Server{Usage: func(fakellm.Call) fakellm.Usage { return fakellm.Usage{InputTokens: in, OutputTokens: out} },
		ToolUse: &fakellm.ToolUse{Name: tool, Input: `{"command":"echo tolls > ` + paid + `","description":"Pay the toll"}`}}
	up := httptest.NewServer(fake)
	t.Cleanup(up.Close)
	s = startStack(t, gatewayEnv(up.URL))
	return fake, s, s.setUpOrg(t), paid
}

// toolLoopCharged requires the tool's command to have run (paid written) and the
// provider to have got two calls of api, the tool's call and the answer, each charged
// price (clientCalls); it returns what the provider's calls cost, once the member's
// spend shows it.
func toolLoopCharged(t *testing.T, s *stack, o org, fake *fakellm.Server, paid, api string, price int64) int64 {
	t.Helper()
	if b, err := os.ReadFile(paid); err != nil || strings.TrimSpace(string(b)) != "tolls" {
		t.Errorf("the tool's command did not run: %q (%v)", b, err)
	}
	var calls int
	for _, c := range fake.Calls() {
		if c.API == api {
			calls++
		}
	}
	n, cost := clientCalls(t, s, fake, 0, o.key, price)
	if calls != 2 {
		t.Errorf("the provider got %d %s calls (of %d), want the tool's call and the answer", calls, api, n)
	}
	s.waitUsed(t, o, n, cost)
	return cost
}

// codexEvents reads `codex exec --json`'s events (one JSON object a line): the agent's
// messages and the errors it reported.
func codexEvents(out string) (messages, errors []string) {
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		var ev struct {
			Type    string
			Message string
			Item    struct{ Type, Text, Message string }
			Error   struct{ Message string }
		}
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			continue
		}
		switch {
		case ev.Type == "item.completed" && ev.Item.Type == "agent_message":
			messages = append(messages, ev.Item.Text)
		case ev.Type == "error":
			errors = append(errors, ev.Message)
		case ev.Type == "turn.failed":
			errors = append(errors, ev.Error.Message)
		}
	}
	return messages, errors
}

// TestCodexThroughTheGateway: OpenAI's Codex CLI (e2e/clients' pinned release, its
// native binary) with a model provider of its own for the gateway, as docs/gateway.md
// shows (Codex does not read OPENAI_BASE_URL: `-c model_providers.tollgate={...}` with
// the gateway's /v1 as base_url, the member's key in the variable env_key names, and the
// Responses API), answers `codex exec`: every call it made charged exactly, the member's
// key never reaching the provider. Once the member's limit is spent it fails at once
// with its own usage-limit message and the reset's time, having sent the call once: the
// refusal's error type, usage_limit_reached, is the one Codex reads as a spent limit.
// (Before, the type was usage_limit_error, and Codex read the 429 as retryable: without
// stream_max_retries=0 it showed "Reconnecting... 1/5" and waited out Retry-After, the
// hours until the window resets.)
func TestCodexThroughTheGateway(t *testing.T) {
	t.Parallel()
	awayFromDayBoundary(t, 3*time.Minute)
	// 0.60 USD a call at the organization's price of model: two calls spend the limit.
	const in, out = 2_000_000, 500_000
	fake, up := fixedUsageUpstream(t, fakellm.Usage{InputTokens: in, OutputTokens: out})
	s := startStack(t, gatewayEnv(up.URL))
	o := s.setUpOrg(t)
	want := catalogCost(in, 0, out)
	env := []string{"HOME=" + t.TempDir(), "CODEX_HOME=" + t.TempDir(), "TOLLGATE_API_KEY=" + o.key}
	args := []string{"exec", "--skip-git-repo-check", "--json", "-m", model,
		"-c", `model_providers.tollgate={name="Tollgate",base_url="` + s.gateway + `/v1",env_key="TOLLGATE_API_KEY",wire_api="responses"}`,
		"-c", "model_provider=tollgate", "How are tolls paid?"}
	settled, used := 0, int64(0)
	for i := range 2 {
		before := len(fake.Calls())
		r := runClient(t, "codex", env, args...)
		messages, errs := codexEvents(r.stdout)
		if r.exit != 0 || len(messages) == 0 || messages[len(messages)-1] != fakellm.Text {
			t.Fatalf("codex exec %d: exit %d, messages %q, errors %q\nstderr: %s", i+1, r.exit, messages, errs, r.stderr)
		}
		n, cost := clientCalls(t, s, fake, before, o.key, want)
		settled, used = settled+n, used+cost
	}
	s.waitUsed(t, o, settled, used)
	r := blockedRun(t, s, o, fake, "codex", func() clientRun { return runClient(t, "codex", env, args...) })
	checkCodexUsageLimit(t, s, r)
	s.waitUsed(t, o, settled, used)
}

// codexUsageLimit is what Codex says of a usage-limit 429 (error type
// usage_limit_reached, without a ChatGPT plan) whose X-Codex-Promo-Message names the way
// to ask for more of the day (the tests' policies allow it): the header's words, then
// "or try again at" the time of resets_at.
var codexUsageLimit = regexp.MustCompile(`hit your usage limit\. You may ask for more: POST (\S+) with your API key and \{"bucketId":"[0-9a-f]{64}","reason":"<why>"\} for the day, or try again at `)

// checkCodexUsageLimit requires a blocked `codex exec --json` run to have failed with
// Codex's usage-limit message, naming s's control plane as where to ask for more.
func checkCodexUsageLimit(t *testing.T, s *stack, r clientRun) {
	t.Helper()
	_, errs := codexEvents(r.stdout)
	var m []string
	if len(errs) > 0 {
		m = codexUsageLimit.FindStringSubmatch(errs[len(errs)-1])
	}
	if r.exit == 0 || m == nil || m[1] != s.rest+"/v1/gateway/usage-limit-reset-requests" {
		t.Errorf("blocked, codex exec: exit %d, errors %q; want Codex's usage-limit message with the way to ask for more at %s", r.exit, errs, s.rest)
	}
}

// chargedReceipts are o's receipts that charged something, in the order they were
// settled, each "<cost> <complete>": a WebSocket session's idle requests, settled at 0,
// left out.
func chargedReceipts(t *testing.T, s *stack, o org) []string {
	t.Helper()
	var got []string
	for _, r := range receiptRows(t, s, o, "cost_micro_usd, complete") {
		if !strings.HasPrefix(r, "0 ") {
			got = append(got, r)
		}
	}
	return got
}

// TestCodexOverTheResponsesWebSocket: the Codex CLI sends a model it knows (gpt-5.5) over
// the Responses API's WebSocket mode: a warmup (a response.create with "generate": false,
// which prepares the turn and generates nothing) and then the turn, two responses on one
// session, each checked and charged as the request it is. First with Codex's own OpenAI
// provider pointed at the gateway (openai_base_url, the member's key in CODEX_API_KEY),
// as most of its users have it: both responses charged exactly, nothing sent over HTTP,
// the member's key never reaching the provider. (A member refused between the warmup and
// the turn is not held by a test: what Codex does then depends on timing, docs/gateway.md
// says what was seen.) (Until this test the fake
// provider read 32 KiB a message at most: Codex's turn is larger, and on that 1009
// close Codex left the WebSocket for HTTP, so no Codex session over it had been run.)
func TestCodexOverTheResponsesWebSocket(t *testing.T) {
	t.Parallel()
	awayFromDayBoundary(t, 3*time.Minute)
	const codexModel = "gpt-5.5" // a model Codex knows: it uses the WebSocket for those
	// Prices of the organization's own, so that the amounts are round: a warmup costs
	// 350,000 micro-USD (its input), a turn 400,000 (its input and 50,000 output tokens).
	const in, out = 3_500_000, 50_000
	const inPrice, outPrice = 100_000, 1_000_000
	fake, up := fixedUsageUpstream(t, fakellm.Usage{InputTokens: in, OutputTokens: out})
	s := startStack(t, gatewayEnv(up.URL))
	o := s.setUpOrg(t)
	s.must(t, 200, "PUT", "/v1/gateway/model-prices", o.owner.token, o.id, map[string]any{"prices": []map[string]any{{
		"model": codexModel, "inputMicroUsdPerMillion": inPrice, "outputMicroUsdPerMillion": outPrice,
		"cachedInputMicroUsdPerMillion": inPrice}}}, nil)
	warmup, turn := int64(in*inPrice/1_000_000), int64(in*inPrice/1_000_000+out*outPrice/1_000_000)
	// sessionsSince are the provider's calls since before, all of which must be
	// WebSocket sessions with the provider's credential alone; it returns how many
	// messages each carried.
	sessionsSince := func(t *testing.T, before int) (messages []string) {
		t.Helper()
		calls := fake.Calls()[before:]
		checkOnlyTheProviderCredential(t, calls, o.key)
		for _, c := range calls {
			if c.API != fakellm.OpenAIResponsesWebSocket {
				t.Errorf("the provider got %s %s: want the Responses WebSocket alone", c.Method, c.Path)
			}
			messages = append(messages, string(c.Body))
		}
		return messages
	}
	// The session's Call counts its messages when it ends, after Codex exits.
	waitSessions := func(t *testing.T, before int, want ...string) {
		t.Helper()
		var got []string
		waitFor(t, 10*time.Second, fmt.Sprintf("sessions of %q messages", want), func() bool {
			got = sessionsSince(t, before)
			return slices.Equal(got, want)
		})
	}

	t.Run("its own OpenAI provider", func(t *testing.T) {
		before := len(fake.Calls())
		env := []string{"HOME=" + t.TempDir(), "CODEX_HOME=" + t.TempDir(), "CODEX_API_KEY=" + o.key}
		r := runClient(t, "codex", env, "exec", "--skip-git-repo-check", "--json", "-m", codexModel,
			"-c", `openai_base_url="`+s.gateway+`/v1"`, "How are tolls paid?")
		messages, errs := codexEvents(r.stdout)
		if r.exit != 0 || len(messages) == 0 || messages[len(messages)-1] != fakellm.Text || len(errs) != 0 {
			t.Fatalf("codex exec: exit %d, messages %q, errors %q\nstderr: %s", r.exit, messages, errs, r.stderr)
		}
		// One session: the warmup and the turn.
		waitSessions(t, before, "2")
		s.waitUsed(t, o, 2, warmup+turn)
		if got, want := chargedReceipts(t, s, o), []string{fmt.Sprint(warmup, " true"), fmt.Sprint(turn, " true")}; !slices.Equal(got, want) {
			t.Errorf("charged %q, want the warmup's and the turn's %q", got, want)
		}
	})

	t.Run("its own OpenAI provider, blocked", func(t *testing.T) {
		// The first subtest spent 0.75 USD: a limit of that blocks the member.
		s.blockAtSpend(t, o)
		env := []string{"HOME=" + t.TempDir(), "CODEX_HOME=" + t.TempDir(), "CODEX_API_KEY=" + o.key}
		// Two handshakes refused: the session's first connection (Codex opens it as the
		// session starts and goes on when it fails) and the turn's, no call over HTTP.
		r := blockedRunRefused(t, s, o, fake, "codex", 2, func() clientRun {
			return runClient(t, "codex", env, "exec", "--skip-git-repo-check", "--json", "-m", codexModel,
				"-c", `openai_base_url="`+s.gateway+`/v1"`, "How are tolls paid?")
		})
		checkCodexUsageLimit(t, s, r)
	})
}

// TestCodexToolLoopOverTheResponsesWebSocket: a Codex turn that runs a command is
// several responses on one Responses WebSocket session: the warmup, the response that
// asks for Codex's exec_command function (the fake provider's ToolUse), and, once Codex
// ran it, the response to its output, answered with text. Each of the three is checked
// and charged as the request it is (the warmup its input; the other two their input and
// output), the session holding one request between them.
func TestCodexToolLoopOverTheResponsesWebSocket(t *testing.T) {
	t.Parallel()
	awayFromDayBoundary(t, 3*time.Minute)
	const codexModel = "gpt-5.5"
	const in, out = 10_000, 1_000 // 0.21 USD in all at the catalog's price: the member stays under the limit
	fake := &fakellm.Server{Usage: func(fakellm.Call) fakellm.Usage { return fakellm.Usage{InputTokens: in, OutputTokens: out} },
		ToolUse: &fakellm.ToolUse{Name: "exec_command", Input: `{"cmd":"echo tolls"}`}}
	up := httptest.NewServer(fake)
	t.Cleanup(up.Close)
	s := startStack(t, gatewayEnv(up.URL))
	o := s.setUpOrg(t)
	env := []string{"HOME=" + t.TempDir(), "CODEX_HOME=" + t.TempDir(), "CODEX_API_KEY=" + o.key}
	r := runClient(t, "codex", env, "exec", "--skip-git-repo-check", "--json", "-m", codexModel,
		"-c", `openai_base_url="`+s.gateway+`/v1"`, "Pay the toll")
	messages, errs := codexEvents(r.stdout)
	if r.exit != 0 || len(messages) == 0 || messages[len(messages)-1] != fakellm.Text || len(errs) != 0 {
		t.Fatalf("codex exec: exit %d, messages %q, errors %q\nstderr: %s", r.exit, messages, errs, r.stderr)
	}
	if !strings.Contains(r.stdout, `"command_execution"`) || !strings.Contains(r.stdout, "echo tolls") {
		t.Errorf("codex exec showed no run of the command:\n%s", r.stdout)
	}
	var got []string
	waitFor(t, 10*time.Second, "one session of three messages", func() bool {
		got = got[:0]
		for _, c := range fake.Calls() {
			got = append(got, c.API+" "+string(c.Body))
		}
		return slices.Equal(got, []string{fakellm.OpenAIResponsesWebSocket + " 3"})
	})
	checkOnlyTheProviderCredential(t, fake.Calls(), o.key)
	warmup, turn := catalogCostOf(t, codexModel, in, 0), catalogCostOf(t, codexModel, in, out)
	s.waitUsed(t, o, 3, warmup+2*turn)
	charged := chargedReceipts(t, s, o)
	if want := []string{fmt.Sprint(warmup, " true"), fmt.Sprint(turn, " true"), fmt.Sprint(turn, " true")}; !slices.Equal(charged, want) {
		t.Errorf("charged %q, want the warmup, the function's call and the answer %q", charged, want)
	}

	// The function's call spends the limit: the gateway closes the session (1008) when
	// the call's response ends, Codex's next connection is refused 429 at its
	// handshake, and Codex ends the turn at once with its usage-limit message. (With
	// the 429 of type usage_limit_error Codex would wait out Retry-After, hours.)
	t.Run("blocked between the call and the answer", func(t *testing.T) {
		// A limit the next warmup stays under and the function's call spends.
		spent := warmup + 2*turn
		limit := spent + warmup + turn/2
		s.guardPolicy(t, o, fmt.Sprintf("%d.%06d", limit/1_000_000, limit%1_000_000), nil)
		before := len(fake.Calls())
		refused := s.metric(t, "tollgate_enforcer_gateway_requests_total", "outcome", "refused")
		r := runClient(t, "codex", env, "exec", "--skip-git-repo-check", "--json", "-m", codexModel,
			"-c", `openai_base_url="`+s.gateway+`/v1"`, "Pay the toll")
		checkCodexUsageLimit(t, s, r)
		var got []string
		for _, c := range fake.Calls()[before:] {
			got = append(got, c.API+" "+string(c.Body))
		}
		if want := []string{fakellm.OpenAIResponsesWebSocket + " 2"}; !slices.Equal(got, want) {
			t.Errorf("the provider got %q, want one session of the warmup and the function's call %q", got, want)
		}
		if n := s.metric(t, "tollgate_enforcer_gateway_requests_total", "outcome", "refused") - refused; n != 1 {
			t.Errorf("the gateway refused %v handshakes, want Codex's next connection's", n)
		}
		s.waitUsed(t, o, 5, spent+warmup+turn)
	})
}

// TestGeminiCLIThroughTheGateway: Google's Gemini CLI (e2e/clients' pinned release) with
// GOOGLE_GEMINI_BASE_URL at the gateway and the member's key in GEMINI_API_KEY (its
// settings choosing the API key's sign-in and usage statistics off; its retries left at
// their default, 10 attempts), answers `gemini -p`: every call it made charged exactly,
// the member's key never reaching the provider. Once the member's limit is spent it
// fails at once with the 429's message, having sent the call once: the message's
// "Please retry in <n>s." with n over 300 is what the CLI reads as a spent quota. (Before
// that sentence, 0.61 sent a blocked call 8 times in 2.5 minutes, backing off, unless
// told general.maxAttempts 1.)
func TestGeminiCLIThroughTheGateway(t *testing.T) {
	t.Parallel()
	awayFromDayBoundary(t, 3*time.Minute)
	const gemini = "gemini-2.5-flash"
	fake, up := fixedUsageUpstream(t, fakellm.Usage{InputTokens: 1_000_000, OutputTokens: 200_000})
	s := startStack(t, gatewayEnv(up.URL))
	o := s.setUpOrg(t)
	want := catalogCostOf(t, gemini, 1_000_000, 200_000)
	env := geminiCLIEnv(t, s, o)
	args := []string{"-p", "How are tolls paid?", "-m", gemini, "--output-format", "json"}
	var result struct{ Response string }
	settled, used := 0, int64(0)
	for i := range 2 {
		before := len(fake.Calls())
		r := runClient(t, "gemini", env, args...)
		if err := json.Unmarshal([]byte(jsonTail(r.stdout)), &result); r.exit != 0 || err != nil || result.Response != fakellm.Text {
			t.Fatalf("gemini -p %d: exit %d, %+v (%v)\nstderr: %s", i+1, r.exit, result, err, r.stderr)
		}
		n, cost := clientCalls(t, s, fake, before, o.key, want)
		settled, used = settled+n, used+cost
	}
	s.waitUsed(t, o, settled, used)
	r := blockedRun(t, s, o, fake, "gemini", func() clientRun { return runClient(t, "gemini", env, args...) })
	// The CLI writes the API's error (the refusal's body) to its standard error.
	if r.exit == 0 || !strings.Contains(r.stderr, "Usage limit exceeded (day)") {
		t.Errorf("blocked, gemini -p: exit %d; want the usage-limit 429's message\nstderr: %s", r.exit, r.stderr)
	}
}

// geminiSettingsHome is a HOME whose <dir>/settings.json chooses the sign-in auth, with
// usage statistics and telemetry off: the Gemini CLI's settings (dir .gemini), which
// Qwen Code, its fork, reads the same way (dir .qwen).
func geminiSettingsHome(t *testing.T, dir, auth string) string {
	t.Helper()
	home := t.TempDir()
	if err := os.MkdirAll(filepath.Join(home, dir), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(home, dir, "settings.json"),
		`{"security":{"auth":{"selectedType":"`+auth+`"}},`+
			`"privacy":{"usageStatisticsEnabled":false},"telemetry":{"enabled":false}}`)
	return home
}

// geminiCLIEnv is the Gemini CLI's environment for member o's calls through s's gateway:
// GOOGLE_GEMINI_BASE_URL at the gateway, the key in GEMINI_API_KEY, and a HOME whose
// settings choose the API key's sign-in, usage statistics and telemetry off.
func geminiCLIEnv(t *testing.T, s *stack, o org) []string {
	t.Helper()
	return []string{"HOME=" + geminiSettingsHome(t, ".gemini", "gemini-api-key"), "GOOGLE_GEMINI_BASE_URL=" + s.gateway, "GEMINI_API_KEY=" + o.key,
		// -p runs headless, which the CLI allows in a folder the user trusts.
		"GEMINI_CLI_TRUST_WORKSPACE=true",
		// Its error reports go to the temporary directory: the test's own.
		"TMPDIR=" + t.TempDir()}
}

// TestGeminiCLIToolLoopThroughTheGateway: the model (the fake provider's ToolUse) asks for
// the Gemini CLI's run_shell_command tool (allowed with --approval-mode yolo: 0.61's
// --allowed-tools still asked for a confirmation it cannot get headless), the CLI runs the
// command (the file it writes is there) and calls again with its result, answered with
// text: each streamGenerateContent call charged exactly.
func TestGeminiCLIToolLoopThroughTheGateway(t *testing.T) {
	t.Parallel()
	awayFromDayBoundary(t, 3*time.Minute)
	const gemini = "gemini-2.5-flash"
	const in, out = 100_000, 20_000
	fake, s, o, paid := toolLoopStack(t, "run_shell_command", in, out)
	r := runClient(t, "gemini", geminiCLIEnv(t, s, o), "-p", "Pay the toll", "-m", gemini, "--output-format", "json",
		"--approval-mode", "yolo")
	var result struct{ Response string }
	if err := json.Unmarshal([]byte(jsonTail(r.stdout)), &result); r.exit != 0 || err != nil || result.Response != fakellm.Text {
		t.Fatalf("gemini -p: exit %d, %+v (%v)\nstderr: %s", r.exit, result, err, r.stderr)
	}
	toolLoopCharged(t, s, o, fake, paid, fakellm.GeminiStream, catalogCostOf(t, gemini, in, out))
}

// jsonTail is the JSON object that ends out: the CLI may print lines (warnings) before
// it.
func jsonTail(out string) string {
	if i := strings.Index(out, "\n{"); i >= 0 {
		return out[i+1:]
	}
	return out
}

// openCodeSmallModel is the model OpenCode 1.18 names a session's title with when its
// OpenAI provider is used (its "small model"): a call of its own at every new session.
const openCodeSmallModel = "gpt-5.4-nano"

// TestOpenCodeThroughTheGateway: OpenCode (opencode-ai, e2e/clients' pin, its native
// binary) with its built-in OpenAI provider pointed at the gateway in its config
// (provider.openai.options: baseURL the gateway's /v1, apiKey the member's key read from
// an environment variable), as docs/gateway.md shows, answers `opencode run`: two calls
// at the provider, both on the Responses API (the session's title on OpenCode's small
// model, and the answer on the model asked for), each charged exactly at its model's
// price, the member's key never upstream. Blocked, OpenCode waits out Retry-After before
// it sends the answer's call again (it retries any 429 after the delay Retry-After
// names, at most 24.8 days, and shows the refusal's message meanwhile): the answer's
// call is refused once and not sent again while the test waits, and the title's call
// three times (the AI SDK's own retries within OpenCode, 2 and 4 s apart); none reaches
// the provider. The run waits for the reset, so the test ends it.
func TestOpenCodeThroughTheGateway(t *testing.T) {
	t.Parallel()
	const in, out = 10_000, 2_000
	fake, s, o := clientStack(t, 3*time.Minute, in, out)
	env := openCodeEnv(t, s, o)
	args := []string{"run", "--print-logs", "-m", "openai/" + model, "How are tolls paid?"}

	r := runClient(t, "opencode", env, args...)
	if r.exit != 0 || !strings.Contains(r.stdout, fakellm.Text) {
		t.Fatalf("opencode run: exit %d\nstdout: %s\nstderr: %s", r.exit, r.stdout, r.stderr)
	}
	calls := fake.Calls()
	checkOnlyTheProviderCredential(t, calls, o.key)
	price := map[string]int64{model: catalogCost(in, 0, out), openCodeSmallModel: catalogCostOf(t, openCodeSmallModel, in, out)}
	var got []string
	used := int64(0)
	for _, c := range calls {
		got = append(got, c.API+" "+c.Model)
		rec := waitReceipt(t, s, c.Header.Get("X-Service-Request-Id"))
		if want := price[c.Model]; rec.cost() != want || rec["complete"] != true {
			t.Errorf("%s %s: receipt %s, want %d, complete", c.API, c.Model, rec, want)
		}
		used += rec.cost()
	}
	slices.Sort(got)
	if want := []string{fakellm.OpenAIResponses + " " + model, fakellm.OpenAIResponses + " " + openCodeSmallModel}; !slices.Equal(got, want) {
		t.Fatalf("the provider got %q, want the title's and the answer's calls %q", got, want)
	}
	s.waitUsed(t, o, len(calls), used)

	t.Run("blocked", func(t *testing.T) {
		s.blockAtSpend(t, o) // spent: the member is blocked
		s.waitBlocked(t, o)
		before := len(fake.Calls())
		refused := func() float64 {
			return s.metric(t, "tollgate_enforcer_gateway_requests_total", "outcome", "refused")
		}
		start := refused()
		ctx, cancel := context.WithCancel(context.Background())
		cmd, _, stderr := clientCommand(ctx, t, "opencode", env, args...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		waitFor(t, 60*time.Second, "the answer's call and the title's three attempts refused", func() bool { return refused()-start >= 4 })
		// Its wait: no other attempt while the test waits (the title's last retry came
		// 4 s after the one before).
		time.Sleep(8 * time.Second)
		n := refused() - start
		select {
		case err := <-exited:
			t.Fatalf("opencode run ended (%v) while its answer's call was refused; want it waiting for the reset\nstderr: %s", err, stderr)
		default:
		}
		cancel()
		<-exited
		if n != 4 {
			t.Errorf("the gateway refused %v calls, want the answer's once and the title's three times", n)
		}
		if n := len(fake.Calls()) - before; n != 0 {
			t.Errorf("blocked, the provider got %d calls", n)
		}
		if !strings.Contains(stderr.String(), "Usage limit exceeded (day)") {
			t.Errorf("opencode's log does not show the refusal's message:\n%s", stderr)
		}
	})
}

// openCodeEnv is OpenCode's environment for member o's calls through s's gateway: a
// HOME whose global config (~/.config/opencode/opencode.json) points OpenCode's OpenAI
// provider at the gateway with the member's key from TOLLGATE_API_KEY, sharing and
// updates off, and no fetch of the models.dev catalog (no network here: OpenCode falls
// back to the catalog it ships, after a timeout).
func openCodeEnv(t *testing.T, s *stack, o org) []string {
	t.Helper()
	home := t.TempDir()
	dir := filepath.Join(home, ".config", "opencode")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "opencode.json"), `{"$schema": "https://opencode.ai/config.json",
  "autoupdate": false, "share": "disabled",
  "provider": {"openai": {"options": {"baseURL": "`+s.gateway+`/v1", "apiKey": "{env:TOLLGATE_API_KEY}"}}}}`)
	return []string{"HOME=" + home, "TOLLGATE_API_KEY=" + o.key, "OPENCODE_DISABLE_MODELS_FETCH=1", "OPENCODE_DISABLE_AUTOUPDATE=1"}
}

// TestQwenCodeThroughTheGateway: Qwen Code (@qwen-code/qwen-code, e2e/clients' pin) with
// its OpenAI-compatible sign-in (OPENAI_BASE_URL at the gateway's /v1, the member's key in
// OPENAI_API_KEY), as docs/gateway.md shows, answers a one-shot prompt: two streamed Chat
// Completions calls (the answer, and its memory extractor's after it), each charged
// exactly, the member's key never upstream. Blocked, it fails at once with the 429's
// whole message (the way to ask for more in it), having sent the call once: Qwen Code
// reads a 429 whose message says the quota is "exceeded" and "will reset" as a spent
// quota, not retried; any other 429 it retries (its default is 7 attempts, backing off).
func TestQwenCodeThroughTheGateway(t *testing.T) {
	t.Parallel()
	const in, out = 10_000, 2_000
	fake, s, o := clientStack(t, 3*time.Minute, in, out)
	env := qwenCodeEnv(t, s, o)
	args := []string{"--output-format", "json", "How are tolls paid?"}

	r := runClient(t, "qwen", env, args...)
	if res := qwenResult(t, r); r.exit != 0 || res.IsError || res.Result != fakellm.Text {
		t.Fatalf("qwen: exit %d, %+v\nstderr: %s", r.exit, res, r.stderr)
	}
	chargedChatStreams(t, s, o, fake, in, out)

	s.blockAtSpend(t, o) // spent: the member is blocked
	r = blockedRun(t, s, o, fake, "qwen", func() clientRun { return runClient(t, "qwen", env, args...) })
	res := qwenResult(t, r)
	if r.exit == 0 || !res.IsError || !strings.HasPrefix(res.Error.Message, "Quota exhausted: Usage limit exceeded (day)") ||
		!strings.Contains(res.Error.Message, s.askForMore()) {
		t.Errorf("blocked, qwen: exit %d, %+v; want the usage-limit 429's message as a spent quota\nstderr: %s", r.exit, res, r.stderr)
	}
}

// clientStack starts an AI tool's test away from the day's boundary by margin (its
// runs and its blocked run within one day): a stack whose gateway fronts a fake provider
// reporting in and out tokens for every answer, and the test organization set up.
func clientStack(t *testing.T, margin time.Duration, in, out int64) (*fakellm.Server, *stack, org) {
	t.Helper()
	awayFromDayBoundary(t, margin)
	fake, up := fixedUsageUpstream(t, fakellm.Usage{InputTokens: in, OutputTokens: out})
	s := startStack(t, gatewayEnv(up.URL))
	return fake, s, s.setUpOrg(t)
}

// chargedChatStreams requires every call the provider got to be a streamed Chat
// Completions call of model asking for its usage, each charged exactly at in and out
// tokens and none carrying the member's key (clientCalls), and waits until the member's
// usage counts them.
func chargedChatStreams(t *testing.T, s *stack, o org, fake *fakellm.Server, in, out int64) {
	t.Helper()
	for _, c := range fake.Calls() {
		if c.API != fakellm.OpenAIChat || c.Model != model || !c.Stream || !c.IncludeUsage {
			t.Errorf("the provider got %s %s (stream %v, include_usage %v), want %s streams of %s with their usage",
				c.API, c.Model, c.Stream, c.IncludeUsage, fakellm.OpenAIChat, model)
		}
	}
	n, cost := clientCalls(t, s, fake, 0, o.key, catalogCost(in, 0, out))
	s.waitUsed(t, o, n, cost)
}

// askForMore is how the usage-limit 429's message begins its way to ask for more, at
// s's control plane.
func (s *stack) askForMore() string {
	return "You may ask for more: POST " + s.rest + "/v1/gateway/usage-limit-reset-requests"
}

// qwenResult is the result event of a `qwen --output-format json` run: the last element
// of the JSON array it writes.
func qwenResult(t *testing.T, r clientRun) (res struct {
	Type    string
	IsError bool `json:"is_error"`
	Result  string
	Error   struct{ Message string }
}) {
	t.Helper()
	var events []json.RawMessage
	if err := json.Unmarshal([]byte(jsonTail(r.stdout)), &events); err != nil || len(events) == 0 {
		t.Fatalf("qwen's output is not a JSON array of events (%v):\n%s\nstderr: %s", err, r.stdout, r.stderr)
	}
	if err := json.Unmarshal(events[len(events)-1], &res); err != nil || res.Type != "result" {
		t.Fatalf("qwen's last event is not its result (%v): %s", err, events[len(events)-1])
	}
	return res
}

// qwenCodeEnv is Qwen Code's environment for member o's calls through s's gateway:
// OPENAI_BASE_URL at the gateway's /v1, the key in OPENAI_API_KEY, the model in
// OPENAI_MODEL, and a HOME whose settings choose the OpenAI-compatible sign-in, with usage
// statistics and telemetry off.
func qwenCodeEnv(t *testing.T, s *stack, o org) []string {
	t.Helper()
	return []string{"HOME=" + geminiSettingsHome(t, ".qwen", "openai"), "OPENAI_BASE_URL=" + s.gateway + "/v1", "OPENAI_API_KEY=" + o.key,
		"OPENAI_MODEL=" + model, "TMPDIR=" + t.TempDir()}
}

// TestClineThroughTheGateway: Cline's CLI (cline, e2e/clients' pin) with its
// OpenAI-compatible provider set to the gateway (`cline auth -p openai -b <gateway>/v1 -k
// <member's key>`), as docs/gateway.md shows, answers a one-shot prompt: one streamed
// Chat Completions call, charged exactly, the member's key never upstream. Blocked, it
// sends the call 6 times over about a minute (its agent calls the model through the AI
// SDK with 5 retries, which retry any 429 and wait out no Retry-After over a minute:
// 2, 4, 8, 16 and 32 s apart), each refused at the gateway and none reaching the
// provider, then fails with the 429's whole message (the way to ask for more in it).
func TestClineThroughTheGateway(t *testing.T) {
	t.Parallel()
	const in, out = 10_000, 2_000
	fake, s, o := clientStack(t, 4*time.Minute, in, out)
	// Its settings and sessions in a folder of the test's own (--data-dir), not ~/.cline.
	data := t.TempDir()
	env := []string{"HOME=" + t.TempDir()}
	if r := runClient(t, "cline", env, "auth", "-p", "openai", "-b", s.gateway+"/v1", "-k", o.key, "-m", model, "--data-dir", data); r.exit != 0 {
		t.Fatalf("cline auth: exit %d\nstdout: %s\nstderr: %s", r.exit, r.stdout, r.stderr)
	}
	args := []string{"--json", "--data-dir", data, "How are tolls paid?"}
	r := runClient(t, "cline", env, args...)
	if res := clineResult(t, r); r.exit != 0 || res.FinishReason != "completed" || res.Text != fakellm.Text {
		t.Fatalf("cline: exit %d, %+v\nstderr: %s", r.exit, res, r.stderr)
	}
	chargedChatStreams(t, s, o, fake, in, out)

	s.blockAtSpend(t, o) // spent: the member is blocked
	r = blockedRunRefused(t, s, o, fake, "cline", 6, func() clientRun { return runClient(t, "cline", env, args...) })
	if res := clineResult(t, r); r.exit == 0 || res.FinishReason != "error" || !strings.HasPrefix(res.Text, "Usage limit exceeded (day)") ||
		!strings.Contains(res.Text, s.askForMore()) {
		t.Errorf("blocked, cline: exit %d, %+v; want the usage-limit 429's message", r.exit, res)
	}
}

// clineResult is the run_result event of a `cline --json` run (one JSON object a line).
func clineResult(t *testing.T, r clientRun) (res struct {
	Type, FinishReason, Text string
}) {
	t.Helper()
	for line := range strings.Lines(r.stdout) {
		res = struct{ Type, FinishReason, Text string }{}
		if json.Unmarshal([]byte(line), &res) == nil && res.Type == "run_result" {
			return res
		}
	}
	t.Fatalf("cline wrote no run_result:\n%s\nstderr: %s", r.stdout, r.stderr)
	return res
}

// TestContinueCLIThroughTheGateway: Continue's CLI (cn, e2e/clients' pin) in headless
// mode (`cn -p`), with a config whose model is an OpenAI one at the gateway's /v1 and the
// member's key, answers a prompt: its Chat Completions streams charged exactly, the
// member's key never upstream. Its metrics and telemetry are off, and so is its update
// of itself (CONTINUE_CLI_AUTO_UPDATED says it has just updated). Not run blocked: it
// sends a refused call 11 times over about 100 s (docs/gateway.md, "AI coding tools").
func TestContinueCLIThroughTheGateway(t *testing.T) {
	t.Parallel()
	const in, out = 10_000, 2_000
	fake, s, o := clientStack(t, 3*time.Minute, in, out)
	home := t.TempDir()
	config := filepath.Join(home, "config.yaml")
	if err := os.WriteFile(config, []byte(continueConfig(s.gateway+"/v1", o.key)), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"HOME=" + home, "CONTINUE_GLOBAL_DIR=" + filepath.Join(home, ".continue"), "CONTINUE_METRICS_ENABLED=0",
		"CONTINUE_CLI_ENABLE_TELEMETRY=0", "CONTINUE_CLI_AUTO_UPDATED=1", "TMPDIR=" + t.TempDir()}
	r := runClient(t, "cn", env, "-p", "--config", config, "How are tolls paid?")
	if r.exit != 0 || strings.TrimSpace(r.stdout) != fakellm.Text {
		t.Fatalf("cn: exit %d, stdout %q\nstderr: %s", r.exit, r.stdout, r.stderr)
	}
	chargedChatStreams(t, s, o, fake, in, out)
}

// continueConfig is a Continue config (schema v1) of one OpenAI model at apiBase with key.
func continueConfig(apiBase, key string) string {
	return fmt.Sprintf(`name: tollgate-e2e
version: 0.0.1
schema: v1
models:
  - name: through Tollgate
    provider: openai
    model: %s
    apiBase: %s
    apiKey: %s
    roles: [chat]
`, model, apiBase, key)
}
