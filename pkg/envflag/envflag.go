// Package envflag reads the environment defaults of command-line flags, the way both
// programs configure themselves: every flag's default comes from a TOLLGATE_* variable,
// and a variable that does not parse is recorded as a problem (not a panic, not a silent
// fallback) so the program can report every problem at once. It knows no variable names.
package envflag

import (
	"flag"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/pkg/redact"
)

// Env reads variables through getenv and collects their problems.
type Env struct {
	getenv   func(string) string
	Problems []string
}

// New returns an Env over getenv (os.Getenv in programs, a map in tests).
func New(getenv func(string) string) *Env { return &Env{getenv: getenv} }

// String is the variable's value, or def when it is empty.
func (e *Env) String(key, def string) string {
	if v := e.getenv(key); v != "" {
		return v
	}
	return def
}

// Duration parses the variable as a Go duration (500ms, 15m, 168h).
func (e *Env) Duration(key string, def time.Duration) time.Duration {
	v := e.getenv(key)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		e.Problems = append(e.Problems, fmt.Sprintf("%s: %q is not a duration like 500ms, 30s or 168h", key, v))
		return def
	}
	return d
}

// Int parses the variable as a whole number.
func (e *Env) Int(key string, def int) int {
	v := e.getenv(key)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		e.Problems = append(e.Problems, fmt.Sprintf("%s: %q is not a whole number", key, v))
		return def
	}
	return n
}

// Bool parses the variable as true or false (false when empty).
func (e *Env) Bool(key string) bool {
	v := e.getenv(key)
	if v == "" {
		return false
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		e.Problems = append(e.Problems, fmt.Sprintf("%s: %q is not true or false", key, v))
	}
	return b
}

// List splits a comma-separated value, dropping blanks.
func List(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// HideDefaults keeps secrets out of the flags' help: a flag's default comes from the
// environment, and the flag package prints non-empty defaults in -h, and in the usage
// it writes to stderr (the logs) after a mistyped flag. Each named flag's printed
// default becomes what redact.URL shows of it: a URL without its password and query
// values (Postgres also takes a password in the query), anything else nothing at all.
// What the flag holds is unchanged.
func HideDefaults(fs *flag.FlagSet, names ...string) {
	for _, name := range names {
		f := fs.Lookup(name)
		if f == nil {
			panic("envflag.HideDefaults: no flag " + name) // a programming error
		}
		f.DefValue = redact.URL(f.DefValue)
	}
}

// HelpOutput is where a program's flag set writes: its help, when the command line asks
// for it (-h, -help or --help before any "--"), goes to stdout, so that `enforcer -h |
// less` and `controlplane serve -h | grep REDIS` read it, as the tollgate CLI's -h does;
// the usage a mistyped flag prints is a complaint, and goes to stderr (the logs).
func HelpOutput(args []string, stdout, stderr io.Writer) io.Writer {
	for _, a := range args {
		switch a {
		case "--":
			return stderr
		case "-h", "-help", "--help":
			return stdout
		}
	}
	return stderr
}

// Recorder is a getenv that remembers every name it was asked. A program's variables
// are the names its own parsing asks for (KnownEnv in each program's app package), so
// that the list an unknown variable is checked against, and the one the documentation is
// checked against, is the code itself, not a second, hand-kept list.
type Recorder struct {
	getenv func(string) string
	names  map[string]bool
}

// NewRecorder records the names asked of getenv (nil: an empty environment).
func NewRecorder(getenv func(string) string) *Recorder {
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	return &Recorder{getenv: getenv, names: map[string]bool{}}
}

// Getenv is getenv, recording key.
func (r *Recorder) Getenv(key string) string {
	r.names[key] = true
	return r.getenv(key)
}

// Names are the names asked so far, sorted.
func (r *Recorder) Names() []string {
	out := make([]string, 0, len(r.names))
	for k := range r.names {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Unknown lists, sorted, the variables of environ ("NAME=value", os.Environ's form)
// whose name starts with prefix and is none of known: most likely a typo
// (TOLLGATE_GATEWAY_UPSTREM), which would otherwise leave its setting at the default
// without a word. Only names are returned, never a value: it may be a secret.
func Unknown(environ []string, prefix string, known ...[]string) []string {
	k := map[string]bool{}
	for _, names := range known {
		for _, n := range names {
			k[n] = true
		}
	}
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, prefix) && !k[name] && !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// goParseError is the flag package's message for a value its own types refuse:
// "invalid value %q for flag -%s: parse error" ("invalid boolean value %q for -%s: ..."
// for a bool), whose "parse error" names neither the form wanted nor the value's fault.
var goParseError = regexp.MustCompile(`^invalid (?:boolean )?value ("(?:[^"\\]|\\.)*") for (?:flag )?-(\S+): (?:parse error|value out of range)$`)

// Explain turns the flag package's "parse error" for a duration, a number or a boolean
// into what the flag wants: `--retention-age: "90d" is not a duration; want e.g. 2160h,
// 30m or 500ms` instead of `invalid value "90d" for flag -retention-age: parse error`.
// Any other error (an unknown flag, a value a flag of the program's own refused with its
// reason) is returned as it is.
func Explain(fs *flag.FlagSet, err error) error {
	if err == nil {
		return nil
	}
	m := goParseError.FindStringSubmatch(err.Error())
	if m == nil {
		return err
	}
	f := fs.Lookup(m[2])
	if f == nil {
		return err
	}
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return err
	}
	var want string
	switch g.Get().(type) {
	case time.Duration:
		want = "a duration; want e.g. 2160h, 30m or 500ms (units h, m, s, ms; no d)"
	case int, int64:
		want = "a whole number"
	case uint, uint64:
		want = "a whole number from 0"
	case float64:
		want = "a number"
	case bool:
		want = "a boolean; want true or false (or the flag alone for true)"
	default:
		return err
	}
	if strings.HasSuffix(m[0], "value out of range") {
		return fmt.Errorf("--%s: %s is out of range (want %s)", f.Name, m[1], strings.SplitN(want, ";", 2)[0])
	}
	return fmt.Errorf("--%s: %s is not %s", f.Name, m[1], want)
}

// Unexpected is the problem of arguments left after the flags (fs.Args()): how many,
// not what they are. The likeliest cause is a flag's value with spaces, unquoted in a
// shell or a container's command line (--upstream-authorization Bearer sk-..., a
// Postgres keyword/value string), whose rest would be quoted here: a secret's.
func Unexpected(args []string) string {
	return fmt.Sprintf("unexpected arguments: %d after the flags, not shown (one may be the rest of a secret): "+
		"a value with spaces, such as \"Bearer sk-...\", must be quoted as one argument", len(args))
}
