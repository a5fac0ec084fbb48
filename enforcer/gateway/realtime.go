package gateway

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/tollgate-dev/tollgate/enforcer/estimate"
	"github.com/tollgate-dev/tollgate/enforcer/gate"
	"github.com/tollgate-dev/tollgate/enforcer/inflight"
	"github.com/tollgate-dev/tollgate/enforcer/realtimeusage"
	"github.com/tollgate-dev/tollgate/enforcer/requestbody"
	"github.com/tollgate-dev/tollgate/enforcer/responseusage"
	"github.com/tollgate-dev/tollgate/enforcer/settleq"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// A Realtime session (OpenAI's Realtime API over a WebSocket: GET /v1/realtime?model=...,
// Azure's /openai/realtime?deployment=...) is proxied message by message and charged
// response by response:
//
//   - The upgrade request is checked like any request (its key in a header: Authorization,
//     x-api-key or api-key; from a browser, which cannot set them, in the subprotocol
//     "openai-insecure-api-key.<key>") and admitted as the session's first request. The
//     upstream's handshake comes first: a refusal of the provider's (401, 404...) is
//     passed on as it came, uncharged.
//   - Every message goes through as it came, either way. The server's events are read
//     (package realtimeusage); each response.done settles the admitted request with that
//     response's usage, and each transcription of the user's audio with its own (at its
//     transcription model's price). A transcription that ends while a response is in
//     progress is charged on a request of its own, admitted then (chargeAside); if the
//     member is refused, on one opened without a check (gate.Gate.Trailing), and the
//     session is not closed then: that would cut the response uncharged. Once the
//     control plane applied it (realtimeSettleWait at most) the member is checked again,
//     a new request, before what comes next: a member whose limit the session spent gets
//     the close code 1008 (policy violation) with the refusal's error code as its
//     reason, and the upstream connection is closed. So a session spends past a limit by
//     one response at most, as a stream does. That request may be held long before the
//     next response begins (a voice session idle for hours): one that begins (or a
//     transcription that ends with none in progress) after the windows it was admitted
//     in ended (05:00 UTC) has the member checked once more then (readmit), so that it is
//     charged on the windows it ran in; a member refused then has that response charged
//     on a request opened without a check, and its end closes the session with 1008.
//   - At the end (either side closes, the upstream is silent for the idle timeout, an
//     error) the last request is settled: at 0 and complete when no response was in
//     progress, else incomplete and estimated from the text the response had sent. A
//     client that leaves while a response is in progress (or can no longer be written
//     to) does not end the session at once: the provider's events are still read (not
//     forwarded) for realtimeLeftGrace at most, until each response in progress sent its
//     response.done, charged as any (without a check for a next response), and only
//     then is the provider's side closed.
//
// Google's Gemini Live API (BidiGenerateContent: the Gemini API's and Vertex AI's) is
// proxied the same way: its key may come in the query (?key=, as Google's SDKs send it),
// the client's first message (setup) names the model, and each turn's usageMetadata
// settles a request (realtimeusage.GeminiLive). It has no transcriptions billed apart.
//
// So is the Responses API's WebSocket mode (GET /v1/responses upgraded), where every
// response is asked for by the client: each response.create (and each response.steer,
// which makes the provider start a successor response) is checked as a request of its
// own before it goes upstream, the session holding one idle request in flight between
// responses as a Realtime session does, and its response's terminal event settles it as the
// same response streamed over HTTP would be settled (responses_ws.go,
// responseusage.ResponsesSession). The readers are behind one interface (sessionEvents,
// session_events.go).
//
// So is OpenAI's GPT-Live over a WebSocket (GET /v1/live/sessions upgraded), billed by
// the second of its session: its server's reports of the session's time settle it in
// steps (realtimeusage.GPTLive), and each Responses call its backend makes (wrapped in
// response.event) settles a request of its own kind, its tokens at the backend's model,
// as does each Decision API evaluation (decision.event, its tokens at the decision's
// model) (liveSession, session_events.go); its session.start names the model, refused there if
// nobody priced it and the organization refuses those.
//
// Any other WebSocket upgrade is refused (400): nothing else a provider serves that way
// could be charged.

// realtimeSettleWait is the longest a session waits for a response's settlement before
// it checks the member again.
const realtimeSettleWait = 2 * time.Second

// awaitApplied waits until applied is closed (a session's settlement was applied, so the
// next check or start sees it), realtimeSettleWait at most, or ctx ends.
func awaitApplied(ctx context.Context, applied <-chan struct{}) {
	wait := time.NewTimer(realtimeSettleWait)
	defer wait.Stop()
	select {
	case <-applied:
	case <-wait.C:
	case <-ctx.Done():
	}
}

// realtimeLeftGrace is how long a session whose client left (closed, went away, or can no
// longer be written to) while a response was in progress still reads the provider's
// events for that response's response.done, which carries what the provider bills: the
// whole input (the context, the audio), which a response cut is charged nothing for
// (only its text is estimated). The provider does not know the client left and goes on
// generating the response, faster than it would be played: a few seconds end most
// responses, and a response.done already on its way arrives within milliseconds. It is
// longer than realtimeSettleWait (the wait for the control plane, not for the model),
// short enough that a client gone does not hold its slot and the provider's connection
// for long, and a shutdown (DrainSessions) cuts it short. A variable only so that the
// tests can shorten it (realtime_export_test.go).
var realtimeLeftGrace = 5 * time.Second

