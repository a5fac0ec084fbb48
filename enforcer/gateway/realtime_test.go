package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/tollgate-dev/tollgate/enforcer/gate"
	"github.com/tollgate-dev/tollgate/enforcer/gateway"
	"github.com/tollgate-dev/tollgate/enforcer/inflight"
	"github.com/tollgate-dev/tollgate/enforcer/responseusage"
)

// realtimeUpstream is a fake Realtime API: it opens the session (session.created, with
// gpt-4o-transcribe transcribing the user's audio), then answers each client message
// with one response (response.created, a text delta, response.done with in+i input and
// out+i output tokens, i counting from 0), or an input_audio_buffer.commit with a
// transcription (17 input and 9 output tokens). With hang, the second response never
// ends; with transcribeDuring, each response carries a transcription (5 and 3 tokens)
// before its end. It records the handshake's headers and the client messages.
type realtimeUpstream struct {
	in, out          int64
	hang             bool
	transcribeDuring bool
	mu               sync.Mutex
	header           http.Header
	got              []string
}

func (u *realtimeUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	u.header = r.Header.Clone()
	u.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer sk-provider" {
		http.Error(w, `{"error":{"message":"Incorrect API key provided"}}`, http.StatusUnauthorized)
		return
	}
	c, send := fakeSession(w, r, websocket.MessageText)
	if c == nil {
		return
	}
	defer c.CloseNow()
	ctx := r.Context()
	if send(`{"type":"session.created","event_id":"ev_0","session":{"object":"realtime.session","model":"gpt-realtime-2025-08-28",`+
		`"audio":{"input":{"transcription":{"model":"gpt-4o-transcribe"}}}}}`) != nil {
		return
	}
	transcribed := func(in, out int) error {
		return send(fmt.Sprintf(`{"type":"conversation.item.input_audio_transcription.completed","item_id":"item_u","content_index":0,"transcript":"Hi.",`+
			`"usage":{"type":"tokens","total_tokens":%d,"input_tokens":%d,"input_token_details":{"text_tokens":0,"audio_tokens":%d},"output_tokens":%d}}`, in+out, in, in, out))
	}
	for i := int64(0); ; {
		_, msg, err := c.Read(ctx)
		if err != nil {
			return
		}
		u.mu.Lock()
		u.got = append(u.got, string(msg))
		u.mu.Unlock()
		if strings.Contains(string(msg), "input_audio_buffer.commit") {
			_ = transcribed(17, 9)
			continue
		}
		id := fmt.Sprintf("resp_%d", i)
		_ = send(`{"type":"response.created","response":{"object":"realtime.response","id":"` + id + `","status":"in_progress","usage":null}}`)
		_ = c.Write(ctx, websocket.MessageBinary, []byte{0, 1, 2}) // not an event: passed on as it came
		_ = send(`{"type":"response.output_text.delta","response_id":"` + id + `","delta":"Tolls are paid in tokens."}`)
		if u.transcribeDuring {
			_ = transcribed(5, 3)
		}
		if u.hang && i == 1 {
			i++
			continue
		}
		_ = send(fmt.Sprintf(`{"type":"response.done","response":{"object":"realtime.response","id":%q,"status":"completed","usage":{"total_tokens":%d,"input_tokens":%d,"output_tokens":%d,"input_token_details":{"cached_tokens":%d,"text_tokens":1,"audio_tokens":2}}}}`,
			id, u.in+u.out+2*i, u.in+i, u.out+i, i))
		i++
	}
}

// fakeSession accepts a fake provider's side of a session (nil when the handshake
// failed: it was answered) and gives a send of messages of typ on it; the caller closes
// it.
func fakeSession(w http.ResponseWriter, r *http.Request, typ websocket.MessageType) (*websocket.Conn, func(string) error) {
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return nil, nil
	}
	return c, func(s string) error { return c.Write(r.Context(), typ, []byte(s)) }
}

// countingGate admits its first n checks of member om_1 of org_1 (request ids req_1,
// req_2, ...) and refuses the next with the usage-limit 429, or, revoked, as gate.Gate
// refuses a key revoked since: 401 naming nobody. It opens trailing requests
// (req_trailing_1, ...) for whoever is named.
type countingGate struct {
	wholeCheckOnly
	n        int
	revoked  bool
	mu       sync.Mutex
	checks   int
	hints    []gate.Hint
	trailing []string
}

func (g *countingGate) Trailing(orgID, memberID string) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.trailing = append(g.trailing, orgID+"/"+memberID)
	return fmt.Sprintf("req_trailing_%d", len(g.trailing))
}

func (g *countingGate) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.checks
}

func (g *countingGate) CheckRequest(_ context.Context, c gate.Credentials, h gate.Hint) (gate.Answer, error) {
	if c.Authorization != "Bearer tgk_good" && c.GoogAPIKey != "tgk_good" {
		return gate.Refusal(gate.ReasonUnknownCredential), nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.checks++
	g.hints = append(g.hints, h)
	if g.checks > g.n && g.revoked {
		return gate.Refusal(gate.ReasonUnknownCredential), nil
	}
	if g.checks > g.n {
		a := gate.Refusal(gate.ReasonUsageLimit)
		a.UsageState, a.OrganizationID, a.MemberID = "blocked", "org_1", "om_1"
		return a, nil
	}
	// Each check finds a hundredth of the day's allowance more used.
	limits := gate.Limits{Primary: gate.LimitWindow{Used: int64(g.checks) * 10_000, Allowance: 1_000_000, Start: 1_800_000_000, End: 1_800_086_400}}
	return gate.Answer{Status: 200, Decision: gate.Admitted, RequestID: fmt.Sprintf("req_%d", g.checks), UsageState: "within_limit",
		Limits: limits, OrganizationID: "org_1", MemberID: "om_1"}, nil
}

func newRealtimeEnv(t *testing.T, up http.Handler, admits int, configure ...func(*gateway.Config)) (*countingGate, *fakeTracker, string, *gateway.Gateway) {
	t.Helper()
	g, tr, gw := newRealtimeGateway(t, up, admits, configure...)
	front := httptest.NewServer(gw)
	t.Cleanup(front.Close)
	return g, tr, "ws" + strings.TrimPrefix(front.URL, "http"), gw
}

// newRealtimeGateway is a gateway with one route, to the fake Realtime server up.
func newRealtimeGateway(t *testing.T, up http.Handler, admits int, configure ...func(*gateway.Config)) (*countingGate, *fakeTracker, *gateway.Gateway) {
	t.Helper()
	g, tr := &countingGate{n: admits}, newTracker()
	return g, tr, realtimeGatewayOf(t, up, g, tr, configure...)
}

// realtimeGatewayOf is a gateway with one route, to the fake Realtime server up, deciding
// with g and settling through tr.
func realtimeGatewayOf(t *testing.T, up http.Handler, g gateway.Checker, tr *fakeTracker, configure ...func(*gateway.Config)) *gateway.Gateway {
	t.Helper()
	upstream := httptest.NewServer(up)
	t.Cleanup(upstream.Close)
	rt, err := gateway.NewRoute("/", upstream.URL, "", "Bearer sk-provider")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := newMetrics()
	cfg := gateway.Config{Routes: []gateway.Route{rt}}
	for _, f := range configure {
		f(&cfg)
	}
	gw, err := gateway.New(cfg, g, tr, responseusage.Limits{}, m, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return gw
}

func dialRealtime(t *testing.T, url, key string) (*websocket.Conn, *http.Response, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	h := http.Header{}
	if key != "" {
		h.Set("Authorization", "Bearer "+key)
	}
	return websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: h})
}

