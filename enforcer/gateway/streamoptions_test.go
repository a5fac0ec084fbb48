package gateway_test

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tollgate-dev/tollgate/enforcer/gateway"
)

// refusingUpstream answers a body with stream_options as an OpenAI-compatible server
// that does not know the field does (an older Groq's words), and any other chat stream
// with a stream that reports no usage. It keeps every body it was sent.
type refusingUpstream struct {
	mu     sync.Mutex
	bodies []string
}

const unaskedStream = `data: {"object":"chat.completion.chunk","model":"llama-3","choices":[{"index":0,"delta":{"content":"hello there"}}]}` + "\n\ndata: [DONE]\n\n"

// longError is a 400 of 20 KiB that names stream_options past its first 16 KiB.
var longError = `{"error":{"message":"` + strings.Repeat("x", 20<<10) + ` stream_options"}}`

const quotedRole = `{"error":{"message":"Invalid value: 'stream_options'. Supported values are: 'system', 'assistant', 'user', 'function', 'tool', and 'developer'.","type":"invalid_request_error","param":"messages[0].role","code":"invalid_value"}}`

const groqRefusal = `{"error":{"message":"property 'stream_options' is unsupported, did you mean 'stream'?","type":"invalid_request_error"}}` + "\n"

func (u *refusingUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	u.mu.Lock()
	u.bodies = append(u.bodies, string(body))
	u.mu.Unlock()
	switch {
	case bytes.Contains(body, []byte(`"role":"stream_options"`)):
		// OpenAI quotes an invalid value: its words name the field, whoever wrote them.
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, quotedRole)
	case bytes.Contains(body, []byte(`"model":"no-such-model"`)):
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"error":{"message":"The model no-such-model does not exist","type":"invalid_request_error"}}`)
	case bytes.Contains(body, []byte(`"model":"long-error"`)):
		// Longer than what is read to tell a refusal, sent chunked: relayed whole.
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, longError[:100])
		w.(http.Flusher).Flush()
		_, _ = io.WriteString(w, longError[100:])
	case bytes.Contains(body, []byte("stream_options")) && !bytes.Contains(body, []byte(`"model":"o3"`)): // o3 takes the field
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, groqRefusal)
	default:
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, unaskedStream)
	}
}

// sent returns the bodies sent since the last call.
func (u *refusingUpstream) sent() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	b := u.bodies
	u.bodies = nil
	return b
}

// An upstream that refuses the stream_options the gateway adds gets the client's own
// body at once, and the next streams of that model go unasked from the start: the
// program runs as it does against the upstream, each stream charged an estimate.
func TestAnUpstreamThatRefusesStreamOptionsGetsTheClientsBody(t *testing.T) {
	up := &refusingUpstream{}
	srv := httptest.NewServer(up)
	defer srv.Close()
	var logged bytes.Buffer
	e := newEnvLogging(t, srv.URL, gateway.Config{}, slog.New(slog.NewTextHandler(&logged, nil)))
	send := func(body string) (int, string) {
		t.Helper()
		res := post(t, e.front.URL+"/v1/chat/completions", "tgk_good", body)
		got, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		return res.StatusCode, string(got)
	}
	stream := func(model, extra string) (int, string) {
		t.Helper()
		return send(`{"model":"` + model + `","stream":true` + extra + `,"messages":[{"role":"user","content":"hi"}]}`)
	}
	client := func(model string) string {
		return `{"model":"` + model + `","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	}

	// The first stream: asked, refused, sent again as the client wrote it.
	status, got := stream("llama-3", "")
	if status != http.StatusOK || got != unaskedStream {
		t.Fatalf("the client got %d %q, want the upstream's stream", status, got)
	}
	sent := up.sent()
	if len(sent) != 2 || !strings.Contains(sent[0], `"include_usage":true`) || sent[1] != client("llama-3") {
		t.Fatalf("the upstream was sent %q, want the asked body, then the client's own", sent)
	}
	u := e.tracker.settledOnce(t)
	if u.Complete || u.Seen == nil || u.Seen.TextBytes != int64(len("hello there")) {
		t.Fatalf("settled %+v, want an estimate from the stream's text (incomplete, its 11 bytes seen)", u)
	}
	if !strings.Contains(logged.String(), "refuses stream_options") || !strings.Contains(logged.String(), "model=llama-3") {
		t.Errorf("the refusal was not logged: %s", logged.String())
	}
	if n := testutil.ToFloat64(e.req.WithLabelValues(gateway.OutcomeProxied)); n != 1 {
		t.Errorf("outcome proxied counted %v times, want once", n)
	}

	// The next stream of that model goes unasked from the start.
	if status, got = stream("llama-3", ""); status != http.StatusOK || got != unaskedStream {
		t.Fatalf("the second stream got %d %q", status, got)
	}
	if sent = up.sent(); len(sent) != 1 || sent[0] != client("llama-3") {
		t.Fatalf("the second stream sent %q, want the client's body alone", sent)
	}
	e.tracker.settledOnce(t)

	// Another model is asked: the upstream may take the field for it.
	stream("llama-4", "")
	if sent = up.sent(); len(sent) != 2 || !strings.Contains(sent[0], "include_usage") {
		t.Fatalf("another model's stream sent %q, want it asked first", sent)
	}
	e.tracker.settledOnce(t)

	// A bad request for another reason reaches the client as it came, sent once.
	status, got = stream("no-such-model", "")
	if status != http.StatusBadRequest || !strings.Contains(got, "does not exist") {
		t.Fatalf("a bad model got %d %q, want the upstream's 400", status, got)
	}
	if sent = up.sent(); len(sent) != 1 {
		t.Fatalf("a bad model was sent %d times, want once", len(sent))
	}
	e.tracker.settledOnce(t)

	// An answer longer than what is read to tell a refusal reaches the client whole.
	status, got = stream("long-error", "")
	if status != http.StatusBadRequest || got != longError {
		t.Fatalf("a long 400 got %d and %d bytes, want the upstream's %d", status, len(got), len(longError))
	}
	if sent = up.sent(); len(sent) != 1 {
		t.Fatalf("a long 400 was sent %d times, want once", len(sent))
	}
	e.tracker.settledOnce(t)

	// A client that asked itself is not sent again: the upstream's refusal is its answer.
	status, got = stream("llama-5", `,"stream_options":{"include_usage":true}`)
	if status != http.StatusBadRequest || got != groqRefusal {
		t.Fatalf("a client that asked got %d %q, want the upstream's refusal as it came", status, got)
	}
	if sent = up.sent(); len(sent) != 1 {
		t.Fatalf("a client that asked was sent %d times, want once", len(sent))
	}
	e.tracker.settledOnce(t)

	// One that wrote stream_options without asking gets the refusal its own body meets.
	status, got = stream("llama-6", `,"stream_options":{"include_usage":false}`)
	if status != http.StatusBadRequest || got != groqRefusal {
		t.Fatalf("a client with its own stream_options got %d %q, want the upstream's refusal", status, got)
	}
	if sent = up.sent(); len(sent) != 2 || !strings.Contains(sent[1], `"include_usage":false`) {
		t.Fatalf("a client with its own stream_options sent %q, want asked, then its own", sent)
	}
	if u := e.tracker.settledOnce(t); u.Complete || u.InputTokens != 0 || u.OutputTokens != 0 {
		t.Fatalf("a refused request settled %+v", u)
	}
	// Nor is that a refusal remembered: its own body was refused too.
	stream("llama-6", "")
	if sent = up.sent(); len(sent) != 2 || !strings.Contains(sent[0], "include_usage") {
		t.Fatalf("after a client's own body was refused, the model's next stream sent %q, want it asked first", sent)
	}
	e.tracker.settledOnce(t)

	// A body whose refusal quotes what the client wrote: the client gets the answer its
	// own body meets, and the model is not taken for one that refuses the field (its
	// members' streams, asked, are charged exactly, hidden reasoning included).
	status, got = stream("o3", "")
	if status != http.StatusOK {
		t.Fatalf("o3 got %d %q", status, got)
	}
	up.sent()
	e.tracker.settledOnce(t)
	quoting := `{"model":"o3","stream":true,"messages":[{"role":"stream_options","content":"hi"}]}`
	if status, got = send(quoting); status != http.StatusBadRequest || got != quotedRole {
		t.Fatalf("a body quoted in its refusal got %d %q, want the upstream's 400 to its own body", status, got)
	}
	if sent = up.sent(); len(sent) != 2 || sent[1] != quoting {
		t.Fatalf("a body quoted in its refusal sent %q, want asked, then its own", sent)
	}
	e.tracker.settledOnce(t)
	stream("o3", "")
	if sent = up.sent(); len(sent) != 1 || !strings.Contains(sent[0], "include_usage") {
		t.Fatalf("after a refusal quoting the client, o3's next stream sent %q, want it asked", sent)
	}
	e.tracker.settledOnce(t)
	for line := range strings.Lines(logged.String()) {
		if strings.Contains(line, "level=WARN") && strings.Contains(line, "model=o3") {
			t.Errorf("a refusal was learned from a body its refusal quoted: %s", line)
		}
	}
}

