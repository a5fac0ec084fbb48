package e2e_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/tollgate-dev/tollgate/e2e/fakellm"
	"github.com/tollgate-dev/tollgate/internal/awsfake"
)

// TestBedrockSignedThroughTheGateway: AWS's official JavaScript SDK
// (@aws-sdk/client-bedrock-runtime) calls Amazon Bedrock Runtime through the gateway
// with the member's Tollgate key as its Bedrock API key (Authorization: Bearer), and the
// gateway's route (aws: {region: us-east-1}) sends each request signed with AWS
// Signature Version 4 by the enforcer's own AWS credentials, from AWS's default chain.
// The fake Bedrock checks every request's signature as AWS does (awsfake.SigV4ProblemWith:
// the key id, the secret, the region, the service bedrock, the body's hash, the session
// token when there is one).
//
// One stack per source of credentials, the enforcer running in this process and AWS's
// SDK reading its environment (so nothing here is parallel, and every other source of
// this machine is shut out: no profile files, no instance metadata):
//   - The environment's access key (AWS_ACCESS_KEY_ID...): InvokeModel,
//     InvokeModelWithResponseStream, Converse and ConverseStream each reach the provider
//     once, signed, with nothing of the member's key, and are charged exactly as
//     TestBedrockThroughTheGateway's; then a blocked member's call is the fast 429 and
//     reaches nothing.
//   - A web identity (EKS's IAM roles for service accounts: AWS_ROLE_ARN,
//     AWS_WEB_IDENTITY_TOKEN_FILE), STS being awsfake.STS (AWS_ENDPOINT_URL_STS): the
//     calls are signed with the temporary credentials STS issued, their session token
//     in X-Amz-Security-Token, and STS is asked once for all of them (cached).
//   - No credentials at all: the 502 service_gateway_upstream_credential, nothing sent,
//     nothing charged.
func TestBedrockSignedThroughTheGateway(t *testing.T) {
	dir := sdkDir(t)
	awayFromDayBoundary(t, 3*time.Minute)
	global, regional := cloudClaudeCost(t)
	// The block below lowers the member's limit to 0.01 USD: four calls must be over it,
	// and their sum far from the 1 USD limit they are made under.
	if global <= usd/100 || 4*regional >= usd {
		t.Fatalf("the test's own arithmetic: %d micro-USD a call", global)
	}
	const modelID = "anthropic.claude-sonnet-4-5-20250929-v1:0"

	t.Run("environment credentials", func(t *testing.T) {
		creds := aws.Credentials{AccessKeyID: "AKIAFAKEGATEWAY00001", SecretAccessKey: "gateway-secret-access-key-0123456789abcd"}
		awsEnvironment(t, map[string]string{"AWS_ACCESS_KEY_ID": creds.AccessKeyID, "AWS_SECRET_ACCESS_KEY": creds.SecretAccessKey})
		b := startSignedBedrock(t, func() aws.Credentials { return creds })
		s := b.startStack(t, "")
		o := s.setUpOrg(t)

		n, total := 0, int64(0)
		for _, tc := range []struct {
			scenario, model, api, operation string
			stream                          bool
		}{
			{"invoke", modelID, fakellm.BedrockInvoke, "invoke", false},
			{"invoke-stream", "global." + modelID, fakellm.BedrockInvokeStream, "invoke-with-response-stream", true},
			{"converse", modelID, fakellm.BedrockConverse, "converse", false},
			{"converse-stream", "us." + modelID, fakellm.BedrockConverseStream, "converse-stream", true},
		} {
			t.Run(tc.scenario, func(t *testing.T) {
				before := len(b.fake.Calls())
				r := runSDK(t, dir, "bedrock.mjs", tc.scenario, s.gateway, o.key, tc.model)
				if !r.OK || r.Status != 200 || r.Text != fakellm.Text {
					t.Fatalf("the call failed or lost its text: %+v; the provider's signature checks: %q", r, b.Problems())
				}
				call := b.signedCall(t, before, creds, o.key)
				if call.API != tc.api || call.Model != tc.model || call.Stream != tc.stream || call.Path != "/model/"+tc.model+"/"+tc.operation {
					t.Fatalf("the provider got %s %s (API %q, model %q, stream %v), want %s for %s", call.Method, call.Path, call.API, call.Model, call.Stream, tc.api, tc.model)
				}
				want := regional
				if strings.HasPrefix(tc.model, "global.") {
					want = global
				}
				bedrockCharged(t, s, call, want)
				n, total = n+1, total+want
			})
		}
		s.waitUsed(t, o, n, total)

		t.Run("a blocked member gets the 429, not retried", func(t *testing.T) {
			s.guardPolicy(t, o, "0.01", nil)
			s.waitBlocked(t, o)
			refusedBefore := s.metric(t, "tollgate_enforcer_gateway_requests_total", "outcome", "refused")
			before := len(b.fake.Calls())
			for _, scenario := range []string{"invoke", "converse-stream"} {
				runSDK(t, dir, "bedrock.mjs", scenario, s.gateway, o.key, modelID).wasRefusedFast(t)
			}
			if got := len(b.fake.Calls()) - before; got != 0 {
				t.Errorf("refused calls reached the provider (%d calls)", got)
			}
			if got := s.metric(t, "tollgate_enforcer_gateway_requests_total", "outcome", "refused") - refusedBefore; got != 2 {
				t.Errorf("the gateway refused %v requests, want 2 (one per call)", got)
			}
			if st := s.status(t, o); st.Buckets[0].UsedMicroUsd != total {
				t.Errorf("used %d after the refusals, want %d", st.Buckets[0].UsedMicroUsd, total)
			}
		})
	})

	t.Run("web identity (EKS IAM roles for service accounts)", func(t *testing.T) {
		sts := awsfake.StartSTS(t)
		awsEnvironment(t, map[string]string{"AWS_ROLE_ARN": awsfake.RoleARN, "AWS_WEB_IDENTITY_TOKEN_FILE": sts.TokenFile(t), "AWS_ENDPOINT_URL_STS": sts.URL})
		// The credentials STS issued first: the only ones, if they are cached.
		issued := func() aws.Credentials {
			if c := sts.Issued(); len(c) > 0 {
				return c[0]
			}
			return aws.Credentials{AccessKeyID: "(none issued)"}
		}
		b := startSignedBedrock(t, issued)
		s := b.startStack(t, "bedrock")
		o := s.setUpOrg(t)

		n, total := 0, int64(0)
		for _, tc := range []struct{ scenario, model, path string }{
			{"converse", modelID, "/model/" + modelID + "/converse"},
			{"converse-stream", "us." + modelID, "/model/us." + modelID + "/converse-stream"},
		} {
			t.Run(tc.scenario, func(t *testing.T) {
				before := len(b.fake.Calls())
				r := runSDK(t, dir, "bedrock.mjs", tc.scenario, s.gateway, o.key, tc.model)
				if !r.OK || r.Status != 200 || r.Text != fakellm.Text {
					t.Fatalf("the call failed or lost its text: %+v; the provider's signature checks: %q", r, b.Problems())
				}
				c := issued()
				call := b.signedCall(t, before, c, o.key)
				if call.Path != tc.path || call.Model != tc.model {
					t.Fatalf("the provider got %s %s (model %q), want %s", call.Method, call.Path, call.Model, tc.path)
				}
				if !strings.HasPrefix(c.AccessKeyID, "ASIAFAKESTS") || call.Header.Get("X-Amz-Security-Token") != c.SessionToken {
					t.Errorf("the provider got the key id of %q and the session token %q, want STS's %s and %q",
						call.Header.Get("Authorization"), call.Header.Get("X-Amz-Security-Token"), c.AccessKeyID, c.SessionToken)
				}
				bedrockCharged(t, s, call, regional)
				n, total = n+1, total+regional
			})
		}
		s.waitUsed(t, o, n, total)
		// At start (WarmCredentials) or at the first call, then cached for the hour.
		if asked, got := sts.Asked(), sts.Issued(); asked != 1 || len(got) != 1 {
			t.Errorf("STS was asked %d times and issued %d credentials for %d calls, want once", asked, len(got), n)
		}
	})

	t.Run("no credentials: a 502, nothing sent, nothing charged", func(t *testing.T) {
		awsEnvironment(t, nil)
		b := startSignedBedrock(t, func() aws.Credentials { return aws.Credentials{AccessKeyID: "(none)"} })
		s := b.startStack(t, "")
		o := s.setUpOrg(t)
		start := time.Now()
		status, h, body := vertexPost(t, s.gateway, "/model/anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse", o.key,
			`{"messages":[{"role":"user","content":[{"text":"How are tolls paid?"}]}],"inferenceConfig":{"maxTokens":1024}}`)
		t.Logf("the gateway answered %d in %s: %s", status, time.Since(start).Round(time.Millisecond), body)
		if status != http.StatusBadGateway || !strings.Contains(body, "service_gateway_upstream_credential") {
			t.Fatalf("got %d %s, want the 502 service_gateway_upstream_credential", status, body)
		}
		if got := len(b.fake.Calls()); got != 0 {
			t.Errorf("the provider got %d calls without credentials", got)
		}
		if got := s.metric(t, "tollgate_enforcer_gateway_requests_total", "outcome", "no_credential"); got != 1 {
			t.Errorf("the gateway counted %v requests without a credential, want 1", got)
		}
		rec := waitReceipt(t, s, h.Get("X-Service-Request-Id"))
		if rec.cost() != 0 {
			t.Errorf("the refused request's receipt %s charges %d", rec, rec.cost())
		}
		if used := s.status(t, o).Buckets[0].UsedMicroUsd; used != 0 {
			t.Errorf("used %d after a request that reached no provider, want 0", used)
		}
	})
}

