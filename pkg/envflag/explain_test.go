package envflag

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

// TestExplainSaysWhatTheFlagWants: the flag package's "parse error" for its own types
// becomes the flag and the form it wants; other errors pass as they are.
func TestExplainSaysWhatTheFlagWants(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--age", "90d"}, `--age: "90d" is not a duration; want e.g. 2160h`},
		{[]string{"--batch", "1k"}, `--batch: "1k" is not a whole number`},
		{[]string{"--batch", "99999999999999999999"}, `--batch: "99999999999999999999" is out of range (want a whole number)`},
		{[]string{"--apply=yes"}, `--apply: "yes" is not a boolean; want true or false`},
		{[]string{"--n", "-1"}, `--n: "-1" is not a whole number from 0`},
		{[]string{"--ratio", "half"}, `--ratio: "half" is not a number`},
		{[]string{"--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"--own", "x"}, `invalid value "x" for flag -own: mine`},
	} {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		fs.Duration("age", time.Hour, "")
		fs.Int("batch", 1, "")
		fs.Bool("apply", false, "")
		fs.Uint("n", 0, "")
		fs.Float64("ratio", 0, "")
		fs.Func("own", "", func(string) error { return errMine })
		err := Explain(fs, fs.Parse(tc.args))
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "parse error") {
			t.Errorf("%v: still %q", tc.args, err)
		}
	}
	if Explain(nil, nil) != nil {
		t.Error("no error explained into one")
	}
}

type mineError struct{}

func (mineError) Error() string { return "mine" }

var errMine = mineError{}
