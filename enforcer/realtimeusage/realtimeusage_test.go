package realtimeusage

import (
	"reflect"
	"strings"
	"testing"
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
		`{"type":"response.done","response":{"id":"resp_1","status":"completed","usage":{"total_tokens":1250,"input_tokens":1000,"output_tokens":250,"input_token_details":{"cached_tokens":640,"text_tokens":100,"audio_tokens":900},"output_token_details":{"text_tokens":50,"audio_tokens":200}}}}`,
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
			AudioInputTokens: i64(900), AudioOutputTokens: i64(200)},
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
// whose usage is missing or malformed reports nothing, and its text is what there is.
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
