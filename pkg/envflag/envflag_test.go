package envflag

import (
	"flag"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestEnv(t *testing.T) {
	vars := map[string]string{"S": "x", "D": "2s", "BAD_D": "soon", "I": "7", "BAD_I": "7.5", "B": "true", "BAD_B": "maybe"}
	e := New(func(k string) string { return vars[k] })
	if e.String("S", "d") != "x" || e.String("NONE", "d") != "d" {
		t.Fatal("String")
	}
	if e.Duration("D", time.Second) != 2*time.Second || e.Duration("NONE", time.Second) != time.Second {
		t.Fatal("Duration")
	}
	if e.Int("I", 1) != 7 || e.Int("NONE", 1) != 1 || !e.Bool("B") || e.Bool("NONE") {
		t.Fatal("Int or Bool")
	}
	if len(e.Problems) != 0 {
		t.Fatalf("problems from good values: %v", e.Problems)
	}
	if e.Duration("BAD_D", time.Second) != time.Second || e.Int("BAD_I", 1) != 1 || e.Bool("BAD_B") {
		t.Fatal("a bad value did not fall back")
	}
	if len(e.Problems) != 3 {
		t.Fatalf("want three problems, got %v", e.Problems)
	}
	if got := List(" a, ,b ,"); !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Fatalf("List %v", got)
	}
}

// A secret's default (read from the environment) is never printed: a URL's password
// becomes "xxxxx", any other value disappears; the flags keep their values.
func TestHideDefaults(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	var token, db, plain string
	fs.StringVar(&token, "token", "s3cret-token", "a token")
	fs.StringVar(&db, "db", "postgres://u:pa55word@db:5432/x", "a URL")
	fs.StringVar(&plain, "plain", "shown", "not a secret")
	var dbq string
	fs.StringVar(&dbq, "dbq", "postgres://u@db:5432/x?sslmode=require&password=qu3ry-pass", "a password in the query")
	HideDefaults(fs, "token", "db", "dbq")
	var out strings.Builder
	fs.SetOutput(&out)
	fs.PrintDefaults()
	help := out.String()
	for _, secret := range []string{"s3cret-token", "pa55word", "qu3ry-pass"} {
		if strings.Contains(help, secret) {
			t.Errorf("help prints %q:\n%s", secret, help)
		}
	}
	if !strings.Contains(help, "postgres://u:xxxxx@db:5432/x") || !strings.Contains(help, "postgres://u@db:5432/x?xxxxx") || !strings.Contains(help, `"shown"`) {
		t.Errorf("help lost what is no secret:\n%s", help)
	}
	if token != "s3cret-token" || db != "postgres://u:pa55word@db:5432/x" {
		t.Errorf("values changed: %q %q", token, db)
	}
}

// The recorder knows what was asked; Unknown names, once and sorted, the variables of
// the prefix nobody asked for.
func TestUnknown(t *testing.T) {
	r := NewRecorder(func(k string) string { return map[string]string{"T_A": "1"}[k] })
	if r.Getenv("T_A") != "1" || r.Getenv("T_B") != "" {
		t.Fatal("Getenv")
	}
	if got := r.Names(); !reflect.DeepEqual(got, []string{"T_A", "T_B"}) {
		t.Fatalf("Names %v", got)
	}
	environ := []string{"T_Z=s3cret", "T_A=1", "PATH=/bin", "T_C=", "T_Z=again", "T_D=x=y"}
	if got := Unknown(environ, "T_", r.Names(), []string{"T_D"}); !reflect.DeepEqual(got, []string{"T_C", "T_Z"}) {
		t.Fatalf("Unknown %v", got)
	}
}
