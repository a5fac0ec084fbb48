// Package realtimeusage reads what a Realtime session costs from its server's events:
// OpenAI's Realtime API over a WebSocket (GET /v1/realtime?model=..., Azure's
// /openai/realtime), where the client and the model talk in JSON events for as long as
// the session lasts. Two kinds of events carry a cost:
//
//   - every response the model makes ends with a response.done event carrying that
//     response's usage (response.usage: input_tokens, output_tokens,
//     input_token_details.cached_tokens, and the audio parts of the counts,
//     input_token_details.audio_tokens, output_token_details.audio_tokens and, of the
//     cached tokens, input_token_details.cached_tokens_details.audio_tokens, which the
//     realtime models price above text; and the image parts, input_token_details.
//     image_tokens and cached_tokens_details.image_tokens, priced above text too),
//     priced at the session's model;
//   - when the session transcribes the user's audio, each transcription ends with
//     conversation.item.input_audio_transcription.completed carrying its usage, in
//     tokens ({"type": "tokens", input_tokens, output_tokens}) or in seconds of audio
//     ({"type": "duration", "seconds"}: whisper-1), priced at the transcription model
//     the session names (session.audio.input.transcription.model; the beta's
//     session.input_audio_transcription.model, which a beta transcription-only session,
//     ?intent=transcription, names in transcription_session.created and .updated).
//
// The gateway charges a session usage by usage (enforcer/gateway, realtime.go): each
// settles one admitted request, so a member's limit is checked again before the next. A
// Reader follows one session: its models, the responses in progress, and the text and
// audio their deltas carried, from which a response cut before its response.done is
// estimated: its text, and its audio's length (response.output_audio.delta, the beta's
// response.audio.delta: base64 of the session's output format, 16-bit PCM at 24 kHz
// unless session.audio.output.format, the beta's output_audio_format, says G.711 at
// 8 kHz or another PCM rate) at pricecatalog.AudioOutputTokensPerSecond, the rate
// OpenAI's audio models count their output at. Audio is generated faster than it plays,
// so a client that hangs up mid-answer has already been sent most of what was billed.
//
// Google's Gemini Live API is read likewise, turn by turn (GeminiLive, gemini.go), and
// OpenAI's GPT-Live by the second of its session (GPTLive, gptlive.go).
//
// It does no I/O and keeps a few counters: the events themselves are not retained.
package realtimeusage

import (
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"

	"github.com/tollgate-dev/tollgate/enforcer/estimate"
	"github.com/tollgate-dev/tollgate/pkg/pricecatalog"
	"github.com/tollgate-dev/tollgate/pkg/saturate"
)

// What an event reported (Reader.Event).
const (
	None          Kind = iota // nothing to charge
	Response                  // a response ended (response.done)
	Transcription             // a transcription of the user's audio ended
)

// Kind says what an event reported.
type Kind uint8

// Usage is what one response or transcription reported (Reader.Event), or what the
// responses in progress at the session's end had shown (Reader.Unfinished).
type Usage struct {
	// Model is the model to price it at: the session's model as the server named it
	// (the request's before it did), or the session's transcription model ("" when the
	// session never named one).
	Model string
	// InputTokens counts all input tokens, cached ones included; CachedInputTokens
	// the part read from the prompt cache.
	InputTokens, OutputTokens, CachedInputTokens int64
	// AudioInputTokens and AudioOutputTokens are the audio parts of InputTokens and
	// OutputTokens (input_token_details.audio_tokens, output_token_details.audio_tokens),
	// nil when the usage did not say.
	AudioInputTokens, AudioOutputTokens *int64
	// CachedAudioInputTokens is the audio part of CachedInputTokens (and so of
	// AudioInputTokens too), which some models price above cached text (gpt-realtime-mini):
	// input_token_details.cached_tokens_details.audio_tokens, at most CachedInputTokens,
	// nil when the usage did not say (or said a negative count).
	CachedAudioInputTokens *int64
	// ImageInputTokens and CachedImageInputTokens are the image parts of InputTokens
	// and CachedInputTokens (input_token_details.image_tokens and
	// cached_tokens_details.image_tokens: images the client sent, which gpt-realtime
	// prices above text), read as the audio parts are: nil when the usage did not say,
	// the cached part at most CachedInputTokens.
	ImageInputTokens, CachedImageInputTokens *int64
	// AudioInputMillis is a transcription billed by the duration of its audio
	// (whisper-1), in milliseconds, a fraction rounded up.
	AudioInputMillis int64
	// Reported: the counts are the server's; else they are 0 and TextBytes is what
	// there is to estimate from.
	Reported bool
	// TextBytes is the output text (and audio transcript) the response's deltas carried,
	// and the bytes of text its audio's tokens stand for (estimate.Bytes), both billed.
	TextBytes int64
}

