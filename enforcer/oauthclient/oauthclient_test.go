package oauthclient_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/enforcer/oauthclient"
	"github.com/tollgate-dev/tollgate/internal/oauthfake"
)

const scope = "https://cognitiveservices.azure.com/.default"

// A client with a secret gets its token, asked for its scopes; one token serves many
// requests.
func TestClientSecret(t *testing.T) {
	f := oauthfake.Start(t, "client-1", "s3cret")
	src, err := oauthclient.New(oauthclient.Config{TokenURL: f.URL, ClientID: "client-1", ClientSecret: "s3cret", Scopes: []string{scope}})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		v, err := src.Authorization(context.Background())
		if err != nil || v != "Bearer oauth-token-1" {
			t.Fatalf("Authorization %q, %v", v, err)
		}
	}
	if got := f.Issued(); len(got) != 1 || f.Scopes()[0] != scope {
		t.Fatalf("issued %q for scopes %q", got, f.Scopes())
	}
	if s := src.String(); !strings.Contains(s, "client-1") || strings.Contains(s, "s3cret") {
		t.Fatalf("String() = %q", s)
	}
}

// A client proving itself with an assertion file (AKS workload identity's federated
// token): the file is read at each fetch, so the kubelet's rotation is followed.
func TestClientAssertionFile(t *testing.T) {
	f := oauthfake.Start(t, "client-2", "")
	f.SetAssertion("eyJ.first.token")
	file := filepath.Join(t.TempDir(), "azure-identity-token")
	if err := os.WriteFile(file, []byte("eyJ.first.token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	src, err := oauthclient.New(oauthclient.Config{TokenURL: f.URL, ClientID: "client-2", ClientAssertionFile: file, Scopes: []string{scope}})
	if err != nil {
		t.Fatal(err)
	}
	if v, err := src.Authorization(context.Background()); err != nil || v != "Bearer oauth-token-1" {
		t.Fatalf("Authorization %q, %v", v, err)
	}
	// Rotated: a new source (nothing cached) presents the new file's token.
	f.SetAssertion("eyJ.second.token")
	if err := os.WriteFile(file, []byte("eyJ.second.token"), 0o600); err != nil {
		t.Fatal(err)
	}
	src, _ = oauthclient.New(oauthclient.Config{TokenURL: f.URL, ClientID: "client-2", ClientAssertionFile: file})
	if v, err := src.Authorization(context.Background()); err != nil || v != "Bearer oauth-token-2" {
		t.Fatalf("after the rotation: %q, %v", v, err)
	}
}

// A refused or failing endpoint: ErrNoToken, naming the client, never its secret.
func TestRefused(t *testing.T) {
	f := oauthfake.Start(t, "client-3", "right")
	src, _ := oauthclient.New(oauthclient.Config{TokenURL: f.URL, ClientID: "client-3", ClientSecret: "wrong-secret"})
	_, err := src.Authorization(context.Background())
	if !errors.Is(err, oauthclient.ErrNoToken) || !strings.Contains(err.Error(), "client-3") || strings.Contains(err.Error(), "wrong-secret") {
		t.Fatalf("err = %v", err)
	}
	if len(f.Issued()) != 0 {
		t.Fatal("a token was issued to a wrong secret")
	}
}

// Bad configurations are refused before anything is sent.
func TestNewRefuses(t *testing.T) {
	for name, cfg := range map[string]oauthclient.Config{
		"no token URL":           {ClientID: "c", ClientSecret: "s"},
		"http beyond loopback":   {TokenURL: "http://login.example.com/token", ClientID: "c", ClientSecret: "s"},
		"ftp":                    {TokenURL: "ftp://login.example.com/token", ClientID: "c", ClientSecret: "s"},
		"no client id":           {TokenURL: "https://login.example.com/token", ClientSecret: "s"},
		"no secret or assertion": {TokenURL: "https://login.example.com/token", ClientID: "c"},
		"both":                   {TokenURL: "https://login.example.com/token", ClientID: "c", ClientSecret: "s", ClientAssertionFile: "/x"},
		"missing assertion file": {TokenURL: "https://login.example.com/token", ClientID: "c", ClientAssertionFile: "/nonexistent/token"},
	} {
		if _, err := oauthclient.New(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// A token endpoint that echoes what it was sent (a proxy's error page quoting the form, an
// error_description quoting the secret it refused, a body without an RFC 6749 error code)
// does not get the client's secret or assertion, or a part of either, into the error the
// gateway logs: golang.org/x/oauth2 quoted the body whole (up to 1 MB) without an error
// code, and the description whole with one. Kept: the status, the error code and
// description, an excerpt of the body, each bounded.
func TestRefusalNeverQuotesTheCredential(t *testing.T) {
	const secret = "Zk9~s3cr3t+Qa7/Xm3=Lb8&Wv4"
	assertion := "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJjbGllbnQtNCJ9.c2lnbmF0dXJlLW9mLXRoZS10b2tlbg"
	file := filepath.Join(t.TempDir(), "azure-identity-token")
	if err := os.WriteFile(file, []byte(assertion+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// sent is what the client sent: its form, and its Basic credentials when it used them.
	sent := func(r *http.Request) string {
		_ = r.ParseForm()
		return r.PostForm.Encode() + " " + r.Header.Get("Authorization")
	}
	filler := strings.Repeat("padding ", 2000)
	for _, tc := range []struct {
		name   string
		answer func(w http.ResponseWriter, r *http.Request)
		want   []string // in the error
	}{
		{"html page quoting the form", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusBadGateway)
			fmt.Fprintf(w, "<html><body>upstream refused POST with %s\n%s</body></html>", sent(r), filler)
		}, []string{"502 Bad Gateway", "upstream refused POST"}},
		{"description quoting the secret", func(w http.ResponseWriter, r *http.Request) {
			_ = r.ParseForm()
			_, pw, _ := r.BasicAuth()
			pw, _ = url.QueryUnescape(pw)
			cred := pw + r.PostForm.Get("client_secret") + r.PostForm.Get("client_assertion")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": "invalid_client",
				"error_description": "AADSTS7000215: Invalid client secret provided: " + cred + " (its first part: " + cred[:12] + ") " + filler})
		}, []string{"401 Unauthorized", `error="invalid_client"`, "AADSTS7000215: Invalid client secret provided"}},
		{"json without an error code", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_, pw, _ := r.BasicAuth()
			_ = r.ParseForm()
			_ = json.NewEncoder(w).Encode(map[string]any{"message": "bad request", "received": map[string]string{
				"client_secret": r.PostForm.Get("client_secret"), "password": pw, "client_assertion": r.PostForm.Get("client_assertion"),
				"header": r.Header.Get("Authorization")}})
		}, []string{"400 Bad Request", "bad request"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(tc.answer))
			defer srv.Close()
			for _, cfg := range []oauthclient.Config{
				{TokenURL: srv.URL + "/token", ClientID: "client-4", ClientSecret: secret},
				{TokenURL: srv.URL + "/token", ClientID: "client-4", ClientAssertionFile: file},
			} {
				src, err := oauthclient.New(cfg)
				if err != nil {
					t.Fatal(err)
				}
				_, err = src.Authorization(context.Background())
				if !errors.Is(err, oauthclient.ErrNoToken) {
					t.Fatalf("err = %v", err)
				}
				text := err.Error()
				for _, c := range []string{secret, assertion} {
					for i := 0; i+8 <= len(c); i++ {
						if strings.Contains(text, c[i:i+8]) || strings.Contains(text, url.QueryEscape(c[i:i+8])) {
							t.Fatalf("the error quotes %q of the credential %q:\n%s", c[i:i+8], c, text)
						}
					}
				}
				if len(text) > 800 {
					t.Errorf("the error is %d bytes long:\n%s", len(text), text)
				}
				for _, w := range tc.want {
					if !strings.Contains(text, w) {
						t.Errorf("the error lacks %q:\n%s", w, text)
					}
				}
			}
		})
	}
}
