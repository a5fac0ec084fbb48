package responseusage

import (
	"bytes"
	"encoding/json"
	"strings"
)

// ResponsesSession follows one OpenAI Responses API session over a WebSocket (its
// "WebSocket mode": GET /v1/responses upgraded, the client sending response.create
// events, the server the Responses stream events of each response it makes, on one
// connection for as long as it lasts; xAI and Azure OpenAI serve it too).
//
// Each response ends with a terminal event (response.completed, response.incomplete,
// response.failed) whose response object is the whole response: its model, its usage,
// its output items (the web searches, file searches, image generations and code
// containers billed apart), its service tier. That event alone is read, by an Extractor
// of its own as the terminal event of an HTTP stream is, so a response is charged
// exactly as the same response streamed over HTTP. A response cut before its terminal
// event (the session ended) is estimated from the text its deltas carried.
//
// Not safe for concurrent use.
//
// Event says what each event was (SessionEvent), so that the front door can tell which
// of the response.create events it admitted a server event concerns: the server makes
// one response at a time, in the order they were asked for.
type ResponsesSession struct {
	model string
	// open holds the ids of the responses created and not yet ended; text the bytes of
	// text their deltas carried (of all of them: a connection may run several at once,
	// whose deltas the events do not always tell apart).
	open map[string]struct{}
	text int64
}

// NewResponsesSession returns a reader of a session's server events.
func NewResponsesSession() *ResponsesSession {
	return &ResponsesSession{open: map[string]struct{}{}}
}

// responsesEvent is the part of a server event the session reads before choosing.
type responsesEvent struct {
	Type     string `json:"type"`
	Delta    string `json:"delta"`
	Response *struct {
		ID    string `json:"id"`
		Model string `json:"model"`
	} `json:"response"`
}

// SessionEvent is what a server event of a Responses session was, as far as the requests
// its response.create events asked for are concerned.
type SessionEvent int

const (
	// OtherEvent concerns no request's start or end (a delta, an output item...).
	OtherEvent SessionEvent = iota
	// ResponseCreated: a response began (response.created).
	ResponseCreated
	// ResponseEnded: a response's terminal event; Event's Usage is that response's.
	ResponseEnded
	// ErrorEvent: the server's "error" event, which is how it refuses a response.create
	// it will not run (previous_response_not_found, response_already_in_flight, a bad
	// parameter); a response that began and then failed ends with response.failed.
	ErrorEvent
	// SteerEnded: a response.steer will start no successor response of its own: it was
	// refused or could not be committed (response.steer.failed), or its input waits for
	// an explicit response.create (response.steer.pending, after a response stopped for
	// the client's tool output).
	SteerEnded
)

// Event reads one message the server sent: what it was, and the usage of the response
// it ended (ResponseEnded).
func (s *ResponsesSession) Event(msg []byte) (Usage, SessionEvent) {
	var e responsesEvent
	if json.Unmarshal(msg, &e) != nil {
		return Usage{}, OtherEvent // not JSON (or not an event's shape): not ours
	}
	if e.Response != nil && e.Response.Model != "" {
		s.model = e.Response.Model
	}
	switch {
	case e.Type == "response.created" && e.Response != nil:
		s.open[e.Response.ID] = struct{}{}
		return Usage{}, ResponseCreated
	case e.Type == "error":
		return Usage{}, ErrorEvent
	case e.Type == "response.steer.failed" || e.Type == "response.steer.pending":
		return Usage{}, SteerEnded
	case e.Type == "response.completed" || e.Type == "response.incomplete" || e.Type == "response.failed":
		if e.Response != nil {
			delete(s.open, e.Response.ID)
		}
		x := New("text/event-stream", nil, Limits{})
		_ = x.Write([]byte("data: "))
		_ = x.Write(oneLine(msg))
		_ = x.Write([]byte("\n\n"))
		u := x.Finish(true)
		if !u.OutputReported {
			// No usage (a failed response may have none): its deltas' text is what
			// there is to estimate from.
			u.TextBytes = max(u.TextBytes, s.text)
		}
		if len(s.open) == 0 {
			s.text = 0
		}
		return u, ResponseEnded
	case strings.HasSuffix(e.Type, ".delta") && !strings.HasSuffix(e.Type, "audio.delta"):
		// Text the model wrote (output text, refusals, reasoning summaries, function
		// call arguments), output it bills, counted as the HTTP stream's is.
		s.text += int64(len(e.Delta))
	}
	return Usage{}, OtherEvent
}

// oneLine is msg, a JSON value, on one line: its line breaks, which JSON allows only as
// white space between tokens (a string escapes them), made spaces, so that it is one
// data line of an event stream (a server that indents its messages would otherwise have
// its terminal event read up to its first line break, and its usage lost). msg itself
// when it has none, as servers send their events.
func oneLine(msg []byte) []byte {
	if bytes.IndexByte(msg, '\n') < 0 && bytes.IndexByte(msg, '\r') < 0 {
		return msg
	}
	line := bytes.Clone(msg)
	for i, c := range line {
		if c == '\n' || c == '\r' {
			line[i] = ' '
		}
	}
	return line
}

// Model is the model the session's responses named, "" before one did.
func (s *ResponsesSession) Model() string { return s.model }

// Unfinished is the text the responses in progress had shown, and whether there were
// any: at the session's end they never reported their usage.
func (s *ResponsesSession) Unfinished() (textBytes int64, inProgress bool) {
	return s.text, len(s.open) > 0
}
