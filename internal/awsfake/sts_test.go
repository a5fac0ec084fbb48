package awsfake_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/config"

	"github.com/tollgate-dev/tollgate/internal/awsfake"
)

// webIdentityEnv gives the AWS SDK of this process only the web identity of tokenFile
// for roleARN, its STS at sts.
func webIdentityEnv(t *testing.T, sts *awsfake.STS, roleARN, tokenFile string) {
	dir := t.TempDir()
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "", "AWS_SESSION_TOKEN": "", "AWS_PROFILE": "",
		"AWS_CONFIG_FILE": filepath.Join(dir, "config"), "AWS_SHARED_CREDENTIALS_FILE": filepath.Join(dir, "credentials"),
		"AWS_EC2_METADATA_DISABLED": "true", "AWS_ROLE_SESSION_NAME": "",
		"AWS_ROLE_ARN": roleARN, "AWS_WEB_IDENTITY_TOKEN_FILE": tokenFile, "AWS_ENDPOINT_URL_STS": sts.URL,
	} {
		t.Setenv(k, v)
	}
}

// TestSTSWithTheSDK: AWS's SDK (aws-sdk-go-v2's default chain) gets the fake's
// credentials for a web identity, and the fake refuses another token or role.
func TestSTSWithTheSDK(t *testing.T) {
	sts := awsfake.StartSTS(t)
	retrieve := func(t *testing.T) (aws.Credentials, error) {
		cfg, err := config.LoadDefaultConfig(context.Background(), config.WithRegion("us-east-1"), config.WithRetryMaxAttempts(1))
		if err != nil {
			t.Fatal(err)
		}
		return cfg.Credentials.Retrieve(context.Background())
	}
	t.Run("issued", func(t *testing.T) {
		webIdentityEnv(t, sts, awsfake.RoleARN, sts.TokenFile(t))
		c, err := retrieve(t)
		if err != nil {
			t.Fatal(err)
		}
		issued := sts.Issued()
		if len(issued) != 1 || c.AccessKeyID != issued[0].AccessKeyID || c.SecretAccessKey != issued[0].SecretAccessKey ||
			c.SessionToken != issued[0].SessionToken || !c.Expires.Equal(issued[0].Expires) || c.AccountID != "123456789012" {
			t.Fatalf("the SDK got %+v, the fake issued %+v", c, issued)
		}
		if d := time.Until(c.Expires); d < 59*time.Minute || d > time.Hour {
			t.Errorf("the credentials expire in %s, want an hour", d)
		}
	})
	for _, tc := range []struct{ name, role, token string }{
		{"another token", awsfake.RoleARN, "eyJhbGciOiJSUzI1NiJ9.e30.c2ln"},
		{"another role", "arn:aws:iam::123456789012:role/other", sts.Token()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "token")
			if err := os.WriteFile(file, []byte(tc.token), 0o600); err != nil {
				t.Fatal(err)
			}
			webIdentityEnv(t, sts, tc.role, file)
			before := len(sts.Issued())
			if c, err := retrieve(t); err == nil {
				t.Fatalf("the SDK got %+v", c)
			} else {
				t.Logf("refused: %v", err)
			}
			if len(sts.Issued()) != before {
				t.Error("the fake issued credentials")
			}
		})
	}
}

// TestSigV4ProblemWithASessionToken: a request signed with temporary credentials
// passes, and fails with another secret, session token (or none), key id or body.
func TestSigV4ProblemWithASessionToken(t *testing.T) {
	creds := aws.Credentials{AccessKeyID: "ASIAFAKESTS000000001", SecretAccessKey: "secret", SessionToken: "token"}
	body := []byte(`{"messages":[]}`)
	req, err := http.NewRequest("POST", "http://bedrock.test/model/anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	sum := sha256.Sum256(body)
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, req, hex.EncodeToString(sum[:]), "bedrock", "us-east-1", time.Now()); err != nil {
		t.Fatal(err)
	}
	if p := awsfake.SigV4ProblemWith(req, body, creds, "us-east-1", "bedrock"); p != "" {
		t.Fatalf("a good signature: %s", p)
	}
	for name, c := range map[string]aws.Credentials{
		"another secret":        {AccessKeyID: creds.AccessKeyID, SecretAccessKey: "other", SessionToken: creds.SessionToken},
		"another session token": {AccessKeyID: creds.AccessKeyID, SecretAccessKey: creds.SecretAccessKey, SessionToken: "other"},
		"no session token":      {AccessKeyID: creds.AccessKeyID, SecretAccessKey: creds.SecretAccessKey},
		"another key id":        {AccessKeyID: "ASIAOTHER", SecretAccessKey: creds.SecretAccessKey, SessionToken: creds.SessionToken},
	} {
		if p := awsfake.SigV4ProblemWith(req, body, c, "us-east-1", "bedrock"); p == "" {
			t.Errorf("%s: the signature passed", name)
		}
	}
	if p := awsfake.SigV4ProblemWith(req, []byte(`{"messages":[ ]}`), creds, "us-east-1", "bedrock"); p == "" {
		t.Error("another body: the signature passed")
	}
}
