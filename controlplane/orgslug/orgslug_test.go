package orgslug_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/controlplane/orgslug"
)

func TestCheck(t *testing.T) {
	for _, ok := range []string{"ab", "acme", "acme-2", "a-b-c", strings.Repeat("a", 48)} {
		if err := orgslug.Check(ok); err != nil {
			t.Errorf("Check(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"", "a", "Acme", "acme--2", "-acme", "acme-", "ac me", "acmé", strings.Repeat("a", 49)} {
		if err := orgslug.Check(bad); !errors.Is(err, orgslug.ErrInvalid) {
			t.Errorf("Check(%q) = %v, want ErrInvalid", bad, err)
		}
	}
}

func TestFromName(t *testing.T) {
	for name, want := range map[string]string{
		"Acme":                    "acme",
		"  Acme, Inc. (EU) ":      "acme-inc-eu",
		"Ünïcode Straße 2":        "n-code-stra-e-2",
		"日本":                      "org",
		"":                        "org",
		"X":                       "org-x",
		strings.Repeat("ab ", 30): strings.Repeat("ab-", 14) + "a", // cut at 43, never after a hyphen
		strings.Repeat("x", 100):  strings.Repeat("x", 43),
	} {
		if got := orgslug.FromName(name); got != want {
			t.Errorf("FromName(%q) = %q, want %q", name, got, want)
		}
	}
}

// TestFromNameIsAValidSlug: a derived slug obeys the rule a given one must (Check). A
// name with one letter or digit ("X", "Team 7" has two, "7" one) gave a one-character
// slug, which POST /v1/organizations refuses when sent (2 to 48 characters), so the
// organization carried a slug no client could send back.
func TestFromNameIsAValidSlug(t *testing.T) {
	for _, name := range []string{"X", "7", " x! ", "Ü1", "é", "Acme", "日本", strings.Repeat("ab ", 30)} {
		if got := orgslug.FromName(name); orgslug.Check(got) != nil {
			t.Errorf("FromName(%q) = %q, not a valid slug", name, got)
		}
	}
}

// TestWithSuffixFitsItsBounds: a suffix on the longest derived slug keeps it within 48
// characters and valid (no hyphen doubled where the cut falls).
func TestWithSuffixFitsItsBounds(t *testing.T) {
	for _, base := range []string{"org", strings.Repeat("a", 43), strings.Repeat("a", 40) + "-bc", "a-b", orgslug.FromName(strings.Repeat("long name ", 10))} {
		got := orgslug.WithSuffix(base)
		if err := orgslug.Check(got); err != nil || !strings.HasPrefix(got, strings.TrimRight(base[:min(len(base), 41)], "-")+"-") || len(got) != len(strings.TrimRight(base[:min(len(base), 41)], "-"))+7 {
			t.Errorf("WithSuffix(%q) = %q (%v)", base, got, err)
		}
	}
}

// taken is a create function over a set of slugs held, as the store's is.
func taken(held map[string]bool, tries *[]string) func(string) error {
	return func(slug string) error {
		*tries = append(*tries, slug)
		if held[slug] {
			return orgslug.ErrTaken
		}
		held[slug] = true
		return nil
	}
}

func TestClaim(t *testing.T) {
	t.Run("a free slug is the slug", func(t *testing.T) {
		var tries []string
		got, err := orgslug.Claim("acme", true, taken(map[string]bool{}, &tries))
		if got != "acme" || err != nil || len(tries) != 1 {
			t.Fatalf("Claim = %q, %v after %v", got, err, tries)
		}
	})
	t.Run("a chosen slug that is taken is refused, untouched", func(t *testing.T) {
		var tries []string
		got, err := orgslug.Claim("acme", false, taken(map[string]bool{"acme": true}, &tries))
		if got != "acme" || !errors.Is(err, orgslug.ErrTaken) || len(tries) != 1 {
			t.Fatalf("Claim = %q, %v after %v", got, err, tries)
		}
	})
	t.Run("a derived slug that is taken gets a suffix", func(t *testing.T) {
		var tries []string
		got, err := orgslug.Claim("acme", true, taken(map[string]bool{"acme": true}, &tries))
		if err != nil || !strings.HasPrefix(got, "acme-") || orgslug.Check(got) != nil || len(tries) != 2 || tries[1] != got {
			t.Fatalf("Claim = %q, %v after %v", got, err, tries)
		}
	})
	t.Run("suffixes are tried until one is free", func(t *testing.T) {
		var tries []string
		create := func(slug string) error {
			tries = append(tries, slug)
			if len(tries) < 5 {
				return orgslug.ErrTaken
			}
			return nil
		}
		got, err := orgslug.Claim("acme", true, create)
		if err != nil || len(tries) != 5 || got != tries[4] {
			t.Fatalf("Claim = %q, %v after %v", got, err, tries)
		}
	})
	t.Run("tries are bounded", func(t *testing.T) {
		var tries []string
		create := func(slug string) error { tries = append(tries, slug); return orgslug.ErrTaken }
		if _, err := orgslug.Claim("acme", true, create); !errors.Is(err, orgslug.ErrTaken) || len(tries) != 9 {
			t.Fatalf("Claim: %v after %d tries, want ErrTaken after 9", err, len(tries))
		}
	})
	t.Run("another error ends the tries", func(t *testing.T) {
		boom := errors.New("connection lost")
		var tries []string
		create := func(slug string) error { tries = append(tries, slug); return boom }
		if _, err := orgslug.Claim("acme", true, create); !errors.Is(err, boom) || len(tries) != 1 {
			t.Fatalf("Claim: %v after %v", err, tries)
		}
	})
}
