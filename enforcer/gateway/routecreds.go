package gateway

// A route's credential when it is no fixed header value: a token that expires (Google's
// for Vertex AI, an OAuth client's for Azure OpenAI with Entra ID) or a signature of
// each request (AWS's SigV4 for Amazon Bedrock with IAM credentials). The packages
// googleauth, oauthclient and awsauth get them; this file parses their routes-file
// keys, asks them per request, and warms them at start.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/tollgate-dev/tollgate/enforcer/googleauth"
	"github.com/tollgate-dev/tollgate/enforcer/oauthclient"
	"github.com/tollgate-dev/tollgate/pkg/redact"
)

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
			return nil, redact.FileError("clientSecretFile", err)
		}
		if cfg.ClientSecret = strings.TrimRight(string(b), "\r\n"); cfg.ClientSecret == "" {
			return nil, fmt.Errorf("clientSecretFile %s is empty", secretFile)
		}
	case secretEnv != "":
		if cfg.ClientSecret = getenv(secretEnv); cfg.ClientSecret == "" {
			// Not the name: it is at times the secret itself, given in its place.
			return nil, errors.New("clientSecretEnv: the environment variable it names is empty or unset")
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