// openSession opens a Realtime session with the good key and reads up to its
// session.created.
func openSession(t *testing.T, url string) (*websocket.Conn, *http.Response) {
	t.Helper()
	c, res, err := dialRealtime(t, url+"/v1/realtime?model=gpt-realtime", "tgk_good")
	if err != nil {
		t.Fatal(err)
	}
	readUntil(t, c, "session.created")
	return c, res
}

// say sends the client event msg.
func say(t *testing.T, c *websocket.Conn, msg string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
		t.Fatal(err)
	}
}

// oneResponse opens a session and has one response made, up to its response.done.
func oneResponse(t *testing.T, url string) *websocket.Conn {
	t.Helper()
	c, _ := openSession(t, url)
	say(t, c, `{"type":"response.create"}`)
	readUntil(t, c, "response.done")
	return c
}

// closeOf reads c until it ends: the close the other side sent, else the error (within 5
// seconds).
func closeOf(c *websocket.Conn) (websocket.CloseError, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _, err := c.Read(ctx)
	var ce websocket.CloseError
	if errors.As(err, &ce) {
		return ce, nil
	}
	return ce, err
}

// readUntil reads messages until one contains want; it returns the text ones read.
func readUntil(t *testing.T, c *websocket.Conn, want string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var got []string
	for {
		typ, msg, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("reading until %q: %v (read %q)", want, err, got)
		}
		if typ == websocket.MessageText {
			got = append(got, string(msg))
		}
		if strings.Contains(string(msg), want) {
			return got
		}
	}
}

// settlements waits for n settlements and returns them.
func (f *fakeTracker) settlements(t *testing.T, n int) []inflight.Usage {
	t.Helper()
	for range n {
		select {
		case <-f.done:
		case <-time.After(5 * time.Second):
			f.mu.Lock()
			got := len(f.finished)
			f.mu.Unlock()
			t.Fatalf("%d settlements, want %d", got, n)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]inflight.Usage(nil), f.finished...)
}

// shown is u as the tests compare it: its audio and image parts by value, not by pointer.
func shown(u inflight.Usage) string {
	part := func(p *int64) string {
		if p == nil {
			return "-"
		}
		return fmt.Sprint(*p)
	}
	in, out, img, cimg := part(u.AudioInputTokens), part(u.AudioOutputTokens), part(u.ImageInputTokens), part(u.CachedImageInputTokens)
	u.AudioInputTokens, u.AudioOutputTokens, u.ImageInputTokens, u.CachedImageInputTokens = nil, nil, nil, nil
	return fmt.Sprintf("%+v audio %s/%s image %s/%s", u, in, out, img, cimg)
}

func i64(n int64) *int64 { return &n }

// A Realtime session is proxied message by message and charged response by response:
// each response.done settles one admitted request with its usage (the model as the
// server named it) and the member is checked again before the next; the upstream gets
// the provider's key, never the member's; the session's end settles the last request
// at 0.
func TestRealtimeSessionIsChargedByResponse(t *testing.T) {
	up := &realtimeUpstream{in: 1000, out: 200}
	g, tr, url, _ := newRealtimeEnv(t, up, 10)
	c, res := openSession(t, url)
	if id := res.Header.Get(gate.HeaderRequestID); id != "" {
		t.Fatalf("the handshake named request %q: a session is many requests", id)
	}
	for i := range 2 {
		say(t, c, fmt.Sprintf(`{"type":"response.create","n":%d}`, i))
		got := readUntil(t, c, "response.done")
		if len(got) != 3 || !strings.Contains(got[1], "Tolls are paid") {
			t.Fatalf("response %d reached the client as %q", i, got)
		}
	}
	_ = c.Close(websocket.StatusNormalClosure, "bye")
	s := tr.settlements(t, 3)
	for i, want := range []inflight.Usage{
		{Model: "gpt-realtime-2025-08-28", InputTokens: 1000, OutputTokens: 200, AudioInputTokens: i64(2), Complete: true, UpstreamStatus: 101},
		{Model: "gpt-realtime-2025-08-28", InputTokens: 1001, OutputTokens: 201, CachedTokens: 1, AudioInputTokens: i64(2), Complete: true, UpstreamStatus: 101},
		{Model: "gpt-realtime-2025-08-28", Complete: true, UpstreamStatus: 101}, // nothing after the last response
	} {
		if shown(s[i]) != shown(want) {
			t.Fatalf("settlement %d: %s, want %s", i, shown(s[i]), shown(want))
		}
	}
	if g.checks != 3 {
		t.Fatalf("%d checks, want the session's opening and one after each response", g.checks)
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	if up.header.Get("Authorization") != "Bearer sk-provider" || strings.Contains(fmt.Sprint(up.header), "tgk_good") ||
		up.header.Get(gate.HeaderRequestID) != "req_1" {
		t.Fatalf("the upstream's handshake headers: %v", up.header)
	}
	if len(up.got) != 2 || up.got[1] != `{"type":"response.create","n":1}` {
		t.Fatalf("the upstream got %q", up.got)
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if fmt.Sprint(tr.recorded) != "[gpt-realtime gpt-realtime-2025-08-28 gpt-realtime-2025-08-28]" {
		t.Fatalf("recorded models %v", tr.recorded)
	}
}

// A member whose limit a response spent is refused before the next: the client gets the
// close code 1008 with the refusal's error code, the upstream is closed, and nothing more
// is admitted or settled.
func TestRealtimeSessionEndsAtTheLimit(t *testing.T) {
	up := &realtimeUpstream{in: 10, out: 20}
	g, tr, url, _ := newRealtimeEnv(t, up, 1)
	c := oneResponse(t, url)
	if ce, err := closeOf(c); ce.Code != websocket.StatusPolicyViolation || ce.Reason != gate.CodeUsageLimitExceeded {
		t.Fatalf("after the limit: %v %v, want close 1008 %s", ce, err, gate.CodeUsageLimitExceeded)
	}
	s := tr.settlements(t, 1)
	if s[0].InputTokens != 10 || s[0].OutputTokens != 20 || !s[0].Complete {
		t.Fatalf("the response was settled %+v", s[0])
	}
	time.Sleep(100 * time.Millisecond)
	tr.mu.Lock()
	n := len(tr.finished)
	tr.mu.Unlock()
	if n != 1 || g.checks != 2 {
		t.Fatalf("%d settlements and %d checks, want 1 and 2", n, g.checks)
	}
}

// A session that ends while a response is in progress settles that request as
// incomplete, estimated from the text the response had sent.
func TestRealtimeSessionCutMidResponse(t *testing.T) {
	up := &realtimeUpstream{in: 10, out: 20, hang: true}
	_, tr, url, _ := newRealtimeEnv(t, up, 10)
	c, _ := openSession(t, url)
	for range 2 {
		say(t, c, `{"type":"response.create"}`)
	}
	readUntil(t, c, "response.done")
	readUntil(t, c, "Tolls are paid") // the second response's delta; it never ends
	_ = c.CloseNow()
	s := tr.settlements(t, 2)
	cut := s[1]
	if cut.Complete || cut.Seen == nil || cut.Seen.TextBytes != int64(len("Tolls are paid in tokens.")) || cut.InputTokens != 0 {
		t.Fatalf("the cut response was settled %+v (seen %+v)", cut, cut.Seen)
	}
}

// Refusals never reach the upstream; another WebSocket than the Realtime API's is
// refused; the provider's refusal of the handshake reaches the client as it came, and
// is settled with its status (nothing used).
func TestRealtimeRefusals(t *testing.T) {
	up := &realtimeUpstream{}
	_, tr, url, _ := newRealtimeEnv(t, up, 10)
	for _, tc := range []struct {
		name, path, key string
		status          int
	}{
		{"no key", "/v1/realtime?model=gpt-realtime", "", http.StatusUnauthorized},
		{"another websocket", "/v1/chat/completions", "tgk_good", http.StatusBadRequest},
	} {
		_, res, err := dialRealtime(t, url+tc.path, tc.key)
		if err == nil || res == nil || res.StatusCode != tc.status {
			t.Fatalf("%s: %v %v, want %d", tc.name, err, res, tc.status)
		}
	}
	up.mu.Lock()
	reached := up.header != nil
	up.mu.Unlock()
	if reached {
		t.Fatal("a refused handshake reached the upstream")
	}
	tr.settlements(t, 1) // the other websocket, admitted then refused
	tr.reset()

	// The upstream refuses our provider key.
	bad := &realtimeUpstream{}
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Set("Authorization", "Bearer sk-revoked")
		bad.ServeHTTP(w, r)
	}))
	defer upstream.Close()
	rt, _ := gateway.NewRoute("/", upstream.URL, "", "Bearer sk-provider")
	m, _ := newMetrics()
	tr2 := newTracker()
	gw, _ := gateway.New(gateway.Config{Routes: []gateway.Route{rt}}, &countingGate{n: 1}, tr2, responseusage.Limits{}, m, slog.New(slog.DiscardHandler))
	front := httptest.NewServer(gw)
	defer front.Close()
	_, res, err := dialRealtime(t, "ws"+strings.TrimPrefix(front.URL, "http")+"/v1/realtime?model=gpt-realtime", "tgk_good")
	if err == nil || res == nil || res.StatusCode != http.StatusUnauthorized || res.Header.Get(gate.HeaderRequestID) != "req_1" {
		t.Fatalf("the provider's 401: %v %+v", err, res)
	}
	if u := tr2.settled(t); u.UpstreamStatus != http.StatusUnauthorized || u.InputTokens != 0 || u.Seen != nil {
		t.Fatalf("settled %+v", u)
	}
}