// Reader follows one session's server events. Not safe for concurrent use.
type Reader struct {
	model, transcriptionModel string
	// open holds the ids of the responses created and not yet done; text the bytes of
	// text their deltas carried, audio the base64 characters of their audio deltas.
	open        map[string]struct{}
	text, audio int64
	// audioRate is the bytes a second of the session's output audio takes (audioRate's
	// default, 16-bit PCM at 24 kHz, until a session event names another format).
	audioRate int64
}

// defaultAudioRate is the bytes a second of the Realtime API's default output audio
// takes: 16-bit PCM at 24 kHz.
const defaultAudioRate = 2 * 24_000

// audioFormat is a session's GA output format: {"type": "audio/pcm", "rate": 24000},
// {"type": "audio/pcmu"}, {"type": "audio/pcma"}.
type audioFormat struct {
	Type string `json:"type"`
	Rate int64  `json:"rate"`
}

// bytesPerSecond is the bytes a second of audio of the format takes; 0 when the format
// is not one known (the rate kept is then the one before).
func (f *audioFormat) bytesPerSecond() int64 {
	switch f.Type {
	case "audio/pcmu", "audio/pcma":
		return 8_000 // G.711: a byte a sample at 8 kHz
	case "audio/pcm":
		if f.Rate > 0 && f.Rate <= 192_000 {
			return 2 * f.Rate
		}
		return defaultAudioRate
	}
	return 0
}

// betaAudioRate is bytesPerSecond for the beta's output_audio_format.
func betaAudioRate(format string) int64 {
	switch format {
	case "g711_ulaw", "g711_alaw":
		return 8_000
	case "pcm16":
		return defaultAudioRate
	}
	return 0
}

// New returns a Reader for a session opened for model (the request's ?model=, the
// Azure deployment: used until the server names its own).
func New(model string) *Reader {
	return &Reader{model: model, open: map[string]struct{}{}}
}

// transcriptionSettings are a session's transcription settings: GA's audio.input.transcription and
// the beta's input_audio_transcription.
type transcriptionSettings struct {
	Model string `json:"model"`
}

// usage is a response's or a transcription's usage object.
type usage struct {
	Type              string      `json:"type"`
	InputTokens       int64       `json:"input_tokens"`
	OutputTokens      int64       `json:"output_tokens"`
	Seconds           json.Number `json:"seconds"`
	InputTokenDetails struct {
		CachedTokens        int64  `json:"cached_tokens"`
		AudioTokens         *int64 `json:"audio_tokens"`
		ImageTokens         *int64 `json:"image_tokens"`
		CachedTokensDetails struct {
			AudioTokens *int64 `json:"audio_tokens"`
			ImageTokens *int64 `json:"image_tokens"`
		} `json:"cached_tokens_details"`
	} `json:"input_token_details"`
	OutputTokenDetails struct {
		AudioTokens *int64 `json:"audio_tokens"`
	} `json:"output_token_details"`
}

