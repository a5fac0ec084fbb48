package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/tollgate-dev/tollgate/enforcer/awsauth"
	"github.com/tollgate-dev/tollgate/enforcer/googleauth"
	"github.com/tollgate-dev/tollgate/enforcer/oauthclient"
	"github.com/tollgate-dev/tollgate/pkg/credential"
)

// Route sends the requests whose path starts with Prefix to Upstream, with the
// provider's credential in Header (canonical name; "" sets none): Credential, or when
// Tokens is set, the value it gives at each request.
type Route struct {
	Prefix     string
	Upstream   *url.URL
	Header     string
	Credential string
	// Tokens gives the credential of a provider whose tokens expire (Google's, for
	// Vertex AI: package googleauth), asked at every request; it caches them.
	Tokens Tokens
	// Signer, when set, signs each request in place of a credential header (AWS's
	// SigV4 for Amazon Bedrock: package awsauth).
	Signer Signer
}

// Signer signs a request as it goes upstream; body is its body, streamed true when the
// body streams as it came (an upload) and body is nil.
type Signer interface {
	Sign(ctx context.Context, req *http.Request, body []byte, streamed bool) error
	Warm(ctx context.Context) error
}

// Tokens gives a route's credential, the whole header value, at each request.
type Tokens interface {
	Authorization(ctx context.Context) (string, error)
}

// credential is the value of the route's Header for a request now.
func (rt *Route) credential(ctx context.Context) (string, error) {
	if rt.Tokens == nil {
		return rt.Credential, nil
	}
	return rt.Tokens.Authorization(ctx)
}

// NewRoute checks one route. header defaults to Authorization when a credential is given.
func NewRoute(prefix, upstream, header, cred string) (Route, error) {
	if !strings.HasPrefix(prefix, "/") {
		return Route{}, fmt.Errorf("prefix %q must start with /", prefix)
	}
	u, err := parseUpstream(upstream)
	if err != nil {
		return Route{}, fmt.Errorf("upstream %q: %w", upstream, err)
	}
	if !credential.ValidHeaderValue(cred) {
		// Never the value itself in the message: it is a secret.
		return Route{}, errors.New("the credential is not a valid header value (leading or trailing space, or a control character)")
	}
	if header == "" && cred != "" {
		header = "Authorization"
	}
	if header != "" && !validHeaderName(header) {
		return Route{}, fmt.Errorf("header %q is not a header name", header)
	}
	return Route{Prefix: prefix, Upstream: u, Header: http.CanonicalHeaderKey(header), Credential: cred}, nil
}

func validHeaderName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return s != ""
}

// routesFile is the YAML (or JSON) routes file of TOLLGATE_GATEWAY_ROUTES.
type routesFile struct {
	Routes []struct {
		Prefix         string `yaml:"prefix"`
		Upstream       string `yaml:"upstream"`
		Header         string `yaml:"header"`
		CredentialFile string `yaml:"credentialFile"`
		CredentialEnv  string `yaml:"credentialEnv"`
		// Google: the route's credential is a Google access token (Vertex AI), from
		// CredentialsFile or, when it is empty, Application Default Credentials.
		Google *struct {
			CredentialsFile string `yaml:"credentialsFile"`
		} `yaml:"google"`
		// OAuth2: the route's credential is an OAuth client's access token (client
		// credentials grant: Azure OpenAI with Entra ID), its secret from a file or the
		// environment, or a client assertion file.
		OAuth2 *struct {
			TokenURL            string   `yaml:"tokenURL"`
			ClientID            string   `yaml:"clientID"`
			ClientSecretFile    string   `yaml:"clientSecretFile"`
			ClientSecretEnv     string   `yaml:"clientSecretEnv"`
			ClientAssertionFile string   `yaml:"clientAssertionFile"`
			Scopes              []string `yaml:"scopes"`
		} `yaml:"oauth2"`
		// AWS: the route's requests are signed with SigV4 (Amazon Bedrock) for Region and
		// Service (default bedrock), with the AWS default credential chain.
		AWS *struct {
			Region  string `yaml:"region"`
			Service string `yaml:"service"`
		} `yaml:"aws"`
	} `yaml:"routes"`
}

