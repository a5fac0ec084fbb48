package httpapi

import (
	"strconv"
	"strings"
	"unicode/utf8"

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
