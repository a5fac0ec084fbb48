package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/tollgate-dev/tollgate/enforcer/awsauth"
	"github.com/tollgate-dev/tollgate/enforcer/requestbody"
	"github.com/tollgate-dev/tollgate/pkg/credential"
	"github.com/tollgate-dev/tollgate/pkg/redact"
)

// Route sends the requests whose path starts with Prefix to Upstream, with the
// provider's credential in Header (canonical name; "" sets none): Credential, or when
// Tokens is set, the value it gives at each request.
type Route struct {
	Prefix     string
	Upstream   *url.URL
	Header     string
	Credential string
	// Tokens gives the credential of a provider whose tokens expire (Google's for
	// Vertex AI, an OAuth client's for Azure OpenAI: routecreds.go), asked at every
	// request; it holds them.
	Tokens Tokens
	// Signer, when set, signs each request in place of a credential header (AWS's
	// SigV4 for Amazon Bedrock: routecreds.go).
	Signer Signer
	// AskStreamUsage: an OpenAI chat-completions (or legacy completions) stream sent on
	// this route (requestbody.AsksStreamUsage) is asked for its usage
	// (stream_options.include_usage, requestbody.WithIncludeUsage). True but for an
	// upstream known to refuse the member and send the usage unasked
	// (requestbody.UsageUnasked: Mistral's API, OpenRouter); the routes file's includeUsage says it
	// for any other upstream that refuses it.
	AskStreamUsage bool
	// Deployments are the models of the route's Azure OpenAI deployments, by name (the
	// routes file's deployments). Azure runs a deployment's model whatever the body's
	// "model" says, and its image and audio answers name none: a request whose path names
	// one of them (requestbody.AzureDeployment) is checked, reserved and noted for its
	// settlement at that model (deploymentModel). nil: every request is read as today.
	Deployments map[string]string
	// Headers are set on every request this route sends upstream (canonical names), over
	// whatever the client sent under them: the routes file's headers, such as the
	// operator's OpenAI-Project, which a client's never replaces
	// (credential.BillingScopeHeaders are dropped from every request). nil: none.
	Headers map[string]string
}

// deploymentModel is the model of the Azure OpenAI deployment path names, when the route
// declares it (Deployments); else "".
func (rt *Route) deploymentModel(path string) string {
	if len(rt.Deployments) == 0 {
		return ""
	}
	if name, ok := requestbody.AzureDeployment(path); ok {
		return rt.Deployments[name]
	}
	return ""
}

// NewRoute checks one route. header defaults to Authorization when a credential is given.
func NewRoute(prefix, upstream, header, cred string) (Route, error) {
	if !strings.HasPrefix(prefix, "/") {
		return Route{}, fmt.Errorf("prefix %q must start with /", prefix)
	}
	u, err := parseUpstream(upstream)
	if err != nil {
		// The URL as redact.URL shows it, or not at all: a refused one may be refused
		// for the credential it carries (a user, ?key=), and this message is logged.
		if shown := redact.URL(upstream); shown != "" {
			return Route{}, fmt.Errorf("upstream %q: %w", shown, err)
		}
		return Route{}, fmt.Errorf("upstream: %w", err)
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
	return Route{Prefix: prefix, Upstream: u, Header: http.CanonicalHeaderKey(header), Credential: cred,
		AskStreamUsage: !requestbody.UsageUnasked(u.Host)}, nil
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
		// IncludeUsage, when set, says whether the route's (legacy) chat-completions streams are
		// asked for their usage (Route.AskStreamUsage): false for an OpenAI-compatible
		// upstream that refuses stream_options.
		IncludeUsage *bool `yaml:"includeUsage"`
		// Deployments maps the route's Azure OpenAI deployment names to the models they
		// run (Route.Deployments).
		Deployments map[string]string `yaml:"deployments"`
		// Headers are set on each request the route sends (Route.Headers).
		Headers map[string]string `yaml:"headers"`
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
// first request. A route's deployments name the models of its Azure OpenAI deployments
// (Route.Deployments), each entry checked (deployments). Prefixes must be distinct.
func ParseRoutes(data []byte, getenv func(string) string) ([]Route, error) {
	var f routesFile
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("routes file: %w", err)
	}
	// One document: the routes of a second one (after "---") would be ignored unread. An
	// empty one (a trailing "---") says nothing and is let be.
	for {
		var more yaml.Node
		err := dec.Decode(&more)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil || !emptyDocument(&more) {
			return nil, errors.New("routes file: more than one YAML document; put every route under the first one's routes")
		}
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
				return nil, fmt.Errorf("routes[%d]: %w", i, redact.FileError("credentialFile", err))
			}
			// Refused empty, as credentialEnv is and TOLLGATE_*_FILE are: a Secret key
			// mounted before it was filled would otherwise send the provider no
			// credential (or an empty header) and every request would fail with its 401.
			if cred = strings.TrimRight(string(b), "\r\n"); cred == "" {
				return nil, fmt.Errorf("routes[%d]: credentialFile %s is empty", i, r.CredentialFile)
			}
		case r.CredentialEnv != "":
			if cred = getenv(r.CredentialEnv); cred == "" {
				// Not the name: it is at times the key itself, given in its place.
				return nil, fmt.Errorf("routes[%d]: credentialEnv: the environment variable it names is empty or unset", i)
			}
		case r.Header != "":
			// A header names where the credential goes; without one the gateway would
			// send it empty in place of the member's key.
			return nil, fmt.Errorf("routes[%d]: header %q without a credential (credentialFile, credentialEnv, google or oauth2)", i, r.Header)
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
		if r.IncludeUsage != nil {
			rt.AskStreamUsage = *r.IncludeUsage
		}
		if rt.Deployments, err = deployments(r.Deployments); err != nil {
			return nil, fmt.Errorf("routes[%d]: deployments: %w", i, err)
		}
		if rt.Headers, err = setHeaders(r.Headers, rt.Header); err != nil {
			return nil, fmt.Errorf("routes[%d]: headers: %w", i, err)
		}
		out = append(out, rt)
	}
	return out, nil
}

