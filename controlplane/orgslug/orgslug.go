// Package orgslug owns an organization's slug, the URL-safe name it is known by: what a
// slug may be, how one is derived from the organization's name, and how a derived slug
// that another organization holds is made unique.
//
// A slug the creator chose is theirs: when it is taken the creation is refused (409
// slug_taken), since a silently changed slug is not what they asked for. A derived one is
// nobody's choice, so its collision is never the creator's problem: it gets a random
// suffix, tried again until one is free.
package orgslug

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"regexp"
	"strings"
)

// MaxLength is the longest slug, chosen or derived.
const MaxLength = 48

// ErrTaken is what a create function answers for a slug another organization holds (the
// store's ErrSlugTaken).
var ErrTaken = errors.New("organization slug already taken")

// ErrInvalid is Check's answer for a slug out of its bounds, worded for the API's problem.
var ErrInvalid = errors.New("must be 2 to 48 lower-case letters, digits and single hyphens")

var pattern = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)

// Check reports whether slug may be chosen: 2 to MaxLength lower-case ASCII letters and
// digits, joined by single hyphens.
func Check(slug string) error {
	if len(slug) < 2 || len(slug) > MaxLength || !pattern.MatchString(slug) {
		return ErrInvalid
	}
	return nil
}

const (
	// suffixLen is a suffix's length, "-" and 6 hex digits.
	suffixLen = 7
	// derivedLength is a derived slug's longest before any suffix (WithSuffix cuts it
	// further): a long name's slug stays readable, not its whole name.
	derivedLength = 43
)

// FromName derives a slug from an organization's name: its lower-case ASCII letters and
// digits, each run of anything else one hyphen, cut at derivedLength; "org" for a name
// with neither, and "org-" before the one character of a name with only one ("X" is
// "org-x"), since a slug has at least two (Check): a one-character slug was stored, and
// no client could send it back.
func FromName(name string) string {
	var b strings.Builder
	hyphen := false
	for _, r := range strings.ToLower(name) {
		switch {
		case r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			if hyphen && b.Len() > 0 {
				b.WriteByte('-')
			}
			hyphen = false
			b.WriteRune(r)
		default:
			hyphen = true
		}
		if b.Len() >= derivedLength {
			break
		}
	}
	switch b.Len() {
	case 0:
		return "org"
	case 1:
		return "org-" + b.String()
	}
	return b.String()
}

// attempts bounds the suffixes tried for a derived slug that is taken. Each is 6 random
// hex digits (16.7 million of them), so a name that thousands of organizations share
// still finds a free slug at once; a single try of 4 digits did not, when a few hundred
// organizations shared a name (a test's, or "Test", "Demo" on a shared installation),
// and the creation was refused slug_taken for a slug nobody asked for.
const attempts = 8

// Claim creates an organization under slug through create, which answers ErrTaken when
// another organization holds it. A chosen slug is tried once; a derived one (derived) is
// then tried with a random suffix, up to attempts times. It returns the slug the
// organization got, or create's last error (ErrTaken when every try was taken). create
// must leave the caller's transaction usable after ErrTaken (an INSERT ... ON CONFLICT
// DO NOTHING does).
func Claim(slug string, derived bool, create func(slug string) error) (string, error) {
	err := create(slug)
	if !derived {
		return slug, err
	}
	got := slug
	for range attempts {
		if !errors.Is(err, ErrTaken) {
			break
		}
		got = WithSuffix(slug)
		err = create(got)
	}
	return got, err
}

// WithSuffix is base and a random suffix, "-" and 6 hex digits, base cut (and a hyphen it
// then ends with dropped) so that the whole is at most MaxLength.
func WithSuffix(base string) string {
	if len(base) > MaxLength-suffixLen {
		base = strings.TrimRight(base[:MaxLength-suffixLen], "-")
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	return base + "-" + hex.EncodeToString(b[:])
}
