package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/tollgate-dev/tollgate/enforcer/estimate"
	"github.com/tollgate-dev/tollgate/enforcer/gate"
	"github.com/tollgate-dev/tollgate/enforcer/inflight"
	"github.com/tollgate-dev/tollgate/enforcer/requestbody"
	"github.com/tollgate-dev/tollgate/enforcer/settleq"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// In the Responses API's WebSocket mode every response is asked for by the client, with
// a response.create event whose fields are those of POST /v1/responses. So each one is
// checked as the request it is, before it goes upstream (responseCreates.pass): the
// gate reserves its worst case from its model and output cap, a Responses call the
// organization cannot be charged for (a code tool naming a container created apart:
// deferred billing) is refused, and so is a model nobody priced where the organization
// refuses those. A refused response.create never reaches the provider: the client's
// WebSocket is closed with 1008 and the refusal's error code, as a session at its limit
// is.
//
// A response.steer is a request too (openai 7.59's ResponseSteerEvent): a steer ends the
// response in progress or follows its completion, and the provider then starts a
// successor response with the steer's input on its own, which no response.create asked
// for. So a steer is checked as a response.create is, and its request waits with the
// others for the successor it asks for; a steer that will start none
// (response.steer.failed, or response.steer.pending: its input waits for an explicit
// response.create, checked itself) is settled at 0.
//
// The session holds its requests as a Realtime session does: one request in flight
// while it is idle, the current one (hold), first the handshake's, which let the session
// open. So an idle session counts in its member's requests in flight (a policy's
// in-flight cap bounds how many a member holds open) and its slot among the gateway's
// has a request to show. A response.create (or steer) that finds the idle request held
// settles it at 0 first, the settlement applied (realtimeSettleWait at most), and only
// then is checked, with its body, as the request of its own it is: a session whose
// responses run one after another counts one request in flight, idle or busy, and each
// response is still checked at its own time, its worst case reserved. Once nothing is
// open any more (the last response waited for ended, was refused by the provider, or a
// steer started none), the next idle request is opened, checked as a Realtime session's
// next request is (after the last settlement was applied); a refusal then closes the
// session with 1008 and the refusal's code (hold). Responses asked for while another is
// in progress (stream_id lanes, a steer of the response in progress) find nothing idle
// and are each a request more in flight, so the in-flight cap bounds them. The idle
// request is settled at 0 at the session's end, or with a response nobody asked for
// that ended (or was cut) while it was held.
//
// The provider makes a connection's responses one at a time, in the order they were
// asked for, so the requests admitted wait in that order (pending) for the events that
// concern them: response.created starts the first that has not started, a response's
// terminal event settles the first (with that response's usage), and an "error" event,
// which is how the provider refuses a response.create it will not run, settles the
// last one not started at 0. A terminal event no request waits for (a successor several
// steers folded into one, a lane's order the queue does not follow) is charged on a
// request checked then (chargeAside; one opened without a check if the member is
// refused, and the session is then closed with 1008). What the session's end leaves: the response in progress is
// estimated from its text (as a cut stream is), one asked for and not yet begun is
// charged its input estimate (the provider had it, as a request cut before its answer
// began).

// responseCreates are the requests a Responses WebSocket session's response.create
// events were admitted as, and the settlement of each.
type responseCreates struct {
	p    *proxied
	path string
	// ctx and creds, the session's and its member's, are set once the session is open,
	// before its client's first message is read; client too when the client is Codex
	// (codexClient), to be told the member's limits as each response is admitted.
	ctx    context.Context
	creds  gate.Credentials
	client *websocket.Conn

	mu      sync.Mutex
	pending []pendingResponse
	// applied is closed once the last response's settlement was applied: the next
	// response.create's check waits for it, to see that response's cost.
	applied chan struct{}
	// ended: the session ended (finish); a request admitted since is settled at once.
	ended bool
	// refused is the refusal a response nobody asked for met when it was charged
	// (finished): the relay closes the session with it (takeRefusal).
	refused *gate.Answer
	// holding: the session holds an idle request, idle ("" when the gate admitted it
	// without a request to track): the handshake's, then the one hold opened after the
	// last response. Never while a request waits in pending.
	holding bool
	idle    string
	// idleAt is when the idle request's check began (proxied.checkedAt): a response
	// nobody asked for that begins once its windows ended is not charged on it
	// (started).
	idleAt time.Time

	// checking is held across a check of the member (pass, hold): the idle request is
	// settled and the next one opened one at a time, so that two checks of one session
	// never meet (a member capped at one request in flight would be refused the second).
	checking sync.Mutex
}

