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
