// Package awsfake holds what tests of the gateway's AWS signing (enforcer/awsauth) check
// requests with: SigV4Problem verifies a request's Signature Version 4 as AWS does,
// with AWS's own signer.
package awsfake

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// SigV4Problem checks r's SigV4 signature as AWS does: the canonical request of what
// arrived (its body's hash), signed with the secret at the instant it names, gives the
// Authorization it carries. "" when it does.
func SigV4Problem(r *http.Request, body []byte, key, secret, region, service string) string {
	auth := r.Header.Get("Authorization")
	if !strings.HasPrefix(auth, "AWS4-HMAC-SHA256 Credential="+key+"/") || !strings.Contains(auth, "/"+region+"/"+service+"/aws4_request") {
		return "Authorization " + auth
	}
	at, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil || time.Since(at) > time.Minute {
		return "X-Amz-Date " + r.Header.Get("X-Amz-Date")
	}
	again, _ := http.NewRequest(r.Method, "http://"+r.Host+r.URL.RequestURI(), nil)
	again.ContentLength = int64(len(body))
	_, signed, _ := strings.Cut(auth, "SignedHeaders=")
	signed, _, _ = strings.Cut(signed, ",")
	for _, h := range strings.Split(signed, ";") {
		if h != "host" && h != "content-length" {
			again.Header[http.CanonicalHeaderKey(h)] = r.Header.Values(h)
		}
	}
	sum := sha256.Sum256(body)
	if err := v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{AccessKeyID: key, SecretAccessKey: secret}, again,
		hex.EncodeToString(sum[:]), service, region, at); err != nil {
		return err.Error()
	}
	if again.Header.Get("Authorization") != auth {
		return "the signature does not match the request (" + auth + ")"
	}
	return ""
}
