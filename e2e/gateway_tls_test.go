package e2e_test

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/e2e/fakellm"
	"github.com/tollgate-dev/tollgate/internal/testtls"
	"github.com/tollgate-dev/tollgate/pkg/pricecatalog"
)

// TestGatewayServesTLS runs the gateway with a certificate of its own
// (TOLLGATE_GATEWAY_TLS_CERT and _KEY), as a client reaches it with no proxy in front:
//   - the official Go SDKs, given a client that trusts the test's CA and nothing else
//     changed (their transport negotiates HTTP/2 by ALPN), make TestGoSDKs' whole suite
//     of calls over HTTPS, every answer HTTP/2: charged exactly, a cancelled stream
//     charged incomplete, the 401, 403 and 429 each sent once;
//   - the official OpenAI Node SDK, trusting the CA by NODE_EXTRA_CA_CERTS, makes a call
//     and a stream over HTTPS, and a Realtime session over wss:// with its own TLS (the
//     SDK's WebSocket takes HTTP/1.1 by ALPN), each response charged;
//   - a plain HTTP request to the port is answered 400 by the server and reaches neither
//     the gate nor the provider;
//   - a renewed pair written over the files (as the kubelet renews a mounted Secret) is
//     served from a handshake within the reload interval, without a restart, and
//     tollgate_enforcer_gateway_tls_certificate_expiration_timestamp_seconds follows it.
func TestGatewayServesTLS(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	awayFromDayBoundary(t, 3*time.Minute)
	ca := testtls.NewCA(t, "gateway TLS test CA")
	certs := t.TempDir()
	served := testtls.Pair{CertFile: filepath.Join(certs, "tls.crt"), KeyFile: filepath.Join(certs, "tls.key")}
	first := ca.Server(t)
	testtls.CopyPair(t, first, served)
	firstLeaf := leafOf(t, served)

	var next fakellm.Usage
	fake, up, upURL := goSDKUpstream(t, &next)
	env := gatewayEnv(upURL)
	env["TOLLGATE_GATEWAY_TLS_CERT"], env["TOLLGATE_GATEWAY_TLS_KEY"] = served.CertFile, served.KeyFile
	s := startStack(t, env)
	if !strings.HasPrefix(s.gateway, "https://") {
		t.Fatalf("the gateway's URL is %s", s.gateway)
	}
	const expiry = "tollgate_enforcer_gateway_tls_certificate_expiration_timestamp_seconds"
	if got := s.metric(t, expiry); got != float64(firstLeaf.NotAfter.Unix()) {
		t.Errorf("%s %v, want the certificate's expiry %d", expiry, got, firstLeaf.NotAfter.Unix())
	}
	roots := x509.NewCertPool()
	pem, err := os.ReadFile(ca.CertFile)
	if err != nil {
		t.Fatal(err)
	}
	roots.AppendCertsFromPEM(pem)

	g := &goSDKRun{s: s, fake: fake, up: up, next: &next}
	t.Run("the Go SDKs over HTTPS", func(t *testing.T) {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: true}
		via := &protoCountingClient{http: &http.Client{Transport: tr}}
		g.run(t, s.gateway, func(t *testing.T) float64 { return s.metric(t, "tollgate_enforcer_gateway_requests_total") }, via)
		if n, other := via.counts(); n == 0 || other != 0 {
			t.Errorf("%d answers over HTTP/2 and %d over another protocol, want every one over HTTP/2", n, other)
		}
	})

	t.Run("the OpenAI Node SDK over HTTPS and wss", func(t *testing.T) {
		o := s.setUpOrg(t)
		trust := "NODE_EXTRA_CA_CERTS=" + ca.CertFile
		next = fakellm.Usage{InputTokens: 1_000_000, OutputTokens: 500_000}
		want := catalogCost(1_000_000, 0, 500_000)
		settled := g.settled
		var used int64
		for _, scenario := range []string{"json", "stream"} {
			before := len(fake.Calls())
			r := runSDK(t, dir, "openai.mjs", scenario, s.gateway, o.key, model, trust)
			if !r.OK || r.Status != 200 || r.Text != fakellm.Text {
				t.Fatalf("%s: %+v", scenario, r)
			}
			calls := fake.Calls()[before:]
			if len(calls) != 1 {
				t.Fatalf("%s: the provider got %d calls", scenario, len(calls))
			}
			rec := waitReceipt(t, s, calls[0].Header.Get("X-Service-Request-Id"))
			settled++
			used += rec.cost()
			if rec.cost() != want || rec["complete"] != true {
				t.Errorf("%s: receipt %s, want %d, complete", scenario, rec, want)
			}
		}
		// A Realtime session: the SDK dials wss:// itself (no plain socket given it, as
		// over http://), three responses, each charged at gpt-realtime's price.
		next = fakellm.Usage{InputTokens: 2_000, OutputTokens: 1_000}
		e, ok := pricecatalog.Lookup("gpt-realtime")
		if !ok {
			t.Fatal("gpt-realtime is not in the catalog")
		}
		perResponse := ceilDiv(2_000*e.InputPerMillion+1_000*e.OutputPerMillion, 1_000_000)
		before := len(fake.Calls())
		r := runSDK(t, dir, "openai.mjs", "realtime", s.gateway, o.key, "gpt-realtime", trust)
		if !r.OK || r.Chunks != 3 || r.Text != strings.Repeat(fakellm.Text, 3) || r.CloseCode != 1000 {
			t.Fatalf("the Realtime session: %+v, want three answers and a normal close", r)
		}
		if calls := fake.Calls()[before:]; len(calls) != 1 || calls[0].API != fakellm.OpenAIRealtime || strings.Contains(fmt.Sprint(calls[0].Header), o.key) {
			t.Fatalf("the provider got %+v, want one Realtime session without the member's key", calls)
		}
		s.waitUsed(t, o, settled+3, used+3*perResponse)
		g.settled = settled + 3
	})

	t.Run("plain HTTP to the HTTPS port reaches nothing", func(t *testing.T) {
		before, requests := len(fake.Calls()), s.metric(t, "tollgate_enforcer_gateway_requests_total")
		u, err := url.Parse(s.gateway)
		if err != nil {
			t.Fatal(err)
		}
		res, err := http.Post("http://"+u.Host+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"`+model+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "HTTPS") {
			t.Errorf("plain HTTP answered %d %q, want 400 saying the server speaks HTTPS", res.StatusCode, body)
		}
		if n := len(fake.Calls()) - before; n != 0 {
			t.Errorf("the provider got %d calls", n)
		}
		if got := s.metric(t, "tollgate_enforcer_gateway_requests_total"); got != requests {
			t.Errorf("the gateway counted %v requests, want none", got-requests)
		}
	})

	t.Run("a renewed certificate is served without a restart", func(t *testing.T) {
		time.Sleep(time.Second) // the renewal expires a second later, which the gauge must show
		testtls.CopyPair(t, ca.Server(t), served)
		renewed := leafOf(t, served)
		u, err := url.Parse(s.gateway)
		if err != nil {
			t.Fatal(err)
		}
		var got *x509.Certificate
		waitFor(t, 30*time.Second, "a handshake presenting the renewed certificate", func() bool {
			conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", u.Host, &tls.Config{RootCAs: roots})
			if err != nil {
				t.Fatalf("handshake: %v", err)
			}
			defer conn.Close()
			got = conn.ConnectionState().PeerCertificates[0]
			return got.SerialNumber.Cmp(renewed.SerialNumber) == 0
		})
		if v := s.metric(t, expiry); v != float64(renewed.NotAfter.Unix()) || renewed.NotAfter.Unix() == firstLeaf.NotAfter.Unix() {
			t.Errorf("%s %v, want the renewal's expiry %d (the first's %d)", expiry, v, renewed.NotAfter.Unix(), firstLeaf.NotAfter.Unix())
		}
		if !strings.Contains(s.enfLogs.String(), "gateway TLS: renewed certificate loaded") {
			t.Errorf("no log line for the renewal:\n%s", s.enfLogs.String())
		}
		// And the SDKs' client, trusting the CA, goes on being answered.
		o := s.setUpOrg(t)
		if r := runSDK(t, dir, "openai.mjs", "json", s.gateway, o.key, model, "NODE_EXTRA_CA_CERTS="+ca.CertFile); !r.OK || r.Status != 200 {
			t.Errorf("a call after the renewal: %+v", r)
		}
	})
}

// leafOf is the certificate of the pair's files.
func leafOf(t *testing.T, p testtls.Pair) *x509.Certificate {
	t.Helper()
	c, err := tls.LoadX509KeyPair(p.CertFile, p.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	return c.Leaf
}
