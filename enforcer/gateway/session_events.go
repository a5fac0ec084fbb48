package gateway

import (
	"net/http"

	"github.com/tollgate-dev/tollgate/enforcer/inflight"
	"github.com/tollgate-dev/tollgate/enforcer/realtimeusage"
	"github.com/tollgate-dev/tollgate/enforcer/responseusage"
)

// sessionEvents reads what a session's server messages report, each as the settlement
// of the request that carries it: OpenAI's Realtime events and Gemini Live's
// (tokenSession), the Responses API's WebSocket mode (responsesSession).
type sessionEvents interface {
	// Event reads one server message: what it reported (kind None: nothing).
	Event(msg []byte) (inflight.Usage, realtimeusage.Kind)
	// Model is the session's model as far as it is known.
	Model() string
	// Unfinished is the settlement of the session's end: of what the responses in
	// progress had shown (incomplete, estimated), or complete at 0 when none was (false).
	Unfinished() (inflight.Usage, bool)
}

// tokenReader is what realtimeusage reads a session with: OpenAI's Realtime events
// (realtimeusage.Reader), Gemini Live's (realtimeusage.GeminiLive).
type tokenReader interface {
	Event(msg []byte) (realtimeusage.Usage, realtimeusage.Kind)
	Model() string
	Unfinished() (realtimeusage.Usage, bool)
}

// tokenSession settles what a tokenReader reads.
type tokenSession struct{ r tokenReader }

func (s tokenSession) Event(msg []byte) (inflight.Usage, realtimeusage.Kind) {
	u, kind := s.r.Event(msg)
	if kind == realtimeusage.None {
		return inflight.Usage{}, kind
	}
	return settlement(u, s.r.Model()), kind
}

func (s tokenSession) Model() string { return s.r.Model() }

func (s tokenSession) Unfinished() (inflight.Usage, bool) {
	last, inProgress := s.r.Unfinished()
	last.Reported = !inProgress
	return settlement(last, s.r.Model()), inProgress
}

// settlement is the inflight.Usage of what a session reported (u): unreported counts
// are estimated from the text seen (inflight.Seen). A usage whose model the session never
// named (a transcription's) is priced at the session's model, never at nothing.
func settlement(u realtimeusage.Usage, sessionModel string) inflight.Usage {
	s := inflight.Usage{Model: u.Model, InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
		CachedTokens: u.CachedInputTokens, AudioInputMillis: u.AudioInputMillis, Complete: u.Reported,
		AudioInputTokens: u.AudioInputTokens, AudioOutputTokens: u.AudioOutputTokens, CachedAudioInputTokens: u.CachedAudioInputTokens,
		ImageInputTokens: u.ImageInputTokens, CachedImageInputTokens: u.CachedImageInputTokens,
		UpstreamStatus: http.StatusSwitchingProtocols}
	if s.Model == "" {
		s.Model = sessionModel
	}
	if !u.Reported {
		s.Seen = &inflight.Seen{TextBytes: u.TextBytes}
	}
	return s
}

// responsesSession settles each response of the Responses API's WebSocket mode as the
// same response streamed over HTTP is settled (inflight.FromResponse), on the request
// its response.create was admitted as (responseCreates): it settles itself, before the
// event that ended the response goes on to the client, who may ask for the next at once.
type responsesSession struct {
	r *responseusage.ResponsesSession
	q *responseCreates
}

func (s responsesSession) Event(msg []byte) (inflight.Usage, realtimeusage.Kind) {
	u, ev := s.r.Event(msg)
	switch ev {
	case responseusage.ResponseCreated:
		s.q.started()
	case responseusage.ErrorEvent:
		s.q.rejected()
	case responseusage.SteerEnded:
		s.q.steerEnded()
	case responseusage.ResponseEnded:
		settled := inflight.FromResponse(u, true, http.StatusSwitchingProtocols, false)
		s.q.finished(settled, s.r.Model())
		return settled, realtimeusage.Response
	}
	return inflight.Usage{}, realtimeusage.None
}

func (s responsesSession) Model() string { return s.r.Model() }

func (s responsesSession) Unfinished() (inflight.Usage, bool) {
	text, inProgress := s.r.Unfinished()
	u := inflight.Usage{Model: s.r.Model(), Complete: !inProgress, UpstreamStatus: http.StatusSwitchingProtocols}
	if inProgress {
		u.Seen = &inflight.Seen{TextBytes: text}
	}
	return u, inProgress
}

// liveSession settles an OpenAI GPT-Live session (realtimeusage.GPTLive): its time, in
// steps, at the session's model (priced by the minute), each Responses call its backend
// makes as the same call streamed over HTTP is settled (its model, its tokens), and each
// Decision API evaluation (decision.event) as the same decision over HTTP is (POST
// /v1/decisions: its model, its tokens).
type liveSession struct {
	l       *realtimeusage.GPTLive
	backend *responseusage.ResponsesSession
}

func (s liveSession) Event(msg []byte) (inflight.Usage, realtimeusage.Kind) {
	ms, estimated, nested, decision := s.l.Event(msg)
	if decision != nil {
		// A Decision API evaluation: its answer read as POST /v1/decisions's is.
		x := responseusage.New("application/json", nil, responseusage.Limits{})
		_ = x.Write(decision)
		return inflight.FromResponse(x.Finish(true), true, http.StatusSwitchingProtocols, false), realtimeusage.Response
	}
	if nested != nil {
		u, ev := s.backend.Event(nested)
		if ev != responseusage.ResponseEnded {
			return inflight.Usage{}, realtimeusage.None
		}
		return inflight.FromResponse(u, true, http.StatusSwitchingProtocols, false), realtimeusage.Response
	}
	if ms == 0 {
		return inflight.Usage{}, realtimeusage.None
	}
	return s.time(ms, estimated), realtimeusage.Response
}

// time is the settlement of ms milliseconds of the session, estimated or reported.
func (s liveSession) time(ms int64, estimated bool) inflight.Usage {
	return inflight.Usage{Model: s.l.Model(), AudioInputMillis: ms, Complete: !estimated, UpstreamStatus: http.StatusSwitchingProtocols}
}

func (s liveSession) Model() string { return s.l.Model() }

// Unfinished is the session's time left to charge (estimated from the clock when the
// server did not close the session); in progress while a backend response is, which the
// provider finishes and bills whether or not the client is there.
func (s liveSession) Unfinished() (inflight.Usage, bool) {
	ms, estimated := s.l.Unreported()
	_, open := s.backend.Unfinished()
	return s.time(ms, estimated), open
}

// Leftovers is what the session's end leaves besides its time: a backend response cut
// before its end, estimated from the text its deltas carried.
func (s liveSession) Leftovers() []inflight.Usage {
	text, open := s.backend.Unfinished()
	if !open {
		return nil
	}
	return []inflight.Usage{{Model: s.backend.Model(), Seen: &inflight.Seen{TextBytes: text}, UpstreamStatus: http.StatusSwitchingProtocols}}
}

// sessionLeftovers is a session whose end may leave more to settle than Unfinished's
// one usage (liveSession): each is charged on a request of its own.
type sessionLeftovers interface {
	Leftovers() []inflight.Usage
}
