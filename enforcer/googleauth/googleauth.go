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
	"time"

	"cloud.google.com/go/auth"
	"cloud.google.com/go/auth/credentials"
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

// FetchTimeout bounds one wait for a token when none is cached. The library serializes
// fetches: a request that finds no token waits for the one fetch in progress.
const FetchTimeout = 10 * time.Second

// Source gives a route's Authorization value.
type Source struct {
	creds *auth.Credentials
	// what says where the tokens come from, for errors and logs (never a secret).
	what string
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

// Authorization is the header value to send now: "Bearer " and a valid token.
func (s *Source) Authorization(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, FetchTimeout)
	defer cancel()
	tok, err := s.creds.Token(ctx)
	if err != nil {
		return "", fmt.Errorf("%w from %s: %w", ErrNoToken, s.what, err)
	}
	typ := tok.Type
	if typ == "" {
		typ = "Bearer"
	}
	return typ + " " + tok.Value, nil
}

// String says where the tokens come from (for logs; no secret).
func (s *Source) String() string { return s.what }