// realtimeMessageBytes bounds one message from the provider (an audio delta, a
// response.done with its whole output); the client's are bounded by the body cap.
const realtimeMessageBytes = 64 << 20

// isWebSocket tells a WebSocket opening handshake (RFC 6455 4.1).
func isWebSocket(r *http.Request) bool {
	return r.Method == http.MethodGet && strings.EqualFold(r.Header.Get("Upgrade"), "websocket") &&
		headerHasToken(r.Header, "Connection", "upgrade")
}

func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// isRealtimePath tells the Realtime API's WebSocket path (OpenAI's /v1/realtime,
// Azure's /openai/realtime), compared as requestbody.Deferred compares paths.
func isRealtimePath(path string) bool {
	return strings.HasSuffix(strings.TrimRight(strings.ToLower(path), "/"), "/realtime")
}

// isGeminiLivePath tells the Gemini Live API's WebSocket path: the Gemini API's
// /ws/google.ai.generativelanguage.{version}.GenerativeService.BidiGenerateContent and
// Vertex AI's /ws/google.cloud.aiplatform.{version}.LlmBidiService/BidiGenerateContent.
// Not BidiGenerateContentConstrained, whose key is an ephemeral token of Google's, nor
// BidiGenerateMusic. Google's SDKs join their base URL's "/" and the path's, so the path
// may begin with "//".
func isGeminiLivePath(path string) bool {
	p := strings.TrimRight(strings.TrimLeft(path, "/"), "/")
	return strings.HasPrefix(p, "ws/") && (strings.HasSuffix(p, ".GenerativeService.BidiGenerateContent") ||
		strings.HasSuffix(p, ".LlmBidiService/BidiGenerateContent"))
}

// isGPTLivePath tells OpenAI's GPT-Live path (/v1/live/sessions), compared as
// isRealtimePath compares; upgraded, it is a GPT-Live session over a WebSocket.
func isGPTLivePath(path string) bool {
	return strings.HasSuffix(strings.TrimRight(strings.ToLower(path), "/"), "/live/sessions")
}

// isResponsesPath tells the Responses API's path, whose WebSocket is its WebSocket mode
// (OpenAI's /v1/responses, Azure's /openai/v1/responses, xAI's), compared as
// isRealtimePath compares.
func isResponsesPath(path string) bool {
	return strings.HasSuffix(strings.TrimRight(strings.ToLower(path), "/"), "/responses")
}

