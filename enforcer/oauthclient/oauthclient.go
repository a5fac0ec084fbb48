// Package oauthclient gives a gateway route the access token of an OAuth 2.0 client,
// got with the client credentials grant (RFC 6749, 4.4): Azure OpenAI with Microsoft
// Entra ID (a service principal's secret, or AKS workload identity's federated token
// as the client's assertion), and any upstream an OAuth-protected gateway fronts. An
// organization that turned off Azure OpenAI's keys has no static credential to give a
// route.
//
// The grant is golang.org/x/oauth2/clientcredentials'; package tokencache holds the
// token and renews it ahead of its expiry. A client assertion file (a projected
// Kubernetes token, which the kubelet rotates) is read again at every fetch.
package oauthclient

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"

	"github.com/tollgate-dev/tollgate/enforcer/tokencache"
	"github.com/tollgate-dev/tollgate/pkg/redact"
)

// AssertionType is the client assertion's type: a JWT (RFC 7523), as Entra ID takes a
// federated token.
const AssertionType = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"

// Config is one client: its token endpoint, its id, and one of its secret and an
// assertion file.
type Config struct {
	TokenURL string
	ClientID string
	// ClientSecret is the client's secret; ClientAssertionFile a file holding a signed
	// JWT that proves the client (read at every fetch). Exactly one.
	ClientSecret        string
	ClientAssertionFile string
	Scopes              []string
}

// Source gives a route's Authorization value.
type Source struct {
	cfg   Config
	cache *tokencache.Cache
}

// New checks cfg and returns the source of its tokens; nothing is fetched yet. The
// token endpoint must be https (http only on loopback, for tests): the client's secret
// goes there.
func New(cfg Config) (*Source, error) {
	u, err := url.Parse(cfg.TokenURL)
	switch {
	case err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http"):
		return nil, errors.New("tokenURL is not an http(s) URL") // not quoted: it could be anything, a secret too
	case u.Scheme == "http" && !loopback(u.Hostname()):
		return nil, fmt.Errorf("tokenURL %q: the client's credential would travel in clear; use https", redact.URL(cfg.TokenURL))
	case cfg.ClientID == "":
		return nil, errors.New("clientID is required")
	case (cfg.ClientSecret == "") == (cfg.ClientAssertionFile == ""):
		return nil, errors.New("give the client's secret or its assertion file, one of them")
	}
	if cfg.ClientAssertionFile != "" {
		if _, err := os.Stat(cfg.ClientAssertionFile); err != nil {
			return nil, redact.FileError("clientAssertionFile", err)
		}
	}
	s := &Source{cfg: cfg}
	s.cache = tokencache.New(s.fetch, 0, 0)
	return s, nil
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ErrNoToken wraps every failure of Authorization.
var ErrNoToken = errors.New("oauthclient: no access token")

// Authorization is the header value to send now: "Bearer " and a valid token (see
// package tokencache for when it waits).
func (s *Source) Authorization(ctx context.Context) (string, error) {
	v, err := s.cache.Value(ctx)
	if err != nil {
		return "", fmt.Errorf("%w from %s: %w", ErrNoToken, s, err)
	}
	return v, nil
}

// fetch runs the grant once.
func (s *Source) fetch(ctx context.Context) (string, time.Time, error) {
	cc := clientcredentials.Config{ClientID: s.cfg.ClientID, ClientSecret: s.cfg.ClientSecret, TokenURL: s.cfg.TokenURL, Scopes: s.cfg.Scopes}
	secrets := []string{s.cfg.ClientSecret}
	if s.cfg.ClientAssertionFile != "" {
		b, err := os.ReadFile(s.cfg.ClientAssertionFile)
		if err != nil {
			return "", time.Time{}, err
		}
		assertion := strings.TrimSpace(string(b))
		secrets = append(secrets, assertion)
		cc.AuthStyle = oauth2.AuthStyleInParams // the client id in the form, no secret
		cc.EndpointParams = url.Values{"client_assertion_type": {AssertionType}, "client_assertion": {assertion}}
	}
	tok, err := cc.Token(ctx)
	if err != nil {
		return "", time.Time{}, s.fetchError(err, secrets)
	}
	return tok.Type() + " " + tok.AccessToken, tok.Expiry, nil
}

// Bounds of what a failed fetch's error (logged, and at every refused request) keeps of
// the endpoint's answer.
const (
	maxErrorCode        = 64
	maxErrorDescription = 300
	maxErrorBody        = 200
)

// fetchError is the error of a failed grant as it may be logged. golang.org/x/oauth2's
// error carries the token endpoint's answer: its error_description whole, or, without an
// RFC 6749 error code, its whole body (up to 1 MB), either of which may echo the request
// (a proxy's or a misconfigured endpoint's error page quoting the form, a description
// quoting the secret it refused). Kept: the status, the error code and description, or
// an excerpt of the body, each bounded and with anything like the client's secret or
// assertion masked (redact.Excerpt).
func (s *Source) fetchError(err error, secrets []string) error {
	var re *oauth2.RetrieveError
	if !errors.As(err, &re) {
		// A transport error quotes the token URL (url.Error's "Post \"...\""), shown as
		// redact.URL shows it.
		text := err.Error()
		if shown := redact.URL(s.cfg.TokenURL); shown != s.cfg.TokenURL {
			text = strings.ReplaceAll(text, s.cfg.TokenURL, cmp.Or(shown, redact.Mask))
		}
		return redact.Wrapped(redact.Excerpt(text, maxErrorBody+200, secrets...), err)
	}
	msg := "the token endpoint refused the grant"
	if re.Response != nil {
		msg = "the token endpoint answered " + redact.Excerpt(re.Response.Status, 64)
	}
	if re.ErrorCode != "" {
		msg += fmt.Sprintf(": error=%q", redact.Excerpt(re.ErrorCode, maxErrorCode, secrets...))
		if re.ErrorDescription != "" {
			msg += fmt.Sprintf(" error_description=%q", redact.Excerpt(re.ErrorDescription, maxErrorDescription, secrets...))
		}
		return redact.Wrapped(msg, err)
	}
	if body := redact.Excerpt(string(re.Body), maxErrorBody, secrets...); body != "" {
		msg += fmt.Sprintf(", body (excerpt) %q", body)
	}
	return redact.Wrapped(msg, err)
}

// String says which client the tokens are of (for logs; no secret).
func (s *Source) String() string {
	return fmt.Sprintf("the OAuth client %s at %s", s.cfg.ClientID, redact.URL(s.cfg.TokenURL))
}
