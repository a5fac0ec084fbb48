package internaltoken_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/metadata"

	"github.com/tollgate-dev/tollgate/pkg/internaltoken"
)

const token = "0123456789abcdef-token"

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name, token string
		ok          bool
	}{
		{"empty (mTLS decides)", "", true},
		{"long enough", strings.Repeat("x", internaltoken.MinLength), true},
		{"one short", strings.Repeat("x", internaltoken.MinLength-1), false},
		{"short", "short", false},
		// A token read from a file with its line break (kubectl create secret
		// --from-file): gRPC refuses to send it, so every call of the enforcer would
		// fail (Internal: "contains value with non-printable ASCII characters").
		{"trailing line break", token + "\n", false},
		{"leading space", " " + token, false},
		{"inner space", "0123456789 abcdef", false},
		{"not ascii", token + "é", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := internaltoken.Validate(tc.token)
			if (p == "") != tc.ok {
				t.Fatalf("problem %q", p)
			}
			if !tc.ok && (!strings.HasPrefix(p, "TOLLGATE_INTERNAL_TOKEN:") || strings.Contains(p, strings.TrimSpace(tc.token)) ||
				len(tc.token) < internaltoken.MinLength && !strings.Contains(p, "at least 16")) {
				t.Fatalf("problem %q", p)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		md   metadata.MD
		want internaltoken.Refusal
	}{
		{"accepted", metadata.Pairs("authorization", "Bearer "+token), ""},
		{"what PerRPC sends", nil, ""},
		{"no metadata", metadata.MD{}, internaltoken.Missing},
		{"other scheme", metadata.Pairs("authorization", "Basic "+token), internaltoken.Malformed},
		{"bare token", metadata.Pairs("authorization", token), internaltoken.Malformed},
		{"empty bearer", metadata.Pairs("authorization", "Bearer "), internaltoken.Malformed},
		{"twice", metadata.Pairs("authorization", "Bearer "+token, "authorization", "Bearer "+token), internaltoken.Malformed},
		{"wrong", metadata.Pairs("authorization", "Bearer "+token+"x"), internaltoken.Mismatch},
		{"prefix", metadata.Pairs("authorization", "Bearer "+token[:10]), internaltoken.Mismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			md := tc.md
			if md == nil {
				m, err := internaltoken.PerRPC(token, false).GetRequestMetadata(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				md = metadata.New(m)
			}
			if got := internaltoken.Check(metadata.NewIncomingContext(context.Background(), md), token); got != tc.want {
				t.Fatalf("refusal %q, want %q", got, tc.want)
			}
		})
	}
	if internaltoken.Matches("", "") {
		t.Fatal("an empty expected token matched")
	}
	if !internaltoken.PerRPC(token, true).RequireTransportSecurity() || internaltoken.PerRPC(token, false).RequireTransportSecurity() {
		t.Fatal("RequireTransportSecurity")
	}
}

// TestCheckAcceptsEitherOfTwo: during a rotation the control plane accepts the token and
// the previous one (an empty previous one matches nothing); anything else is refused.
func TestCheckAcceptsEitherOfTwo(t *testing.T) {
	const previous = "fedcba9876543210-previous"
	in := func(tok string) context.Context {
		return metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer "+tok))
	}
	for _, tok := range []string{token, previous} {
		if got := internaltoken.Check(in(tok), token, previous); got != "" {
			t.Errorf("%s refused: %q", tok, got)
		}
	}
	if got := internaltoken.Check(in("neither-one-of-them-000"), token, previous); got != internaltoken.Mismatch {
		t.Errorf("another token: %q", got)
	}
	if got := internaltoken.Check(in(previous), token, ""); got != internaltoken.Mismatch {
		t.Errorf("no previous token configured, the old one: %q", got)
	}
	if p := internaltoken.ValidateVar(internaltoken.PreviousEnv, previous+"\n"); !strings.HasPrefix(p, "TOLLGATE_INTERNAL_TOKEN_PREVIOUS:") || strings.Contains(p, previous) {
		t.Errorf("problem %q", p)
	}
}