// realtime proxies an admitted WebSocket upgrade (see above).
func (p *proxied) realtime(w http.ResponseWriter, r *http.Request) {
	gw := p.gw
	if p.id != "" {
		gw.tracker.Follow(p.id)
	}
	var events sessionEvents
	// inspect looks at the client's messages before they go upstream: Gemini Live's
	// first names the model, the Responses API's response.create events are checked.
	var inspect clientInspector
	// creates: a Responses session's requests, one per response.create (responses_ws.go).
	var creates *responseCreates
	switch path := r.URL.Path; {
	case p.route.Signer != nil:
	case isGeminiLivePath(path):
		live := realtimeusage.NewGeminiLive()
		events = tokenSession{live}
		inspect = &setupInspector{id: p.id, tracker: gw.tracker, name: func(msg []byte) string {
			live.Setup(msg)
			return live.Model()
		}}
	case isGPTLivePath(path):
		live := realtimeusage.NewGPTLive(gw.cfg.Clock.Now)
		events = liveSession{live, responseusage.NewResponsesSession()}
		inspect = &setupInspector{id: p.id, tracker: gw.tracker, name: func(msg []byte) string {
			m := realtimeusage.SessionStart(msg)
			live.SetModel(m)
			return m
		}}
	case isResponsesPath(path):
		creates = &responseCreates{p: p, path: path}
		events, inspect = responsesSession{responseusage.NewResponsesSession(), creates}, creates
	case isRealtimePath(path):
		q := r.URL.Query()
		model := requestbody.CleanModel(q.Get("model"))
		if model == "" {
			model = requestbody.CleanModel(q.Get("deployment")) // Azure names the deployment
		}
		if !p.record(w, estimate.Request{Model: model}) {
			return
		}
		events = tokenSession{realtimeusage.New(model)}
	}
	if events == nil {
		p.settle(inflight.Refused(http.StatusBadRequest)) // the status answered below
		gw.answered(w, OutcomeRefused)
		writeError(w, http.StatusBadRequest, "invalid_request_error", "service_gateway_websocket_unsupported",
			"Only the Realtime API's WebSocket (/v1/realtime), the Responses API's (/v1/responses), GPT-Live's (/v1/live/sessions) and the Gemini Live API's (BidiGenerateContent), on a route that does not sign its requests, can be proxied and charged.", nil)
		return
	}

	ctx, cancel := context.WithCancel(r.Context())
	p.cancel = cancel
	cred, err := p.route.credential(ctx)
	if err != nil {
		p.credentialFailed(w, r, err)
		return
	}
	header := http.Header{}
	p.upstreamHeader(header, r.Header, cred, true)
	up, resp, err := websocket.Dial(ctx, p.upstreamURL(r), &websocket.DialOptions{
		HTTPClient:   &http.Client{Transport: gw.up, CheckRedirect: passRedirectOn},
		HTTPHeader:   header,
		Subprotocols: subprotocols(r.Header),
	})
	if err != nil {
		p.handshakeFailed(w, r, resp, err)
		return
	}
	defer up.CloseNow()
	up.SetReadLimit(realtimeMessageBytes)

	var accept websocket.AcceptOptions
	if sp := up.Subprotocol(); sp != "" {
		accept.Subprotocols = []string{sp}
	}
	// Origins are not checked: the member's key authenticates the session, in a header a
	// page cannot set, and no cookie is read.
	accept.InsecureSkipVerify = true
	gw.answered(w, OutcomeProxied)
	p.upstreamAnswered(http.StatusSwitchingProtocols)
	client, err := websocket.Accept(w, r, &accept)
	if err != nil {
		return // Accept answered the client; nothing reached the model
	}
	defer client.CloseNow()
	client.SetReadLimit(gw.cfg.MaxBodyBytes)
	creds := credentialsOf(r)
	if creates != nil {
		// The handshake's request let the session open and asked for no response: it is
		// the session's idle request, held until the first response.create (or steer)
		// settles it at 0 before its own check, or the session ends (responses_ws.go).
		// The session counts in the member's requests in flight while it is idle.
		creates.ctx, creates.creds = ctx, creds
		if codexClient(r.Header) {
			creates.client = client
		}
		creates.idle, creates.holding, creates.idleAt = p.id, true, p.checkedAt
		p.settled = true // creates settles it
		if p.log != nil {
			p.log.usage, p.log.settled = inflight.Usage{Complete: true, UpstreamStatus: http.StatusSwitchingProtocols}, true
		}
	}
	// The upstream's messages are read under their own cancellation, which a shutdown
	// uses (DrainSessions): the client's side stays open for the close that says why.
	upCtx, stopCause := context.WithCancelCause(ctx)
	defer stopCause(nil)
	gw.openSession(p, func() { stopCause(errShuttingDown) })
	defer gw.closeSession(p)
	go keepAlive(upCtx, gw.cfg.IdleTimeout, up, stopCause)

	// Transcriptions that ended while a response was in progress and could not be
	// charged aside (the check could not finish: the session's context ended) wait for
	// its end, or the session's.
	var waiting []inflight.Usage
	// The provider's messages are read on their own (readUpstream), so that the session
	// also hears of its client's end (relayClient) while the provider is silent.
	clientEnded := make(chan error, 1)
	go relayClient(ctx, cancel, client, up, clientEnded, inspect)
	fromUp := make(chan upstreamMessage)
	stopReading := make(chan struct{})
	defer close(stopReading)
	go readUpstream(upCtx, up, fromUp, stopReading)
	// left is why the client's side ended (it closed, went away, or can no longer be
	// written to), nil while it is there. From then on nothing is forwarded: the
	// provider's events are only read, for the usage of the responses in progress, which
	// the provider bills whether or not anyone hears them, until they ended or the grace
	// (graceOver) passed; then the provider's side is closed.
	var left error
	// refusal is the check that refused the member mid-session (charge), whose session
	// may have used more since its last request ended (trailing, below).
	var refusal gate.Answer
	// closing is the refusal met as a response began (readmit): that response, charged
	// on a request opened without a check, ends the session.
	var closing *gate.Answer
	var grace *time.Timer
	var graceOver <-chan time.Time
	// clientLeft notes how the client's side ended (err, from relayClient); true when it is
	// the first sign the client left.
	clientLeft := func(err error) bool {
		if errors.Is(err, errClientRefused) && creates == nil {
			p.settled = true // a session's setup: the tracker settled the request (setupInspector)
		}
		switch {
		case left == nil:
			left = err
			return true
		case websocket.CloseStatus(left) == -1 && websocket.CloseStatus(err) != -1:
			// A write to the client failed first (it had begun to close): its own close
			// says why, and is what the provider's side is closed with.
			left = err
		}
		return false
	}
	// leaving ends the session once its client left (true), unless a response is in
	// progress: then its response.done is waited for, realtimeLeftGrace at most.
	leaving := func() bool {
		if _, inProgress := events.Unfinished(); !inProgress {
			closeWith(up, left)
			return true
		}
		if grace == nil {
			grace = time.NewTimer(realtimeLeftGrace)
			graceOver = grace.C
		}
		return false
	}
relay:
	for {
		var m upstreamMessage
		select {
		case m = <-fromUp:
		case err := <-clientEnded:
			if clientLeft(err) && leaving() {
				break relay
			}
			continue
		case <-graceOver:
			closeWith(up, left) // the responses in progress are settled as cut, below
			break relay
		}
		// No read deadline: a session may be silent for long (a user who says nothing);
		// keepAlive ends it when the provider stops answering pings. The grace after the
		// client left ends with upCtx too (a shutdown: DrainSessions).
		if m.err != nil {
			if left == nil {
				err := m.err
				if upCtx.Err() != nil && ctx.Err() == nil {
					err = context.Cause(upCtx) // DrainSessions, or the provider stopped answering
				}
				closeWithin(client, err, cancel)
			}
			break
		}
		// Gemini Live sends its JSON in binary frames too; OpenAI's binary frames, if
		// any, are not JSON and report nothing. What begins with this event (a response, a
		// transcription ended with none in progress) on a request held idle across its
		// windows' end is admitted again first (readmit).
		stale := creates == nil && left == nil && closing == nil && p.admissionEnded()
		var wasBusy bool
		if stale {
			_, wasBusy = events.Unfinished()
		}
		u, kind := events.Event(m.msg)
		if stale && !wasBusy {
			if _, busy := events.Unfinished(); busy || kind != realtimeusage.None {
				if a, refused := p.readmit(ctx, creds, events.Model()); refused {
					closing = &a
				}
			}
		}
		if left == nil {
			// A write is bounded by the idle timeout: a client that stopped reading (its
			// socket's buffers full) blocked it, and with it the whole session, for as long
			// as it kept its connection (before 2026-12-02). Cut, the connection is closed
			// and the session ends as for a client that left. A shutdown (DrainSessions) cuts
			// it too, clientCloseWait after it cuts the provider's side (upCtx): before
			// 2026-12-07 the write waited out the idle timeout past the shutdown, and the
			// session's request was settled without what its response had shown
			// (TestRealtimeShutdownCutsAWriteToAStuckClient). Not at once: a write whose
			// context ends closes the connection outright (its frame may be half sent), so
			// a write under way as the shutdown began, to a client that reads, ended the
			// session without its 1001 (TestRealtimeSessionOpenedDuringTheDrainIsEnded
			// failed so under load); given a moment it ends, and the close follows.
			wctx, wcancel := context.WithTimeout(ctx, p.gw.cfg.IdleTimeout)
			cutLater := context.AfterFunc(upCtx, func() { time.AfterFunc(clientCloseWait, wcancel) })
			err := client.Write(wctx, m.typ, m.msg)
			cutLater()
			wcancel()
			if err != nil {
				// The client is gone; what this event reported is charged all the same (the
				// provider billed it), below.
				left = err
				if errors.Is(err, net.ErrClosed) {
					// Its close is under way (the write found the handshake begun): the
					// client's reader is about to report it, and the provider's side is
					// closed with its code, not as if the client went away.
					awaitClientEnd(ctx, clientEnded, clientLeft)
				}
			}
		}
		// A Responses session settles its responses itself (responsesSession); a response
		// nobody asked for that found the member refused (charged all the same) ends it
		// as a refused response.create does. Once nothing is open any more (a response
		// ended, and no other waits), the next idle request is opened (hold), checked as
		// a Realtime session's next request is; a refused member's session is closed the
		// same way.
		if creates != nil && left == nil {
			a, refused := creates.takeRefusal()
			if !refused {
				a, refused = creates.hold()
			}
			if refused {
				refusal = a
				_ = client.Close(websocket.StatusPolicyViolation, closeReason(a))
				_ = up.Close(websocket.StatusNormalClosure, "")
				break
			}
		}
		if kind != realtimeusage.None && creates == nil {
			if _, inProgress := events.Unfinished(); kind == realtimeusage.Transcription && inProgress {
				if !p.chargeAside(ctx, u, creds, events.Model()) {
					waiting = append(waiting, u)
				}
			} else if left != nil {
				p.chargeLeft(ctx, u, creds, events.Model())
			} else if closing != nil {
				// The member was refused as this began (readmit): charged on the request
				// opened for it, and the session ends as at any refusal.
				p.settleThen(u, nil)
				p.id, refusal = "", *closing
				_ = client.Close(websocket.StatusPolicyViolation, closeReason(refusal))
				_ = up.Close(websocket.StatusNormalClosure, "")
				break
			} else if !p.charge(ctx, u, creds, events.Model(), client, up, &refusal) {
				break
			} else if _, inProgress := events.Unfinished(); !inProgress {
				// Else another response overlaps: the transcriptions wait for its end too.
				for _, w := range waiting {
					if !p.charge(ctx, w, creds, events.Model(), client, up, &refusal) {
						break relay
					}
				}
				waiting = waiting[:0]
			}
		}
		if left != nil && leaving() {
			break
		}
	}
	if grace != nil {
		grace.Stop()
	}
	cancel()
	wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), realtimeSettleWait)
	defer wcancel()
	// Transcriptions still waiting (their check could not finish, and the session ended
	// before the response did): one more try each.
	for _, w := range waiting {
		p.chargeAside(wctx, w, creds, events.Model())
	}
	// The last request: nothing more when no response was in progress (complete at 0),
	// else the cut response, estimated from its text; on a request of its own when the
	// session's request carried a response that ended after the client left
	// (chargeLeft).
	if lo, ok := events.(sessionLeftovers); ok {
		for _, u := range lo.Leftovers() {
			p.chargeAside(wctx, u, creds, events.Model())
		}
	}
	last, inProgress := events.Unfinished()
	if creates != nil {
		if unasked, ok := creates.finish(last, inProgress); ok && used(unasked) {
			// A response nobody asked for, cut, with no idle request held to carry it
			// (the member was refused the last one).
			p.chargeAside(wctx, unasked, creds, events.Model())
		}
		return
	}
	if p.id == "" && refusal.MemberID != "" && used(last) {
		// A session billed by its time (GPT-Live) ran on between its last charged step
		// and the close the refusal caused, and the provider bills that time: charged on
		// a request opened without a check (gate.Gate.Trailing), never dropped.
		if id := p.gw.gate.Trailing(refusal.OrganizationID, refusal.MemberID); id != "" {
			p.chargeOn(id, last, events.Model())
		}
		return
	}
	if inProgress && left != nil && p.settled && p.id != "" {
		p.chargeAside(wctx, last, creds, events.Model())
		return
	}
	p.settle(last)
}