// At shutdown (DrainSessions) an open session goes on until the deadline, then is ended:
// the client gets 1001 with the reason, the provider's side is closed, and the session's
// request is settled before DrainSessions returns.
func TestRealtimeSessionsEndAtShutdown(t *testing.T) {
	up := &realtimeUpstream{in: 10, out: 20}
	_, tr, url, gw := newRealtimeEnv(t, up, 10)
	c := oneResponse(t, url)
	closed := make(chan websocket.CloseError, 1)
	go func() {
		ce, _ := closeOf(c)
		closed <- ce
	}()
	grace, stop := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer stop()
	began := time.Now()
	gw.DrainSessions(grace)
	if took := time.Since(began); took < 200*time.Millisecond {
		t.Fatalf("DrainSessions returned after %v, before its grace period", took)
	}
	if ce := <-closed; ce.Code != websocket.StatusGoingAway {
		t.Fatalf("the client saw %v, want 1001", ce)
	}
	s := tr.settlements(t, 2)
	if s[0].OutputTokens != 20 || !s[1].Complete || s[1].OutputTokens != 0 {
		t.Fatalf("settled %+v", s)
	}
}

// A transcription of the user's audio is charged as a request of its own, at the
// transcription model the session names: at once when no response is in progress, else
// once that response ended (after it), so that a member refused in between never has a
// response cut uncharged.
func TestRealtimeTranscriptionsAreCharged(t *testing.T) {
	up := &realtimeUpstream{in: 100, out: 50, transcribeDuring: true}
	g, tr, url, _ := newRealtimeEnv(t, up, 10)
	c, _ := openSession(t, url)
	say(t, c, `{"type":"input_audio_buffer.commit"}`)
	readUntil(t, c, "input_audio_transcription.completed")
	say(t, c, `{"type":"response.create"}`)
	readUntil(t, c, "response.done")
	_ = c.Close(websocket.StatusNormalClosure, "")
	s := tr.settlements(t, 4)
	for i, want := range []inflight.Usage{
		{Model: "gpt-4o-transcribe", InputTokens: 17, OutputTokens: 9, AudioInputTokens: i64(17), Complete: true, UpstreamStatus: 101},
		{Model: "gpt-4o-transcribe", InputTokens: 5, OutputTokens: 3, AudioInputTokens: i64(5), Complete: true, UpstreamStatus: 101}, // aside, during the response
		{Model: "gpt-realtime-2025-08-28", InputTokens: 100, OutputTokens: 50, AudioInputTokens: i64(2), Complete: true, UpstreamStatus: 101},
		{Model: "gpt-realtime-2025-08-28", Complete: true, UpstreamStatus: 101},
	} {
		if shown(s[i]) != shown(want) {
			t.Fatalf("settlement %d: %s, want %s", i, shown(s[i]), shown(want))
		}
	}
	if g.checks != 4 {
		t.Fatalf("%d checks, want the opening, one after each charge and one for the transcription aside", g.checks)
	}
}

// A transcription that ends during a response the session is then cut in is charged
// (aside, on a request of its own); before 2026-11-28 it waited for the response's end,
// which never came, and was lost.
func TestRealtimeTranscriptionDuringACutResponse(t *testing.T) {
	up := &realtimeUpstream{in: 100, out: 50, transcribeDuring: true, hang: true}
	_, tr, url, _ := newRealtimeEnv(t, up, 10)
	c, _ := openSession(t, url)
	for range 2 {
		say(t, c, `{"type":"response.create"}`)
	}
	readUntil(t, c, "response.done")
	readUntil(t, c, "input_audio_transcription.completed") // during the second response, which never ends
	_ = c.CloseNow()
	s := tr.settlements(t, 4)
	transcription := inflight.Usage{Model: "gpt-4o-transcribe", InputTokens: 5, OutputTokens: 3, AudioInputTokens: i64(5), Complete: true, UpstreamStatus: 101}
	if shown(s[0]) != shown(transcription) || shown(s[2]) != shown(transcription) {
		t.Fatalf("settlements %+v: the transcriptions are not 1st and 3rd", s)
	}
	if cut := s[3]; cut.Complete || cut.Seen == nil || cut.Seen.TextBytes == 0 {
		t.Fatalf("the cut response was settled %+v", cut)
	}
}

