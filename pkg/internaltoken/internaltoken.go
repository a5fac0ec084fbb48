// Package internaltoken owns the contract of TOLLGATE_INTERNAL_TOKEN, the shared secret
// between the control plane's internal API and its enforcers: its minimum length
// (validated in both programs' configuration), how a caller presents it (gRPC metadata
// "authorization: Bearer <token>"), the one parse of that value, and the constant-time
// comparison. It says nothing about what a caller may do once accepted, and never puts
// a token in an error or a log line.
package internaltoken

import (
	"context"
	"crypto/subtle"
	"fmt"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	"github.com/tollgate-dev/tollgate/pkg/credential"
)

// Env is the variable both programs read the token from.
const Env = "TOLLGATE_INTERNAL_TOKEN"

// PreviousEnv is the variable the control plane also accepts a token from while the
// token rotates (docs/admin.md, "Rotating the internal token"): enforcers still sending
// the old one are not refused while they roll to the new one. Enforcers send Env only.
const PreviousEnv = "TOLLGATE_INTERNAL_TOKEN_PREVIOUS"

// MinLength is the shortest token either program accepts: the token is the only thing
// between the network and every member's spend.
const MinLength = 16

// MetadataKey is the gRPC metadata key the token travels in.
const MetadataKey = "authorization"

// Validate reports a configured token that is too short, or that is no header value
// ("" when it is fine). An empty token is not this function's problem: whether one is
// required depends on mTLS.
func Validate(token string) string { return ValidateVar(Env, token) }

// ValidateVar is Validate for the token read from the variable name (Env or
// PreviousEnv), which the problem names.
func ValidateVar(name, token string) string {
	if token != "" && len(token) < MinLength {
		return fmt.Sprintf("%s: must be at least %d characters", name, MinLength)
	}
	// A token with a line break (a Secret made from a file with its newline), a space or
	// a non-ASCII letter would start both programs, and then gRPC would refuse to send
	// it (metadata values are printable ASCII): every call of every enforcer failing.
	// Never the value itself in the message: it is a secret.
	for i := 0; i < len(token); i++ {
		if token[i] <= ' ' || token[i] > '~' {
			return fmt.Sprintf("%s: must be printable ASCII without spaces (a trailing line break of the file it came from?)", name)
		}
	}
	return ""
}

// Header is the metadata value presenting token.
func Header(token string) string { return "Bearer " + token }

// Parse extracts the token of a presented value ("Bearer <token>").
func Parse(v string) (string, bool) { return credential.BearerFromHeader(v) }

// Refusal says why a presented token was not accepted; it is for the server's log, never
// for the caller's answer.
type Refusal string

// The reasons Check refuses.
const (
	Missing   Refusal = "no internal token presented"
	Malformed Refusal = "authorization is not a Bearer token"
	Mismatch  Refusal = "wrong internal token"
)

// Check compares the token presented in ctx's incoming metadata with each of want (the
// first not empty; an empty one matches nothing), in constant time; the Refusal is ""
// when it matches one of them.
func Check(ctx context.Context, want ...string) Refusal {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get(MetadataKey)
	if len(vals) == 0 {
		return Missing
	}
	if len(vals) != 1 {
		return Malformed
	}
	presented, ok := Parse(vals[0])
	if !ok {
		return Malformed
	}
	// Every one compared, so that the time says nothing of which one matched.
	matched := false
	for _, w := range want {
		matched = Matches(presented, w) || matched
	}
	if !matched {
		return Mismatch
	}
	return ""
}

// Matches compares a presented token with the expected one in constant time (an empty
// expected token matches nothing).
func Matches(presented, want string) bool {
	return want != "" && subtle.ConstantTimeCompare([]byte(presented), []byte(want)) == 1
}

// PerRPC presents token on every call of a gRPC client. With requireTLS the client
// refuses to send it over a plaintext connection; without, it also works over
// plaintext loopback (or a mesh that encrypts).
func PerRPC(token string, requireTLS bool) credentials.PerRPCCredentials {
	return perRPC{header: Header(token), secure: requireTLS}
}

type perRPC struct {
	header string
	secure bool
}

func (p perRPC) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{MetadataKey: p.header}, nil
}

func (p perRPC) RequireTransportSecurity() bool { return p.secure }