// ParseRoutes reads a routes file: a list of {prefix, upstream, header, and the
// credential: credentialFile, credentialEnv, google, aws or oauth2}. A credential file's trailing
// line break is dropped; getenv reads credentialEnv; google's tokens come from its
// credentialsFile or Google's Application Default Credentials (package googleauth),
// found now, fetched at the first request; aws signs with SigV4 for its region
// (package awsauth), the credentials fetched at the first request; oauth2's tokens
// come from an OAuth client's credentials grant (package oauthclient), fetched at the
// first request. Prefixes must be distinct.
func ParseRoutes(data []byte, getenv func(string) string) ([]Route, error) {
	var f routesFile
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("routes file: %w", err)
	}
	if len(f.Routes) == 0 {
		return nil, errors.New("routes file: no routes")
	}
	var out []Route
	seen := map[string]bool{}
	for i, r := range f.Routes {
		if seen[r.Prefix] {
			return nil, fmt.Errorf("routes[%d]: prefix %q repeats", i, r.Prefix)
		}
		seen[r.Prefix] = true
		var cred string
		var tokens Tokens
		var signer Signer
		switch {
		case credentials(r.CredentialFile != "", r.CredentialEnv != "", r.Google != nil, r.AWS != nil, r.OAuth2 != nil) > 1:
			return nil, fmt.Errorf("routes[%d]: set one of credentialFile, credentialEnv, google, aws and oauth2", i)
		case r.OAuth2 != nil:
			src, err := oauthTokens(r.OAuth2.TokenURL, r.OAuth2.ClientID, r.OAuth2.ClientSecretFile, r.OAuth2.ClientSecretEnv,
				r.OAuth2.ClientAssertionFile, r.OAuth2.Scopes, getenv)
			if err != nil {
				return nil, fmt.Errorf("routes[%d]: oauth2: %w", i, err)
			}
			tokens = src
		case r.AWS != nil:
			if r.Header != "" {
				return nil, fmt.Errorf("routes[%d]: aws signs the request: it takes no header", i)
			}
			sg, err := awsauth.New(context.Background(), r.AWS.Region, r.AWS.Service)
			if err != nil {
				return nil, fmt.Errorf("routes[%d]: aws: %w", i, err)
			}
			signer = sg
		case r.Google != nil:
			src, err := googleTokens(r.Google.CredentialsFile)
			if err != nil {
				return nil, fmt.Errorf("routes[%d]: google: %w", i, err)
			}
			tokens = src
		case r.CredentialFile != "":
			b, err := os.ReadFile(r.CredentialFile)
			if err != nil {
				return nil, fmt.Errorf("routes[%d]: %w", i, err)
			}
			cred = strings.TrimRight(string(b), "\r\n")
		case r.CredentialEnv != "":
			if cred = getenv(r.CredentialEnv); cred == "" {
				return nil, fmt.Errorf("routes[%d]: the environment variable %s is empty", i, r.CredentialEnv)
			}
		}
		rt, err := NewRoute(r.Prefix, r.Upstream, r.Header, cred)
		if err != nil {
			return nil, fmt.Errorf("routes[%d]: %w", i, err)
		}
		if tokens != nil {
			if rt.Header == "" {
				rt.Header = "Authorization"
			}
			rt.Tokens = tokens
		}
		rt.Signer = signer
		out = append(out, rt)
	}
	return out, nil
}

// credentials counts the credentials a route sets.
func credentials(set ...bool) int {
	n := 0
	for _, b := range set {
		if b {
			n++
		}
	}
	return n
}

// oauthTokens is the token source of a route's oauth2 credential: the client's secret
// from its file (the trailing line break dropped) or environment variable, or its
// assertion file.
func oauthTokens(tokenURL, clientID, secretFile, secretEnv, assertionFile string, scopes []string, getenv func(string) string) (Tokens, error) {
	cfg := oauthclient.Config{TokenURL: tokenURL, ClientID: clientID, ClientAssertionFile: assertionFile, Scopes: scopes}
	switch {
	case credentials(secretFile != "", secretEnv != "", assertionFile != "") != 1:
		return nil, errors.New("set one of clientSecretFile, clientSecretEnv and clientAssertionFile")
	case secretFile != "":
		b, err := os.ReadFile(secretFile)
		if err != nil {
			return nil, err
		}
		cfg.ClientSecret = strings.TrimRight(string(b), "\r\n")
	case secretEnv != "":
		if cfg.ClientSecret = getenv(secretEnv); cfg.ClientSecret == "" {
			return nil, fmt.Errorf("the environment variable %s is empty", secretEnv)
		}
	}
	return oauthclient.New(cfg)
}

// googleTokens is the token source of a route's google credential.
func googleTokens(file string) (Tokens, error) {
	if file != "" {
		return googleauth.FromFile(file)
	}
	return googleauth.Default()
}

// sortRoutes orders routes longest prefix first, so the first match is the longest.
func sortRoutes(rs []Route) []Route {
	out := slices.Clone(rs)
	slices.SortStableFunc(out, func(a, b Route) int { return len(b.Prefix) - len(a.Prefix) })
	return out
}

// route finds the route of a path: the longest prefix that matches.
func (gw *Gateway) route(path string) *Route {
	for i := range gw.routes {
		if strings.HasPrefix(path, gw.routes[i].Prefix) {
			return &gw.routes[i]
		}
	}
	return nil
}

// WarmCredentials fetches the first token of each route whose credential is one
// (Tokens), or the credentials of each route that signs (Signer), and logs whether
// they came: a credential that cannot be had shows in the log
// when the enforcer starts, not first at a member's request, which would wait for it.
// Each route's requests still fetch for themselves (the source caches), so a failure
// here only logs.
func (gw *Gateway) WarmCredentials(ctx context.Context) {
	for i := range gw.routes {
		rt := &gw.routes[i]
		var err error
		var source any
		switch {
		case rt.Tokens != nil:
			_, err = rt.credential(ctx)
			source = rt.Tokens
		case rt.Signer != nil:
			err = rt.Signer.Warm(ctx)
			source = rt.Signer
		default:
			continue
		}
		if err != nil {
			if ctx.Err() == nil {
				gw.log.Error("gateway: the route's credential cannot be had; its requests will be answered 502 until it can", "prefix", rt.Prefix, "err", err)
			}
			continue
		}
		gw.log.Info("gateway: the route's credential is ready", "prefix", rt.Prefix, "source", fmt.Sprint(source))
	}
}