// audio is the audio parts of u's counts, each nil when not reported (or negative).
func (u *usage) audio() (in, out *int64) {
	return part(u.InputTokenDetails.AudioTokens), part(u.OutputTokenDetails.AudioTokens)
}

// cachedParts are the audio and image parts of u's cached count (see cachedPart).
func (u *usage) cachedParts(cached int64) (audio, image *int64) {
	d := &u.InputTokenDetails.CachedTokensDetails
	return cachedPart(d.AudioTokens, cached), cachedPart(d.ImageTokens, cached)
}

// cachedPart is a part of the cached count, nil when not reported (or negative), at
// most cached (the cached count as read): a larger one would be taken off the uncached
// part of its modality that settlement charges.
func cachedPart(n *int64, cached int64) *int64 {
	if n = part(n); n == nil {
		return nil
	}
	c := min(*n, cached)
	return &c
}

// part is a reported part (audio, image): nil when the usage did not say, or said a
// negative count.
func part(n *int64) *int64 {
	if n == nil || *n < 0 {
		return nil
	}
	return n
}

// event is the part of a server event the Reader looks at.
type event struct {
	Type    string `json:"type"`
	Session *struct {
		Model string `json:"model"`
		Audio *struct {
			Input *struct {
				Transcription *transcriptionSettings `json:"transcription"`
			} `json:"input"`
			Output *struct {
				Format *audioFormat `json:"format"`
			} `json:"output"`
		} `json:"audio"`
		InputAudioTranscription *transcriptionSettings `json:"input_audio_transcription"`
		OutputAudioFormat       string                 `json:"output_audio_format"`
	} `json:"session"`
	Response *struct {
		ID    string `json:"id"`
		Usage *usage `json:"usage"`
	} `json:"response"`
	Usage      *usage `json:"usage"`
	ResponseID string `json:"response_id"`
	Delta      string `json:"delta"`
}

// Event reads one text message the server sent: what it reported, with its usage.
func (r *Reader) Event(msg []byte) (Usage, Kind) {
	var head struct {
		Type string `json:"type"`
	}
	// Most messages (audio deltas above all) matter only by their type: the rest is
	// decoded only for the few that count. An event that is not JSON is not ours.
	if json.Unmarshal(msg, &head) != nil {
		return Usage{}, None
	}
	switch head.Type {
	case "session.created", "session.updated", "response.created", "response.done",
		"transcription_session.created", "transcription_session.updated", // the beta's transcription-only sessions
		"conversation.item.input_audio_transcription.completed",
		"response.output_text.delta", "response.output_audio_transcript.delta", // GA names
		"response.text.delta", "response.audio_transcript.delta", // the beta's
		"response.output_audio.delta", "response.audio.delta": // audio, GA's and the beta's
	default:
		return Usage{}, None
	}
	if head.Type == "response.output_audio.delta" || head.Type == "response.audio.delta" {
		r.audioDelta(msg)
		return Usage{}, None
	}
	var e event
	if err := json.Unmarshal(msg, &e); err != nil && !r.trustedEnough(err, &e) {
		return Usage{}, None
	}
	switch e.Type {
	case "session.created", "session.updated", "transcription_session.created", "transcription_session.updated":
		r.noteSession(&e)
	case "response.created":
		if e.Response != nil {
			r.open[e.Response.ID] = struct{}{}
		}
	case "response.done":
		if e.Response == nil {
			return Usage{}, None
		}
		delete(r.open, e.Response.ID)
		u := Usage{Model: r.model}
		if us := e.Response.Usage; us != nil && us.InputTokens >= 0 && us.OutputTokens >= 0 && us.InputTokenDetails.CachedTokens >= 0 {
			u.InputTokens, u.OutputTokens = us.InputTokens, us.OutputTokens
			u.CachedInputTokens = min(us.InputTokenDetails.CachedTokens, us.InputTokens)
			// Each response reports its own usage, charged on its own: one that does not
			// say how its tokens divide leaves its split unknown (nil, charged at the
			// dearer price), whatever an earlier response said.
			u.AudioInputTokens, u.AudioOutputTokens = us.audio()
			u.ImageInputTokens = part(us.InputTokenDetails.ImageTokens)
			u.CachedAudioInputTokens, u.CachedImageInputTokens = us.cachedParts(u.CachedInputTokens)
			u.Reported = true
		} else {
			// No usage: the text and audio seen are what there is to estimate from (of
			// every response in progress, when several overlap).
			u.TextBytes = r.shown()
		}
		if len(r.open) == 0 {
			r.text, r.audio = 0, 0
		}
		return u, Response
	case "conversation.item.input_audio_transcription.completed":
		u, ok := transcribed(e.Usage)
		if !ok {
			return Usage{}, None // nothing reported: nothing to charge it by
		}
		u.Model = r.transcriptionModel
		return u, Transcription
	default: // a text delta
		if _, ok := r.open[e.ResponseID]; ok || e.ResponseID == "" {
			r.text = saturate.Add(r.text, int64(len(e.Delta)))
		}
	}
	return Usage{}, None
}