// A member refused when a transcription ends during a response is not closed on (that
// would cut the response): the transcription, which was used all the same, is charged on
// a request opened without a check for the refused member (before 2026-11-30 it waited
// for the response's end, to be charged only if the member then passed a check, and was
// lost), and the response's end closes the session on the refusal (1008) as usual. A key
// revoked meanwhile is refused naming nobody: the transcription is the member's whose key
// opened the session.
func TestRealtimeTranscriptionRefusedAside(t *testing.T) {
	for _, revoked := range []bool{false, true} {
		t.Run(fmt.Sprintf("revoked=%v", revoked), func(t *testing.T) {
			up := &realtimeUpstream{in: 100, out: 50, transcribeDuring: true}
			g, tr, url, _ := newRealtimeEnv(t, up, 1) // the opening only
			g.revoked = revoked
			c, _ := openSession(t, url)
			say(t, c, `{"type":"response.create"}`)
			readUntil(t, c, "response.done") // the refusal aside did not cut it
			if ce, err := closeOf(c); err != nil || ce.Code != websocket.StatusPolicyViolation {
				t.Fatalf("closed with %v (%v), want 1008", ce, err)
			}
			s := tr.settlements(t, 2)
			tr.mu.Lock()
			ids := append([]string(nil), tr.finishedIDs...)
			tr.mu.Unlock()
			if s[0].Model != "gpt-4o-transcribe" || s[0].InputTokens != 5 || ids[0] != "req_trailing_1" {
				t.Fatalf("settled %+v on %s first, want the transcription on the trailing request", s[0], ids[0])
			}
			if s[1].Model != "gpt-realtime-2025-08-28" || s[1].InputTokens != 100 || !s[1].Complete || ids[1] != "req_1" {
				t.Fatalf("settled %+v on %s, want the response on the session's request", s[1], ids[1])
			}
			if n := g.count(); n < 3 {
				t.Fatalf("%d checks, want the opening, the refused one aside, the refused one after the response", n)
			}
			g.mu.Lock()
			defer g.mu.Unlock()
			if len(g.trailing) != 1 || g.trailing[0] != "org_1/om_1" {
				t.Fatalf("trailing requests opened for %v, want the session's member's one", g.trailing)
			}
		})
	}
}

// A session silent for longer than the idle timeout goes on (the provider answers pings);
// a provider that stops answering pings ends the session: 1001, and the session's
// request settled.
func TestRealtimeSilenceIsNotIdleness(t *testing.T) {
	idle := func(c *gateway.Config) { c.IdleTimeout = 100 * time.Millisecond }
	t.Run("silent", func(t *testing.T) {
		up := &realtimeUpstream{in: 10, out: 20}
		_, tr, url, _ := newRealtimeEnv(t, up, 10, idle)
		c, _ := openSession(t, url)
		time.Sleep(800 * time.Millisecond) // eight idle timeouts without a message
		say(t, c, `{"type":"response.create"}`)
		readUntil(t, c, "response.done")
		_ = c.Close(websocket.StatusNormalClosure, "")
		if s := tr.settlements(t, 2); s[0].InputTokens != 10 || !s[0].Complete {
			t.Fatalf("settled %+v, want the response", s)
		}
	})
	t.Run("a provider that stopped answering", func(t *testing.T) {
		stuck := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c, err := websocket.Accept(w, r, nil)
			if err != nil {
				return
			}
			defer c.CloseNow()
			_ = c.Write(r.Context(), websocket.MessageText, []byte(`{"type":"session.created","session":{"model":"gpt-realtime"}}`))
			<-r.Context().Done() // reads nothing, so answers no ping
		})
		_, tr, url, _ := newRealtimeEnv(t, stuck, 10, idle)
		c, _ := openSession(t, url)
		ce, err := closeOf(c)
		if err != nil || ce.Code != websocket.StatusGoingAway || ce.Reason != "the provider stopped answering" {
			t.Fatalf("closed with %v (%v), want 1001 and why", ce, err)
		}
		if s := tr.settlements(t, 1); !s[0].Complete || s[0].InputTokens != 0 {
			t.Fatalf("settled %+v, want the idle request at 0", s)
		}
	})
}

// leavingUpstream is a fake Realtime API for a client that leaves mid-response: it opens
// the session and, on the client's first message, starts responses responses
// (response.created and a text delta each, resp_0, resp_1...); once let (the test's word
// that the client's end was noticed) it ends the first done of them (response.done with
// 1000+i input and 200+i output tokens), then reads until the gateway closes its side,
// reported on closed. With done 0 it ends none and reads at once.
type leavingUpstream struct {
	responses, done int
	proceed         chan struct{}
	letOnce         sync.Once
	closed          chan providerClose
}

// providerClose is how the gateway ended the provider's side of a session, and when.
type providerClose struct {
	err error
	at  time.Time
}

const leavingDelta = "Tolls are paid in tokens."

func newLeavingUpstream(t *testing.T, responses, done int) *leavingUpstream {
	u := &leavingUpstream{responses: responses, done: done, proceed: make(chan struct{}), closed: make(chan providerClose, 1)}
	t.Cleanup(u.let)
	return u
}

// let has the responses end.
func (u *leavingUpstream) let() { u.letOnce.Do(func() { close(u.proceed) }) }

func (u *leavingUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c, send := fakeSession(w, r, websocket.MessageText)
	if c == nil {
		return
	}
	defer c.CloseNow()
	ctx := r.Context()
	send(`{"type":"session.created","session":{"model":"gpt-realtime-2025-08-28"}}`)
	if _, _, err := c.Read(ctx); err != nil {
		return
	}
	for i := range u.responses {
		send(fmt.Sprintf(`{"type":"response.created","response":{"id":"resp_%d","status":"in_progress","usage":null}}`, i))
		send(fmt.Sprintf(`{"type":"response.output_text.delta","response_id":"resp_%d","delta":%q}`, i, leavingDelta))
	}
	if u.done > 0 {
		<-u.proceed
	}
	for i := range u.done {
		send(fmt.Sprintf(`{"type":"response.done","response":{"id":"resp_%d","status":"completed",`+
			`"usage":{"input_tokens":%d,"output_tokens":%d,"input_token_details":{"cached_tokens":0}}}}`, i, 1000+i, 200+i))
	}
	_, _, err := c.Read(ctx)
	u.closed <- providerClose{err, time.Now()}
}

// closedBy waits for the gateway to close the provider's side and returns how.
func (u *leavingUpstream) closedBy(t *testing.T) providerClose {
	t.Helper()
	select {
	case c := <-u.closed:
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("the provider's side was never closed")
		return providerClose{}
	}
}

// clientConns is the gateway's listener, handing the test each client connection it
// accepts (accepted): the test learns when the gateway's side noticed the client's end
// (ended: a read failed, or the gateway closed it), or makes writes to the client fail,
// as to a client whose network vanished (its reads then wait, as a TCP connection's do
// until keepalive finds the peer gone).
type clientConns struct {
	net.Listener
	accepted chan *clientConn
}

