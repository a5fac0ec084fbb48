// Package measure measures the enforcer's token estimator (package estimate) against
// real tokenizers: OpenAI's o200k_base (gpt-4o, gpt-4.1, o-series) and cl100k_base
// (gpt-4, gpt-3.5), through github.com/pkoukk/tiktoken-go with its
// offline loader (the encoding ships inside the module: nothing is downloaded at run
// time). It is a module of its own so that the enforcer never depends on a tokenizer.
//
//	cd enforcer/estimate/measure && go test -v -count=1 .          # print the errors
//	cd enforcer/estimate/measure && go test -count=1 . -update     # rewrite the counts
//
// -update writes each sample's token count into ../testdata/samples.json, which the
// estimate package's own test reads to hold the estimator to the measured error.
package measure

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"testing"

	tiktoken "github.com/pkoukk/tiktoken-go"
	tiktoken_loader "github.com/pkoukk/tiktoken-go-loader"

	"github.com/tollgate-dev/tollgate/enforcer/estimate"
)

var update = flag.Bool("update", false, "rewrite the token counts in ../testdata/samples.json")

var encodings = []string{"o200k_base", "cl100k_base"}

type sample struct {
	Name   string         `json:"name"`
	Kind   string         `json:"kind"`
	Text   string         `json:"text"`
	Tokens map[string]int `json:"tokens"`
}

type samples struct {
	Tokenizer string   `json:"tokenizer"`
	Samples   []sample `json:"samples"`
}

func TestMeasure(t *testing.T) {
	tiktoken.SetBpeLoader(tiktoken_loader.NewOfflineLoader())
	const path = "../testdata/samples.json"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var s samples
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	for _, name := range encodings {
		enc, err := tiktoken.GetEncoding(name)
		if err != nil {
			t.Fatal(err)
		}
		for i := range s.Samples {
			x := &s.Samples[i]
			n := len(enc.Encode(x.Text, nil, nil))
			est := estimate.Tokens(int64(len(x.Text)))
			t.Logf("%-11s %-22s %-13s bytes %5d  tokens %5d  estimate %5d  error %+6.1f%%", name, x.Name, x.Kind, len(x.Text), n, est,
				100*float64(est-int64(n))/float64(n))
			if !*update && x.Tokens[name] != n {
				t.Errorf("%s: testdata says %d tokens, %s counts %d (run with -update)", x.Name, x.Tokens[name], name, n)
			}
			if x.Tokens == nil {
				x.Tokens = map[string]int{}
			}
			x.Tokens[name] = n
		}
	}
	if *update {
		s.Tokenizer = fmt.Sprintf("%v, counted by github.com/pkoukk/tiktoken-go v0.1.8 with its offline loader (enforcer/estimate/measure)", encodings)
		out, err := json.MarshalIndent(s, "", " ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, append(out, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
