package realtimeusage

import (
	"reflect"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/enforcer/estimate"
	"github.com/tollgate-dev/tollgate/pkg/pricecatalog"
)

func i64(n int64) *int64 { return &n }

// A session's events, as OpenAI's Realtime API (GA) sends them: the session names its
// model, each response ends with its own usage, audio deltas and other events do not
// count, and the beta's event names read as the GA's.
func TestSessionResponses(t *testing.T) {
	r := New("gpt-realtime")
	events := []string{
		`{"type":"session.created","event_id":"ev_1","session":{"object":"realtime.session","model":"gpt-realtime-2025-08-28"}}`,
		`{"type":"response.created","response":{"id":"resp_1","status":"in_progress","usage":null}}`,
		`{"type":"response.output_audio.delta","response_id":"resp_1","delta":"` + strings.Repeat("UklGR", 400) + `"}`,
		`{"type":"response.output_audio_transcript.delta","response_id":"resp_1","delta":"Hello"}`,
		`{"type":"response.done","response":{"id":"resp_1","status":"completed","usage":{"total_tokens":1250,"input_tokens":1000,"output_tokens":250,"input_token_details":{"cached_tokens":640,"text_tokens":100,"audio_tokens":900,"image_tokens":0,"cached_tokens_details":{"text_tokens":64,"audio_tokens":576,"image_tokens":0}},"output_token_details":{"text_tokens":50,"audio_tokens":200}}}}`,
		`{"type":"input_audio_buffer.speech_started","audio_start_ms":1000}`,
		`{"type":"response.created","response":{"id":"resp_2"}}`,
		`{"type":"response.text.delta","response_id":"resp_2","delta":"Hi"}`,
		`{"type":"response.done","response":{"id":"resp_2","usage":{"input_tokens":7,"output_tokens":3}}}`,
	}
	var got []Usage
	for _, e := range events {
		if u, kind := r.Event([]byte(e)); kind == Response {
			got = append(got, u)
		}
	}
	want := []Usage{
		{Model: "gpt-realtime-2025-08-28", InputTokens: 1000, OutputTokens: 250, CachedInputTokens: 640, Reported: true,
			AudioInputTokens: i64(900), AudioOutputTokens: i64(200), CachedAudioInputTokens: i64(576),
			ImageInputTokens: i64(0), CachedImageInputTokens: i64(0)},
		// Each response's usage is its own: this one does not split its counts, whatever
		// the first said.
		{Model: "gpt-realtime-2025-08-28", InputTokens: 7, OutputTokens: 3, Reported: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("responses %+v, want %+v", got, want)
	}
	if u, open := r.Unfinished(); open || u.TextBytes != 0 {
		t.Fatalf("after every response ended: %+v open %v", u, open)
	}
}

// A response in progress when the session ends has shown only its text; a response.done
// whose usage is missing or malformed (a field of an unexpected type included) reports
// nothing but ends its response, and its text is what there is.
func TestUnfinishedAndUnreported(t *testing.T) {
	r := New("gpt-realtime-mini")
	for _, e := range []string{
		`{"type":"response.created","response":{"id":"resp_1"}}`,
		`{"type":"response.output_text.delta","response_id":"resp_1","delta":"Tolls are "}`,
		`{"type":"response.output_text.delta","response_id":"resp_other","delta":"not this session's"}`,
		`{"type":"response.output_text.delta","response_id":"resp_1","delta":"paid."}`,
		`not json`,
	} {
		if _, kind := r.Event([]byte(e)); kind != None {
			t.Fatalf("%s ended a response", e)
		}
	}
	u, open := r.Unfinished()
	if !open || u.TextBytes != int64(len("Tolls are paid.")) || u.Model != "gpt-realtime-mini" {
		t.Fatalf("unfinished %+v open %v", u, open)
	}
	for _, done := range []string{
		`{"type":"response.done","response":{"id":"resp_1","usage":null}}`,
		`{"type":"response.done","response":{"id":"resp_1","usage":{"input_tokens":-5,"output_tokens":3}}}`,
		`{"type":"response.done","response":{"id":"resp_1","usage":{"input_tokens":5,"output_tokens":3,"input_token_details":{"cached_tokens":9,"audio_tokens":-2},"output_token_details":{"audio_tokens":2}}}}`,
		// A field of an unexpected type: the response ended, its usage is in doubt.
		`{"type":"response.done","response":{"id":"resp_1","usage":{"input_tokens":"5","output_tokens":3}}}`,
		`{"type":"response.done","response":{"id":"resp_1","status":7,"usage":{"input_tokens":5,"output_tokens":{"text":3}}}}`,
	} {
		r := New("m")
		r.Event([]byte(`{"type":"response.created","response":{"id":"resp_1"}}`))
		r.Event([]byte(`{"type":"response.output_text.delta","response_id":"resp_1","delta":"Paid."}`))
		u, kind := r.Event([]byte(done))
		if kind != Response {
			t.Fatalf("%s did not end the response", done)
		}
		if strings.Contains(done, "cached_tokens\":9") {
			// More cached than input: the cached part is at most the input.
			// A negative audio count is no report: the split stays unknown.
			if !u.Reported || u.CachedInputTokens != 5 || u.AudioInputTokens != nil || u.AudioOutputTokens == nil || *u.AudioOutputTokens != 2 {
				t.Fatalf("%s: %+v", done, u)
			}
			continue
		}
		if u.Reported || u.InputTokens != 0 || u.OutputTokens != 0 || u.TextBytes != int64(len("Paid.")) {
			t.Fatalf("%s reported %+v", done, u)
		}
		// It ended its response: nothing is left to estimate again at the end.
		if u, open := r.Unfinished(); open {
			t.Fatalf("%s left the response open: %+v", done, u)
		}
	}
	// A response.done that does not say which response ended (its id of another type)
	// ends none: the response is estimated at the session's end, once.
	r = New("m")
	r.Event([]byte(`{"type":"response.created","response":{"id":"resp_1"}}`))
	r.Event([]byte(`{"type":"response.output_text.delta","response_id":"resp_1","delta":"Paid."}`))
	if _, kind := r.Event([]byte(`{"type":"response.done","response":{"id":1,"usage":{"input_tokens":5,"output_tokens":3}}}`)); kind != None {
		t.Fatal("a response.done without a readable id ended a response")
	}
	if u, open := r.Unfinished(); !open || u.TextBytes != int64(len("Paid.")) {
		t.Fatalf("unfinished %+v open %v", u, open)
	}
}

// A response cut before its response.done (the client hung up mid-answer) has shown its
// audio too: its deltas' base64 is the audio's length in the session's output format,
// and each second of it 20 output tokens (pricecatalog.AudioOutputTokensPerSecond),
// billed besides its transcript's text. Before, only the transcript counted: a second of
// speech, some 15 bytes of text, was charged 4 tokens for the 20 the audio bills. A
// response.done without usage is estimated so too; one with usage ends the estimate.
func TestUnfinishedAudio(t *testing.T) {
	// second is the base64 of a second of audio that takes rate bytes a second.
	second := func(rate int) string { return strings.Repeat("AAAA", rate/3) }
	const transcript = "Hello there."
	for _, tc := range []struct {
		name, session, delta string
		seconds              int64
	}{
		{"the default, 16-bit PCM at 24 kHz", ``, second(48_000), 1},
		{"GA's PCM named", `{"type":"session.created","session":{"model":"gpt-realtime","audio":{"output":{"format":{"type":"audio/pcm","rate":24000}}}}}`, second(48_000), 1},
		{"GA's G.711 (a phone line's)", `{"type":"session.updated","session":{"audio":{"output":{"format":{"type":"audio/pcmu"}}}}}`, second(8_000) + second(8_000), 2},
		{"the beta's G.711", `{"type":"session.updated","session":{"output_audio_format":"g711_alaw"}}`, second(8_000), 1},
		{"an unknown format keeps the default", `{"type":"session.updated","session":{"audio":{"output":{"format":{"type":"audio/opus"}}}}}`, second(48_000), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := int64(len(transcript)) + estimate.Bytes(tc.seconds*pricecatalog.AudioOutputTokensPerSecond)
			for _, done := range []string{"", `{"type":"response.done","response":{"id":"resp_1","status":"cancelled","usage":null}}`} {
				r := New("gpt-realtime")
				for _, e := range []string{tc.session,
					`{"type":"response.created","response":{"id":"resp_1"}}`,
					`{"type":"response.output_audio.delta","response_id":"resp_1","delta":"` + tc.delta + `"}`,
					`{"type":"response.output_audio.delta","response_id":"resp_other","delta":"` + tc.delta + `"}`,
					`{"type":"response.output_audio_transcript.delta","response_id":"resp_1","delta":"` + transcript + `"}`,
				} {
					r.Event([]byte(e))
				}
				if done == "" {
					if u, open := r.Unfinished(); !open || u.TextBytes != want {
						t.Fatalf("unfinished: %d bytes (open %v), want %d", u.TextBytes, open, want)
					}
					continue
				}
				if u, kind := r.Event([]byte(done)); kind != Response || u.Reported || u.TextBytes != want {
					t.Fatalf("ended without usage: %+v, want %d bytes", u, want)
				}
			}
		})
	}
	// The beta's audio deltas count alike; a response that reports its usage ends them.
	r := New("gpt-4o-realtime-preview")
	r.Event([]byte(`{"type":"response.created","response":{"id":"resp_1"}}`))
	r.Event([]byte(`{"type":"response.audio.delta","response_id":"resp_1","delta":"` + second(48_000) + `"}`))
	if u, _ := r.Unfinished(); u.TextBytes != estimate.Bytes(pricecatalog.AudioOutputTokensPerSecond) {
		t.Fatalf("the beta's audio: %d bytes", u.TextBytes)
	}
	r.Event([]byte(`{"type":"response.done","response":{"id":"resp_1","usage":{"input_tokens":7,"output_tokens":3}}}`))
	if u, open := r.Unfinished(); open || u.TextBytes != 0 {
		t.Fatalf("after its usage: %+v open %v", u, open)
	}
}