// awsCredentialSources are the environment variables through which aws-sdk-go-v2's
// default chain (config.LoadDefaultConfig) finds credentials or their endpoints.
var awsCredentialSources = []string{
	"AWS_ACCESS_KEY_ID", "AWS_ACCESS_KEY", "AWS_SECRET_ACCESS_KEY", "AWS_SECRET_KEY", "AWS_SESSION_TOKEN",
	"AWS_PROFILE", "AWS_DEFAULT_PROFILE",
	"AWS_ROLE_ARN", "AWS_ROLE_SESSION_NAME", "AWS_WEB_IDENTITY_TOKEN_FILE",
	"AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
	"AWS_CONTAINER_AUTHORIZATION_TOKEN", "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
	"AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_STS", "AWS_EC2_METADATA_SERVICE_ENDPOINT",
}

// awsEnvironment gives the AWS SDK of this process (the enforcer's) the credential
// sources set and no other, until the test's end: every awsCredentialSources variable
// unset, empty profile files, the EC2 instance metadata service off.
func awsEnvironment(t *testing.T, set map[string]string) {
	t.Helper()
	for _, k := range awsCredentialSources {
		t.Setenv(k, "") // restored at the test's end
		os.Unsetenv(k)
	}
	dir := t.TempDir()
	for k, name := range map[string]string{"AWS_CONFIG_FILE": "config", "AWS_SHARED_CREDENTIALS_FILE": "credentials"} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		t.Setenv(k, path)
	}
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	for k, v := range set {
		t.Setenv(k, v)
	}
}