// awaitClientEnd waits for the client's reader (relayClient) to report on ended how the
// client's side ended, and hands that to noted: a write to the client found its close
// under way (net.ErrClosed), so the reader is ending. It waits clientCloseWait at most,
// and not once the session ended (ctx): relayClient ends it without a report when the
// provider cannot be written to.
func awaitClientEnd(ctx context.Context, ended <-chan error, noted func(error) bool) {
	wait := time.NewTimer(clientCloseWait)
	defer wait.Stop()
	select {
	case err := <-ended:
		noted(err)
	case <-ctx.Done():
	case <-wait.C:
	}
}

// clientCloseWait bounds awaitClientEnd: the reader of a client whose close is under way
// reports it within microseconds, unless the machine is starved.
const clientCloseWait = time.Second

// upstreamMessage is a message the provider sent, or the error its side ended with.
type upstreamMessage struct {
	typ websocket.MessageType
	msg []byte
	err error
}

// readUpstream reads the provider's messages (under ctx) and hands them to the session
// (out) until a read fails, its error handed on last, or the session ended (stop).
func readUpstream(ctx context.Context, up *websocket.Conn, out chan<- upstreamMessage, stop <-chan struct{}) {
	for {
		typ, msg, err := up.Read(ctx)
		select {
		case out <- upstreamMessage{typ, msg, err}:
		case <-stop:
			return
		}
		if err != nil {
			return
		}
	}
}

