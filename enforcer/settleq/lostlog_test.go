package settleq_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/enforcer/metrics"
	"github.com/tollgate-dev/tollgate/enforcer/settleq"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
)

// measured is a settlement with what the enforcer measured of a request.
func measured(id string) *internalv1.SettleItem {
	cost := int64(0)
	audio := int64(7)
	return &internalv1.SettleItem{RequestId: id, OrganizationId: "org_x", MemberId: "om_x", Model: "gpt-4o",
		InputTokens: 1_000_000, OutputTokens: 2_000, CachedInputTokens: 300, CacheCreationInputTokens: 40,
		AudioInputTokens: &audio, UpstreamCostMicroUsd: &cost, Complete: true, UsageEstimated: false,
		ServiceTier: internalv1.ServiceTier_SERVICE_TIER_FAST, PriorityTier: true, RegionalEndpoint: true,
		UpstreamHost: "api.groq.com", GuardrailUnits: &internalv1.GuardrailUnits{ContentText: 3},
		Snapshot: &internalv1.Snapshot{Version: 2}}
}

// wantResend is the POST /settle body that re-sends measured(id) as it would have been sent.
func wantResend(id string) string {
	return `{"requestId":"` + id + `","model":"gpt-4o","inputTokens":1000000,"outputTokens":2000,"cachedInputTokens":300,` +
		`"cacheCreationInputTokens":40,"audioInputTokens":7,"upstreamCostMicroUsd":0,"complete":true,"estimated":false,` +
		`"serviceTier":"fast","regionalEndpoint":true,"upstreamHost":"api.groq.com","guardrailUnits":{"contentText":3}}`
}

// resendOf finds the JSON log line starting with msg that names id, and returns its
// settle field compacted the way wantResend is written (keys sorted).
func resendOf(t *testing.T, logs, msg, id string) string {
	t.Helper()
	for line := range strings.SplitSeq(logs, "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil || !strings.HasPrefix(rec["msg"].(string), msg) || rec["request_id"] != id {
			continue
		}
		got, _ := json.Marshal(rec["settle"])
		return string(got)
	}
	t.Fatalf("no %q line naming %s:\n%s", msg, id, logs)
	return ""
}

func sameJSON(t *testing.T, got, want string) bool {
	t.Helper()
	var g, w any
	if json.Unmarshal([]byte(got), &g) != nil {
		return false
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(g)
	b, _ := json.Marshal(w)
	return string(a) == string(b)
}

// A settlement given up (SETTLEMENT LOST, SETTLEMENT NOT DELIVERED at the drain or after
// it) names what the enforcer measured, as the POST /settle body that re-sends it: the
// runbook of TollgateSettlementsLost takes it from the line. The line named the request
// id alone, and the operator had to take the cost from the provider's records.
func TestAGivenUpSettlementCarriesItsResendBody(t *testing.T) {
	down := status.Error(codes.Unavailable, "down")
	errs := make([]error, 100)
	for i := range errs {
		errs[i] = down
	}
	logs := &logBuf{}
	log := slog.New(slog.NewJSONHandler(logs, nil))
	cfg := fastConfig()
	cfg.Capacity = 1
	q := settleq.New(&scripted{errs: errs}, cfg, metrics.New(prometheus.NewRegistry()), log)
	_ = q.Enqueue(measured("req_stuck"), nil, nil)
	_ = q.Enqueue(measured("req_overflow"), nil, nil) // full, no reservation, no spool: LOST
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	q.Drain(ctx)
	_ = q.Enqueue(measured("req_late"), nil, nil)

	for _, c := range []struct{ msg, id string }{
		{"SETTLEMENT LOST", "req_overflow"}, {"SETTLEMENT NOT DELIVERED", "req_stuck"}, {"SETTLEMENT NOT DELIVERED", "req_late"},
	} {
		if got := resendOf(t, logs.String(), c.msg, c.id); !sameJSON(t, got, wantResend(c.id)) {
			t.Errorf("%s line of %s carries settle=%s\nwant %s", c.msg, c.id, got, wantResend(c.id))
		}
	}
}

// In a text log the body is the same JSON as a quoted string; a voided settlement has
// none to re-send (recovery closes its start uncharged, as the void asked).
func TestAGivenUpSettlementsResendBodyInTextAndWhenVoided(t *testing.T) {
	logs := &logBuf{}
	q := settleq.New(&scripted{}, fastConfig(), metrics.New(prometheus.NewRegistry()), slog.New(slog.NewTextHandler(logs, nil)))
	q.Drain(context.Background())
	_ = q.Enqueue(measured("req_text"), nil, nil)
	_ = q.Enqueue(&internalv1.SettleItem{RequestId: "req_void", Voided: true}, nil, nil)
	var quoted string
	for line := range strings.SplitSeq(logs.String(), "\n") {
		if _, v, ok := strings.Cut(line, " settle="); ok && strings.Contains(line, "request_id=req_text") {
			quoted = v
		}
	}
	body, err := strconv.Unquote(quoted)
	if err != nil || !sameJSON(t, body, wantResend("req_text")) {
		t.Errorf("text line's settle=%s (%v)\nwant the quoted %s\n%s", quoted, err, wantResend("req_text"), logs.String())
	}
	if !strings.Contains(logs.String(), `request_id=req_void`) || !strings.Contains(logs.String(), `settle="none (voided`) {
		t.Errorf("a voided settlement's line should say there is nothing to re-send:\n%s", logs.String())
	}
}
