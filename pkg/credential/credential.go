// Package credential owns the shape of bearer secrets (session tokens and API keys): how
// they are minted and how they are hashed for storage and lookup. Both programs use it, so
// the enforcer's hash of a presented key always matches the control plane's stored hash.
// It never stores or logs a secret.
package credential

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"strings"
)

// Prefixes tell a reader what kind of secret a string is, and help secret scanners.
const (
	SessionPrefix = "tgs_"
	APIKeyPrefix  = "tgk_"
)

// entropyBytes is the random part of every secret: 256 bits.
const entropyBytes = 32

// New mints a secret with the given prefix and returns it with its storage hash.
func New(prefix string) (secret string, hash []byte) {
	var b [entropyBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		// crypto/rand never fails on supported platforms; a failure is unrecoverable.
		panic("credential: crypto/rand failed: " + err.Error())
	}
	secret = prefix + base64.RawURLEncoding.EncodeToString(b[:])
	return secret, Hash(secret)
}

// Hash is the SHA-256 of a secret: secrets are high-entropy, so a fast hash is enough and
// lets every request look one up by index.
func Hash(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

// APIKeyFromHeader validates a raw x-api-key header value. A value starting with
// "Bearer " (in any case) is refused: the header carries the raw key only.
func APIKeyFromHeader(v string) (string, bool) {
	if v == "" || hasBearerScheme(v) || strings.TrimSpace(v) != v {
		return "", false
	}
	return v, true
}

// BearerFromHeader extracts the token of an "Authorization: Bearer <token>" header. The
// scheme is matched case-insensitively and may be followed by several spaces (RFC 9110
// section 11.1: auth-scheme is case-insensitive, then 1*SP); the token itself is
// exact, with nothing around it.
func BearerFromHeader(v string) (string, bool) {
	if !hasBearerScheme(v) {
		return "", false
	}
	tok := strings.TrimLeft(v[len("Bearer "):], " ")
	if tok == "" || strings.TrimSpace(tok) != tok {
		return "", false
	}
	return tok, true
}

// hasBearerScheme tells whether v starts with the Bearer scheme and a space, in any case.
func hasBearerScheme(v string) bool {
	return len(v) >= len("Bearer ") && strings.EqualFold(v[:len("Bearer")], "Bearer") && v[len("Bearer")] == ' '
}

// IsTollgateToken tells whether a bearer token has the shape of a Tollgate credential (an
// API key or a session), as opposed to, say, a provider key a client sends its way.
func IsTollgateToken(tok string) bool {
	return strings.HasPrefix(tok, APIKeyPrefix) || strings.HasPrefix(tok, SessionPrefix)
}

// ValidHeaderValue tells whether v may be sent as a provider credential header value as
// it is: no leading or trailing white space (which proxies strip or keep differently) and
// no control character other than a tab (a line break would inject a header). Both the
// enforcer's TOLLGATE_UPSTREAM_* credentials and the gateway's route credentials use it.
func ValidHeaderValue(v string) bool {
	return strings.TrimSpace(v) == v && !strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 && r != '\t' || r == 0x7f })
}

// BillingScopeHeaders are the request headers (canonical names) by which a client picks
// which of a provider credential's organizations or projects a request runs and bills
// under: OpenAI's OpenAI-Organization and OpenAI-Project, and Google's
// X-Goog-User-Project (the quota and billing project of a Google credential). Through
// Tollgate the credential is the operator's, never the member's: a member who could name
// them would choose which of the operator's organizations or projects pays, past the
// operator's own per-project budgets and limits (and a developer whose SDK sends
// OPENAI_ORG_ID from their own environment would be answered 401 for an organization the
// operator's key is not in). So no front door forwards a client's; an operator who
// wants one says it per route (the gateway's routes file, `headers`; Envoy's route
// request_headers_to_add, applied after ext_authz).
var BillingScopeHeaders = []string{"Openai-Organization", "Openai-Project", "X-Goog-User-Project"}
