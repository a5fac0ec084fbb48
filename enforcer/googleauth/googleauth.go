// Package googleauth gives a gateway route to Google Cloud (Vertex AI) its provider
// credential: an OAuth 2.0 access token of the cloud-platform scope, sent as
// "Authorization: Bearer <token>". Vertex AI takes no static key: its tokens live an
// hour, so a route's credential is fetched, cached and renewed here rather than read
// once from a file as the other providers' keys are.
//
// The tokens come from Google's own library (cloud.google.com/go/auth), which signs a
// service account's JWT, asks the GKE or GCE metadata server (Workload Identity), or
// exchanges an external account's token, whichever the credentials are. It caches the
// token and renews it in the background some minutes before it expires, so a proxied
// request waits for Google only when no valid token is cached (the first request, or
// after renewals failed until the token expired).
//
// A credentials file must be of a type listed in FileTypes: the file is the operator's
// own, but a type outside the list is refused rather than trusted, as Google advises
// for configurations read from files.
package googleauth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"cloud.google.com/go/auth"
	"cloud.google.com/go/auth/credentials"
	"golang.org/x/sync/singleflight"
)

// Scope is the OAuth scope of the tokens: Vertex AI's (all of Google Cloud's APIs; the
// service account's IAM roles say what it may do).
const Scope = "https://www.googleapis.com/auth/cloud-platform"

// FileTypes are the credential files a route may name, by their "type".
var FileTypes = []credentials.CredType{
	credentials.ServiceAccount,
	credentials.AuthorizedUser,
	credentials.ExternalAccount,
	credentials.ImpersonatedServiceAccount,
}

// FetchTimeout bounds one fetch of a token when none is cached.
const FetchTimeout = 10 * time.Second

// fetchTimeout is FetchTimeout, shorter in tests.
var fetchTimeout = FetchTimeout

// Source gives a route's Authorization value.
type Source struct {
	creds *auth.Credentials
	// what says where the tokens come from, for errors and logs (never a secret).
	what string
	// current is the header of the last token, with the instant until which it is
	// served without asking the library (renewBefore its expiry): the hot path's cost
	// is one atomic load.
	current atomic.Pointer[header]
	// fetches makes the callers that find no valid token share one fetch, each waiting
	// for it no longer than its own context allows. The library alone would hold its
	// lock through each caller's fetch in turn: with Google's endpoint unreachable
	// (packets dropped), requests would queue behind one another's timeouts.
	fetches singleflight.Group
}

// FromFile reads a Google credentials file (a service account's key, or another type of
// FileTypes) and returns the source of its tokens. Nothing is fetched yet.
func FromFile(path string) (*Source, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var head struct {
		Type        string `json:"type"`
		ClientEmail string `json:"client_email"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		// Not the decoder's message: it may quote the file's bytes, a secret.
		return nil, fmt.Errorf("%s is not a Google credentials file (not JSON)", path)
	}
	t := credentials.CredType(head.Type)
	if !slices.Contains(FileTypes, t) {
		return nil, fmt.Errorf("%s: credentials of type %q are not taken; use one of %v", path, head.Type, FileTypes)
	}
	creds, err := credentials.NewCredentialsFromJSON(t, b, &credentials.DetectOptions{Scopes: []string{Scope}})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	what := fmt.Sprintf("the %s credentials of %s", head.Type, path)
	if head.ClientEmail != "" {
		what = fmt.Sprintf("the service account %s (%s)", head.ClientEmail, path)
	}
	return &Source{creds: creds, what: what}, nil
}

// Default returns the source of Google's Application Default Credentials: the file
// GOOGLE_APPLICATION_CREDENTIALS names, gcloud's own, or the metadata server of GKE
// (Workload Identity) or GCE. It fails when none is there. Off Google Cloud, the
// metadata server is probed first, which may take a few seconds.
func Default() (*Source, error) {
	creds, err := credentials.DetectDefault(&credentials.DetectOptions{Scopes: []string{Scope}})
	if err != nil {
		return nil, err
	}
	return &Source{creds: creds, what: "Google's application default credentials"}, nil
}

// ErrNoToken wraps every failure of Authorization.
var ErrNoToken = errors.New("googleauth: no access token")

// header is an Authorization value and the instant until which it is served as is.
type header struct {
	value      string
	freshUntil time.Time
}

// renewBefore is how long before its expiry a token stops being served from current
// and the library is asked again: longer than the library's own renewal window (3m45s
// by default, in which it answers the old token while it fetches the next one in the
// background), so that window is what renews it.
const renewBefore = 5 * time.Minute

// Authorization is the header value to send now: "Bearer " and a valid token. It
// waits for a fetch (FetchTimeout at most) only when no valid token is cached, and no
// longer than ctx allows; the fetch goes on for the callers still waiting.
func (s *Source) Authorization(ctx context.Context) (string, error) {
	if h := s.current.Load(); h != nil && time.Now().Before(h.freshUntil) {
		return h.value, nil
	}
	ch := s.fetches.DoChan("", func() (any, error) {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), fetchTimeout)
		defer cancel()
		return s.creds.Token(fctx)
	})
	var tok *auth.Token
	select {
	case r := <-ch:
		if r.Err != nil {
			return "", fmt.Errorf("%w from %s: %w", ErrNoToken, s.what, r.Err)
		}
		tok = r.Val.(*auth.Token)
	case <-ctx.Done():
		return "", fmt.Errorf("%w from %s: %w", ErrNoToken, s.what, context.Cause(ctx))
	}
	typ := tok.Type
	if typ == "" {
		typ = "Bearer"
	}
	h := &header{value: typ + " " + tok.Value, freshUntil: tok.Expiry.Add(-renewBefore)}
	if tok.Expiry.IsZero() {
		h.freshUntil = time.Now().Add(renewBefore) // a token without expiry: ask again now and then
	}
	s.current.Store(h)
	return h.value, nil
}

// String says where the tokens come from (for logs; no secret).
func (s *Source) String() string { return s.what }
