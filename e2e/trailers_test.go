package e2e_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/e2e/fakellm"
)

// A provider may end its answer with HTTP trailers (an HTTP/2 server may send them to
// any request; gRPC-backed frontends do). Envoy then gives ext_proc the answer's last
// chunk without end_of_stream and the end as the trailers, which deploy/envoy/envoy.yaml's
// response filter must be sent (response_trailer_mode: SEND): skipped, the stream ended
// unseen, and a request whose usage was read whole was settled as cut off. Through
// envoy.yaml's filter chain, a stream answered with trailers is settled complete at the
// charge of the same stream answered without them.
func TestResponseTrailersThroughEnvoy(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	s := startStack(t)
	o := s.setUpOrg(t)

	fake := &fakellm.Server{Usage: func(fakellm.Call) fakellm.Usage { return fakellm.Usage{InputTokens: 1000, OutputTokens: 100} }}
	withTrailers := false
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fake.ServeHTTP(w, r)
		if withTrailers {
			w.Header().Set(http.TrailerPrefix+"Grpc-Status", "0")
		}
	}))
	t.Cleanup(up.Close)
	proxy, front := s.deployedEnvoy(t, up.URL)

	stream := func() (receipt, http.Header) {
		t.Helper()
		before := len(fake.Calls())
		req, _ := http.NewRequest("POST", front+"/v1/chat/completions",
			strings.NewReader(`{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"hello"}]}`))
		req.Header.Set("Authorization", "Bearer "+o.key)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil || res.StatusCode != 200 || !strings.Contains(string(body), "[DONE]") {
			t.Fatalf("the stream: %d %v %q (proxy problems %v)", res.StatusCode, err, body, proxy.Problems())
		}
		calls := fake.Calls()[before:]
		if len(calls) != 1 || !calls[0].IncludeUsage {
			t.Fatalf("the provider got %+v, want one stream asked for its usage", calls)
		}
		return waitReceipt(t, s, calls[0].Header.Get("X-Service-Request-Id")), res.Trailer
	}

	plain, _ := stream()
	if plain["complete"] != true || plain.cost() <= 0 {
		t.Fatalf("the stream without trailers: complete %v at %d micro-USD, want complete and charged", plain["complete"], plain.cost())
	}
	withTrailers = true
	got, trailers := stream()
	if trailers.Get("Grpc-Status") != "0" {
		t.Errorf("the client got trailers %v, want the provider's", trailers)
	}
	if got["complete"] != true || got.cost() != plain.cost() {
		t.Fatalf("the stream with trailers: complete %v at %d micro-USD; want complete at %d, as without them", got["complete"], got.cost(), plain.cost())
	}
}
