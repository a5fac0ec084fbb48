package estimate

import (
	"encoding/json"
	"math"
	"os"
	"strings"
	"testing"
)

func TestTokens(t *testing.T) {
	for _, tc := range []struct{ n, want int64 }{{-5, 0}, {0, 0}, {1, 1}, {4, 1}, {5, 2}, {400, 100}, {401, 101}} {
		if got := Tokens(tc.n); got != tc.want {
			t.Errorf("Tokens(%d) = %d, want %d", tc.n, got, tc.want)
		}
	}
}

func TestInput(t *testing.T) {
	long := strings.Repeat("a", 4000)
	for _, tc := range []struct {
		name      string
		body      string
		model     string
		textBytes int64
		messages  int64
	}{
		{"OpenAI chat", `{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hello there"}]}`,
			"gpt-4o-mini", 9 + 11, 2},
		{"OpenAI content parts, image skipped", `{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"text","text":"What is this?"},` +
			`{"type":"image_url","image_url":{"url":"data:image/png;base64,` + long + `","detail":"high"}}]}]}`, "gpt-4o", 13, 1},
		{"Anthropic with system and a base64 document", `{"model":"claude-sonnet-4-5","max_tokens":1024,"system":"You are terse.",` +
			`"messages":[{"role":"user","content":[{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"` + long + `"}},` +
			`{"type":"text","text":"Summarise"}]},{"role":"assistant","content":"Sure"}]}`, "claude-sonnet-4-5", 14 + 9 + 4, 3},
		{"OpenAI Responses, string input", `{"model":"gpt-4.1","instructions":"Answer in French.","input":"Where is Lyon?"}`, "gpt-4.1", 17 + 14, 1},
		{"OpenAI Responses, item input", `{"model":"gpt-4.1","input":[{"role":"user","content":[{"type":"input_text","text":"Hi"}]}]}`, "gpt-4.1", 2, 1},
		{"tools count, parameters do not", `{"model":"m","temperature":0.2,"max_tokens":50,"tools":[{"type":"function","function":{"name":"get_weather",` +
			`"description":"Weather for a city"}}],"messages":[{"role":"user","content":"x"}]}`, "m", 11 + 18 + 1, 1},
		{"escapes count as their text", `{"model":"m","messages":[{"role":"user","content":"caf\u00e9 \"q\""}]}`, "m", 9, 1},
		{"no model", `{"messages":[]}`, "", 0, 0},
		{"model not a string", `{"model":{"x":"y"},"prompt":"abcd"}`, "", 4, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Input([]byte(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			want := Tokens(tc.textBytes) + PerMessage*tc.messages + Priming
			if r.Model != tc.model || r.TextBytes != tc.textBytes || r.Messages != tc.messages || r.InputTokens != want {
				t.Fatalf("got %+v, want model %q, %d bytes, %d messages, %d tokens", r, tc.model, tc.textBytes, tc.messages, want)
			}
		})
	}
}

func TestInputRefusesWhatIsNotOneObject(t *testing.T) {
	for _, body := range []string{``, `[]`, `"x"`, `{"model":"m"`, `{"model":"m"} {}`, `{"a":[1,2}`, `not json`} {
		if _, err := Input([]byte(body)); err == nil {
			t.Errorf("%q: no error", body)
		}
	}
}

// TestEstimateErrorOnSamples holds the estimator to the error the package doc states,
// on samples counted by real tokenizers (enforcer/estimate/measure).
func TestEstimateErrorOnSamples(t *testing.T) {
	b, err := os.ReadFile("testdata/samples.json")
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Samples []struct {
			Name, Kind, Text string
			Tokens           map[string]int
		}
	}
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	bound := map[string]float64{"prose": 0.30, "code": 0.30, "other script": 0.50}
	n := 0
	for _, x := range s.Samples {
		for enc, tokens := range x.Tokens {
			n++
			rel := float64(Tokens(int64(len(x.Text)))-int64(tokens)) / float64(tokens)
			if b, ok := bound[x.Kind]; !ok || math.Abs(rel) > b {
				t.Errorf("%s (%s), %s: error %+.1f%%, bound %.0f%%", x.Name, x.Kind, enc, 100*rel, 100*b)
			}
		}
	}
	if n < 10 {
		t.Fatalf("only %d counted samples", n)
	}
}

func FuzzInput(f *testing.F) {
	f.Add([]byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`))
	f.Add([]byte(`{"input":[{"content":[{"text":"x"}]}],"system":"s"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := Input(body)
		if err != nil {
			return
		}
		if !json.Valid(body) {
			t.Fatalf("accepted invalid JSON %q", body)
		}
		if r.TextBytes < 0 || r.TextBytes > 3*int64(len(body)) || r.InputTokens < Priming {
			t.Fatalf("estimate %+v of %d bytes", r, len(body))
		}
	})
}