// audioDelta counts an audio delta's base64 characters (of a response in progress, as a
// text delta's text), without copying them: the most frequent and largest of a session's
// messages.
func (r *Reader) audioDelta(msg []byte) {
	var e struct {
		ResponseID string `json:"response_id"`
		Delta      b64Len `json:"delta"`
	}
	if json.Unmarshal(msg, &e) != nil {
		return
	}
	if _, ok := r.open[e.ResponseID]; ok || e.ResponseID == "" {
		r.audio = saturate.Add(r.audio, int64(e.Delta))
	}
}

// b64Len is the length of a base64 string as JSON writes it (no escape but perhaps "\/",
// counted as its two bytes: a little more audio, never less), not decoded.
type b64Len int64

func (n *b64Len) UnmarshalJSON(b []byte) error {
	if len(b) >= 2 && b[0] == '"' {
		*n = b64Len(len(b) - 2)
	}
	return nil
}

// shown is what the responses in progress showed, in bytes of text: their text, and
// their audio's tokens as the text they stand for (estimate.Bytes), as the settlement
// estimates text (estimate.Tokens). OpenAI bills a response's audio tokens and its text
// tokens (the transcript) both, so the two add up.
func (r *Reader) shown() int64 {
	rate := r.audioRate
	if rate == 0 {
		rate = defaultAudioRate
	}
	// base64: 4 characters a 3 bytes; the tokens rounded up.
	bytes := r.audio / 4 * 3
	tokens := (bytes/rate*pricecatalog.AudioOutputTokensPerSecond + (bytes%rate*pricecatalog.AudioOutputTokensPerSecond+rate-1)/rate)
	return saturate.Add(r.text, estimate.Bytes(tokens))
}

// trustedEnough reports whether an event that failed to decode with err is still read:
// one whose JSON is whole but holds a field of an unexpected type (json.Unmarshal decodes
// the rest), when it is a response.done naming its response. Its response ended all the
// same: it is charged now, from the text its deltas carried (its usage, which may be the
// field in doubt, is dropped), rather than at the session's end, so that the member's
// limit is checked again before the next response. Any other such event is skipped, as
// one that is not JSON.
func (r *Reader) trustedEnough(err error, e *event) bool {
	var typeErr *json.UnmarshalTypeError
	if !errors.As(err, &typeErr) || e.Type != "response.done" || e.Response == nil || e.Response.ID == "" {
		return false
	}
	e.Response.Usage = nil
	return true
}

