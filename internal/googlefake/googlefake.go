// Package googlefake is a stand-in for Google's OAuth 2.0 token endpoint and for the
// token path of the GCE and GKE metadata server, for tests of the gateway's Vertex AI
// credential (enforcer/googleauth) driven by Google's real client library.
//
// The token endpoint checks what Google checks of a service account's request: a JWT
// bearer grant whose assertion is signed (RS256) by the account's key, issued by the
// account, addressed to the endpoint, asking for a scope, not expired. Only then does
// it issue a token, "ya29.fake-N". The metadata path asks for the Metadata-Flavor
// header and issues "ya29.metadata-N". Either can be made to fail.
package googlefake

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/tokenledger"
)

// Email is the service account's address in the files ServiceAccountFile writes.
const Email = "gateway@tollgate-test.iam.gserviceaccount.com"

// Server is the fake; Start makes one.
type Server struct {
	URL string
	key *rsa.PrivateKey

	// Ledger records the requests and the tokens issued (Asked, Issued, Scopes,
	// SetFailing).
	tokenledger.Ledger

	mu sync.Mutex
	// lifetime is the expires_in of the tokens issued.
	lifetime time.Duration
	// stall, when not nil, holds every token request until it is closed (or the
	// request is cancelled): an endpoint that does not answer.
	stall chan struct{}
}

// Start starts the fake; it stops at the test's end.
func Start(t testing.TB) *Server {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{key: key, lifetime: time.Hour}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /token", s.token)
	mux.HandleFunc("GET /computeMetadata/v1/instance/service-accounts/default/token", s.metadataToken)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	s.URL = srv.URL
	return s
}

// MetadataHost is the value of GCE_METADATA_HOST that sends Google's library here.
func (s *Server) MetadataHost() string { return strings.TrimPrefix(s.URL, "http://") }

// ServiceAccountFile writes a service account's key file whose token_uri is this
// fake's, in a temporary directory, and returns its path.
func (s *Server) ServiceAccountFile(t testing.TB) string {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(s.key)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(map[string]string{
		"type":           "service_account",
		"project_id":     "tollgate-test",
		"private_key_id": "k1",
		"private_key":    string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		"client_email":   Email,
		"client_id":      "1",
		"token_uri":      s.URL + "/token",
	})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "service-account.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Stall makes token requests wait, unanswered, until the returned function is called.
func (s *Server) Stall() (release func()) {
	ch := make(chan struct{})
	s.mu.Lock()
	s.stall = ch
	s.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			s.stall = nil
			s.mu.Unlock()
			close(ch)
		})
	}
}

// SetLifetime sets the expires_in of the tokens issued from now on.
func (s *Server) SetLifetime(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lifetime = d
}

// issue counts a request and, unless failing, returns a new token named prefix-N.
func (s *Server) issue(w http.ResponseWriter, r *http.Request, prefix, scope string) {
	s.Count()
	s.mu.Lock()
	stall := s.stall
	lifetime := s.lifetime
	s.mu.Unlock()
	if stall != nil {
		select {
		case <-stall:
		case <-r.Context().Done():
			return
		}
	}
	if s.Failing() {
		http.Error(w, `{"error":"internal_failure"}`, http.StatusInternalServerError)
		return
	}
	tok := s.Issue(prefix+"-", scope)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"access_token": tok, "token_type": "Bearer", "expires_in": int(lifetime.Seconds())})
}

func (s *Server) token(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil || r.PostForm.Get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer" {
		refuse(w, "invalid_request", "not a JWT bearer grant")
		return
	}
	scope, err := s.verify(r.PostForm.Get("assertion"), "http://"+r.Host+r.URL.Path)
	if err != nil {
		s.Count()
		refuse(w, "invalid_grant", err.Error())
		return
	}
	s.issue(w, r, "ya29.fake", scope)
}

func (s *Server) metadataToken(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Metadata-Flavor") != "Google" {
		http.Error(w, "Missing Metadata-Flavor:Google header.", http.StatusForbidden)
		return
	}
	s.issue(w, r, "ya29.metadata", r.URL.Query().Get("scopes"))
}

func refuse(w http.ResponseWriter, code, desc string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": code, "error_description": desc})
}

// verify checks a service account's assertion: RS256 by the key, its claims those of
// a token request to aud. It returns the scope asked for.
func (s *Server) verify(assertion, aud string) (string, error) {
	parts := strings.Split(assertion, ".")
	if len(parts) != 3 {
		return "", fmt.Errorf("the assertion is not a JWT")
	}
	var head struct {
		Alg string `json:"alg"`
		Kid string `json:"kid"`
	}
	if err := decodeSegment(parts[0], &head); err != nil || head.Alg != "RS256" {
		return "", fmt.Errorf("the JWT's header %q is not RS256", parts[0])
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return "", fmt.Errorf("the signature is not base64url")
	}
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if err := rsa.VerifyPKCS1v15(&s.key.PublicKey, crypto.SHA256, sum[:], sig); err != nil {
		return "", fmt.Errorf("the signature is not the service account's")
	}
	var c struct {
		Iss   string `json:"iss"`
		Aud   string `json:"aud"`
		Scope string `json:"scope"`
		Exp   int64  `json:"exp"`
		Iat   int64  `json:"iat"`
	}
	if err := decodeSegment(parts[1], &c); err != nil {
		return "", fmt.Errorf("the claims are not JSON")
	}
	now := time.Now().Unix()
	switch {
	case c.Iss != Email:
		return "", fmt.Errorf("iss %q is not the service account", c.Iss)
	case c.Aud != aud:
		return "", fmt.Errorf("aud %q is not this endpoint (%s)", c.Aud, aud)
	case c.Scope == "":
		return "", fmt.Errorf("no scope")
	case c.Exp <= now || c.Iat > now+60:
		return "", fmt.Errorf("the assertion is expired or from the future")
	}
	return c.Scope, nil
}

func decodeSegment(seg string, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}