func (l *clientConns) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	cc := &clientConn{Conn: c, ended: make(chan struct{})}
	select {
	case l.accepted <- cc:
	default:
	}
	return cc, nil
}

// next is the client connection accepted first.
func (l *clientConns) next(t *testing.T) *clientConn {
	t.Helper()
	select {
	case c := <-l.accepted:
		return c
	case <-time.After(5 * time.Second):
		t.Fatal("no client connection")
		return nil
	}
}

type clientConn struct {
	net.Conn
	ended      chan struct{}
	endOnce    sync.Once
	failWrites atomic.Bool
}

func (c *clientConn) end() { c.endOnce.Do(func() { close(c.ended) }) }

func (c *clientConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	// A deadline passed is net/http's own, stopping its background read at the hijack.
	if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		c.end()
	}
	return n, err
}

func (c *clientConn) Write(b []byte) (int, error) {
	if c.failWrites.Load() {
		return 0, syscall.EPIPE
	}
	return c.Conn.Write(b)
}

func (c *clientConn) Close() error {
	c.end()
	return c.Conn.Close()
}

// noticed waits until the gateway's side of the client's connection c noticed its end.
func (c *clientConn) noticed(t *testing.T) {
	t.Helper()
	select {
	case <-c.ended:
	case <-time.After(5 * time.Second):
		t.Fatal("the gateway never noticed the client's end")
	}
}

// newWatchedRealtimeEnv is newRealtimeEnv (10 admissions) with the client connections
// its front accepts handed to the test.
func newWatchedRealtimeEnv(t *testing.T, up http.Handler) (*fakeTracker, string, *clientConns, *gateway.Gateway) {
	t.Helper()
	_, tr, gw := newRealtimeGateway(t, up, 10)
	front := httptest.NewUnstartedServer(gw)
	conns := &clientConns{Listener: front.Listener, accepted: make(chan *clientConn, 1)}
	front.Listener = conns
	front.Start()
	t.Cleanup(front.Close)
	return tr, "ws" + strings.TrimPrefix(front.URL, "http"), conns, gw
}

// onlyOne checks, once the session ended (the provider's side was closed), that it
// settled nothing more than the one settlement seen.
func onlyOne(t *testing.T, tr *fakeTracker) {
	t.Helper()
	time.Sleep(100 * time.Millisecond)
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(tr.finished) != 1 {
		t.Fatalf("%d settlements, want 1: %+v", len(tr.finished), tr.finished)
	}
}

// leaveMidResponse opens a session, asks a response and, once the client has read
// until (a text it waits for), closes the client's side (1000, "bye") and waits until
// the gateway noticed.
func leaveMidResponse(t *testing.T, url string, conns *clientConns, until string) {
	t.Helper()
	c, _ := openSession(t, url)
	conn := conns.next(t)
	say(t, c, `{"type":"response.create"}`)
	readUntil(t, c, until)
	_ = c.Close(websocket.StatusNormalClosure, "bye")
	conn.noticed(t)
}

// leftResponse is what leavingUpstream's first response reports.
var leftResponse = inflight.Usage{Model: "gpt-realtime-2025-08-28", InputTokens: 1000, OutputTokens: 200, Complete: true, UpstreamStatus: 101}

// A response in progress when the client leaves is charged from its response.done, which
// the provider sends a moment later with what it bills (the whole input above all): the
// session goes on reading the provider's events for it (forwarding nothing), and only
// then closes the provider's side, with the client's close code. Before 2026-11-28 the
// provider's side was closed at once, the close handshake discarded the response.done,
// and the response was estimated from its text, with 0 input tokens.
func TestRealtimeResponseDoneAfterTheClientLeftIsCharged(t *testing.T) {
	up := newLeavingUpstream(t, 1, 1)
	tr, url, conns, _ := newWatchedRealtimeEnv(t, up)
	leaveMidResponse(t, url, conns, "output_text.delta")
	up.let()
	if u := tr.settled(t); shown(u) != shown(leftResponse) {
		t.Fatalf("settled %s, want %s", shown(u), shown(leftResponse))
	}
	var ce websocket.CloseError
	if closed := up.closedBy(t); !errors.As(closed.err, &ce) || ce.Code != websocket.StatusNormalClosure || ce.Reason != "bye" {
		t.Fatalf("the provider's side ended with %v, want the client's close (1000 bye)", closed.err)
	}
	onlyOne(t, tr)
}

// The client's close and the provider's next event may cross: the session's write of the
// event then finds the client's close under way (net.ErrClosed) before the client's
// reader has reported that close. However they cross, the provider's side is closed with
// the client's own close (1000, "bye"). Before 2026-12-01 a write that came first had
// the provider told 1001 (going away), about once in 300 runs of the test above under
// load; here the two are sent at once, many times.
func TestRealtimeClientCloseCrossingAnEvent(t *testing.T) {
	for range 30 {
		up := newLeavingUpstream(t, 1, 1)
		_, url, conns, _ := newWatchedRealtimeEnv(t, up)
		c, _ := openSession(t, url)
		conns.next(t)
		say(t, c, `{"type":"response.create"}`)
		readUntil(t, c, "output_text.delta")
		go up.let()
		_ = c.Close(websocket.StatusNormalClosure, "bye")
		var ce websocket.CloseError
		if closed := up.closedBy(t); !errors.As(closed.err, &ce) || ce.Code != websocket.StatusNormalClosure || ce.Reason != "bye" {
			t.Fatalf("the provider's side ended with %v, want the client's close (1000 bye)", closed.err)
		}
	}
}

// A response.done the client can no longer be given (the write to it fails) is charged all
// the same: the provider billed it. Before 2026-11-28 the session ended on the failed
// write before charging it and, the response no longer in progress, settled its request
// complete at 0. The provider sends the response.done only once the gateway's side of the
// client's connection is broken.
func TestRealtimeResponseDoneToAGoneClientIsCharged(t *testing.T) {
	t.Run("its network vanished", func(t *testing.T) {
		// The failed write is the only sign: reads from the client wait.
		up := newLeavingUpstream(t, 1, 1)
		tr, url, conns, _ := newWatchedRealtimeEnv(t, up)
		c, _ := openSession(t, url)
		defer c.CloseNow()
		conn := conns.next(t)
		say(t, c, `{"type":"response.create"}`)
		readUntil(t, c, "output_text.delta")
		conn.failWrites.Store(true)
		up.let()
		if u := tr.settled(t); shown(u) != shown(leftResponse) {
			t.Fatalf("settled %s, want %s", shown(u), shown(leftResponse))
		}
		if closed := up.closedBy(t); websocket.CloseStatus(closed.err) != websocket.StatusGoingAway {
			t.Fatalf("the provider's side ended with %v, want 1001", closed.err)
		}
		onlyOne(t, tr)
	})
	t.Run("it reset its connection", func(t *testing.T) {
		up := newLeavingUpstream(t, 1, 1)
		tr, url, conns, _ := newWatchedRealtimeEnv(t, up)
		var raw net.Conn
		dial := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			raw = c
			return c, err
		}}}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, _, err := websocket.Dial(ctx, url+"/v1/realtime?model=gpt-realtime", &websocket.DialOptions{
			HTTPClient: dial, HTTPHeader: http.Header{"Authorization": {"Bearer tgk_good"}}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.CloseNow()
		conn := conns.next(t)
		readUntil(t, c, "session.created")
		say(t, c, `{"type":"response.create"}`)
		readUntil(t, c, "output_text.delta")
		_ = raw.(*net.TCPConn).SetLinger(0) // Close sends a reset
		_ = raw.Close()
		conn.noticed(t)
		up.let()
		if u := tr.settled(t); shown(u) != shown(leftResponse) {
			t.Fatalf("settled %s, want %s", shown(u), shown(leftResponse))
		}
		up.closedBy(t)
		onlyOne(t, tr)
	})
}

