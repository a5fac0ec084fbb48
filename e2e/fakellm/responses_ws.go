package fakellm

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/coder/websocket"
)

// OpenAIResponsesWebSocket is a session of the Responses API's WebSocket mode (GET
// /v1/responses, a WebSocket).
const OpenAIResponsesWebSocket = "openai.responses.websocket"

// responsesMessageBytes bounds a client's message to a Responses session: the gateway's
// default request body cap.
const responsesMessageBytes = 16 << 20

// responsesWebSocket serves the Responses API's WebSocket mode as OpenAI does, in the
// parts the enforcer's accounting depends on: every response.create the client sends
// (its model, as Call.Model, the first one's) is answered by the events an HTTP stream
// of the same response carries (responsesEvents), each a text message, ending with
// response.completed and the whole response with its usage (the test's Usage, asked once
// per session). A warmup (a response.create with "generate": false, which prepares the
// request's state and generates nothing) is answered response.created and
// response.completed with no output, its usage the input alone. With the server's
// ToolUse, a response.create whose input has no function_call_output is answered with a
// call of that function (responsesFunctionCallEvents), and one with n of them with the
// chain's next call (ToolUse.Then), if any. The session is one Call; its Body
// counts the client's messages, in decimal, when it ends.
func (s *Server) responsesWebSocket(w http.ResponseWriter, r *http.Request) {
	conn, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer conn.CloseNow()
	// The library's default, 32 KiB, is far below what OpenAI reads: a response.create
	// that continues no earlier response carries the whole request (Codex's, after a
	// warmup this fake once answered with text, was larger), and on the 1009 close Codex
	// leaves the WebSocket for HTTP.
	conn.SetReadLimit(responsesMessageBytes)
	ctx := r.Context()
	at := -1
	got := 0
	defer func() {
		if at >= 0 {
			s.countMessages(at, got)
		}
	}()
	var u Usage
	for i := 0; ; i++ {
		_, msg, err := conn.Read(ctx)
		if err != nil {
			return
		}
		got++
		var ev struct {
			Type     string `json:"type"`
			Model    string `json:"model"`
			Generate *bool  `json:"generate"`
		}
		if json.Unmarshal(msg, &ev) != nil || ev.Type != "response.create" || ev.Model == "" {
			continue
		}
		if at < 0 {
			at, u = s.session(r, OpenAIResponsesWebSocket, ev.Model)
		}
		model := ev.Model
		if m, ok := s.Snapshots[model]; ok {
			model = m
		}
		var werr error
		emit := func(_, data string) {
			if werr == nil {
				werr = conn.Write(ctx, websocket.MessageText, []byte(data))
			}
		}
		tool := s.toolCall(msg, "function_call_output")
		switch id := fmt.Sprintf("resp_ws%06d", i); {
		case ev.Generate != nil && !*ev.Generate:
			responsesWarmupEvents(id, model, u, emit)
		case tool != nil:
			responsesFunctionCallEvents(id, model, fmt.Sprintf("call_ws%06d", i), *tool, u, emit)
		default:
			responsesEvents(id, model, u, emit)
		}
		if werr != nil {
			return
		}
		s.mu.Lock()
		s.wsAnswered++
		s.mu.Unlock()
	}
}