// pendingResponse is a response.create (or a response.steer: steer) admitted as request
// id ("" when the gate admitted it without a request to track), waiting for its response
// (the steer's successor) to begin and end.
type pendingResponse struct {
	id      string
	started bool
	steer   bool
}

// requestEvent tells a client's event that asks for a response: "response.create",
// "response.steer" (its successor), "" for any other; warmup tells a response.create
// with "generate": false, which prepares a turn's state and generates nothing (Codex
// sends one as a session opens, before its turn).
func requestEvent(msg []byte) (kind string, warmup bool) {
	var ev struct {
		Type string `json:"type"`
		// Raw: a value of another type must not make the event unreadable, and so
		// unchecked.
		Generate json.RawMessage `json:"generate"`
	}
	if requestbody.UnmarshalExact(msg, &ev, "type", "generate") != nil || ev.Type != "response.create" && ev.Type != "response.steer" {
		return "", false
	}
	return ev.Type, ev.Type == "response.create" && string(ev.Generate) == "false"
}

// pass checks a message the client sent before it goes upstream: a response.create or
// a response.steer as the request it is (see above). It returns the reason to close the
// client's side with (1008) when the message must not go upstream: the refusal's error
// code, or "" when the check could not finish (the session is ending). Any other
// message passes: it asks for no response.
func (q *responseCreates) pass(msg []byte) (reason string, ok bool) {
	kind, warmup := requestEvent(msg)
	if kind == "" {
		return "", true
	}
	p := q.p
	gw := p.gw
	q.checking.Lock()
	defer q.checking.Unlock()
	q.waitApplied()
	// The idle request is this response's place: settled at 0 (applied) before the
	// response's own check, so that the session has one request in flight, not two.
	q.mu.Lock()
	idle, held := q.idle, q.holding
	q.idle, q.holding = "", false
	q.mu.Unlock()
	if held {
		q.settleApplied(idle)
	}
	host := p.route.Upstream.Host
	hint := gate.BodyHint(msg, q.path, host).WithUpstreamHost(host)
	if warmup && hint.Body != nil {
		hint.Body.NoGeneration = true // its worst case is its input
	}
	a, err := gw.gate.CheckRequest(q.ctx, q.creds, hint)
	if err != nil {
		return "", false
	}
	if !a.Allowed() {
		return closeReason(a), false
	}
	id := a.RequestID
	if id != "" {
		gw.tracker.Follow(id)
	}
	if endpoint := requestbody.DeferredRequest(http.MethodPost, q.path, hint.Body, msg); endpoint != "" && !gw.cfg.AllowDeferred.Allows(endpoint) {
		if id != "" {
			_ = gw.tracker.Finish(id, inflight.Refused(http.StatusForbidden), nil)
		}
		return closeReason(gate.BillingDeferredRefusal(endpoint)), false
	}
	if id != "" {
		if est := hint.Body; est != nil {
			if gw.tracker.RefuseUnpricedModel(id, est.Model) {
				return closeReason(gate.ModelNotPricedRefusal(est.Model)), false // settled by the tracker
			}
			gw.tracker.RecordRequest(id, *est)
		}
	}
	q.mu.Lock()
	if q.ended {
		// The session ended while the check ran: the create never goes upstream.
		q.settle(id, inflight.Usage{Complete: true, UpstreamStatus: http.StatusSwitchingProtocols}, nil)
		q.mu.Unlock()
		return "", false
	}
	q.pending = append(q.pending, pendingResponse{id: id, steer: kind == "response.steer"})
	q.mu.Unlock()
	if q.client != nil {
		// Before the message goes upstream, so before the response's own events: where
		// Codex's limits stand as this response was admitted (gate.Limits). Not under
		// q.mu: a slow client must not hold the relay of the provider's events.
		if ev := a.Limits.AppendCodexEvent(nil); ev != nil {
			_ = q.client.Write(q.ctx, websocket.MessageText, ev)
		}
	}
	return "", true
}