// A transcription of the user's audio is charged at the transcription model the session
// names (GA's audio.input.transcription, the beta's input_audio_transcription), by its
// tokens or by its audio's duration (exact to the millisecond, rounded up).
func TestTranscriptions(t *testing.T) {
	for _, tc := range []struct {
		name, session, usage string
		want                 Usage
		kind                 Kind
	}{
		{"GA, tokens", `{"type":"session.created","session":{"model":"gpt-realtime","audio":{"input":{"transcription":{"model":"gpt-4o-transcribe"}}}}}`,
			`{"type":"tokens","total_tokens":26,"input_tokens":17,"input_token_details":{"text_tokens":0,"audio_tokens":17},"output_tokens":9}`,
			Usage{Model: "gpt-4o-transcribe", InputTokens: 17, OutputTokens: 9, AudioInputTokens: i64(17), Reported: true}, Transcription},
		{"beta, duration", `{"type":"session.updated","session":{"model":"gpt-4o-realtime-preview","input_audio_transcription":{"model":"whisper-1"}}}`,
			`{"type":"duration","seconds":2.3}`, Usage{Model: "whisper-1", AudioInputMillis: 2_300, Reported: true}, Transcription},
		// A transcription-only session of the beta (?intent=transcription) names its model in
		// transcription_session.created and .updated, not session.*: until 2026-12-07 its
		// transcriptions were priced at the session's model, which such a session has none
		// of (the fallback price: the catalog's dearest).
		{"beta transcription session", `{"type":"transcription_session.updated","session":{"id":"sess_1","object":"realtime.transcription_session",` +
			`"input_audio_transcription":{"model":"gpt-4o-mini-transcribe","language":"en"}}}`,
			`{"type":"tokens","total_tokens":26,"input_tokens":17,"input_token_details":{"text_tokens":0,"audio_tokens":17},"output_tokens":9}`,
			Usage{Model: "gpt-4o-mini-transcribe", InputTokens: 17, OutputTokens: 9, AudioInputTokens: i64(17), Reported: true}, Transcription},
		{"beta transcription session created", `{"type":"transcription_session.created","session":{"id":"sess_1","object":"realtime.transcription_session",` +
			`"input_audio_transcription":{"model":"whisper-1"}}}`,
			`{"type":"duration","seconds":1}`, Usage{Model: "whisper-1", AudioInputMillis: 1_000, Reported: true}, Transcription},
		{"a fraction below the millisecond rounds up", ``, `{"type":"duration","seconds":0.1004}`,
			Usage{AudioInputMillis: 101, Reported: true}, Transcription},
		{"no usage", ``, `null`, Usage{}, None},
		{"a negative duration", ``, `{"type":"duration","seconds":-1}`, Usage{}, None},
		{"an exponent", ``, `{"type":"duration","seconds":1e3}`, Usage{}, None},
		{"no tokens", ``, `{"type":"tokens","input_tokens":0,"output_tokens":0}`, Usage{}, None},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := New("gpt-realtime")
			if tc.session != "" {
				r.Event([]byte(tc.session))
			}
			u, kind := r.Event([]byte(`{"type":"conversation.item.input_audio_transcription.completed","item_id":"item_1","content_index":0,"transcript":"Hello.","usage":` + tc.usage + `}`))
			if !reflect.DeepEqual(u, tc.want) || kind != tc.kind {
				t.Fatalf("%+v %v, want %+v %v", u, kind, tc.want, tc.kind)
			}
		})
	}
}