// failSecond sends the first request on and fails every later one before it is written
// (no connection), as an upstream that went away between the two would.
type failSecond struct {
	mu   sync.Mutex
	sent int
}

func (f *failSecond) RoundTrip(r *http.Request) (*http.Response, error) {
	f.mu.Lock()
	f.sent++
	n := f.sent
	f.mu.Unlock()
	if n == 1 {
		return http.DefaultTransport.RoundTrip(r)
	}
	if r.Body != nil {
		_ = r.Body.Close()
	}
	return nil, &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
}

// The refused request was not billed: when the client's own body then never reaches the
// upstream, nothing is charged, as for any request that never reached it.
func TestARefusedStreamNotSentAgainCostsNothing(t *testing.T) {
	srv := httptest.NewServer(&refusingUpstream{})
	defer srv.Close()
	e := newEnv(t, srv.URL, gateway.Config{Transport: &failSecond{}})
	res := post(t, e.front.URL+"/v1/chat/completions", "tgk_good", chatBody)
	_, _ = io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusBadGateway {
		t.Fatalf("got %d, want 502", res.StatusCode)
	}
	if u := e.tracker.settled(t); !u.Complete || u.UpstreamStatus != http.StatusBadGateway {
		t.Fatalf("settled %+v, want nothing charged (complete, 502)", u)
	}
}