// The grace after the client left (realtimeLeftGrace) is bounded: a provider that sends
// no response.done within it has the response settled as cut (incomplete, estimated from
// its text, as before 2026-11-28), and its side closed then, not before. Of two
// overlapping responses one of which ends, that one is charged on the session's request
// and the other estimated on a request of its own. A shutdown ends the grace at once,
// the session settled before DrainSessions returns.
func TestRealtimeGraceAfterTheClientLeft(t *testing.T) {
	grace := gateway.RealtimeLeftGrace()
	cut := func(t *testing.T, u inflight.Usage, text int) {
		t.Helper()
		if u.Complete || u.Seen == nil || u.Seen.TextBytes != int64(text) || u.InputTokens != 0 || u.Model != "gpt-realtime-2025-08-28" {
			t.Fatalf("the cut response was settled %+v (seen %+v), want incomplete and %d bytes of text", u, u.Seen, text)
		}
	}
	t.Run("no response.done", func(t *testing.T) {
		up := newLeavingUpstream(t, 1, 0)
		tr, url, _, _ := newWatchedRealtimeEnv(t, up)
		c, _ := openSession(t, url)
		say(t, c, `{"type":"response.create"}`)
		readUntil(t, c, "output_text.delta")
		left := time.Now()
		_ = c.Close(websocket.StatusNormalClosure, "bye")
		closed := up.closedBy(t)
		if held := closed.at.Sub(left); held < grace || held > grace+3*time.Second {
			t.Fatalf("the provider's side was closed %v after the client left, want after the grace (%v)", held, grace)
		}
		if ce := websocket.CloseStatus(closed.err); ce != websocket.StatusNormalClosure {
			t.Fatalf("the provider's side ended with %v, want the client's close (1000)", closed.err)
		}
		cut(t, tr.settled(t), len(leavingDelta))
		onlyOne(t, tr)
	})
	t.Run("one of two responses ends", func(t *testing.T) {
		up := newLeavingUpstream(t, 2, 1)
		tr, url, conns, _ := newWatchedRealtimeEnv(t, up)
		leaveMidResponse(t, url, conns, `"response_id":"resp_1"`)
		up.let()
		s := tr.settlements(t, 2)
		if shown(s[0]) != shown(leftResponse) {
			t.Fatalf("settled %s first, want %s", shown(s[0]), shown(leftResponse))
		}
		cut(t, s[1], 2*len(leavingDelta)) // the text of both: overlapping responses share their estimate
	})
	t.Run("a shutdown ends it", func(t *testing.T) {
		up := newLeavingUpstream(t, 1, 0)
		tr, url, conns, gw := newWatchedRealtimeEnv(t, up)
		leaveMidResponse(t, url, conns, "output_text.delta")
		stopped, stop := context.WithCancel(context.Background())
		stop()
		began := time.Now()
		gw.DrainSessions(stopped)
		took := time.Since(began)
		tr.mu.Lock()
		n := len(tr.finished)
		tr.mu.Unlock()
		if took > grace/2 || n != 1 {
			t.Fatalf("DrainSessions returned after %v with %d settlements, want the session settled and ended at once (its grace is %v)", took, n, grace)
		}
		cut(t, tr.settled(t), len(leavingDelta))
	})
}

// geminiLiveUpstream is a fake Gemini Live API: it answers the setup with setupComplete,
// then each client message with one turn (a text part, turnComplete, and the turn's
// usageMetadata: in+i prompt tokens, 300 of them audio, out+i response tokens, all
// audio), every message in a binary frame as Google sends them. With hang, the second
// turn never reports its usage. It records the handshake's query and headers.
type geminiLiveUpstream struct {
	in, out int64
	hang    bool
	mu      sync.Mutex
	query   string
	header  http.Header
	// setups counts the setup messages it got.
	setups int
}

func (u *geminiLiveUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	u.query, u.header = r.URL.RawQuery, r.Header.Clone()
	u.mu.Unlock()
	c, send := fakeSession(w, r, websocket.MessageBinary)
	if c == nil {
		return
	}
	defer c.CloseNow()
	ctx := r.Context()
	if _, _, err := c.Read(ctx); err != nil {
		return
	}
	u.mu.Lock()
	u.setups++
	u.mu.Unlock()
	if send(`{"setupComplete":{}}`) != nil {
		return
	}
	for i := int64(0); ; i++ {
		if _, _, err := c.Read(ctx); err != nil {
			return
		}
		_ = send(`{"serverContent":{"modelTurn":{"parts":[{"text":"Tolls are paid in tokens."}]}}}`)
		if u.hang && i == 1 {
			continue
		}
		_ = send(`{"serverContent":{"turnComplete":true}}`)
		_ = send(fmt.Sprintf(`{"usageMetadata":{"promptTokenCount":%d,"responseTokenCount":%d,"totalTokenCount":%d,`+
			`"promptTokensDetails":[{"modality":"TEXT","tokenCount":%d},{"modality":"AUDIO","tokenCount":300}],"responseTokensDetails":[{"modality":"AUDIO","tokenCount":%d}]}}`,
			u.in+i, u.out+i, u.in+u.out+2*i, u.in+i-300, u.out+i))
	}
}

// askTwice sends msg on session c twice, each after the answer to the last was read up
// to ended; with hang, the second answer only up to shown (it never ends). Then it closes
// c and returns the session's settlements: one per answer that ended, and the session's
// last request (with hang, the cut answer's).
func askTwice(t *testing.T, c *websocket.Conn, tr *fakeTracker, msg, ended, shown string, hang bool) []inflight.Usage {
	t.Helper()
	for i := range 2 {
		say(t, c, msg)
		if hang && i == 1 {
			readUntil(t, c, shown)
			break
		}
		readUntil(t, c, ended)
	}
	_ = c.Close(websocket.StatusNormalClosure, "bye")
	if hang {
		return tr.settlements(t, 2)
	}
	return tr.settlements(t, 3)
}

// geminiLivePath is the Gemini API's Live endpoint.
const geminiLivePath = "/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent"

