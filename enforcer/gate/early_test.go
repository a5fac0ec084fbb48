package gate_test

import (
	"context"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/enforcer/metrics"
)

// TestRefusalBeforeBodyAgreesWithTheCheck runs every case of the gate's table twice:
// the refusal before the body (what a front door answers a client waiting for its 100)
// and then the whole check. The early refusal, when there is one, is the check's own
// answer, with nothing started; and every refusal the body cannot change (the
// credential's, the member's, a hard limit's, a suspended capture's), read without a
// failure and before any start, is answered early.
func TestRefusalBeforeBodyAgreesWithTheCheck(t *testing.T) {
	bodyless := []string{"no_credential", "unknown_credential", "inactive_member", "usage_limit", "capture_suspended"}
	early := 0
	for _, tc := range gateCases() {
		if tc.answer != nil {
			continue // made outside the check
		}
		t.Run(tc.name, func(t *testing.T) {
			g, f, cred, check := tableGate(t, tc, metrics.New(prometheus.NewRegistry()))
			starts := len(f.starts.items)
			ea, refused := g.RefusalBeforeBody(context.Background(), cred)
			if n := len(f.starts.items) - starts; n != 0 {
				t.Fatalf("the refusal before the body submitted %d starts", n)
			}
			a := check()
			if refused {
				early++
				if ea.Status != a.Status || ea.Reason != a.Reason || ea.Decision != a.Decision || ea.MemberID != a.MemberID ||
					!slices.Equal(ea.DeniedHeaders(), a.DeniedHeaders()) {
					t.Fatalf("refused before the body with %d %s %s %v (member %q), the check answers %d %s %s %v (member %q)",
						ea.Status, ea.Decision, ea.Reason, ea.DeniedHeaders(), ea.MemberID, a.Status, a.Decision, a.Reason, a.DeniedHeaders(), a.MemberID)
				}
				return
			}
			// A failed read, a record resolved through the control plane, or a start's
			// refusal: known only to the whole check.
			later := f.ids.err != nil || f.records.readErr != nil || tc.want.resolves > 0 || tc.want.starts > 0
			if slices.Contains(bodyless, a.Reason.String()) && !later {
				t.Fatalf("the check refuses %d %s, which no body changes, but not before the body", a.Status, a.Reason)
			}
		})
	}
	if early == 0 {
		t.Fatal("no case was refused before its body")
	}
}
