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
			return nil, err
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
	if s.cfg.ClientAssertionFile != "" {
		b, err := os.ReadFile(s.cfg.ClientAssertionFile)
		if err != nil {
			return "", time.Time{}, err
		}
		cc.AuthStyle = oauth2.AuthStyleInParams // the client id in the form, no secret
		cc.EndpointParams = url.Values{"client_assertion_type": {AssertionType}, "client_assertion": {strings.TrimSpace(string(b))}}
	}
	tok, err := cc.Token(ctx)
	if err != nil {
		return "", time.Time{}, err
	}
	return tok.Type() + " " + tok.AccessToken, tok.Expiry, nil
}

// String says which client the tokens are of (for logs; no secret).
func (s *Source) String() string {
	return fmt.Sprintf("the OAuth client %s at %s", s.cfg.ClientID, redact.URL(s.cfg.TokenURL))
}
