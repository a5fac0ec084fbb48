// Package realtimeusage reads what a Realtime session costs from its server's events:
// OpenAI's Realtime API over a WebSocket (GET /v1/realtime?model=..., Azure's
// /openai/realtime), where the client and the model talk in JSON events for as long as
// the session lasts, and every response the model makes ends with a response.done event
// carrying that response's usage (response.usage: input_tokens, output_tokens, and
// input_token_details.cached_tokens; text, audio and image tokens counted together).
//
// The gateway charges a session response by response (enforcer/gateway, realtime.go):
// each response.done settles one admitted request, so a member's limit is checked again
// before the next response. A Reader follows one session: the model it runs
// (session.created and session.updated name it), the responses in progress, and the
// text their deltas carried, from which a response cut before its response.done is
// estimated.
//
// It does no I/O and keeps a few counters: the events themselves are not retained.
package realtimeusage

import "encoding/json"

// Usage is what one response reported (Response), or what the responses in progress
// at the session's end had shown (Reader.Unfinished).
type Usage struct {
	// Model is the session's model as the server named it ("" before it did).
	Model string
	// InputTokens counts all input tokens, cached ones included; CachedInputTokens
	// the part read from the prompt cache.
	InputTokens, OutputTokens, CachedInputTokens int64
	// Reported: the counts are the server's (a response.done with its usage); else
	// they are 0 and TextBytes is what there is to estimate from.
	Reported bool
	// TextBytes is the output text (and audio transcript) the response's deltas carried.
	TextBytes int64
}

// Reader follows one session's server events. Not safe for concurrent use.
type Reader struct {
	model string
	// open holds the ids of the responses created and not yet done; text the bytes of
	// text their deltas carried.
	open map[string]struct{}
	text int64
}

// New returns a Reader for a session opened for model (the request's ?model=, the
// Azure deployment: used until the server names its own).
func New(model string) *Reader {
	return &Reader{model: model, open: map[string]struct{}{}}
}

// event is the part of a server event the Reader looks at.
type event struct {
	Type    string `json:"type"`
	Session *struct {
		Model string `json:"model"`
	} `json:"session"`
	Response *struct {
		ID    string `json:"id"`
		Usage *struct {
			InputTokens       int64 `json:"input_tokens"`
			OutputTokens      int64 `json:"output_tokens"`
			InputTokenDetails struct {
				CachedTokens int64 `json:"cached_tokens"`
			} `json:"input_token_details"`
		} `json:"usage"`
	} `json:"response"`
	ResponseID string `json:"response_id"`
	Delta      string `json:"delta"`
}

// Event reads one text message the server sent. When it is a response.done it returns
// that response's usage and true.
func (r *Reader) Event(msg []byte) (Usage, bool) {
	var head struct {
		Type string `json:"type"`
	}
	// Most messages (audio deltas above all) matter only by their type: the rest is
	// decoded only for the few that count. An event that is not JSON is not ours.
	if json.Unmarshal(msg, &head) != nil {
		return Usage{}, false
	}
	switch head.Type {
	case "session.created", "session.updated", "response.created", "response.done",
		"response.output_text.delta", "response.output_audio_transcript.delta", // GA names
		"response.text.delta", "response.audio_transcript.delta": // the beta's
	default:
		return Usage{}, false
	}
	var e event
	if json.Unmarshal(msg, &e) != nil {
		return Usage{}, false
	}
	switch e.Type {
	case "session.created", "session.updated":
		if e.Session != nil && e.Session.Model != "" {
			r.model = e.Session.Model
		}
	case "response.created":
		if e.Response != nil {
			r.open[e.Response.ID] = struct{}{}
		}
	case "response.done":
		if e.Response == nil {
			return Usage{}, false
		}
		delete(r.open, e.Response.ID)
		u := Usage{Model: r.model}
		if us := e.Response.Usage; us != nil && us.InputTokens >= 0 && us.OutputTokens >= 0 && us.InputTokenDetails.CachedTokens >= 0 {
			u.InputTokens, u.OutputTokens = us.InputTokens, us.OutputTokens
			u.CachedInputTokens = min(us.InputTokenDetails.CachedTokens, us.InputTokens)
			u.Reported = true
		} else {
			// No usage: the text seen is what there is to estimate from (the text of
			// every response in progress, when several overlap).
			u.TextBytes = r.text
		}
		if len(r.open) == 0 {
			r.text = 0
		}
		return u, true
	default: // a text delta
		if _, ok := r.open[e.ResponseID]; ok || e.ResponseID == "" {
			r.text += int64(len(e.Delta))
		}
	}
	return Usage{}, false
}

// Model is the session's model: the server's name once it gave one, else the request's.
func (r *Reader) Model() string { return r.model }

// Unfinished is what the responses in progress had shown (their deltas' text), and
// whether there were any: at the session's end they never reported their usage.
func (r *Reader) Unfinished() (Usage, bool) {
	return Usage{Model: r.model, TextBytes: r.text}, len(r.open) > 0
}
