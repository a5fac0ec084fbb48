package realtimeusage

import (
	"encoding/json"
	"mime"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/tollgate-dev/tollgate/enforcer/estimate"
	"github.com/tollgate-dev/tollgate/pkg/saturate"
)

// GeminiLive follows one session of Google's Gemini Live API (BidiGenerateContent over a
// WebSocket: the Gemini API's /ws/google.ai.generativelanguage.{version}.GenerativeService.
// BidiGenerateContent, Vertex AI's /ws/google.cloud.aiplatform.{version}.LlmBidiService/
// BidiGenerateContent). Its messages are JSON objects, which Google sends in binary
// frames as well as text ones:
//
//   - the client's first message, setup, names the session's model (Setup);
//   - the server's serverContent carries each turn the model takes (modelTurn's parts:
//     text, or audio as base64 PCM in inlineData; outputTranscription, the text of that
//     audio, when the session asked for it), and toolCall a turn that calls the
//     client's functions;
//   - usageMetadata reports one turn's usage (per turn, not a running total of the
//     session: each turn's promptTokenCount counts the whole context it read):
//     promptTokenCount and toolUsePromptTokenCount in, responseTokenCount and
//     thoughtsTokenCount out, cachedContentTokenCount, and by modality
//     (promptTokensDetails, responseTokensDetails, cacheTokensDetails: TEXT, AUDIO,
//     IMAGE, VIDEO), since the Live models price audio (and video) above text.
//
// Each usageMetadata is a Response (Event), settled on its own; a turn cut before its
// usage is estimated from what it showed (Unfinished): its text, and its audio's length
// at Google's GeminiAudioTokensPerSecond.
//
// Event, Model and Unfinished are for the session's one reading goroutine; Setup may be
// called from the goroutine that relays the client's messages.
type GeminiLive struct {
	model atomic.Pointer[string]
	// open: content came since the last usage (a turn in progress); text and audio what
	// it showed (text bytes, audio output tokens).
	open  bool
	text  int64
	audio int64
}

// GeminiAudioTokensPerSecond is how many tokens a second of audio counts as on Gemini
// (Google's token documentation: 32 a second, input and output): the rate a turn cut
// before its usage is estimated at from the audio it sent.
const GeminiAudioTokensPerSecond = 32

// NewGeminiLive returns a reader for a session whose model its setup will name.
func NewGeminiLive() *GeminiLive { return &GeminiLive{} }

// Setup reads a message the client sent: the first, setup, names the session's model
// ("models/gemini-...", Vertex AI's "projects/.../publishers/google/models/gemini-..."),
// kept as the model's own id. Any other message is ignored.
func (r *GeminiLive) Setup(msg []byte) {
	var m struct {
		Setup *struct {
			Model string `json:"model"`
		} `json:"setup"`
	}
	if json.Unmarshal(msg, &m) != nil || m.Setup == nil || m.Setup.Model == "" {
		return
	}
	model := m.Setup.Model
	if i := strings.LastIndex(model, "models/"); i >= 0 {
		model = model[i+len("models/"):]
	}
	r.model.Store(&model)
}

// Model is the model the session's setup named, "" before it did.
func (r *GeminiLive) Model() string {
	if m := r.model.Load(); m != nil {
		return *m
	}
	return ""
}

// liveMessage is the part of a server message the reader looks at.
type liveMessage struct {
	ServerContent *struct {
		ModelTurn *struct {
			Parts []struct {
				Text       string `json:"text"`
				InlineData *struct {
					MimeType string `json:"mimeType"`
					// Data is base64: only its length is used, so it is not decoded.
					Data json.RawMessage `json:"data"`
				} `json:"inlineData"`
			} `json:"parts"`
		} `json:"modelTurn"`
		OutputTranscription *struct {
			Text string `json:"text"`
		} `json:"outputTranscription"`
	} `json:"serverContent"`
	ToolCall      json.RawMessage `json:"toolCall"`
	UsageMetadata *liveUsage      `json:"usageMetadata"`
}

// liveUsage is a Live turn's usageMetadata (Vertex AI's may name the output as
// generateContent does: candidatesTokenCount, candidatesTokensDetails).
type liveUsage struct {
	PromptTokenCount        int64           `json:"promptTokenCount"`
	CachedContentTokenCount int64           `json:"cachedContentTokenCount"`
	ResponseTokenCount      int64           `json:"responseTokenCount"`
	CandidatesTokenCount    int64           `json:"candidatesTokenCount"`
	ToolUsePromptTokenCount int64           `json:"toolUsePromptTokenCount"`
	ThoughtsTokenCount      int64           `json:"thoughtsTokenCount"`
	TotalTokenCount         int64           `json:"totalTokenCount"`
	PromptTokensDetails     []modalityCount `json:"promptTokensDetails"`
	ResponseTokensDetails   []modalityCount `json:"responseTokensDetails"`
	CandidatesTokensDetails []modalityCount `json:"candidatesTokensDetails"`
	CacheTokensDetails      []modalityCount `json:"cacheTokensDetails"`
}

