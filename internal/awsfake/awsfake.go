// Package awsfake holds what tests of the gateway's AWS signing (enforcer/awsauth) check
// requests with: SigV4Problem verifies a request's Signature Version 4 as AWS does,
// with AWS's own signer; STS (sts.go) is a stand-in for AWS STS's
// AssumeRoleWithWebIdentity, the call behind EKS's IAM roles for service accounts.
package awsfake

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// SigV4Problem checks r's SigV4 signature as AWS does: the canonical request of what
// arrived (its body's hash), signed with the secret at the instant it names, gives the
// Authorization it carries. "" when it does. The credentials are long-term ones (no
// session token): r must carry no X-Amz-Security-Token.
func SigV4Problem(r *http.Request, body []byte, key, secret, region, service string) string {
	return SigV4ProblemWith(r, body, aws.Credentials{AccessKeyID: key, SecretAccessKey: secret}, region, service)
}

// SigV4ProblemWith is SigV4Problem for creds, temporary ones included (STS's): a
// session token must arrive, signed, in X-Amz-Security-Token.
func SigV4ProblemWith(r *http.Request, body []byte, creds aws.Credentials, region, service string) string {
	auth := r.Header.Get("Authorization")
	if !strings.HasPrefix(auth, "AWS4-HMAC-SHA256 Credential="+creds.AccessKeyID+"/") || !strings.Contains(auth, "/"+region+"/"+service+"/aws4_request") {
		return "Authorization " + auth
	}
	at, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil || time.Since(at) > time.Minute {
		return "X-Amz-Date " + r.Header.Get("X-Amz-Date")
	}
	_, signed, _ := strings.Cut(auth, "SignedHeaders=")
	signed, _, _ = strings.Cut(signed, ",")
	names := strings.Split(signed, ";")
	token := r.Header.Values("X-Amz-Security-Token")
	switch {
	case creds.SessionToken == "" && len(token) > 0:
		return "X-Amz-Security-Token " + strings.Join(token, ",") + " with long-term credentials"
	case creds.SessionToken != "" && (len(token) != 1 || token[0] != creds.SessionToken):
		return "X-Amz-Security-Token " + strings.Join(token, ",") + ", not the session's token"
	case creds.SessionToken != "" && !slices.Contains(names, "x-amz-security-token"):
		return "the session token is not signed (SignedHeaders=" + signed + ")"
	}
	again, _ := http.NewRequest(r.Method, "http://"+r.Host+r.URL.RequestURI(), nil)
	again.ContentLength = int64(len(body))
	for _, h := range names {
		if h != "host" && h != "content-length" {
			again.Header[http.CanonicalHeaderKey(h)] = r.Header.Values(h)
		}
	}
	sum := sha256.Sum256(body)
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, again, hex.EncodeToString(sum[:]), service, region, at); err != nil {
		return err.Error()
	}
	if again.Header.Get("Authorization") != auth {
		return "the signature does not match the request (" + auth + ")"
	}
	return ""
}
