package fakellm

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"github.com/coder/websocket"
)

// OpenAIGPTLive is a GPT-Live session over a WebSocket (GET /v1/live/sessions).
const OpenAIGPTLive = "openai.live.websocket"

// GPTLiveBackend is the model a GPT-Live session's backend answers with.
const GPTLiveBackend = "gpt-5"

// gptLive serves OpenAI's GPT-Live over a WebSocket, in the parts the enforcer's
// accounting depends on: the client's session.start (its session.model, as Call.Model)
// is answered by session.started; each response.create by a session.usage.updated whose
// seconds, the session's total, grow by half the test's Usage.AudioMillis (the time the
// model took to think), then the backend's response (GPTLiveBackend, with the Usage's
// tokens), each of its Responses events wrapped in a response.event, then another
// session.usage.updated with the other half (the time it took to speak the answer);
// session.close by session.closed with the session's total grown by Usage.AudioMillis
// once more. The session is one Call (the Usage asked once).
func (s *Server) gptLive(w http.ResponseWriter, r *http.Request) {
	conn, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer conn.CloseNow()
	ctx := r.Context()
	var u Usage
	var millis int64
	seconds := func() string { return strconv.FormatFloat(float64(millis)/1000, 'f', -1, 64) }
	send := func(data string) error { return conn.Write(ctx, websocket.MessageText, []byte(data)) }
	for i := 0; ; {
		_, msg, err := conn.Read(ctx)
		if err != nil {
			return
		}
		var ev struct {
			Type    string `json:"type"`
			Session struct {
				Model string `json:"model"`
			} `json:"session"`
		}
		if json.Unmarshal(msg, &ev) != nil {
			continue
		}
		switch ev.Type {
		case "session.start":
			_, u = s.session(r, OpenAIGPTLive, ev.Session.Model)
			if send(`{"type":"session.started","event_id":"event_start","session":{"id":"live_fake","model":`+strconv.Quote(ev.Session.Model)+`}}`) != nil {
				return
			}
		case "response.create":
			report := func(ms int64) error {
				millis += ms
				return send(`{"type":"session.usage.updated","event_id":"event_usage","usage":{"seconds":` + seconds() + `}}`)
			}
			if report(u.AudioMillis/2) != nil {
				return
			}
			var werr error
			responsesEvents(fmt.Sprintf("resp_live%06d", i), GPTLiveBackend, u, func(_, data string) {
				if werr == nil {
					werr = send(`{"type":"response.event","event_id":"event_backend","delegation_id":"dl_fake","event":` + data + `}`)
				}
			})
			if werr != nil || report(u.AudioMillis-u.AudioMillis/2) != nil {
				return
			}
			i++
		case "session.close":
			millis += u.AudioMillis
			_ = send(`{"type":"session.closed","event_id":"event_closed","reason":"close_requested","session":{"id":"live_fake","model":"gpt-live-1"},"usage":{"seconds":` + seconds() + `}}`)
			_ = conn.Close(websocket.StatusNormalClosure, "")
			return
		}
	}
}
