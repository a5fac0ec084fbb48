package e2e_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestRotatingTheInternalTokenByTheBook runs docs/admin.md's "Rotating the internal token"
// sequence (its first sh block: each line restarts the control plane or rolls an
// enforcer with the environment it gives) against a real stack, with requests admitted
// and settled through the enforcers at every step: no internal call is refused for its
// token, and no enforcer stops being ready, from the first step to the last.
func TestRotatingTheInternalTokenByTheBook(t *testing.T) {
	t.Parallel()
	blocks := docBlocks(t, "../docs/admin.md", "## Rotating the internal token")
	if len(blocks) == 0 {
		t.Fatal("no sh block in docs/admin.md's Rotating the internal token")
	}
	const newToken = "0f1e2d3c4b5a69788796a5b4c3d2e1f0"
	vars := map[string]string{"OLD": internalToken, "NEW": newToken}
	s := startStack(t)
	o := s.setUpOrg(t)
	// The enforcer that traffic goes through; a roll replaces it by a new one.
	authz, enfLogs := s.authz, s.enfLogs
	var stopEnf func() = s.enfStop
	admit := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := authz.Check(ctx, checkRequest(map[string]string{"x-api-key": o.key}))
		if err != nil {
			return err
		}
		if code := resp.GetStatus().GetCode(); code != 0 {
			return fmt.Errorf("refused (code %d): %v", code, resp.GetDeniedResponse())
		}
		return nil
	}
	refused := func(step string) {
		t.Helper()
		for what, logs := range map[string]string{"control plane": s.cpLogs.String(), "enforcer": enfLogs.String()} {
			for _, sign := range []string{"internal call refused", "internal token rejected"} {
				if strings.Contains(logs, sign) {
					t.Fatalf("after %q the %s logs %q:\n%s", step, what, sign, logs)
				}
			}
		}
	}
	if err := admit(); err != nil {
		t.Fatalf("before the rotation: %v", err)
	}
	steps := 0
	for _, line := range strings.Split(blocks[0], "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "NEW=") {
			continue // comments, and the new token's minting (the test's own newToken)
		}
		env := map[string]string{}
		fields := strings.Fields(os.Expand(line, func(k string) string { return vars[k] }))
		for len(fields) > 0 && strings.Contains(fields[0], "=") {
			k, v, _ := strings.Cut(fields[0], "=")
			env[k] = v
			fields = fields[1:]
		}
		if env["TOLLGATE_INTERNAL_TOKEN"] == "" {
			t.Fatalf("step %q sets no TOLLGATE_INTERNAL_TOKEN", line)
		}
		switch strings.Join(fields, " ") {
		case "controlplane serve":
			delete(s.cpVars, "TOLLGATE_INTERNAL_TOKEN_PREVIOUS")
			for k, v := range env {
				s.cpVars[k] = v
			}
			s.restartControlPlane(t)
		case "enforcer":
			// A roll: the new enforcer ready before the old one stops.
			e := s.startEnforcer(t, env)
			conn, err := grpc.NewClient(e.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close() })
			refused(line + " (the enforcer before it stops)")
			stopEnf()
			authz, enfLogs, stopEnf = authv3.NewAuthorizationClient(conn), e.logs, e.stop
		default:
			t.Fatalf("docs/admin.md: a step the test does not know: %q", line)
		}
		steps++
		// A request admitted: its durable start went over the internal API, with the
		// token. (A restarted control plane is reconnected to first; a refusal for the
		// token would show in the logs, not only as a failed check.)
		waitFor(t, 15*time.Second, "a check admitted after "+line, func() bool { return admit() == nil })
		refused(line)
	}
	if steps != 3 {
		t.Fatalf("%d steps in the doc, want 3 (control plane, enforcers, control plane)", steps)
	}
	if s.cpVars["TOLLGATE_INTERNAL_TOKEN"] != newToken || s.cpVars["TOLLGATE_INTERNAL_TOKEN_PREVIOUS"] != "" {
		t.Fatal("the sequence does not end with the control plane on the new token alone")
	}
}