// charge settles the request with what a response or a transcription that ended
// reported (u), and admits the session's next request; false when the member was
// refused (both sides are then closed: the client with 1008 and the refusal's code; a
// refusal of the member is kept in refused) or the check could not finish.
func (p *proxied) charge(ctx context.Context, u inflight.Usage, creds gate.Credentials, model string,
	client, up *websocket.Conn, refused *gate.Answer) bool {
	// The next check must see this response's cost: the control plane answers a
	// settlement once the member's record holds it. A settlement that takes longer (the
	// control plane unreachable: it waits in the spool) does not hold the session up.
	applied := make(chan struct{})
	if p.settleThen(u, func(settleq.Result) { close(applied) }) {
		awaitApplied(ctx, applied)
	}
	p.checkedAt = p.gw.cfg.Clock.Now()
	a, err := p.gw.gate.CheckRequest(ctx, creds, gate.Hint{})
	if err != nil {
		return false
	}
	if !a.Allowed() {
		p.id, *refused = "", p.named(a)
		_ = client.Close(websocket.StatusPolicyViolation, closeReason(a))
		_ = up.Close(websocket.StatusNormalClosure, "")
		return false
	}
	p.id, p.settled = a.RequestID, false
	if p.id != "" {
		p.gw.tracker.Follow(p.id)
		if p.gw.tracker.RefuseUnpricedModel(p.id, model) {
			// The organization refuses the model, which a Gemini Live session names only
			// after its handshake: the tracker settled the request at 0, and the session
			// ends as at a limit, with the refusal's code.
			p.id = ""
			_ = client.Close(websocket.StatusPolicyViolation, closeReason(gate.ModelNotPricedRefusal(model)))
			_ = up.Close(websocket.StatusNormalClosure, "")
			return false
		}
		p.gw.tracker.RecordRequest(p.id, estimate.Request{Model: model})
	}
	return true
}

// admissionEnded tells whether the session's request (admitted, not yet settled) was
// checked for in windows that have ended since: a request is charged on its admission's
// windows (ACCOUNTING.md), and the request a session holds between two responses may
// wait hours for the next. Every window ends at 05:00 UTC, a day's first (pkg/window),
// so the day's tells. A check that began before 05:00 and admitted after it counts as
// ended too (checkedAt): the member is checked once more, never charged on a window
// ended.
func (p *proxied) admissionEnded() bool {
	return p.id != "" && !p.settled && !p.checkedAt.IsZero() &&
		!p.gw.cfg.Clock.Now().Before(window.Of(window.Day, p.checkedAt).End)
}

