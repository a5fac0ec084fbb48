package awsfake

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// RoleARN is the IAM role the fake STS lets a web identity assume (AWS_ROLE_ARN).
const RoleARN = "arn:aws:iam::123456789012:role/tollgate-bedrock"

// stsNamespace is the XML namespace of STS's answers.
const stsNamespace = "https://sts.amazonaws.com/doc/2011-06-15/"

// STS is a stand-in for AWS STS's AssumeRoleWithWebIdentity (the query API: a POST form
// of Action, Version, RoleArn, RoleSessionName and WebIdentityToken, answered in XML),
// for the AWS SDK's web identity credentials: EKS's IAM roles for service accounts,
// where AWS_ROLE_ARN names the role and AWS_WEB_IDENTITY_TOKEN_FILE the service
// account's projected token; AWS_ENDPOINT_URL_STS sends the SDK here.
//
// It checks what STS checks of the call, short of the token's signature: the token is
// the one this fake handed out (Token, TokenFile: a JWT in form, its signature random),
// the role is RoleARN, a session name is given. Only then does it issue temporary
// credentials, an hour long: access key id ASIAFAKESTS000000001 (and on), a random
// secret, a session token; Issued tells them, for SigV4ProblemWith. Otherwise it
// answers STS's error (InvalidIdentityToken 400, AccessDenied 403, ValidationError or
// InvalidAction 400).
type STS struct {
	URL   string
	token string

	mu sync.Mutex
	// asked counts the calls, refused ones included; issued are the credentials given,
	// in order.
	asked  int
	issued []aws.Credentials
}

// StartSTS starts the fake; it stops at the test's end.
func StartSTS(t testing.TB) *STS {
	t.Helper()
	s := &STS{token: fakeJWT()}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /", s.serve)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	s.URL = srv.URL
	return s
}

// Token is the web identity token the fake accepts.
func (s *STS) Token() string { return s.token }

// TokenFile writes Token in a temporary directory, as Kubernetes projects a service
// account's token (no trailing line break), and returns its path.
func (s *STS) TokenFile(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte(s.token), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Asked is how many calls came, refused ones included.
func (s *STS) Asked() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.asked
}

// Issued returns the credentials issued so far, in order.
func (s *STS) Issued() []aws.Credentials {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]aws.Credentials(nil), s.issued...)
}

func (s *STS) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.asked++
	s.mu.Unlock()
	if err := r.ParseForm(); err != nil {
		stsError(w, http.StatusBadRequest, "MalformedQueryString", err.Error())
		return
	}
	f := r.PostForm
	session := f.Get("RoleSessionName")
	switch {
	case f.Get("Action") != "AssumeRoleWithWebIdentity" || f.Get("Version") != "2011-06-15":
		stsError(w, http.StatusBadRequest, "InvalidAction", fmt.Sprintf("Could not find operation %s for version %s", f.Get("Action"), f.Get("Version")))
		return
	case session == "":
		stsError(w, http.StatusBadRequest, "ValidationError", "1 validation error detected: Value null at 'roleSessionName' failed to satisfy constraint: Member must not be null")
		return
	case f.Get("WebIdentityToken") != s.token:
		stsError(w, http.StatusBadRequest, "InvalidIdentityToken", "The web identity token is not the one this fake handed out")
		return
	case f.Get("RoleArn") != RoleARN:
		stsError(w, http.StatusForbidden, "AccessDenied", "Not authorized to perform sts:AssumeRoleWithWebIdentity on "+f.Get("RoleArn"))
		return
	}
	s.mu.Lock()
	c := aws.Credentials{
		AccessKeyID:     fmt.Sprintf("ASIAFAKESTS%09d", len(s.issued)+1),
		SecretAccessKey: randomText(30),
		SessionToken:    "FwoGZXIvYXdzEFAKE" + randomText(60),
		CanExpire:       true,
		Expires:         time.Now().Add(time.Hour).UTC().Truncate(time.Second),
	}
	s.issued = append(s.issued, c)
	s.mu.Unlock()

	type credentials struct {
		AccessKeyID     string `xml:"AccessKeyId"`
		SecretAccessKey string
		SessionToken    string
		Expiration      string
	}
	type result struct {
		SubjectFromWebIdentityToken string
		Audience                    string
		AssumedRoleUser             struct{ Arn, AssumedRoleId string }
		Credentials                 credentials
		Provider                    string
	}
	type response struct {
		XMLName                         xml.Name `xml:"AssumeRoleWithWebIdentityResponse"`
		Xmlns                           string   `xml:"xmlns,attr"`
		AssumeRoleWithWebIdentityResult result
		ResponseMetadata                struct{ RequestId string }
	}
	res := response{Xmlns: stsNamespace, AssumeRoleWithWebIdentityResult: result{
		SubjectFromWebIdentityToken: "system:serviceaccount:tollgate:tollgate-enforcer",
		Audience:                    "sts.amazonaws.com",
		Credentials:                 credentials{c.AccessKeyID, c.SecretAccessKey, c.SessionToken, c.Expires.Format(time.RFC3339)},
		Provider:                    "arn:aws:iam::123456789012:oidc-provider/oidc.eks.us-east-1.amazonaws.com/id/FAKE",
	}}
	res.AssumeRoleWithWebIdentityResult.AssumedRoleUser.Arn = "arn:aws:sts::123456789012:assumed-role/tollgate-bedrock/" + session
	res.AssumeRoleWithWebIdentityResult.AssumedRoleUser.AssumedRoleId = "AROAFAKEROLE0000000:" + session
	res.ResponseMetadata.RequestId = requestID()
	writeXML(w, http.StatusOK, res.ResponseMetadata.RequestId, res)
}

// stsError answers STS's error document.
func stsError(w http.ResponseWriter, status int, code, message string) {
	type errorResponse struct {
		XMLName   xml.Name `xml:"ErrorResponse"`
		Xmlns     string   `xml:"xmlns,attr"`
		Error     struct{ Type, Code, Message string }
		RequestId string
	}
	e := errorResponse{Xmlns: stsNamespace, RequestId: requestID()}
	e.Error.Type, e.Error.Code, e.Error.Message = "Sender", code, message
	writeXML(w, status, e.RequestId, e)
}

// writeXML answers v in XML, with its request id also in the header, as STS does.
func writeXML(w http.ResponseWriter, status int, id string, v any) {
	b, err := xml.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/xml")
	w.Header().Set("X-Amzn-Requestid", id)
	w.WriteHeader(status)
	_, _ = w.Write(append([]byte(xml.Header), b...))
}

// fakeJWT is a token shaped as EKS's projected service account token: an RS256 JWT for
// the audience sts.amazonaws.com, its signature random bytes.
func fakeJWT() string {
	seg := func(v any) string {
		b, _ := json.Marshal(v)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	now := time.Now().Unix()
	sig := make([]byte, 256)
	_, _ = rand.Read(sig)
	return seg(map[string]any{"alg": "RS256", "kid": "fake-eks-oidc"}) + "." +
		seg(map[string]any{"aud": []string{"sts.amazonaws.com"}, "exp": now + 86400, "iat": now,
			"iss": "https://oidc.eks.us-east-1.amazonaws.com/id/FAKE", "sub": "system:serviceaccount:tollgate:tollgate-enforcer"}) + "." +
		base64.RawURLEncoding.EncodeToString(sig)
}

// requestID is a new request id, a UUID as STS's.
func requestID() string {
	h := randomText(16)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// randomText is n random bytes in hex.
func randomText(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
