// Package oauthfake is a stand-in for an OAuth 2.0 token endpoint (Microsoft Entra ID's,
// say) serving the client credentials grant, for tests of the gateway's OAuth client
// routes (enforcer/oauthclient) driven by golang.org/x/oauth2.
//
// It checks what such an endpoint checks: grant_type=client_credentials, the client's
// id, and its proof: the secret (HTTP Basic or in the form) or a JWT client assertion
// equal to the one it expects; then it issues "oauth-token-N" (or another prefix's,
// SetTokenPrefix: two fakes in one test tell their tokens apart) for the scopes asked.
package oauthfake

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/tokenledger"
)

// Server is the fake; Start makes one.
type Server struct {
	URL      string // the token endpoint
	ClientID string
	// Secret is the client's secret (unless SetAssertion asks for an assertion).
	Secret string

	// Ledger records the requests and the tokens issued (Asked, Issued, Scopes,
	// SetFailing).
	tokenledger.Ledger

	mu         sync.Mutex
	assertion  string
	prefix     string
	assertions []string
	lifetime   time.Duration
}

// Start starts the fake endpoint of clientID with secret; it stops at the test's end.
func Start(t testing.TB, clientID, secret string) *Server {
	t.Helper()
	s := &Server{ClientID: clientID, Secret: secret, prefix: "oauth-token-", lifetime: time.Hour}
	srv := httptest.NewServer(http.HandlerFunc(s.token))
	t.Cleanup(srv.Close)
	s.URL = srv.URL + "/oauth2/v2.0/token"
	return s
}

// SetAssertion makes the client prove itself with this assertion instead of a secret.
func (s *Server) SetAssertion(a string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.assertion = a
}

// SetTokenPrefix makes the tokens issued from now on prefix followed by their number
// (from 1, counting those issued before): "oauth-token-" unless set.
func (s *Server) SetTokenPrefix(prefix string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.prefix = prefix
}

// Assertions returns the client assertion each token request presented ("" for none),
// refused ones included, failing or not.
func (s *Server) Assertions() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.assertions...)
}

func (s *Server) token(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.Count()
	if r.Method == http.MethodPost && r.ParseForm() == nil {
		s.assertions = append(s.assertions, r.PostForm.Get("client_assertion"))
	} else {
		s.assertions = append(s.assertions, "")
	}
	if s.Failing() {
		http.Error(w, `{"error":"temporarily_unavailable"}`, http.StatusInternalServerError)
		return
	}
	if r.Method != http.MethodPost || r.ParseForm() != nil || r.PostForm.Get("grant_type") != "client_credentials" {
		refuse(w, http.StatusBadRequest, "unsupported_grant_type", "a POSTed client_credentials grant is expected")
		return
	}
	id, secret, basic := r.BasicAuth()
	if !basic {
		id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	}
	switch {
	case id != s.ClientID:
		refuse(w, http.StatusBadRequest, "unauthorized_client", fmt.Sprintf("client %q is unknown", id))
		return
	case s.assertion != "":
		if r.PostForm.Get("client_assertion_type") != "urn:ietf:params:oauth:client-assertion-type:jwt-bearer" ||
			r.PostForm.Get("client_assertion") != s.assertion || secret != "" {
			refuse(w, http.StatusUnauthorized, "invalid_client", "the client assertion is not the expected one")
			return
		}
	case secret != s.Secret:
		refuse(w, http.StatusUnauthorized, "invalid_client", "the client secret is wrong")
		return
	}
	tok := s.Issue(s.prefix, r.PostForm.Get("scope"))
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"access_token": tok, "token_type": "Bearer", "expires_in": int(s.lifetime.Seconds())})
}

func refuse(w http.ResponseWriter, status int, code, desc string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": code, "error_description": desc})
}