// readmit checks the member again for what begins now (a response; a transcription that
// ended with no response in progress) on a request admitted in windows that ended since
// (admissionEnded): that request, which carried nothing, is settled at 0 (applied, so
// that a member's in-flight cap does not count it), and the new one is admitted in the
// windows the response runs in. The provider started the response and bills it whatever
// the check says: a member refused then (the key revoked, the new window's limit spent)
// has it charged on a request opened without a check (gate.Gate.Trailing), and the
// refusal is returned (refused), for the relay to close the session with once the
// response ended (not before: that would cut it, its input billed and never seen). A
// check that could not finish (the session is ending) has it charged on such a request
// too, the member whose key opened the session named, and refuses nothing.
func (p *proxied) readmit(ctx context.Context, creds gate.Credentials, model string) (refusal gate.Answer, refused bool) {
	applied := make(chan struct{})
	if p.settleThen(inflight.Usage{Model: model, Complete: true, UpstreamStatus: http.StatusSwitchingProtocols}, func(settleq.Result) { close(applied) }) {
		awaitApplied(ctx, applied)
	}
	p.checkedAt = p.gw.cfg.Clock.Now()
	a, err := p.gw.gate.CheckRequest(ctx, creds, gate.Hint{})
	id := a.RequestID
	switch {
	case err != nil:
		id = p.gw.gate.Trailing(p.org, p.member)
	case !a.Allowed():
		refusal, refused = p.named(a), true
		id = p.gw.gate.Trailing(refusal.OrganizationID, refusal.MemberID)
	}
	p.id, p.settled = id, false
	if id != "" {
		p.gw.tracker.Follow(id)
		p.gw.tracker.RecordRequest(id, estimate.Request{Model: model})
	}
	return refusal, refused
}

// chargeAside charges what ended (u: a transcription, a response after the client left)
// on a request of its own, while the session's request stays with the response in
// progress: admitted now when the member passes the check, else opened without one for
// the refused member (gate.Gate.Trailing), since it was used whatever the limit says
// (the member learns of the refusal at the session's next check). False when the check
// could not finish: nothing was charged.
func (p *proxied) chargeAside(ctx context.Context, u inflight.Usage, creds gate.Credentials, model string) bool {
	_, _, ok := p.chargeAsideAnswer(ctx, u, creds, model)
	return ok
}

// chargeAsideAnswer is chargeAside, which also tells whether the check refused the
// member (refused, the refusal with the member it is about).
func (p *proxied) chargeAsideAnswer(ctx context.Context, u inflight.Usage, creds gate.Credentials, model string) (refusal gate.Answer, refused, ok bool) {
	a, err := p.gw.gate.CheckRequest(ctx, creds, gate.Hint{})
	if err != nil {
		return gate.Answer{}, false, false
	}
	id := a.RequestID
	if !a.Allowed() {
		a = p.named(a)
		id = p.gw.gate.Trailing(a.OrganizationID, a.MemberID)
		refusal, refused = a, true
	}
	if id != "" {
		p.chargeOn(id, u, model)
	}
	return refusal, refused, true
}

// named is a mid-session refusal with the member it is about: the check's own, else the
// member whose key opened the session. A check names nobody when the key was revoked (or
// its member removed) during the session, or when the control plane could not say whose
// it is; the session's usage up to then is that member's all the same, and the provider
// bills it.
func (p *proxied) named(a gate.Answer) gate.Answer {
	if a.MemberID == "" {
		a.OrganizationID, a.MemberID = p.org, p.member
	}
	return a
}

// chargeOn settles u, a session's usage at model, on the request id, opened for it.
func (p *proxied) chargeOn(id string, u inflight.Usage, model string) {
	p.gw.tracker.Follow(id)
	p.gw.tracker.RecordRequest(id, estimate.Request{Model: model})
	_ = p.gw.tracker.Finish(id, u, nil)
}

// used tells whether a session's usage u counts anything to charge: time, tokens, or
// text to estimate them from.
func used(u inflight.Usage) bool {
	return u.AudioInputMillis > 0 || u.InputTokens > 0 || u.OutputTokens > 0 || u.Seen != nil && u.Seen.TextBytes > 0
}

// chargeLeft charges what a response or a transcription that ended after the client
// left reported (u): on the session's request while it is unsettled, else on a request
// of its own (chargeAside: one opened without a check if the member is refused). Unlike
// charge, the member is not checked again for a next response: there is no client left
// to ask for one, nor to be closed with 1008.
func (p *proxied) chargeLeft(ctx context.Context, u inflight.Usage, creds gate.Credentials, model string) {
	if p.settled {
		p.chargeAside(ctx, u, creds, model)
		return
	}
	p.settle(u)
}

// closeReason is a refusal's error code, as a close frame's reason carries it (at most
// 123 bytes).
func closeReason(a gate.Answer) string {
	for _, h := range a.DeniedHeaders() {
		if h.Name == gate.HeaderErrorCode {
			return h.Value
		}
	}
	return a.Reason.String()
}