// The audio part of a response's cached tokens (input_token_details.cached_tokens_details.
// audio_tokens), which gpt-realtime-mini prices above cached text: reported 0 when the
// cached tokens were text, unknown (nil) when the usage does not say or says a negative
// count, and never more than the cached tokens (themselves at most the input).
func TestCachedAudio(t *testing.T) {
	for _, tc := range []struct {
		name, usage string
		cached      int64
		want        *int64
	}{
		{"audio and text cached", `{"input_tokens":1000,"output_tokens":5,"input_token_details":{"cached_tokens":640,"text_tokens":100,"audio_tokens":900,` +
			`"cached_tokens_details":{"text_tokens":64,"audio_tokens":576,"image_tokens":0}}}`, 640, i64(576)},
		{"text cached only: 0", `{"input_tokens":1000,"output_tokens":5,"input_token_details":{"cached_tokens":640,"audio_tokens":900,` +
			`"cached_tokens_details":{"text_tokens":640,"audio_tokens":0}}}`, 640, i64(0)},
		{"no details: unknown", `{"input_tokens":1000,"output_tokens":5,"input_token_details":{"cached_tokens":640,"audio_tokens":900}}`, 640, nil},
		{"details without audio_tokens: unknown", `{"input_tokens":1000,"output_tokens":5,"input_token_details":{"cached_tokens":640,` +
			`"cached_tokens_details":{"text_tokens":640}}}`, 640, nil},
		{"details null: unknown", `{"input_tokens":1000,"output_tokens":5,"input_token_details":{"cached_tokens":640,"cached_tokens_details":null}}`, 640, nil},
		{"negative: unknown", `{"input_tokens":1000,"output_tokens":5,"input_token_details":{"cached_tokens":640,"cached_tokens_details":{"audio_tokens":-1}}}`, 640, nil},
		{"more than the cached tokens: at most them", `{"input_tokens":1000,"output_tokens":5,"input_token_details":{"cached_tokens":640,` +
			`"cached_tokens_details":{"audio_tokens":700}}}`, 640, i64(640)},
		{"more cached than input: at most the input", `{"input_tokens":500,"output_tokens":5,"input_token_details":{"cached_tokens":900,` +
			`"cached_tokens_details":{"audio_tokens":800}}}`, 500, i64(500)},
		{"no cached count: 0", `{"input_tokens":500,"output_tokens":5,"input_token_details":{"cached_tokens_details":{"audio_tokens":8}}}`, 0, i64(0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := New("gpt-realtime-mini")
			u, kind := r.Event([]byte(`{"type":"response.done","response":{"id":"resp_1","status":"completed","usage":` + tc.usage + `}}`))
			if kind != Response || !u.Reported || u.CachedInputTokens != tc.cached || !reflect.DeepEqual(u.CachedAudioInputTokens, tc.want) {
				t.Fatalf("%+v %v: cached %d, cached audio %v, want %d, %v", u, kind, u.CachedInputTokens, deref(u.CachedAudioInputTokens), tc.cached, deref(tc.want))
			}
		})
	}
	// A transcription's usage has no cached tokens: nothing to split.
	r := New("gpt-realtime-mini")
	u, _ := r.Event([]byte(`{"type":"conversation.item.input_audio_transcription.completed","usage":{"type":"tokens","input_tokens":17,"output_tokens":9,` +
		`"input_token_details":{"audio_tokens":17,"cached_tokens_details":{"audio_tokens":4}}}}`))
	if u.CachedAudioInputTokens != nil || u.CachedInputTokens != 0 {
		t.Fatalf("a transcription: %+v", u)
	}
}