// codexClient tells a WebSocket handshake of OpenAI's Codex: Codex names its turn and
// window in headers of its own (X-Codex-Turn-Metadata, X-Codex-Window-Id, ...), whatever
// its originator (its app server's client names itself: an IDE extension, a test). It
// is the one client told the member's limits in the session (AppendCodexEvent): Codex
// reads them from an event it knows; another client would get an event of a type its
// provider never sends.
func codexClient(h http.Header) bool {
	for name := range h {
		if strings.HasPrefix(name, "X-Codex-") {
			return true
		}
	}
	return false
}

// lost settles a response.create admitted but not written upstream (the write failed)
// at 0, unless the session's end settled it already.
func (q *responseCreates) lost(msg []byte) {
	if kind, _ := requestEvent(msg); kind == "" {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if n := len(q.pending); n > 0 && !q.pending[n-1].started {
		q.settle(q.pending[n-1].id, inflight.Usage{Complete: true, UpstreamStatus: http.StatusSwitchingProtocols}, nil)
		q.pending = q.pending[:n-1]
	}
}

// settleApplied settles the idle request id at 0 and waits until that was applied (the
// in-flight guard counts it until then), realtimeSettleWait at most, or the session's
// context ended.
func (q *responseCreates) settleApplied(id string) {
	if id == "" {
		return
	}
	applied := make(chan struct{})
	q.settle(id, inflight.Usage{Complete: true, UpstreamStatus: http.StatusSwitchingProtocols}, func(settleq.Result) { close(applied) })
	awaitApplied(q.ctx, applied)
}

// hold opens the session's next idle request when nothing is open (no request waits,
// none is held: the last response ended), once the last settlement was applied, as a
// Realtime session admits its next request. It returns the refusal of a member the check
// refused (named): the relay closes the session with 1008 and its code. A check that
// could not finish (the session is ending) opens nothing.
func (q *responseCreates) hold() (gate.Answer, bool) {
	open := func() bool { return q.ended || q.holding || len(q.pending) > 0 }
	q.mu.Lock()
	busy := open()
	q.mu.Unlock()
	if busy {
		return gate.Answer{}, false
	}
	q.checking.Lock()
	defer q.checking.Unlock()
	q.mu.Lock()
	busy = open() // a response.create was checked meanwhile
	q.mu.Unlock()
	if busy {
		return gate.Answer{}, false
	}
	q.waitApplied()
	at := q.p.gw.cfg.Clock.Now()
	a, err := q.p.gw.gate.CheckRequest(q.ctx, q.creds, gate.Hint{})
	if err != nil {
		return gate.Answer{}, false
	}
	if !a.Allowed() {
		return q.p.named(a), true
	}
	if a.RequestID != "" {
		q.p.gw.tracker.Follow(a.RequestID)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.ended {
		q.settle(a.RequestID, inflight.Usage{Complete: true, UpstreamStatus: http.StatusSwitchingProtocols}, nil)
		return gate.Answer{}, false
	}
	q.idle, q.holding, q.idleAt = a.RequestID, true, at
	return gate.Answer{}, false
}

// waitApplied waits until the last response's settlement was applied, the session's
// context ended, or realtimeSettleWait passed (a control plane that is down does not
// hold the session up: the settlement waits in the spool).
func (q *responseCreates) waitApplied() {
	q.mu.Lock()
	applied := q.applied
	q.mu.Unlock()
	if applied == nil {
		return
	}
	awaitApplied(q.ctx, applied)
}

// started notes response.created: the first request not started has begun. With none
// waiting, a response nobody asked for begins, charged on the idle request held
// (finished); unless that one was admitted in windows that ended since (held idle
// across 05:00 UTC): it is then settled at 0, and the relay opens the next (hold), in the
// windows the response runs in, as a Realtime session's response that begins then is
// admitted again (readmit).
func (q *responseCreates) started() {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i := range q.pending {
		if !q.pending[i].started {
			q.pending[i].started = true
			return
		}
	}
	if q.holding && !q.idleAt.IsZero() && !q.p.gw.cfg.Clock.Now().Before(window.Of(window.Day, q.idleAt).End) {
		applied := make(chan struct{})
		q.applied = applied
		q.settle(q.idle, inflight.Usage{Complete: true, UpstreamStatus: http.StatusSwitchingProtocols}, func(settleq.Result) { close(applied) })
		q.idle, q.holding = "", false
	}
}

// rejected notes the provider's "error" event: the last response.create not started was
// refused, and is settled at 0. An error with none waiting concerns no request.
func (q *responseCreates) rejected() {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i := len(q.pending) - 1; i >= 0; i-- {
		if !q.pending[i].started {
			q.settle(q.pending[i].id, inflight.Usage{Complete: true, UpstreamStatus: http.StatusSwitchingProtocols}, nil)
			q.pending = append(q.pending[:i], q.pending[i+1:]...)
			return
		}
	}
}

// steerEnded notes a steer that will start no successor (response.steer.failed,
// response.steer.pending): the first steer waiting whose successor has not begun is
// settled at 0.
func (q *responseCreates) steerEnded() {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i := range q.pending {
		if r := q.pending[i]; r.steer && !r.started {
			q.settle(r.id, inflight.Usage{Complete: true, UpstreamStatus: http.StatusSwitchingProtocols}, nil)
			q.pending = append(q.pending[:i], q.pending[i+1:]...)
			return
		}
	}
}

// finished settles the first request waiting with the usage of the response that ended
// (u). A response nobody asked for (none waits) is charged on the idle request the
// session holds (the relay then opens the next: hold); with none held, on a request of
// its own, checked now: admitted, or opened without a check for a refused member
// (gate.Gate.Trailing), since the provider bills it either way; a refusal is kept for
// the relay, which closes the session with 1008 (takeRefusal).
func (q *responseCreates) finished(u inflight.Usage, model string) {
	q.mu.Lock()
	if len(q.pending) == 0 && q.holding {
		id := q.idle
		q.idle, q.holding = "", false
		applied := make(chan struct{})
		q.applied = applied
		if id != "" {
			q.p.gw.tracker.RecordRequest(id, estimate.Request{Model: model})
		}
		q.settle(id, u, func(settleq.Result) { close(applied) })
		q.mu.Unlock()
		return
	}
	if len(q.pending) == 0 {
		q.mu.Unlock()
		if a, refused, _ := q.p.chargeAsideAnswer(q.ctx, u, q.creds, model); refused {
			q.mu.Lock()
			q.refused = &a
			q.mu.Unlock()
		}
		return
	}
	head := q.pending[0]
	q.pending = q.pending[1:]
	applied := make(chan struct{})
	q.applied = applied
	q.settle(head.id, u, func(settleq.Result) { close(applied) })
	q.mu.Unlock()
}

// takeRefusal is the refusal a response nobody asked for met (finished), once.
func (q *responseCreates) takeRefusal() (gate.Answer, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	a := q.refused
	q.refused = nil
	if a == nil {
		return gate.Answer{}, false
	}
	return *a, true
}

// finish settles what the session's end left waiting (see above): cut, the usage of the
// response in progress as its text showed it (when inProgress); else the input
// estimate of a response asked for. Requests admitted afterwards are settled at once
// (pass, hold). The idle request held is settled at 0, or with cut when a response was
// in progress that no request waiting had begun (nobody asked for it); such a response
// with no idle request held is returned (unasked): the caller charges it aside.
func (q *responseCreates) finish(cut inflight.Usage, inProgress bool) (unasked inflight.Usage, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.ended = true
	owed := inflight.Usage{Complete: true, UpstreamStatus: http.StatusSwitchingProtocols}
	if inProgress && (len(q.pending) == 0 || !q.pending[0].started) {
		owed = cut
		if !q.holding {
			unasked, ok = cut, true
		}
	}
	if q.holding {
		q.settle(q.idle, owed, nil)
		q.idle, q.holding = "", false
	}
	for i, r := range q.pending {
		if i == 0 && r.started && inProgress {
			q.settle(r.id, cut, nil)
			continue
		}
		q.settle(r.id, inflight.Usage{Seen: &inflight.Seen{}, UpstreamStatus: http.StatusSwitchingProtocols}, nil)
	}
	q.pending = nil
	return unasked, ok
}

// settle reports request id's end (nothing for ""), calling done once it was applied or
// given up (the tracker calls it on its errors too).
func (q *responseCreates) settle(id string, u inflight.Usage, done func(settleq.Result)) {
	if id == "" {
		if done != nil {
			done(settleq.Result{})
		}
		return
	}
	_ = q.p.gw.tracker.Finish(id, u, done)
}