// clientInspector looks at each message a session's client sends before it goes
// upstream.
type clientInspector interface {
	// pass tells whether msg may go upstream; else the reason the client's side is
	// closed with (1008), "" when the session is ending.
	pass(msg []byte) (reason string, ok bool)
	// lost: msg, which pass let through, could not be written upstream.
	lost(msg []byte)
}

// setupInspector reads a session's first client message, which names the model (Gemini
// Live's setup, GPT-Live's session.start: name reads it): where the organization refuses
// models nobody priced, such a model is refused there, before the message reaches the
// provider, and the session's first request (id, admitted on the handshake) is settled
// at 0 by the tracker.
type setupInspector struct {
	name    func(msg []byte) string
	id      string
	tracker Tracker
	read    bool
}

func (g *setupInspector) pass(msg []byte) (string, bool) {
	if g.read {
		return "", true
	}
	g.read = true
	if model := g.name(msg); g.id != "" && g.tracker.RefuseUnpricedModel(g.id, model) {
		return closeReason(gate.ModelNotPricedRefusal(model)), false
	}
	return "", true
}

func (g *setupInspector) lost([]byte) {}

// relayClient sends the client's messages to the upstream until either side ends. A
// client that ends (closes, goes away) is reported on ended: the session decides when
// the upstream's side closes (at once, unless a response is in progress). An upstream
// that can no longer be written to ends the session (cancel), the client told why.
// inspect, when not nil, passes each message first: one it refuses ends the client's
// side (closed with 1008 and the reason), reported on ended as errClientRefused.
func relayClient(ctx context.Context, cancel context.CancelFunc, client, up *websocket.Conn, ended chan<- error, inspect clientInspector) {
	for {
		typ, msg, err := client.Read(ctx)
		if err != nil {
			ended <- err
			return
		}
		if inspect != nil {
			if reason, ok := inspect.pass(msg); !ok {
				if reason != "" {
					_ = client.Close(websocket.StatusPolicyViolation, reason)
				}
				ended <- errClientRefused
				return
			}
		}
		if err := up.Write(ctx, typ, msg); err != nil {
			if inspect != nil {
				inspect.lost(msg)
			}
			closeWith(client, err)
			cancel()
			return
		}
	}
}

// closeWith closes c with the status the other side closed with (normal when it did
// not say, or went away without a close).
func closeWith(c *websocket.Conn, err error) {
	status := websocket.CloseStatus(err)
	if status == -1 || status == websocket.StatusNoStatusRcvd || status == websocket.StatusAbnormalClosure {
		status = websocket.StatusGoingAway
	}
	var ce websocket.CloseError
	reason := ""
	if errors.As(err, &ce) {
		reason = ce.Reason
	}
	_ = c.Close(status, reason)
}

// closeWithin is closeWith for the client's side of a session the provider's side
// ended (a shutdown, the provider closed or went silent), while relayClient still reads
// the client under the session's context (cancel): a client that does not answer the
// close within clientCloseWait (it stopped reading, or its network vanished) has its
// connection closed outright then, the reader's context ending it. Its close frame (1001
// and the reason) was sent first. Waiting for its answer as long as the WebSocket
// library does (5s, twice that when the frame cannot be written) held the session's
// settlement, and at shutdown made DrainSessions give the session up, past what the
// shutdown had left, its request settled at its input estimate by SettleAll.
func closeWithin(client *websocket.Conn, err error, cancel context.CancelFunc) {
	t := time.AfterFunc(clientCloseWait, cancel)
	defer t.Stop()
	closeWith(client, err)
}

// subprotocols are the client's offered subprotocols, for the upstream, without any that
// would carry a key (a browser's "openai-insecure-api-key.<key>", read as its credential:
// credentialsOf).
func subprotocols(h http.Header) []string {
	var out []string
	for _, v := range h.Values("Sec-Websocket-Protocol") {
		for _, sp := range strings.Split(v, ",") {
			if sp = strings.TrimSpace(sp); sp != "" && !strings.Contains(strings.ToLower(sp), "api-key") {
				out = append(out, sp)
			}
		}
	}
	return out
}

// handshakeFailed answers an upstream that did not open the WebSocket: its own answer
// when it gave one (a 401 for a bad provider key, say), else 502 or 504. Nothing was
// used either way.
func (p *proxied) handshakeFailed(w http.ResponseWriter, r *http.Request, resp *http.Response, err error) {
	if resp == nil || resp.StatusCode == http.StatusSwitchingProtocols {
		p.upstreamFailed(w, r, err)
		return
	}
	p.settle(inflight.Usage{Complete: true, UpstreamStatus: int32(resp.StatusCode)})
	p.gw.answered(w, OutcomeProxied)
	p.upstreamAnswered(resp.StatusCode)
	h := w.Header()
	copyHeaders(h, resp.Header)
	p.redirectThroughGateway(h, resp.Request)
	p.nameRequest(h)
	w.WriteHeader(resp.StatusCode)
	if resp.Body != nil {
		_, _ = io.Copy(w, io.LimitReader(resp.Body, 1<<20))
	}
}