// A Gemini Live session, its key in the query as Google's SDKs send it, is proxied and
// charged turn by turn as a Realtime session is: each turn's usageMetadata (in binary
// frames) settles a request at the model the setup named, with its audio parts; the
// member is checked again before the next; the provider gets its own key, never the
// member's (nor in the query); a turn cut before its usage is estimated from its text.
func TestGeminiLiveSessionIsChargedByTurn(t *testing.T) {
	for _, hang := range []bool{false, true} {
		t.Run(fmt.Sprint("hang ", hang), func(t *testing.T) {
			up := &geminiLiveUpstream{in: 1000, out: 200, hang: hang}
			g, tr, url, _ := newRealtimeEnv(t, up, 10)
			c, res, err := dialRealtime(t, url+geminiLivePath+"?key=tgk_good", "")
			if err != nil {
				t.Fatal(err, res)
			}
			say(t, c, `{"setup":{"model":"models/gemini-2.5-flash-native-audio-preview-09-2025","generationConfig":{"responseModalities":["AUDIO"]}}}`)
			readUntil(t, c, "setupComplete")
			s := askTwice(t, c, tr, `{"clientContent":{"turns":[{"role":"user","parts":[{"text":"Question"}]}],"turnComplete":true}}`,
				"usageMetadata", "Tolls are paid", hang)
			const model = "gemini-2.5-flash-native-audio-preview-09-2025"
			want := []inflight.Usage{
				{Model: model, InputTokens: 1000, OutputTokens: 200, AudioInputTokens: i64(300), AudioOutputTokens: i64(200), Complete: true, UpstreamStatus: 101},
				{Model: model, InputTokens: 1001, OutputTokens: 201, AudioInputTokens: i64(300), AudioOutputTokens: i64(201), Complete: true, UpstreamStatus: 101},
				{Model: model, Complete: true, UpstreamStatus: 101}, // nothing after the last turn
			}
			if hang {
				cut := s[1]
				if cut.Seen == nil || cut.Seen.TextBytes != int64(len("Tolls are paid in tokens.")) {
					t.Fatalf("the cut turn was seen %+v", cut.Seen)
				}
				cut.Seen = nil
				s[1], want = cut, []inflight.Usage{want[0], {Model: model, UpstreamStatus: 101}}
			}
			if len(s) != len(want) {
				t.Fatalf("%d settlements, want %d", len(s), len(want))
			}
			for i := range want {
				if shown(s[i]) != shown(want[i]) {
					t.Fatalf("settlement %d: %s, want %s", i, shown(s[i]), shown(want[i]))
				}
			}
			if !hang && g.count() != 3 {
				t.Fatalf("%d checks, want the session's opening and one after each turn", g.count())
			}
			up.mu.Lock()
			defer up.mu.Unlock()
			if up.query != "" || up.header.Get("Authorization") != "Bearer sk-provider" || strings.Contains(fmt.Sprint(up.header), "tgk_good") {
				t.Fatalf("the upstream's handshake: query %q, headers %v", up.query, up.header)
			}
		})
	}
}

// The Gemini Live paths the gateway proxies: the Gemini API's and Vertex AI's, each
// version, as Google's SDKs send them (two leading slashes); not the ephemeral tokens'
// constrained endpoint, nor Lyria's music, nor look-alikes.
func TestGeminiLivePaths(t *testing.T) {
	for path, want := range map[string]bool{
		"/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent":             true,
		"//ws/google.ai.generativelanguage.v1alpha.GenerativeService.BidiGenerateContent":           true,
		"/ws/google.cloud.aiplatform.v1beta1.LlmBidiService/BidiGenerateContent":                    true,
		"//ws/google.cloud.aiplatform.v1.LlmBidiService/BidiGenerateContent/":                       true,
		"/ws/google.ai.generativelanguage.v1alpha.GenerativeService.BidiGenerateContentConstrained": false,
		"/ws/google.ai.generativelanguage.v1alpha.GenerativeService.BidiGenerateMusic":              false,
		"/v1beta/models/gemini-2.5-flash:BidiGenerateContent":                                       false,
		"/v1/realtime": false,
	} {
		if got := gateway.IsGeminiLivePath(path); got != want {
			t.Errorf("%s: %v, want %v", path, got, want)
		}
	}
}

// An organization that refuses models nobody priced refuses a Gemini Live session's
// model at its setup, which names it after the handshake: the setup never reaches the
// provider, the session is closed with 1008 and the refusal's code, and the session's
// request is left to the tracker, which settled it at 0 (no settlement of the gateway's
// own). A session with a priced model goes on as any.
func TestGeminiLiveUnpricedModelIsRefusedAtSetup(t *testing.T) {
	up := &geminiLiveUpstream{in: 10, out: 20}
	_, tr, url, _ := newRealtimeEnv(t, up, 10)
	tr.refuse = "gemini-unpriced-live"
	c, _, err := dialRealtime(t, url+geminiLivePath+"?key=tgk_good", "")
	if err != nil {
		t.Fatal(err)
	}
	say(t, c, `{"setup":{"model":"models/gemini-unpriced-live"}}`)
	if ce, err := closeOf(c); ce.Code != websocket.StatusPolicyViolation || ce.Reason != gate.CodeModelNotPriced {
		t.Fatalf("after the setup: %v %v, want close 1008 %s", ce, err, gate.CodeModelNotPriced)
	}
	up.mu.Lock()
	setups := up.setups
	up.mu.Unlock()
	if setups != 0 {
		t.Fatalf("the provider got %d setups", setups)
	}

	c, _, err = dialRealtime(t, url+geminiLivePath+"?key=tgk_good", "")
	if err != nil {
		t.Fatal(err)
	}
	say(t, c, `{"setup":{"model":"models/gemini-2.5-flash-native-audio-preview-09-2025"}}`)
	readUntil(t, c, "setupComplete")
	say(t, c, `{"clientContent":{"turnComplete":true}}`)
	readUntil(t, c, "usageMetadata")
	_ = c.Close(websocket.StatusNormalClosure, "bye")
	s := tr.settlements(t, 2)
	if ids := tr.settledIDs(); fmt.Sprint(ids) != "[req_2 req_3]" {
		t.Fatalf("settled %v, want the second session's turn and last request only", ids)
	}
	if s[0].InputTokens != 10 || !s[0].Complete {
		t.Fatalf("the priced session's turn was settled %+v", s[0])
	}
}

// A Tollgate key in a Realtime URL's api-key parameter (which Azure OpenAI reads as its
// key) never reaches the provider, as one in ?key= does not; a provider's key there, and
// the other parameters, stay as sent. Before 2026-12-02 ?api-key= passed whatever it
// carried.
func TestRealtimeAPIKeyInTheQueryIsStripped(t *testing.T) {
	for _, tc := range []struct{ query, want string }{
		{"api-version=2025-04-01-preview&deployment=gpt-realtime&api-key=tgk_good", "api-version=2025-04-01-preview&deployment=gpt-realtime"},
		{"api-key=tgk_good&deployment=gpt-realtime", "deployment=gpt-realtime"},
		{"deployment=gpt-realtime&api-key=azure-provider-key", "deployment=gpt-realtime&api-key=azure-provider-key"},
		{"deployment=gpt-realtime&key=tgk_good", "deployment=gpt-realtime"},
	} {
		t.Run(tc.query, func(t *testing.T) {
			up := &geminiLiveUpstream{in: 1, out: 1}
			_, _, url, _ := newRealtimeEnv(t, up, 10)
			c, _, err := dialRealtime(t, url+"/openai/realtime?"+tc.query, "tgk_good")
			if err != nil {
				t.Fatal(err)
			}
			c.CloseNow()
			up.mu.Lock()
			defer up.mu.Unlock()
			if up.query != tc.want {
				t.Fatalf("the provider got ?%s, want ?%s", up.query, tc.want)
			}
		})
	}
}