// signedBedrock is a fake Bedrock Runtime (fakellm, answering cloudClaudeUsage) that
// checks every request's SigV4 signature, for us-east-1 and bedrock, against the
// credentials want gives when the request comes.
type signedBedrock struct {
	fake *fakellm.Server
	url  string
	want func() aws.Credentials

	mu sync.Mutex
	// problems are the requests whose signature failed, and why.
	problems []string
}

func startSignedBedrock(t *testing.T, want func() aws.Credentials) *signedBedrock {
	t.Helper()
	b := &signedBedrock{fake: &fakellm.Server{Usage: func(fakellm.Call) fakellm.Usage { return cloudClaudeUsage }}, want: want}
	srv := httptest.NewServer(b)
	t.Cleanup(srv.Close)
	b.url = srv.URL
	return b
}

func (b *signedBedrock) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if p := awsfake.SigV4ProblemWith(r, body, b.want(), "us-east-1", "bedrock"); p != "" {
		b.mu.Lock()
		b.problems = append(b.problems, fmt.Sprintf("%s %s: %s", r.Method, r.URL.EscapedPath(), p))
		b.mu.Unlock()
		// As AWS would: the SDK's call fails too.
		w.Header().Set("X-Amzn-Errortype", "InvalidSignatureException")
		http.Error(w, `{"message":"The request signature we calculated does not match the signature you provided."}`, http.StatusForbidden)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	b.fake.ServeHTTP(w, r)
}

