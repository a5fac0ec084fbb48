package realtimeusage

import (
	"encoding/json"
	"math"
	"reflect"
	"sync/atomic"
	"time"

	"github.com/tollgate-dev/tollgate/pkg/saturate"
)

// GPTLive follows an OpenAI GPT-Live session over a WebSocket (GET /v1/live/sessions,
// openai 7's LiveWS; gpt-live-1). GPT-Live bills the session's time, by the second, not
// tokens: its server reports the session's cumulative seconds in session.usage.updated
// (usage.seconds, a total, never an increment) and, finally, in session.closed. The
// reasoning and tools a session delegates to a Responses backend are billed as those
// Responses calls are, by their tokens: the server wraps the backend's Responses stream
// events in response.event (event: the Responses event itself), which Event hands back
// for a Responses reader (responseusage.ResponsesSession). So are its Decision API
// evaluations (a client's decision.create, a delegation to Decisions, a transcript
// trigger), by their tokens at the decision's model: each result comes in decision.event
// (event: decision.completed, whose decision is the native Decision, its model and usage
// as POST /v1/decisions answers them), which Event hands back whole for the reader of
// that answer (responseusage, as the HTTP Decisions API's is read).
//
// The time is charged in steps of at least GPTLiveStep (and whatever is left at
// session.closed): every report would be a settlement, and the server may report often.
// A server silent for GPTLiveSilence (no report) has the session's clock time since its
// last report charged at its next event, an estimate, so that a member's limit is
// checked all the same; its later reports charge only what goes beyond. A session that
// ends without session.closed (its connection cut) is charged, besides what its reports
// said, the clock time since its last report, an estimate (Unreported).
//
// Not safe for concurrent use, but for SetModel (the client's side of the session) beside
// the other methods (its server's side).
type GPTLive struct {
	now   func() time.Time
	model atomic.Pointer[string]
	// reported is the session's cumulative time as the server last reported it, and
	// charged the time Event handed out (reported, or estimated from the clock); both in
	// milliseconds.
	reported, charged int64
	// counted is the moment up to which the session's time was reported or estimated
	// (the session's start before either).
	counted time.Time
	closed  bool
}

// GPTLiveStep is the least session time Event charges at once (but at session.closed):
// 10 seconds, 0.83 cents at gpt-live-1's price, which a session may spend past a
// member's limit besides what its backend spends.
const GPTLiveStep = 10 * time.Second

// GPTLiveSilence is how long a session runs without a report of its server before its
// clock time is charged, an estimate: a minute, 5 cents at gpt-live-1's price.
const GPTLiveSilence = time.Minute

// NewGPTLive returns a reader for a session starting now (now is the clock: the
// session's time is estimated from it when the server stops reporting).
func NewGPTLive(now func() time.Time) *GPTLive {
	return &GPTLive{now: now, counted: now()}
}

// gptLiveEvent is the part of a GPT-Live server event the reader reads.
type gptLiveEvent struct {
	Type    string `json:"type"`
	Session *struct {
		Model string `json:"model"`
	} `json:"session"`
	Usage *gptLiveUsage   `json:"usage"`
	Event json.RawMessage `json:"event"`
}

// gptLiveUsage is a GPT-Live session's usage (session.usage.updated, session.closed): its
// cumulative seconds.
type gptLiveUsage struct {
	Seconds *float64 `json:"seconds"`
}

// ReadsGPTLiveField is ReadsField for a GPT-Live session's usage field ("seconds").
func ReadsGPTLiveField(path string) bool { return readsField(reflect.TypeFor[gptLiveUsage](), path) }

// HandsOverGPTLiveDecisions tells whether Event hands each decision.event's Decision
// back whole (for a reader of the Decisions API's answer), so that its usage's fields
// are read as that reader reads them: e2e's TestEverySDKUsageFieldIsDecided asks.
func HandsOverGPTLiveDecisions() bool {
	l := NewGPTLive(time.Now)
	_, _, _, d := l.Event([]byte(`{"type":"decision.event","event":{"type":"decision.completed","decision":{"usage":{}}}}`))
	return string(d) == `{"usage":{}}`
}

