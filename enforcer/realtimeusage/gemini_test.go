package realtimeusage

import (
	"encoding/base64"
	"reflect"
	"strings"
	"testing"
)

// The setup's model is kept as its own id, from the Gemini API's and from Vertex AI's
// resource names; other client messages leave it.
func TestGeminiLiveSetup(t *testing.T) {
	r := NewGeminiLive()
	if r.Model() != "" {
		t.Fatal("a model before the setup")
	}
	r.Setup([]byte(`{"setup":{"model":"models/gemini-2.5-flash-native-audio-preview-09-2025","generationConfig":{"responseModalities":["AUDIO"]}}}`))
	if r.Model() != "gemini-2.5-flash-native-audio-preview-09-2025" {
		t.Fatalf("model %q", r.Model())
	}
	r.Setup([]byte(`{"realtimeInput":{"audio":{"data":"AAAA","mimeType":"audio/pcm;rate=16000"}}}`))
	r.Setup([]byte(`not json`))
	if r.Model() != "gemini-2.5-flash-native-audio-preview-09-2025" {
		t.Fatalf("model %q after other messages", r.Model())
	}
	v := NewGeminiLive()
	v.Setup([]byte(`{"setup":{"model":"projects/p1/locations/us-central1/publishers/google/models/gemini-live-2.5-flash-native-audio"}}`))
	if v.Model() != "gemini-live-2.5-flash-native-audio" {
		t.Fatalf("Vertex AI's model %q", v.Model())
	}
}

// pcm is base64 of seconds of 16-bit PCM audio at rate.
func pcm(seconds float64, rate int) string {
	return base64.StdEncoding.EncodeToString(make([]byte, int(seconds*float64(rate))*2))
}

// Each turn's usageMetadata is a response of its own, with its parts by modality: audio,
// video and images are the priced part of the input, audio of the output; thinking and
// tool results count; a usage without lists leaves its split unknown.
func TestGeminiLiveTurns(t *testing.T) {
	r := NewGeminiLive()
	r.Setup([]byte(`{"setup":{"model":"models/gemini-2.5-flash-native-audio-latest"}}`))
	var got []Usage
	for _, m := range []string{
		`{"setupComplete":{}}`,
		`{"serverContent":{"modelTurn":{"parts":[{"inlineData":{"mimeType":"audio/pcm;rate=24000","data":"` + pcm(0.5, 24000) + `"}}]}}}`,
		`{"serverContent":{"outputTranscription":{"text":"Tolls are paid"}}}`,
		`{"serverContent":{"turnComplete":true}}`,
		`{"usageMetadata":{"promptTokenCount":400,"responseTokenCount":120,"thoughtsTokenCount":30,"toolUsePromptTokenCount":50,"totalTokenCount":600,
			"promptTokensDetails":[{"modality":"TEXT","tokenCount":100},{"modality":"AUDIO","tokenCount":250},{"modality":"VIDEO","tokenCount":50}],
			"responseTokensDetails":[{"modality":"AUDIO","tokenCount":120}]}}`,
		// A text turn, its usage in the same message as its last content, no lists.
		`{"serverContent":{"modelTurn":{"parts":[{"text":"By card."}]},"turnComplete":true},"usageMetadata":{"promptTokenCount":700,"responseTokenCount":5}}`,
		// A total above the parts: the output is at least what it leaves.
		`{"usageMetadata":{"promptTokenCount":10,"responseTokenCount":5,"totalTokenCount":40,"promptTokensDetails":[{"modality":"TEXT","tokenCount":10}],"cachedContentTokenCount":4,"cacheTokensDetails":[{"modality":"AUDIO","tokenCount":9}]}}`,
		// Nothing to charge by: all 0, a negative count, not JSON.
		`{"usageMetadata":{}}`,
		`{"usageMetadata":{"promptTokenCount":-1,"responseTokenCount":5}}`,
		`binary audio`,
	} {
		if u, kind := r.Event([]byte(m)); kind == Response {
			got = append(got, u)
		} else if kind != None {
			t.Fatalf("%s: kind %v", m, kind)
		}
	}
	const model = "gemini-2.5-flash-native-audio-latest"
	want := []Usage{
		{Model: model, InputTokens: 450, OutputTokens: 150, Reported: true, AudioInputTokens: i64(300), AudioOutputTokens: i64(120)},
		{Model: model, InputTokens: 700, OutputTokens: 5, Reported: true},
		{Model: model, InputTokens: 10, OutputTokens: 30, CachedInputTokens: 4, Reported: true, AudioInputTokens: i64(0), CachedAudioInputTokens: i64(4)},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("turns %+v\nwant %+v", got, want)
	}
	if u, open := r.Unfinished(); open || u.TextBytes != 0 {
		t.Fatalf("after every turn reported: %+v open %v", u, open)
	}
}

// A turn cut before its usage has shown its text and its audio: the larger is what it is
// estimated from (audio at 32 tokens a second, as text bytes at four a token). A tool
// call is a turn too.
func TestGeminiLiveUnfinished(t *testing.T) {
	r := NewGeminiLive()
	r.Setup([]byte(`{"setup":{"model":"models/gemini-live-2.5-flash-preview"}}`))
	r.Event([]byte(`{"serverContent":{"modelTurn":{"parts":[{"inlineData":{"mimeType":"audio/pcm;rate=24000","data":"` + pcm(2, 24000) + `"}}]}}}`))
	r.Event([]byte(`{"serverContent":{"outputTranscription":{"text":"` + strings.Repeat("toll ", 4) + `"}}}`))
	u, open := r.Unfinished()
	if !open || u.Model != "gemini-live-2.5-flash-preview" || u.TextBytes != 64*4 {
		t.Fatalf("two seconds of audio cut: %+v open %v, want 256 bytes (64 tokens)", u, open)
	}
	r.Event([]byte(`{"usageMetadata":{"promptTokenCount":1,"responseTokenCount":1}}`))
	r.Event([]byte(`{"serverContent":{"modelTurn":{"parts":[{"text":"` + strings.Repeat("word ", 100) + `"}]}}}`))
	if u, open := r.Unfinished(); !open || u.TextBytes != 500 {
		t.Fatalf("text cut: %+v open %v", u, open)
	}
	r.Event([]byte(`{"usageMetadata":{"promptTokenCount":1,"responseTokenCount":1}}`))
	r.Event([]byte(`{"toolCall":{"functionCalls":[{"id":"f1","name":"lookup","args":{}}]}}`))
	if _, open := r.Unfinished(); !open {
		t.Fatal("a tool call's turn is not in progress")
	}
}
