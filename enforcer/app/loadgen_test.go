package app_test

import (
	"context"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate-dev/tollgate/enforcer/internal/enforcertest"
	"github.com/tollgate-dev/tollgate/internal/loadgen"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// The load generator (internal/loadgen, tested there against a stand-in server) drives
// BenchmarkCheckLoad and the e2e benchmarks; this is what those measurements rest on,
// against the real enforcer with its own codec (authz.Server.Codec): grpc-go's client
// and the generator's own HTTP/2 client get the same answers (a refusal without
// credentials, a 429 with its headers and body, an admission with a request id of its
// own), and a response reported through ext_proc in each of Envoy's ways is settled
// with its usage.
func TestLoadGeneratorAgainstEnforcer(t *testing.T) {
	e := enforcertest.New(t, enforcertest.Options{Quiet: true})
	e.CP.SetPrice("gpt-4o-mini", 1, 1)
	blocked := newMember(e, dayLimit(1*usd, true))
	e.CP.SetSpend(blocked.member, window.Day, 2*usd)
	admitted := newMember(e, dayLimit(1_000*usd, true))
	viaGRPC, conns, err := loadgen.Dial(e.GRPCAddr, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer conns[0].Close()
	viaH2, err := loadgen.DialH2(e.GRPCAddr, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer viaH2.Close()
	ctx := context.Background()

	t.Run("answers", func(t *testing.T) {
		for _, c := range []struct {
			name    string
			headers map[string]string
			status  int32 // of the denial; 0: admitted
		}{
			{"no credential", nil, 401},
			{"unknown key", map[string]string{"x-api-key": "tgk_unknown"}, 401},
			{"blocked", map[string]string{"x-api-key": blocked.key}, 429},
			{"admitted", map[string]string{"x-api-key": admitted.key}, 0},
		} {
			req := enforcertest.CheckRequest(c.headers)
			want, err := viaGRPC.Check(ctx, req)
			if err != nil {
				t.Fatalf("%s: grpc: %v", c.name, err)
			}
			got, err := viaH2.Check(ctx, req)
			if err != nil {
				t.Fatalf("%s: h2: %v", c.name, err)
			}
			if c.status != 0 {
				if got.GetDeniedResponse().GetStatus().GetCode() != want.GetDeniedResponse().GetStatus().GetCode() ||
					int32(got.GetDeniedResponse().GetStatus().GetCode()) != c.status {
					t.Fatalf("%s: h2 status %v, grpc %v, want %d", c.name, got.GetDeniedResponse().GetStatus(), want.GetDeniedResponse().GetStatus(), c.status)
				}
				// Retry-After counts seconds to a reset, so two answers a moment apart may
				// differ in it; everything else is the same bytes.
				for _, r := range []*authv3.CheckResponse{want, got} {
					for _, h := range r.GetDeniedResponse().GetHeaders() {
						if h.GetHeader().GetKey() == "Retry-After" {
							h.Header.Value = ""
						}
					}
				}
				if !proto.Equal(got, want) {
					t.Fatalf("%s: h2 answered\n%v\ngrpc answered\n%v", c.name, got, want)
				}
				continue
			}
			if got.GetOkResponse() == nil || admittedID(got) == "" || admittedID(got) == admittedID(want) {
				t.Fatalf("%s: h2 answered %v (grpc %v), want an admission with a request id of its own", c.name, got, want)
			}
		}
	})

	proc := extprocv3.NewExternalProcessorClient(conns[0])
	for _, tc := range []struct {
		name   string
		report func(ctx context.Context, id string, in, out int) error
	}{
		{"report/grpc", func(ctx context.Context, id string, in, out int) error {
			return loadgen.ReportJSONResponse(ctx, proc, id, in, out, false)
		}},
		{"report/grpc/observability", func(ctx context.Context, id string, in, out int) error {
			return loadgen.ReportJSONResponse(ctx, proc, id, in, out, true)
		}},
		{"report/h2/observability", viaH2.ReportJSONResponse},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, _ := requestID(t, e, admitted.key)
			if err := tc.report(ctx, id, 100, 20); err != nil {
				t.Fatal(err)
			}
			// The enforcer settles after the stream ends.
			deadline := time.Now().Add(5 * time.Second)
			for e.CP.Receipt(id) == nil {
				if time.Now().After(deadline) {
					t.Fatal("the reported request was never settled")
				}
				time.Sleep(10 * time.Millisecond)
			}
			if it := e.CP.Receipt(id).Item; it.GetInputTokens() != 100 || it.GetOutputTokens() != 20 || !it.GetComplete() {
				t.Fatalf("the report was settled as %v, want 100 input and 20 output tokens, complete", it)
			}
		})
	}
}

func admittedID(r *authv3.CheckResponse) string {
	for _, h := range r.GetOkResponse().GetHeaders() {
		if h.GetHeader().GetKey() == "x-service-request-id" {
			return h.GetHeader().GetValue()
		}
	}
	return ""
}