// SetModel names the session's model before the server does: the client's session.start
// (SessionStart).
func (l *GPTLive) SetModel(model string) {
	if model != "" {
		l.model.CompareAndSwap(nil, &model)
	}
}

// SessionStart reads the model a client's first message (session.start) names; "" for
// any other message.
func SessionStart(msg []byte) string {
	var e gptLiveEvent
	if json.Unmarshal(msg, &e) != nil || e.Type != "session.start" || e.Session == nil {
		return ""
	}
	return e.Session.Model
}

// gptLiveDecision is the event a decision.event wraps: decision.completed, with the
// native Decision (openai 7's live.d.ts DecisionEvent.Event).
type gptLiveDecision struct {
	Type     string          `json:"type"`
	Decision json.RawMessage `json:"decision"`
}

// Event reads one server event: the session time to charge now, in milliseconds (0 but
// at a step, the session's close or a silence), and whether that is an estimate from
// the clock; for a response.event, the Responses event it wraps (nested, nil
// otherwise); for a decision.event, the Decision it carries (decision: a Decision API
// answer with its model and usage, nil otherwise).
func (l *GPTLive) Event(msg []byte) (millis int64, estimated bool, nested, decision []byte) {
	var e gptLiveEvent
	if json.Unmarshal(msg, &e) != nil {
		return 0, false, nil, nil // not JSON, or not an event's shape: not ours
	}
	if e.Session != nil && e.Session.Model != "" && (e.Type == "session.started" || e.Type == "session.updated" || e.Type == "session.closed") {
		l.model.Store(&e.Session.Model)
	}
	switch e.Type {
	case "response.event":
		if len(e.Event) > 0 && e.Event[0] == '{' {
			return 0, false, e.Event, nil // its own charge: the silence is counted at the next event
		}
	case "decision.event":
		var d gptLiveDecision
		if json.Unmarshal(e.Event, &d) == nil && d.Type == "decision.completed" && len(d.Decision) > 0 && d.Decision[0] == '{' {
			return 0, false, nil, d.Decision // its own charge, as a backend response's
		}
	case "session.usage.updated", "session.closed":
		if e.Usage != nil && e.Usage.Seconds != nil {
			l.report(*e.Usage.Seconds)
		}
		if e.Type == "session.closed" {
			l.closed = true
			return l.take(), false, nil, nil
		}
		if l.reported-l.charged >= GPTLiveStep.Milliseconds() {
			return l.take(), false, nil, nil
		}
		return 0, false, nil, nil
	}
	if l.closed {
		return 0, false, nil, nil
	}
	if since := l.now().Sub(l.counted); since >= GPTLiveSilence {
		l.counted = l.counted.Add(since)
		ms := since.Milliseconds()
		l.charged = saturate.Add(l.charged, ms)
		return ms, true, nil, nil
	}
	return 0, false, nil, nil
}

// report notes the server's cumulative seconds: a total, so a smaller or broken one
// (negative, not a number) changes nothing.
func (l *GPTLive) report(seconds float64) {
	l.counted = l.now()
	if math.IsNaN(seconds) || seconds <= 0 {
		return
	}
	ms := int64(math.MaxInt64)
	if seconds < math.MaxInt64/1000 {
		ms = int64(math.Ceil(seconds * 1000)) // a started millisecond counts
	}
	l.reported = max(l.reported, ms)
}

// take hands out the time reported and not yet charged (none while the estimates
// charged reach beyond it).
func (l *GPTLive) take() int64 {
	n := max(0, l.reported-l.charged)
	l.charged = max(l.charged, l.reported)
	return n
}

// Model is the session's model as the server (or the client's session.start) named it,
// "" before either did.
func (l *GPTLive) Model() string {
	if m := l.model.Load(); m != nil {
		return *m
	}
	return ""
}

// Unreported is what the session's end leaves to charge, in milliseconds: the time
// reported and not yet charged (a step not reached), and, unless the server closed the
// session, the time since its last report, an estimate (estimated).
func (l *GPTLive) Unreported() (millis int64, estimated bool) {
	n := max(0, l.reported-l.charged)
	if l.closed {
		return n, false
	}
	since := max(0, l.now().Sub(l.counted).Milliseconds())
	return saturate.Add(n, since), since > 0
}
