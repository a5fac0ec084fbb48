package awsauth_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/tollgate-dev/tollgate/enforcer/awsauth"
)

// isolate gives the test its own AWS environment: static keys when key is not "", no
// shared files, no instance metadata.
func isolate(t *testing.T, key string) {
	t.Helper()
	dir := t.TempDir()
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": "", "AWS_SESSION_TOKEN": "",
		"AWS_CONFIG_FILE": filepath.Join(dir, "config"), "AWS_SHARED_CREDENTIALS_FILE": filepath.Join(dir, "credentials"),
		"AWS_PROFILE": "", "AWS_ROLE_ARN": "", "AWS_WEB_IDENTITY_TOKEN_FILE": "", "AWS_CONTAINER_CREDENTIALS_FULL_URI": "",
		"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "", "AWS_EC2_METADATA_DISABLED": "true",
	} {
		t.Setenv(k, v)
	}
	if key != "" {
		t.Setenv("AWS_SECRET_ACCESS_KEY", "secret-"+key)
		t.Setenv("AWS_SESSION_TOKEN", "session-"+key)
	}
}

// verify checks req's signature as AWS would: the same canonical request, signed with
// the same secret at the instant it names, gives the same Authorization.
func verify(t *testing.T, req *http.Request, body []byte, key, region, service string) {
	t.Helper()
	at, err := time.Parse("20060102T150405Z", req.Header.Get("X-Amz-Date"))
	if err != nil {
		t.Fatalf("X-Amz-Date %q: %v", req.Header.Get("X-Amz-Date"), err)
	}
	again := req.Clone(context.Background())
	again.Header.Del("Authorization")
	hash := req.Header.Get("X-Amz-Content-Sha256")
	if hash == "" {
		hash = sha256Hex(body)
	}
	creds := aws.Credentials{AccessKeyID: key, SecretAccessKey: "secret-" + key, SessionToken: "session-" + key}
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, again, hash, service, region, at); err != nil {
		t.Fatal(err)
	}
	if got, want := req.Header.Get("Authorization"), again.Header.Get("Authorization"); got != want {
		t.Fatalf("Authorization %q, want %q", got, want)
	}
}

// A request is signed for its region and service, its body hashed, with the
// environment's credentials; the client's own signature headers are replaced.
func TestSign(t *testing.T) {
	isolate(t, "AKIDTEST")
	s, err := awsauth.New(context.Background(), "us-east-1", "")
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"messages":[{"role":"user","content":[{"text":"hi"}]}]}`)
	req, _ := http.NewRequest("POST", "https://bedrock-runtime.us-east-1.amazonaws.com/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Amz-Date", "20000101T000000Z") // a client's, replaced
	req.Header.Set("X-Amz-Security-Token", "the client's")
	if err := s.Sign(context.Background(), req, body, false); err != nil {
		t.Fatal(err)
	}
	auth := req.Header.Get("Authorization")
	if !strings.HasPrefix(auth, "AWS4-HMAC-SHA256 Credential=AKIDTEST/") || !strings.Contains(auth, "/us-east-1/bedrock/aws4_request") {
		t.Fatalf("Authorization %q", auth)
	}
	if req.Header.Get("X-Amz-Security-Token") != "session-AKIDTEST" || req.Header.Get("X-Amz-Date") == "20000101T000000Z" {
		t.Fatalf("signature headers %v", req.Header)
	}
	verify(t, req, body, "AKIDTEST", "us-east-1", "bedrock")
	// A changed body no longer matches its signature.
	tampered := req.Clone(context.Background())
	again := req.Clone(context.Background())
	again.Header.Del("Authorization")
	at, _ := time.Parse("20060102T150405Z", req.Header.Get("X-Amz-Date"))
	_ = v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{AccessKeyID: "AKIDTEST", SecretAccessKey: "secret-AKIDTEST", SessionToken: "session-AKIDTEST"},
		again, sha256Hex([]byte("other")), "bedrock", "us-east-1", at)
	if tampered.Header.Get("Authorization") == again.Header.Get("Authorization") {
		t.Fatal("the signature does not cover the body")
	}
}

// A streamed body is signed as an unsigned payload; the service can be named.
func TestSignStreamedAndService(t *testing.T) {
	isolate(t, "AKIDTEST")
	s, err := awsauth.New(context.Background(), "eu-west-3", "bedrock-runtime")
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("POST", "https://example.com/x", strings.NewReader("streamed"))
	if err := s.Sign(context.Background(), req, nil, true); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(req.Header.Get("Authorization"), "/eu-west-3/bedrock-runtime/aws4_request") {
		t.Fatalf("Authorization %q", req.Header.Get("Authorization"))
	}
	if req.Header.Get("X-Amz-Content-Sha256") != "UNSIGNED-PAYLOAD" {
		t.Fatalf("a streamed body's request says %v", req.Header)
	}
	verify(t, req, nil, "AKIDTEST", "eu-west-3", "bedrock-runtime")
}

// No credentials anywhere: New succeeds (nothing is fetched), Sign and Warm fail with
// ErrNoCredentials; no region is refused at once.
func TestNoCredentials(t *testing.T) {
	isolate(t, "")
	s, err := awsauth.New(context.Background(), "us-east-1", "")
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("POST", "https://example.com/x", nil)
	if err := s.Sign(context.Background(), req, nil, false); !errors.Is(err, awsauth.ErrNoCredentials) {
		t.Fatalf("Sign: %v", err)
	}
	if err := s.Warm(context.Background()); !errors.Is(err, awsauth.ErrNoCredentials) {
		t.Fatalf("Warm: %v", err)
	}
	if req.Header.Get("Authorization") != "" {
		t.Fatal("a request was signed without credentials")
	}
	if _, err := awsauth.New(context.Background(), "", ""); err == nil || !strings.Contains(err.Error(), "region") {
		t.Fatalf("no region: %v", err)
	}
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Temporary credentials are fetched again before they expire, not used to their last
// instant: a request signed in the last moments of its credentials reaches AWS after
// they expired and is refused (ExpiredTokenException), which the SDK's ExpiryWindow
// exists to prevent. Here a credential process hands out credentials that expire in
// 30s: the next signature fetches new ones.
func TestCredentialsAboutToExpireAreFetchedAgain(t *testing.T) {
	isolate(t, "")
	dir := t.TempDir()
	count := filepath.Join(dir, "count")
	script := filepath.Join(dir, "creds.sh")
	exp := time.Now().Add(30 * time.Second).UTC().Format(time.RFC3339)
	body := "#!/bin/sh\necho x >> " + count + "\necho '{\"Version\":1,\"AccessKeyId\":\"AKIDPROC\",\"SecretAccessKey\":\"secret-AKIDPROC\",\"SessionToken\":\"session-AKIDPROC\",\"Expiration\":\"" + exp + "\"}'\n"
	if err := os.WriteFile(script, []byte(body), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(os.Getenv("AWS_CONFIG_FILE"), []byte("[profile proc]\ncredential_process = "+script+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_PROFILE", "proc")
	s, err := awsauth.New(context.Background(), "us-east-1", "")
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		req, _ := http.NewRequest("POST", "https://bedrock-runtime.us-east-1.amazonaws.com/x", nil)
		if err := s.Sign(context.Background(), req, []byte("{}"), false); err != nil {
			t.Fatal(err)
		}
		verify(t, req, []byte("{}"), "AKIDPROC", "us-east-1", "bedrock")
	}
	b, err := os.ReadFile(count)
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(b, []byte("x")); n != 2 {
		t.Fatalf("credentials fetched %d times for 2 signatures, 30s before they expire; want 2", n)
	}
}