// A session ended at shutdown whose client does not answer the close (it stopped
// reading: a frozen app, a network gone without a word) is settled, and its slot freed,
// before DrainSessions returns, within realtimeSettleWait (2s) of the deadline. Before
// 2026-12-02 the session waited for the client's close frame first (coder/websocket's
// close handshake: 5s), so DrainSessions gave up on it after 4s (its own wait, then
// waitIdle's), past what the shutdown had left, and the tracker's SettleAll settled the
// session's request at its input estimate before the handler reported what it saw.
func TestRealtimeShutdownDoesNotWaitForASilentClient(t *testing.T) {
	up := &realtimeUpstream{in: 10, out: 20}
	_, tr, url, gw := newRealtimeEnv(t, up, 10)
	c := oneResponse(t, url) // read no more: the gateway's close is never answered
	defer c.CloseNow()
	tr.settlements(t, 1)
	grace, stop := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer stop()
	began := time.Now()
	gw.DrainSessions(grace)
	took := time.Since(began)
	tr.mu.Lock()
	n := len(tr.finished)
	tr.mu.Unlock()
	if n != 2 || took > 300*time.Millisecond+2500*time.Millisecond {
		t.Fatalf("DrainSessions returned after %v with %d settlements, want 2 within the deadline and 2s", took, n)
	}
}

// DrainSessions waits realtimeSettleWait (2s) at most once it ended the sessions left,
// for them and the streams its server cut alike: what the shutdown has left after it
// is the tracker's and the settle queue's. Before 2026-12-02 it waited that long for
// the sessions, then as long again for every request's slot (waitIdle), a session's
// included: 4s past the deadline, more than the quarter of the shutdown (3.75s with the
// defaults) kept for settling what is left and draining the settle queue.
func TestDrainSessionsWaitsOnceAfterTheDeadline(t *testing.T) {
	up := &realtimeUpstream{in: 10, out: 20}
	_, tr, url, gw := newRealtimeEnv(t, up, 10)
	c := oneResponse(t, url)
	defer c.CloseNow()
	go func() { _, _ = closeOf(c) }() // the client answers the close
	tr.settlements(t, 1)
	tr.mu.Lock()
	tr.slow = 5 * time.Second // the session's handler unwinds slowly
	tr.mu.Unlock()
	var waits []time.Time
	gateway.ObserveIdleWaits(gw, func(deadline time.Time) { waits = append(waits, deadline) })
	grace, stop := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer stop()
	graceEnd, _ := grace.Deadline()
	gw.DrainSessions(grace)
	returned := time.Now()
	// One wait, of realtimeSettleWait from when the grace ended (or later, when
	// DrainSessions ran past it), and DrainSessions returned when it ended: asserted on
	// the wait's deadline, not by timing DrainSessions (with the test binary stopped 300ms
	// of every 500ms, 2 runs of 5 failed "DrainSessions returned after 2.9s, want within
	// its deadline and 2s", the wait right).
	if len(waits) != 1 || waits[0].Before(graceEnd.Add(gateway.RealtimeSettleWait)) || waits[0].After(returned) {
		t.Fatalf("DrainSessions waited until %v, want once, until %v after its grace at least", waits, gateway.RealtimeSettleWait)
	}
	// Returned once the wait ended (a loaded machine's scheduling allowed for, not a
	// second wait).
	if late := returned.Sub(waits[0]); late > time.Second {
		t.Fatalf("DrainSessions returned %v after its wait's end", late)
	}
}

// A session whose handshake was under way when the shutdown cut the sessions (its
// upstream's handshake slow) is ended as soon as it opens, with 1001, and settled
// before DrainSessions returns. Before 2026-12-02 it was not among the sessions cut (it
// registered after), so it ran on past the shutdown: DrainSessions waited 2s for its slot
// in vain, and the tracker's SettleAll settled its request at once.
func TestRealtimeSessionOpenedDuringTheDrainIsEnded(t *testing.T) {
	asked := make(chan struct{}, 1)
	up := &realtimeUpstream{in: 10, out: 20}
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked <- struct{}{}
		time.Sleep(300 * time.Millisecond)
		up.ServeHTTP(w, r)
	})
	_, tr, url, gw := newRealtimeEnv(t, slow, 10)
	closed := make(chan websocket.CloseError, 1)
	go func() {
		c, _, err := dialRealtime(t, url+"/v1/realtime?model=gpt-realtime", "tgk_good")
		if err != nil {
			closed <- websocket.CloseError{}
			return
		}
		defer c.CloseNow()
		for {
			if _, _, err := c.Read(context.Background()); err != nil {
				ce, _ := errors.AsType[websocket.CloseError](err)
				closed <- ce
				return
			}
		}
	}()
	<-asked
	stopped, cancel := context.WithCancel(context.Background())
	cancel()
	began := time.Now()
	gw.DrainSessions(stopped)
	took := time.Since(began)
	tr.mu.Lock()
	n := len(tr.finished)
	tr.mu.Unlock()
	if n != 1 || took > 1500*time.Millisecond {
		t.Fatalf("DrainSessions returned after %v with %d settlements, want the session ended and settled", took, n)
	}
	select {
	case ce := <-closed:
		if ce.Code != websocket.StatusGoingAway {
			t.Fatalf("the client saw %v, want 1001", ce)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the session opened during the drain was never ended")
	}
}

// A WebSocket upgrade of a path no session reader serves (a chat completion's) is
// refused 400 service_gateway_websocket_unsupported, never sent upstream, and its
// admitted request settled as refused with that same status: the receipt says what the
// client was answered. Before 2026-12-07 it was settled as a 403.
func TestOtherWebSocketUpgradesAreRefused(t *testing.T) {
	var reached atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached.Add(1) }))
	defer up.Close()
	e := newEnv(t, up.URL, gateway.Config{})
	_, res, err := dialRealtime(t, "ws"+strings.TrimPrefix(e.front.URL, "http")+"/v1/chat/completions", "tgk_good")
	if err == nil || res == nil || res.StatusCode != http.StatusBadRequest ||
		res.Header.Get("X-Service-Error-Code") != "service_gateway_websocket_unsupported" {
		t.Fatalf("dial: %v %+v, want 400 service_gateway_websocket_unsupported", err, res)
	}
	if u := e.tracker.settled(t); !u.Refused || u.UpstreamStatus != http.StatusBadRequest {
		t.Fatalf("settled %+v, want refused at 400, the status the client got", u)
	}
	if n := reached.Load(); n != 0 {
		t.Fatalf("the upstream was reached %d times", n)
	}
}