// passRedirectOn keeps a handshake's redirect for the client, as a plain request's is
// (redirectThroughGateway): followed by the dialer, it would carry the route's credential
// to whatever host the provider named, since Go's client drops only Authorization and
// cookies on a redirect to another host, not api-key or x-goog-api-key.
func passRedirectOn(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// keepAlive pings the provider's side of a session every interval (the idle timeout,
// 30s at most), each ping answered within the idle timeout, until ctx ends; a provider
// that does not answer gets its side stopped (stop), and the client is told 1001 with
// errProviderSilent. Silence alone ends nothing: a Realtime session may wait minutes
// for its user to speak, where a response stream silent that long is stuck. The client
// is not pinged (not every client library answers a ping while it is not reading): a
// client that vanished is found by TCP keepalive, as on every connection of the
// gateway's server.
func keepAlive(ctx context.Context, idle time.Duration, up *websocket.Conn, stop context.CancelCauseFunc) {
	t := time.NewTicker(min(idle, realtimePingInterval))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, pcancel := context.WithTimeout(ctx, idle)
		err := up.Ping(pctx)
		pcancel()
		if err != nil && ctx.Err() == nil {
			stop(errProviderSilent)
			return
		}
	}
}

// realtimePingInterval is the longest a session goes without a ping of its provider.
const realtimePingInterval = 30 * time.Second

// errClientRefused is how the client's side of a session ends when one of its messages
// was refused (a response.create, Gemini Live's setup: clientInspector): its WebSocket
// was closed with 1008 and the refusal's code, and the provider's side is closed as for
// any client that left.
var errClientRefused = errors.New("a message of the client was refused")

// errProviderSilent ends a session whose provider stopped answering pings.
var errProviderSilent = websocket.CloseError{Code: websocket.StatusGoingAway, Reason: "the provider stopped answering"}

// errShuttingDown ends a session the enforcer's shutdown cut: the client is told 1001
// (going away).
var errShuttingDown = websocket.CloseError{Code: websocket.StatusGoingAway, Reason: "the enforcer is shutting down"}

// openSession registers a session, cut by DrainSessions at shutdown; one that opens
// once DrainSessions has cut the others (its handshake was under way) is cut at once:
// before 2026-12-02 it ran on past the shutdown, never cut
// (TestRealtimeSessionOpenedDuringTheDrainIsEnded).
func (gw *Gateway) openSession(p *proxied, cancel context.CancelFunc) {
	gw.sessionsMu.Lock()
	gw.sessions[p] = cancel
	cut := gw.sessionsCut
	gw.sessionsMu.Unlock()
	if cut {
		cancel()
	}
}

func (gw *Gateway) closeSession(p *proxied) {
	gw.sessionsMu.Lock()
	delete(gw.sessions, p)
	gw.sessionsMu.Unlock()
}

func (gw *Gateway) openSessions() int {
	gw.sessionsMu.Lock()
	defer gw.sessionsMu.Unlock()
	return len(gw.sessions)
}

// sessionPoll is how often DrainSessions looks whether the sessions ended.
const sessionPoll = 50 * time.Millisecond

// DrainSessions is the gateway's part of a shutdown, after its server's Shutdown: it
// lets the open Realtime sessions go on until ctx ends, then ends those left (the client
// gets 1001, going away) and returns once every request the gateway took has ended,
// each having settled what it saw (waitIdle: the sessions ended, the streams its server
// cut), or after realtimeSettleWait more. A session ended this way is settled as any
// that ends: its finished responses already were, a response in progress is estimated.
// The one wait covers the sessions and the streams alike (a session holds a slot too):
// before 2026-12-02 it waited realtimeSettleWait for the sessions, then as long again
// for the slots, 4s past ctx's end, more than a shutdown keeps after it for the tracker
// and the settle queue (TestDrainSessionsWaitsOnceAfterTheDeadline). A session whose
// handshake was under way is cut as soon as it opens (openSession).
func (gw *Gateway) DrainSessions(ctx context.Context) {
	tick := time.NewTicker(sessionPoll)
	defer tick.Stop()
	for gw.openSessions() > 0 {
		select {
		case <-tick.C:
			continue
		case <-ctx.Done():
		}
		break
	}
	gw.sessionsMu.Lock()
	gw.sessionsCut = true // a session still opening is cut as it opens (openSession)
	for _, cancel := range gw.sessions {
		cancel()
	}
	gw.sessionsMu.Unlock()
	gw.waitIdle(realtimeSettleWait)
}

// waitIdle waits until every request the gateway took has ended, each having settled
// what it saw, or limit passed. At shutdown its server was closed (streams cut) and its
// sessions ended; their handlers unwind a moment longer. The tracker's SettleAll, which
// comes next, would otherwise settle a request still unwinding at its input estimate
// alone, before the handler reports what the stream had shown.
func (gw *Gateway) waitIdle(limit time.Duration) {
	deadline := time.Now().Add(limit)
	if gw.idleWaits != nil {
		gw.idleWaits(deadline)
	}
	for len(gw.slots) > 0 && time.Now().Before(deadline) {
		time.Sleep(sessionPoll / 10)
	}
}
