package httpapi

import (
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"github.com/tollgate-dev/tollgate/controlplane/fault"
	"github.com/tollgate-dev/tollgate/pkg/typeid"
)

// trimmedText trims s and checks its length in characters, recording a problem at path.
func trimmedText(p *fault.Problems, s *string, minLen, maxLen int, path ...any) string {
	if s == nil {
		p.Add("is required", path...)
		return ""
	}
	v := strings.TrimSpace(*s)
	if n := utf8.RuneCountInString(v); n < minLen || n > maxLen {
		p.Add(lengthMessage(minLen, maxLen), path...)
	}
	return v
}

// nameText is trimmedText for the names people give users, organizations, teams and API
// keys. The name is put in Unicode's composed form (NFC) first, so that one name typed
// two ways ("é" as one character, or "e" and a combining accent) is one name: a team's
// is unique in its organization (team_name_taken), and the two forms look the same in
// every list. A name holding control characters (line breaks, tabs, terminal escapes) or
// the bidirectional overrides and isolates that make text display as other text
// (U+202A to U+202E, U+2066 to U+2069) is refused: a name is shown to others, in lists,
// audit trails and logs, where such characters forge lines or hide what it says.
func nameText(p *fault.Problems, s *string, minLen, maxLen int, path ...any) string {
	if s == nil {
		return trimmedText(p, s, minLen, maxLen, path...)
	}
	composed := norm.NFC.String(*s)
	before := len(*p)
	v := trimmedText(p, &composed, minLen, maxLen, path...)
	if len(*p) == before && strings.ContainsFunc(v, unsafeInName) {
		p.Add(nameCharactersMessage, path...)
	}
	return v
}

// nameCharactersMessage is the detail of a name nameText refuses for its characters.
const nameCharactersMessage = "must not contain control characters or bidirectional overrides"

// unsafeInName tells the characters nameText refuses.
func unsafeInName(r rune) bool {
	return unicode.IsControl(r) || (r >= '\u202a' && r <= '\u202e') || (r >= '\u2066' && r <= '\u2069')
}

func lengthMessage(minLen, maxLen int) string {
	if minLen == maxLen {
		return "must be exactly " + strconv.Itoa(minLen) + " characters"
	}
	return "must be " + strconv.Itoa(minLen) + " to " + strconv.Itoa(maxLen) + " characters"
}

// pathID checks a TypeID path parameter and answers 400 with details when it is malformed.
func (c *Call) pathID(name string, prefix typeid.Prefix) (string, error) {
	v := c.Path(name)
	if err := typeid.Check(v, prefix); err != nil {
		return "", fault.InvalidAt(err.Error(), name)
	}
	return v, nil
}

// validEmail is a deliberately loose check: something@something.tld, no spaces. Real
// validation is that the invitation reaches the address.
func validEmail(s string) bool {
	if len(s) > 254 || strings.ContainsAny(s, " \t\r\n") {
		return false
	}
	local, domain, ok := strings.Cut(s, "@")
	return ok && local != "" && strings.Contains(domain, ".") && !strings.HasPrefix(domain, ".") &&
		!strings.HasSuffix(domain, ".") && !strings.Contains(domain, "@")
}

// requiredEmail normalizes a required email field, recording a problem at path when it
// is absent or not an address.
func requiredEmail(p *fault.Problems, s *string, path ...any) string {
	if s == nil {
		p.Add("is required", path...)
		return ""
	}
	email := normalizeEmail(*s)
	if !validEmail(email) {
		p.Add("must be an email address", path...)
	}
	return email
}

// storableText tells whether s is text Postgres can store and compare: valid UTF-8
// without NUL characters. Request bodies are checked by jsonx; path parameters and query
// values by checkRequestText; the organization header by resolveMember.
func storableText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

// textProblem is the detail of a path parameter or query value that is not storable text.
const textProblem = "must be UTF-8 text without NUL characters"

// checkRequestText refuses, once for every route, path parameters and query values that
// are not storable text (400 invalid_request, the parameter named in details). Without
// it they reach Postgres, which refuses them as an error that would be answered 503.
func (c *Call) checkRequestText(wildcards []string) error {
	var p fault.Problems
	for _, name := range wildcards {
		if !storableText(c.Path(name)) {
			p.Add(textProblem, name)
		}
	}
	if c.R.URL.RawQuery != "" {
		q := c.R.URL.Query()
		names := make([]string, 0, len(q))
		for name := range q {
			names = append(names, name)
		}
		slices.Sort(names) // the same details for the same request
		for _, name := range names {
			ok := storableText(name)
			for _, v := range q[name] {
				ok = ok && storableText(v)
			}
			if !ok {
				p.Add(textProblem, strings.ToValidUTF8(strings.ReplaceAll(name, "\x00", ""), "\uFFFD"))
			}
		}
	}
	return p.Err()
}

// checkText runs, on a textAfterBody route, the text check that wrap left to the
// handler (once); elsewhere wrap ran it before the handler and this does nothing.
func (c *Call) checkText() error {
	if !c.textUnchecked {
		return nil
	}
	c.textUnchecked = false
	return c.checkRequestText(c.uncheckedText)
}

// patternWildcards lists the names of a route pattern's wildcards ("{policyId}",
// "{rest...}").
func patternWildcards(pattern string) []string {
	var names []string
	for rest := pattern; ; {
		i := strings.IndexByte(rest, '{')
		if i < 0 {
			return names
		}
		j := strings.IndexByte(rest[i:], '}')
		if j < 0 {
			return names
		}
		names = append(names, strings.TrimSuffix(rest[i+1:i+j], "..."))
		rest = rest[i+j+1:]
	}
}