// deployments checks a route's deployments: each a deployment's name (as it appears in
// the path, /openai/deployments/{name}/..., without a slash) and the model it runs (a
// model name as a body's would be, requestbody.CleanModel). Whether the catalog or the
// organization prices that model is not asked: the unpriced-model rule judges it at
// each request, as it would the body's. nil for none.
func deployments(in map[string]string) (map[string]string, error) {
	if len(in) == 0 {
		return nil, nil
	}
	names := slices.Sorted(maps.Keys(in)) // the first bad one, the same at every start
	out := make(map[string]string, len(in))
	for _, name := range names {
		model := strings.TrimSpace(in[name])
		switch {
		case strings.TrimSpace(name) == "":
			return nil, errors.New("a deployment with no name")
		case name != strings.TrimSpace(name) || strings.ContainsAny(name, "/?#"):
			return nil, fmt.Errorf("deployment %q: not a deployment name (no surrounding space, /, ? or #)", name)
		case model == "":
			return nil, fmt.Errorf("deployment %q: no model", name)
		case requestbody.CleanModel(model) != model:
			return nil, fmt.Errorf("deployment %q: model %q is not a model name (over %d bytes, invalid UTF-8 or a control character)",
				name, model, requestbody.MaxModelBytes)
		}
		out[name] = model
	}
	return out, nil
}

// gatewayOwnedHeaders are the request headers a route's headers may not set: the
// gateway writes them itself (the credentials, the request's id, its framing and
// coding, what the client's request is judged by) or they belong to one hop.
var gatewayOwnedHeaders = []string{"Authorization", "X-Api-Key", "X-Goog-Api-Key", "Api-Key", "Host",
	"Content-Length", "Content-Encoding", "Content-Type", "Transfer-Encoding", "Expect", "Accept-Encoding",
	"X-Goog-Fieldmask", "X-Http-Method-Override", "X-Http-Method", "X-Method-Override", "Cookie"}

// setHeaders checks a route's headers: names of request headers the gateway does not own
// (gatewayOwnedHeaders, the route's credential header, hop-by-hop ones, X-Service-*,
// X-Forwarded-*, Forwarded), each given once whatever its case, with a value that is a
// valid header value and not empty (a route that should send none says nothing). The
// credential goes in credentialFile or credentialEnv, never here: this file is not a
// secret. nil for none.
func setHeaders(in map[string]string, credentialHeader string) (map[string]string, error) {
	if len(in) == 0 {
		return nil, nil
	}
	names := slices.Sorted(maps.Keys(in)) // the first bad one, the same at every start
	out := make(map[string]string, len(in))
	for _, name := range names {
		k := http.CanonicalHeaderKey(name)
		switch {
		case !validHeaderName(name):
			return nil, fmt.Errorf("%q is not a header name", name)
		case out[k] != "":
			return nil, fmt.Errorf("%s is given twice", k)
		case k == credentialHeader || slices.Contains(gatewayOwnedHeaders, k):
			return nil, fmt.Errorf("%s is the gateway's to set (a credential goes in credentialFile or credentialEnv)", k)
		case isHopByHop(k) || k == "Forwarded" || strings.HasPrefix(k, "X-Service-") || strings.HasPrefix(k, "X-Forwarded-"):
			return nil, fmt.Errorf("%s is the gateway's to set", k)
		case in[name] == "" || !credential.ValidHeaderValue(in[name]):
			// The value is shown: a header here is no secret (see above).
			return nil, fmt.Errorf("%s: %q is not a header value (empty, leading or trailing space, or a control character)", k, in[name])
		}
		out[k] = in[name]
	}
	return out, nil
}

// emptyDocument reports a YAML document with nothing in it, or only null.
func emptyDocument(n *yaml.Node) bool {
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	return n.Kind == 0 || n.Kind == yaml.DocumentNode && len(n.Content) == 0 || n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

// sortRoutes orders routes longest prefix first, so the first match is the longest.
func sortRoutes(rs []Route) []Route {
	out := slices.Clone(rs)
	slices.SortStableFunc(out, func(a, b Route) int { return len(b.Prefix) - len(a.Prefix) })
	return out
}

// route finds the route of a path: the longest prefix that matches.
func (gw *Gateway) route(path string) *Route {
	// Google's SDKs join a base URL ending in "/" to a path beginning with one (a Gemini
	// Live session's "//ws/..."): routed as the path it means.
	for len(path) > 1 && path[1] == '/' {
		path = path[1:]
	}
	for i := range gw.routes {
		if strings.HasPrefix(path, gw.routes[i].Prefix) {
			return &gw.routes[i]
		}
	}
	return nil
}