// noteSession keeps the models a session.created or session.updated names.
func (r *Reader) noteSession(e *event) {
	s := e.Session
	if s == nil {
		return
	}
	if s.Model != "" {
		r.model = s.Model
	}
	if s.Audio != nil && s.Audio.Output != nil && s.Audio.Output.Format != nil {
		if rate := s.Audio.Output.Format.bytesPerSecond(); rate > 0 {
			r.audioRate = rate
		}
	} else if rate := betaAudioRate(s.OutputAudioFormat); rate > 0 {
		r.audioRate = rate
	}
	switch {
	case s.Audio != nil && s.Audio.Input != nil && s.Audio.Input.Transcription != nil:
		r.transcriptionModel = s.Audio.Input.Transcription.Model
	case s.InputAudioTranscription != nil:
		r.transcriptionModel = s.InputAudioTranscription.Model
	}
}

// transcribed is a transcription's usage: its tokens, or its audio's duration.
func transcribed(us *usage) (Usage, bool) {
	if us == nil {
		return Usage{}, false
	}
	if us.Type == "duration" {
		ms, ok := millis(string(us.Seconds))
		if !ok {
			return Usage{}, false
		}
		return Usage{AudioInputMillis: ms, Reported: true}, true
	}
	if us.InputTokens < 0 || us.OutputTokens < 0 || us.InputTokens == 0 && us.OutputTokens == 0 {
		return Usage{}, false
	}
	in, out := us.audio()
	return Usage{InputTokens: us.InputTokens, OutputTokens: us.OutputTokens, AudioInputTokens: in, AudioOutputTokens: out, Reported: true}, true
}

// Model is the session's model: the server's name once it gave one, else the request's.
func (r *Reader) Model() string { return r.model }

// Unfinished is what the responses in progress had shown (their deltas' text and audio:
// shown), and whether there were any: at the session's end they never reported their
// usage.
func (r *Reader) Unfinished() (Usage, bool) {
	return Usage{Model: r.model, TextBytes: r.shown()}, len(r.open) > 0
}

// millis reads a decimal number of seconds (no sign, no exponent) as milliseconds,
// exactly: digits below the millisecond round up, as the usage reader of HTTP answers
// reads whisper-1's usage.seconds (enforcer/responseusage).
func millis(seconds string) (int64, bool) {
	whole, frac, _ := strings.Cut(seconds, ".")
	if whole == "" || strings.Trim(whole, "0123456789") != "" || strings.Trim(frac, "0123456789") != "" || len(whole) > 15 {
		return 0, false
	}
	ms, _ := strconv.ParseInt(whole, 10, 64)
	ms *= 1000
	for i := range 3 {
		d := int64(0)
		if i < len(frac) {
			d = int64(frac[i] - '0')
		}
		ms += d * []int64{100, 10, 1}[i]
	}
	if len(frac) > 3 && strings.Trim(frac[3:], "0") != "" {
		ms++
	}
	return ms, true
}

// ReadsField tells whether a Realtime usage object's field at path
// ("input_token_details.cached_tokens") is one this package reads: a contract test holds
// the official SDKs' usage fields to it (e2e, TestEverySDKUsageFieldIsDecided).
func ReadsField(path string) bool { return readsField(reflect.TypeFor[usage](), path) }

// ReadsGeminiLiveField is ReadsField for a Gemini Live usageMetadata's field
// ("promptTokensDetails.modality": a list's entries are named by the list).
func ReadsGeminiLiveField(path string) bool { return readsField(reflect.TypeFor[liveUsage](), path) }

func readsField(t reflect.Type, path string) bool {
	for _, name := range strings.Split(path, ".") {
		if t.Kind() == reflect.Slice {
			t = t.Elem()
		}
		f, ok := fieldByTag(t, name)
		if !ok {
			return false
		}
		t = f.Type
	}
	return true
}

// fieldByTag is the field of struct t whose JSON name is name.
func fieldByTag(t reflect.Type, name string) (reflect.StructField, bool) {
	if t.Kind() != reflect.Struct {
		return reflect.StructField{}, false
	}
	for i := range t.NumField() {
		if f := t.Field(i); strings.Split(f.Tag.Get("json"), ",")[0] == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}