// The image parts of a response's input (input_token_details.image_tokens, and of its
// cached tokens cached_tokens_details.image_tokens: images the client sent, which
// gpt-realtime prices above text) are read as the audio parts are: reported 0 when
// there were none, unknown (nil) when the usage does not say or says a negative count,
// the cached part never more than the cached tokens.
func TestImageParts(t *testing.T) {
	for _, tc := range []struct {
		name, details      string
		image, cachedImage *int64
	}{
		{"images, some cached", `"cached_tokens":640,"text_tokens":200,"audio_tokens":300,"image_tokens":500,` +
			`"cached_tokens_details":{"text_tokens":64,"audio_tokens":176,"image_tokens":400}`, i64(500), i64(400)},
		{"none: 0", `"cached_tokens":640,"text_tokens":1000,"image_tokens":0,"cached_tokens_details":{"text_tokens":640,"image_tokens":0}`, i64(0), i64(0)},
		{"not said: unknown", `"cached_tokens":640,"text_tokens":1000,"cached_tokens_details":{"text_tokens":640}`, nil, nil},
		{"negative: unknown", `"cached_tokens":640,"image_tokens":-1,"cached_tokens_details":{"image_tokens":-3}`, nil, nil},
		{"more cached image than cached tokens: at most them", `"cached_tokens":640,"image_tokens":900,"cached_tokens_details":{"image_tokens":700}`,
			i64(900), i64(640)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := New("gpt-realtime")
			u, kind := r.Event([]byte(`{"type":"response.done","response":{"id":"resp_1","status":"completed","usage":{"input_tokens":1000,"output_tokens":5,` +
				`"input_token_details":{` + tc.details + `}}}}`))
			if kind != Response || !u.Reported || !reflect.DeepEqual(u.ImageInputTokens, tc.image) || !reflect.DeepEqual(u.CachedImageInputTokens, tc.cachedImage) {
				t.Fatalf("%+v %v: image %v, cached image %v, want %v, %v", u, kind, deref(u.ImageInputTokens), deref(u.CachedImageInputTokens),
					deref(tc.image), deref(tc.cachedImage))
			}
		})
	}
}

// deref shows an optional count: its value, or nil.
func deref(n *int64) any {
	if n == nil {
		return nil
	}
	return *n
}