type modalityCount struct {
	Modality   string `json:"modality"`
	TokenCount int64  `json:"tokenCount"`
}

// Event reads one message the server sent (text or binary): a turn's usage is a
// Response.
func (r *GeminiLive) Event(msg []byte) (Usage, Kind) {
	var m liveMessage
	if json.Unmarshal(msg, &m) != nil {
		return Usage{}, None // not JSON, or not of the shape read: not ours
	}
	if c := m.ServerContent; c != nil {
		if t := c.ModelTurn; t != nil {
			r.open = true
			for _, p := range t.Parts {
				r.text = saturate.Add(r.text, int64(len(p.Text)))
				if d := p.InlineData; d != nil {
					r.audio = saturate.Add(r.audio, audioTokens(d.MimeType, len(d.Data)))
				}
			}
		}
		if t := c.OutputTranscription; t != nil {
			r.open = true
			r.text = saturate.Add(r.text, int64(len(t.Text)))
		}
	}
	if len(m.ToolCall) > 0 {
		r.open = true
	}
	u, ok := m.UsageMetadata.usage()
	if !ok {
		return Usage{}, None
	}
	u.Model = r.Model()
	r.open, r.text, r.audio = false, 0, 0
	return u, Response
}

// Unfinished is what the turn in progress had shown, and whether one was: at the
// session's end it never reported its usage. Its audio tokens are counted as the text
// bytes they stand for (estimate.Bytes), as the settlement estimates text
// (estimate.Tokens), so that the larger of the two is what it is charged.
func (r *GeminiLive) Unfinished() (Usage, bool) {
	text := max(r.text, estimate.Bytes(r.audio))
	return Usage{Model: r.Model(), TextBytes: text}, r.open
}

// usage is what a usageMetadata reports; false when it reports nothing (absent, all
// counts 0) or a negative count, which is no usage to charge by.
func (us *liveUsage) usage() (Usage, bool) {
	if us == nil {
		return Usage{}, false
	}
	for _, n := range []int64{us.PromptTokenCount, us.CachedContentTokenCount, us.ResponseTokenCount, us.CandidatesTokenCount,
		us.ToolUsePromptTokenCount, us.ThoughtsTokenCount, us.TotalTokenCount} {
		if n < 0 {
			return Usage{}, false
		}
	}
	in := saturate.Add(us.PromptTokenCount, us.ToolUsePromptTokenCount)
	out := saturate.Add(max(us.ResponseTokenCount, us.CandidatesTokenCount), us.ThoughtsTokenCount)
	if us.TotalTokenCount > saturate.Add(in, out) {
		out = us.TotalTokenCount - in // never less than the total says
	}
	if in == 0 && out == 0 {
		return Usage{}, false
	}
	u := Usage{InputTokens: in, OutputTokens: out, CachedInputTokens: min(us.CachedContentTokenCount, in), Reported: true}
	// Audio, video and images are priced alike on the Live models, above text: their
	// tokens are the priced part (AudioInputTokens); a list that is there reports 0 of
	// them when it names none (Gemini lists the modalities it counted).
	u.AudioInputTokens = nonText(us.PromptTokensDetails, in)
	u.CachedAudioInputTokens = nonText(us.CacheTokensDetails, u.CachedInputTokens)
	details := us.ResponseTokensDetails
	if details == nil {
		details = us.CandidatesTokensDetails
	}
	u.AudioOutputTokens = nonText(details, out)
	return u, true
}

// nonText is the tokens of a modality list that are not text (audio, video, image), at
// most limit; nil when there is no list (the split unknown: the settlement charges the
// dearer price) or one with a negative count.
func nonText(list []modalityCount, limit int64) *int64 {
	if list == nil {
		return nil
	}
	var n int64
	for _, c := range list {
		if c.TokenCount < 0 {
			return nil
		}
		if c.Modality != "TEXT" {
			n = saturate.Add(n, c.TokenCount)
		}
	}
	n = min(n, limit)
	return &n
}

// audioTokens is what base64 data of dataLen bytes (its JSON quotes included) of audio of
// mimeType counts as: 16-bit PCM at the type's rate (Live sends "audio/pcm;rate=24000"),
// at GeminiAudioTokensPerSecond, rounded up. Data of another type counts nothing.
func audioTokens(mimeType string, dataLen int) int64 {
	mt, params, err := mime.ParseMediaType(mimeType)
	if err != nil || mt != "audio/pcm" {
		return 0
	}
	rate, err := strconv.ParseInt(params["rate"], 10, 64)
	if err != nil || rate <= 0 {
		rate = 24_000 // Live's output rate
	}
	bytes := int64(max(dataLen-2, 0)) * 3 / 4
	samples := bytes / 2
	return (samples*GeminiAudioTokensPerSecond + rate - 1) / rate
}
