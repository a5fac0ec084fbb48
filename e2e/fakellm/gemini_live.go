package fakellm

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/coder/websocket"
)

// GeminiLive is a Gemini Live API session (the Gemini API's BidiGenerateContent, a
// WebSocket).
const GeminiLive = "gemini.live"

// isGeminiLive tells the Gemini API's Live endpoint (Google's SDKs join their base URL
// and the path with two slashes).
func isGeminiLive(r *http.Request) bool {
	if r.Method != http.MethodGet {
		return false
	}
	rest, ok := strings.CutPrefix(strings.TrimLeft(r.URL.Path, "/"), "ws/google.ai.generativelanguage.")
	version, method, _ := strings.Cut(rest, ".")
	return ok && slices.Contains(geminiVersions, version) && method == "GenerativeService.BidiGenerateContent"
}

// geminiLive serves a Live session as Google's Gemini API does, in the parts the
// enforcer's accounting depends on: the client's setup (its model, "models/..." left as
// sent in Call.Model) is answered by setupComplete, and every clientContent the client
// sends by one turn: a text part per word of Text, an audio part (0.25 s of 24 kHz PCM),
// the words' output transcription, turnComplete, and the turn's usageMetadata (the test's
// Usage, asked once per session: promptTokenCount with promptTokensDetails, the audio
// ones AudioInputTokens; responseTokenCount with responseTokensDetails, the audio ones
// AudioOutputTokens). Every message goes in a binary frame, as Google sends them. The
// session is one Call, recorded when its setup came; its Body counts the client's
// messages, in decimal, when it ends.
func (s *Server) geminiLive(w http.ResponseWriter, r *http.Request) {
	conn, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer conn.CloseNow()
	ctx := r.Context()
	_, msg, err := conn.Read(ctx)
	if err != nil {
		return
	}
	var setup struct {
		Setup *struct {
			Model string `json:"model"`
		} `json:"setup"`
	}
	if json.Unmarshal(msg, &setup) != nil || setup.Setup == nil || setup.Setup.Model == "" {
		_ = conn.Close(websocket.StatusPolicyViolation, "the first message must be a setup naming a model")
		return
	}
	at, u := s.session(r, GeminiLive, setup.Setup.Model)
	got := 1
	defer func() { s.countMessages(at, got) }()
	send := func(format string, args ...any) error {
		return conn.Write(ctx, websocket.MessageBinary, []byte(fmt.Sprintf(format, args...)))
	}
	if send(`{"setupComplete":{}}`) != nil {
		return
	}
	for {
		_, msg, err := conn.Read(ctx)
		if err != nil {
			return
		}
		got++
		var m struct {
			ClientContent json.RawMessage `json:"clientContent"`
		}
		if json.Unmarshal(msg, &m) != nil || m.ClientContent == nil {
			continue
		}
		if liveTurn(send, u) != nil {
			return
		}
	}
}

// liveTurn sends one turn's messages.
func liveTurn(send func(string, ...any) error, u Usage) error {
	for _, word := range words() {
		if err := send(`{"serverContent":{"modelTurn":{"parts":[{"text":%q}]}}}`, word); err != nil {
			return err
		}
	}
	audio := base64.StdEncoding.EncodeToString(make([]byte, 24_000/4*2))
	if err := send(`{"serverContent":{"modelTurn":{"parts":[{"inlineData":{"mimeType":"audio/pcm;rate=24000","data":%q}}]}}}`, audio); err != nil {
		return err
	}
	if err := send(`{"serverContent":{"outputTranscription":{"text":%q}}}`, Text); err != nil {
		return err
	}
	if err := send(`{"serverContent":{"turnComplete":true}}`); err != nil {
		return err
	}
	return send(`{"usageMetadata":{"promptTokenCount":%d,"responseTokenCount":%d,"totalTokenCount":%d,`+
		`"promptTokensDetails":[{"modality":"TEXT","tokenCount":%d},{"modality":"AUDIO","tokenCount":%d}],`+
		`"responseTokensDetails":[{"modality":"TEXT","tokenCount":%d},{"modality":"AUDIO","tokenCount":%d}]}}`,
		u.InputTokens, u.OutputTokens, u.InputTokens+u.OutputTokens, u.InputTokens-u.AudioInputTokens, u.AudioInputTokens,
		u.OutputTokens-u.AudioOutputTokens, u.AudioOutputTokens)
}
