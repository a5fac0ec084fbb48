package fakellm

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/coder/websocket"
)

// OpenAIRealtime is a Realtime API session (GET /v1/realtime?model=..., a WebSocket).
const OpenAIRealtime = "openai.realtime"

// realtime serves a Realtime session as OpenAI's Realtime API (GA) does, in the parts the
// enforcer's accounting depends on: session.created names the model (its snapshot when
// Server.Snapshots says so), and every response.create the client sends is answered by
// response.created, one output_text delta per word of Text, an audio delta, and
// response.done carrying that response's usage (the test's Usage, asked once per
// session: input_tokens with input_token_details.cached_tokens, audio_tokens and
// image_tokens, output_tokens with output_token_details.audio_tokens). The
// session is one Call; its Body counts the client's messages, in decimal, when it ends.
func (s *Server) realtime(w http.ResponseWriter, r *http.Request) {
	c := Call{API: OpenAIRealtime, Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Header: r.Header.Clone(),
		Model: r.URL.Query().Get("model"), Stream: true}
	if s.Usage != nil && c.Model != "" {
		c.Usage = s.Usage(c)
	}
	s.mu.Lock()
	s.seq++
	n := s.seq
	s.calls = append(s.calls, c)
	at := len(s.calls) - 1
	s.mu.Unlock()
	if c.Model == "" {
		writeError(w, http.StatusBadRequest, c.API, "Missing required parameter: 'model'.")
		return
	}
	// OpenAI names the subprotocol "realtime" when the client offers it (a browser's
	// client does, beside its key's), and a browser fails a handshake that offered
	// subprotocols and got none. It takes sessions from any page's origin.
	conn, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{"realtime"}, InsecureSkipVerify: true})
	if err != nil {
		return
	}
	defer conn.CloseNow()
	model := c.Model
	if m, ok := s.Snapshots[model]; ok {
		model = m
	}
	ctx := r.Context()
	send := func(format string, args ...any) error {
		return conn.Write(ctx, websocket.MessageText, []byte(fmt.Sprintf(format, args...)))
	}
	if send(`{"type":"session.created","event_id":"event_%d_0","session":{"type":"realtime","object":"realtime.session","id":"sess_fake%06d","model":%q,"output_modalities":["audio"]}}`, n, n, model) != nil {
		return
	}
	u := c.Usage
	got := 0
	defer func() {
		s.mu.Lock()
		s.calls[at].Body = []byte(fmt.Sprint(got))
		s.mu.Unlock()
	}()
	for i := 0; ; i++ {
		_, msg, err := conn.Read(ctx)
		if err != nil {
			return
		}
		got++
		var ev struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(msg, &ev) != nil || ev.Type != "response.create" {
			continue
		}
		if respond(ctx, send, n, i, u) != nil {
			return
		}
	}
}

// respond sends one response's events.
func respond(ctx context.Context, send func(string, ...any) error, session, i int, u Usage) error {
	id := fmt.Sprintf("resp_fake%06d_%d", session, i)
	if err := send(`{"type":"response.created","event_id":"event_%s_c","response":{"object":"realtime.response","id":%q,"status":"in_progress","output":[],"usage":null}}`, id, id); err != nil {
		return err
	}
	for _, word := range words() {
		if err := send(`{"type":"response.output_text.delta","event_id":"event_%s_t","response_id":%q,"item_id":"item_%s","output_index":0,"content_index":0,"delta":%q}`, id, id, id, word); err != nil {
			return err
		}
	}
	audio := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("\x00\x01", 2400)))
	if err := send(`{"type":"response.output_audio.delta","event_id":"event_%s_a","response_id":%q,"item_id":"item_%s","output_index":0,"content_index":1,"delta":%q}`, id, id, id, audio); err != nil {
		return err
	}
	return send(`{"type":"response.done","event_id":"event_%s_d","response":{"object":"realtime.response","id":%q,"status":"completed","output":[{"type":"message","role":"assistant","content":[{"type":"output_text","text":%q}]}],"usage":{"total_tokens":%d,"input_tokens":%d,"output_tokens":%d,"input_token_details":{"text_tokens":%d,"audio_tokens":%d,"image_tokens":%d,"cached_tokens":%d,"cached_tokens_details":{"text_tokens":%d,"audio_tokens":%d,"image_tokens":%d}},"output_token_details":{"text_tokens":%d,"audio_tokens":%d}}}}`,
		id, id, Text, u.InputTokens+u.OutputTokens, u.InputTokens, u.OutputTokens, u.InputTokens-u.AudioInputTokens-u.ImageInputTokens, u.AudioInputTokens,
		u.ImageInputTokens, u.CachedInputTokens, u.CachedInputTokens-u.CachedAudioInputTokens-u.CachedImageInputTokens, u.CachedAudioInputTokens,
		u.CachedImageInputTokens, u.OutputTokens-u.AudioOutputTokens, u.AudioOutputTokens)
}
