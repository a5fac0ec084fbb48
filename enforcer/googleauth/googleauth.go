// Package googleauth gives a gateway route to Google Cloud (Vertex AI) its provider
// credential: an OAuth 2.0 access token of the cloud-platform scope, sent as
// "Authorization: Bearer <token>". Vertex AI takes no static key: its tokens live an
// hour, so a route's credential is fetched, cached and renewed here rather than read
// once from a file as the other providers' keys are.
//
// The tokens come from Google's own library (cloud.google.com/go/auth), which signs a
// service account's JWT, asks the GKE or GCE metadata server (Workload Identity), or
// exchanges an external account's token, whichever the credentials are. Package
// tokencache holds the token and renews it in the background some minutes before it
// expires, so a proxied request waits for Google only when no valid token is held (the
// first request, or after renewals failed until the token expired).
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
	"strings"
	"time"

	"cloud.google.com/go/auth"
	"cloud.google.com/go/auth/credentials"

	"github.com/tollgate-dev/tollgate/enforcer/tokencache"
	"github.com/tollgate-dev/tollgate/pkg/redact"
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

// FetchTimeout bounds one fetch of a token (tokencache.DefaultTimeout).
const FetchTimeout = tokencache.DefaultTimeout

// fetchTimeout is FetchTimeout, shorter in tests.
var fetchTimeout = FetchTimeout

// Source gives a route's Authorization value.
type Source struct {
	creds *auth.Credentials
	// what says where the tokens come from, for errors and logs (never a secret).
	what string
	// cache serves the token from memory and renews it ahead of its expiry, the
	// requests that find none sharing one fetch (package tokencache). The library's own
	// cache is told to renew in the same window, synchronously: when the cache asks,
	// it gets a new token, not the one it holds.
	cache *tokencache.Cache
}

// detectOptions are the library's options for every source.
func detectOptions() *credentials.DetectOptions {
	return &credentials.DetectOptions{Scopes: []string{Scope}, EarlyTokenRefresh: tokencache.DefaultRenewBefore, DisableAsyncRefresh: true}
}

// newSource wraps credentials in the cache.
func newSource(creds *auth.Credentials, what string) *Source {
	s := &Source{creds: creds, what: what}
	s.cache = tokencache.New(s.fetch, fetchTimeout, tokencache.DefaultRenewBefore)
	return s
}

// FromFile reads a Google credentials file (a service account's key, or another type of
// FileTypes) and returns the source of its tokens. Nothing is fetched yet.
func FromFile(path string) (*Source, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, redact.FileError("credentialsFile", err)
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
	creds, err := credentials.NewCredentialsFromJSON(t, b, detectOptions())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	what := fmt.Sprintf("the %s credentials of %s", head.Type, path)
	if head.ClientEmail != "" {
		what = fmt.Sprintf("the service account %s (%s)", head.ClientEmail, path)
	}
	return newSource(creds, what), nil
}

// Default returns the source of Google's Application Default Credentials: the file
// GOOGLE_APPLICATION_CREDENTIALS names, gcloud's own, or the metadata server of GKE
// (Workload Identity) or GCE. It fails when none is there. Off Google Cloud, the
// metadata server is probed first, which may take a few seconds.
func Default() (*Source, error) {
	creds, err := credentials.DetectDefault(detectOptions())
	if err != nil {
		return nil, err
	}
	return newSource(creds, "Google's application default credentials"), nil
}

// ErrNoToken wraps every failure of Authorization.
var ErrNoToken = errors.New("googleauth: no access token")

// Authorization is the header value to send now: "Bearer " and a valid token. It
// waits for a fetch (FetchTimeout at most) only when no valid token is held, and no
// longer than ctx allows.
func (s *Source) Authorization(ctx context.Context) (string, error) {
	v, err := s.cache.Value(ctx)
	if err != nil {
		return "", fmt.Errorf("%w from %s: %w", ErrNoToken, s.what, err)
	}
	return v, nil
}

// fetch asks the library for a token.
func (s *Source) fetch(ctx context.Context) (string, time.Time, error) {
	tok, err := s.creds.Token(ctx)
	if err != nil {
		return "", time.Time{}, fetchError(err)
	}
	typ := tok.Type
	if typ == "" {
		typ = "Bearer"
	}
	return typ + " " + tok.Value, tok.Expiry, nil
}

// maxErrorText bounds what a failed fetch's error (logged, and at every refused
// request) keeps of the token endpoint's answer.
const maxErrorText = 300

// fetchError is the error of a failed fetch as it may be logged. The library's error
// carries the endpoint's answer: its error_description whole, or without an error code
// its whole body, which may echo the request (the signed JWT assertion a service
// account's key made, a proxy's error page quoting the form). Kept: the status and a
// bounded excerpt, with anything like a credential masked (redact.Excerpt).
func fetchError(err error) error {
	var ae *auth.Error
	if !errors.As(err, &ae) || ae.Response == nil {
		return redact.Wrapped(redact.Excerpt(err.Error(), maxErrorText), err)
	}
	text := ae.Error() // `auth: "code" "description"` when the answer had an error code
	if !strings.HasPrefix(text, `auth: "`) {
		text = string(ae.Body)
	}
	return redact.Wrapped(fmt.Sprintf("the token endpoint answered %d: %q", ae.Response.StatusCode, redact.Excerpt(text, maxErrorText)), err)
}

// String says where the tokens come from (for logs; no secret).
func (s *Source) String() string { return s.what }