// Problems returns the signature failures so far.
func (b *signedBedrock) Problems() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.problems...)
}

// startStack starts a stack whose gateway has one route, /model/ to the fake, signed
// for us-east-1 (and service, when not "").
func (b *signedBedrock) startStack(t *testing.T, service string) *stack {
	t.Helper()
	route := "routes:\n  - prefix: /model/\n    upstream: " + b.url + "\n    aws:\n      region: us-east-1\n"
	if service != "" {
		route += "      service: " + service + "\n"
	}
	routes := filepath.Join(t.TempDir(), "routes.yaml")
	if err := os.WriteFile(routes, []byte(route), 0o600); err != nil {
		t.Fatal(err)
	}
	return startStack(t, map[string]string{"TOLLGATE_GATEWAY_ADDR": "127.0.0.1:0", "TOLLGATE_GATEWAY_ROUTES": routes})
}

// signedCall is the one call the provider got since it had before: signed with creds
// (and so no problem so far), its only Authorization the signature, nothing of the
// member's key (key) anywhere in its headers.
func (b *signedBedrock) signedCall(t *testing.T, before int, creds aws.Credentials, key string) fakellm.Call {
	t.Helper()
	if p := b.Problems(); len(p) > 0 {
		t.Fatalf("the provider got requests it would refuse: %q", p)
	}
	calls := b.fake.Calls()[before:]
	if len(calls) != 1 {
		t.Fatalf("the provider got %d calls: %+v", len(calls), calls)
	}
	call := calls[0]
	if a := call.Header.Values("Authorization"); len(a) != 1 || !strings.HasPrefix(a[0], "AWS4-HMAC-SHA256 Credential="+creds.AccessKeyID+"/") {
		t.Errorf("the provider got Authorization %q, want only the signature of %s", a, creds.AccessKeyID)
	}
	all := strings.Join(flatten(call.Header), "\n")
	if strings.Contains(all, key) || strings.Contains(all, "tgk_") || strings.Contains(all, "Bearer") {
		t.Errorf("the member's Tollgate key reached the provider: %v", call.Header)
	}
	if creds.SessionToken == "" && call.Header.Get("X-Amz-Security-Token") != "" {
		t.Errorf("the provider got a session token with long-term credentials: %q", call.Header.Get("X-Amz-Security-Token"))
	}
	t.Logf("the provider got %s %s, %s", call.Method, call.Path, call.Header.Get("Authorization"))
	return call
}

// bedrockCharged checks the receipt of the provider's call: cost micro-USD, complete,
// from the reported usage at the catalog's price of cloudClaude.
func bedrockCharged(t *testing.T, s *stack, call fakellm.Call, cost int64) {
	t.Helper()
	rec := waitReceipt(t, s, call.Header.Get("X-Service-Request-Id"))
	model, _ := rec["model"].(string)
	t.Logf("receipt: model %q, cost %d (want %d), complete %v, cost_basis %v, price_source %v", model, rec.cost(), cost,
		rec["complete"], rec["cost_basis"], rec["price_source"])
	if rec.cost() != cost || rec["complete"] != true || rec["cost_basis"] != "reported_usage" || rec["price_source"] != "catalog" {
		t.Errorf("receipt %s, want %d micro-USD, complete, from the reported usage at the catalog's price", rec, cost)
	}
	if !strings.Contains(model, cloudClaude) {
		t.Errorf("the receipt's model is %q, want one naming %s", model, cloudClaude)
	}
}
