package oauthclient_test

import (
	"context"
	"errors"
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
