package httpapi_test

import (
	"context"
	"net/http"
	"sync"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/apitest"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// Helpers of the gateway usage tests. The accounting issue fills counters and tracking
// rows; until then these tests write them with SQL, which is what settlement will do.

const (
	policiesPath = "/v1/gateway/usage-limit-policies"
	mePath       = "/v1/gateway/usage-limits/me"
	resetsPath   = "/v1/gateway/usage-limit-reset-requests"
)

// policy is the specification's Usage limit policy as tests read it.
type policy struct {
	ID                string  `json:"id"`
	Name              string  `json:"name"`
	HardLimit         bool    `json:"hardLimit"`
	AllowRequestReset bool    `json:"allowRequestReset"`
	Revision          int64   `json:"revision"`
	ArchivedAt        *string `json:"archivedAt"`
	Limits            []struct {
		Timeframe         string `json:"timeframe"`
		CostLimitMicroUsd int64  `json:"costLimitMicroUsd"`
	} `json:"limits"`
	Assignments []struct {
		ID           string  `json:"id"`
		MemberID     *string `json:"memberId"`
		TeamID       *string `json:"teamId"`
		Organization bool    `json:"organization"`
	} `json:"assignments"`
}

type status struct {
	OrganizationID string `json:"organizationId"`
	MemberID       string `json:"memberId"`
	State          string `json:"state"`
	Buckets        []struct {
		ID                    string  `json:"id"`
		Timeframe             string  `json:"timeframe"`
		PolicyID              string  `json:"policyId"`
		PolicyName            string  `json:"policyName"`
		PolicyRevision        int64   `json:"policyRevision"`
		BaseAllowanceMicroUsd int64   `json:"baseAllowanceMicroUsd"`
		ExtensionMicroUsd     int64   `json:"extensionMicroUsd"`
		AllowanceMicroUsd     int64   `json:"allowanceMicroUsd"`
		UsedMicroUsd          int64   `json:"usedMicroUsd"`
		ReservedMicroUsd      int64   `json:"reservedMicroUsd"`
		RemainingMicroUsd     int64   `json:"remainingMicroUsd"`
		ResetAt               string  `json:"resetAt"`
		WindowStart           string  `json:"windowStart"`
		HardLimit             bool    `json:"hardLimit"`
		AllowRequestReset     bool    `json:"allowRequestReset"`
		CanRequestReset       bool    `json:"canRequestReset"`
		ResetRequestStatus    *string `json:"resetRequestStatus"`
		Provenance            []struct {
			Kind         string  `json:"kind"`
			AssignmentID string  `json:"assignmentId"`
			MemberID     *string `json:"memberId"`
			TeamID       *string `json:"teamId"`
			TeamName     *string `json:"teamName"`
		} `json:"provenance"`
	} `json:"buckets"`
	Windows []struct {
		Timeframe    string `json:"timeframe"`
		BucketID     string `json:"bucketId"`
		UsedMicroUsd int64  `json:"usedMicroUsd"`
		Limited      bool   `json:"limited"`
	} `json:"windows"`
	Coverage map[string]any `json:"coverage"`
}

type resetRequest struct {
	ID                    string  `json:"id"`
	MemberID              string  `json:"memberId"`
	BucketID              string  `json:"bucketId"`
	Timeframe             string  `json:"timeframe"`
	PolicyID              string  `json:"policyId"`
	PolicyRevision        int64   `json:"policyRevision"`
	BaseAllowanceMicroUsd int64   `json:"baseAllowanceMicroUsd"`
	ExtensionMicroUsd     int64   `json:"extensionMicroUsd"`
	Status                string  `json:"status"`
	ExpiredReason         *string `json:"expiredReason"`
	Note                  *string `json:"note"`
	CreatedAt             string  `json:"createdAt"`
	DecidedByMemberID     *string `json:"decidedByMemberId"`
}

type resetPage struct {
	Requests     []resetRequest `json:"requests"`
	View         string         `json:"view"`
	Limit        int            `json:"limit"`
	HasMore      bool           `json:"hasMore"`
	NextCursor   *string        `json:"nextCursor"`
	PendingCount int64          `json:"pendingCount"`
}

// createPolicy creates a policy as m and returns it.
func createPolicy(t *testing.T, e *apitest.Env, m apitest.Member, body map[string]any) policy {
	t.Helper()
	var p policy
	e.Do(t, "POST", policiesPath, body, m.As()...).Expect(t, http.StatusOK).Decode(t, &p)
	return p
}

// dayPolicy creates a policy with one day limit.
func dayPolicy(t *testing.T, e *apitest.Env, m apitest.Member, name, costUSD string, extra map[string]any) policy {
	t.Helper()
	body := map[string]any{"name": name, "limits": []map[string]any{{"timeframe": "day", "costUsd": costUSD}}}
	for k, v := range extra {
		body[k] = v
	}
	return createPolicy(t, e, m, body)
}

func assign(t *testing.T, e *apitest.Env, by apitest.Member, policyID string, target map[string]any) policy {
	t.Helper()
	var p policy
	e.Do(t, "POST", policiesPath+"/"+policyID+"/assignments", target, by.As()...).Expect(t, http.StatusOK).Decode(t, &p)
	return p
}

func getStatus(t *testing.T, e *apitest.Env, m apitest.Member) status {
	t.Helper()
	var s status
	r := e.Do(t, "GET", mePath, nil, m.As()...).Expect(t, http.StatusOK)
	if cc := r.Header.Get("Cache-Control"); cc != "private, no-store" {
		t.Fatalf("cache-control %q", cc)
	}
	r.Decode(t, &s)
	return s
}

// bucketOf returns the status bucket of a timeframe, failing when it is not limited.
func (s status) bucketOf(t *testing.T, tf string) int {
	t.Helper()
	for i, b := range s.Buckets {
		if b.Timeframe == tf {
			return i
		}
	}
	t.Fatalf("no %s bucket in %+v", tf, s.Buckets)
	return -1
}

// bucketID is the deterministic id of m's current bucket of tf.
func bucketID(e *apitest.Env, m apitest.Member, tf window.Timeframe) string {
	return window.BucketID(m.OrgID, m.MemberID, tf, window.Of(tf, e.Clock.Now()).Start)
}

// setUsed writes m's counter of the current tf window, as settlement would.
func setUsed(t *testing.T, e *apitest.Env, m apitest.Member, tf window.Timeframe, used int64) {
	t.Helper()
	w := window.Of(tf, e.Clock.Now())
	_, err := e.Store.Pool.Exec(context.Background(), `INSERT INTO usage_buckets (id, organization_id, member_id, timeframe,
			window_start, window_end, used_micro_usd, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8)
		ON CONFLICT (id) DO UPDATE SET used_micro_usd = EXCLUDED.used_micro_usd`,
		bucketID(e, m, tf), m.OrgID, m.MemberID, string(tf), w.Start, w.End, used, e.Clock.Now())
	if err != nil {
		t.Fatal(err)
	}
}

// counter reads m's current tf counter: used and extension (zeros when missing).
func counter(t *testing.T, e *apitest.Env, m apitest.Member, tf window.Timeframe) (used, extension int64) {
	t.Helper()
	_ = e.Store.Pool.QueryRow(context.Background(), `SELECT used_micro_usd, extension_micro_usd FROM usage_buckets WHERE id = $1`,
		bucketID(e, m, tf)).Scan(&used, &extension)
	return used, extension
}

// usageCount runs a count(*) query.
func usageCount(t *testing.T, e *apitest.Env, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := e.Store.Pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func submit(t *testing.T, e *apitest.Env, m apitest.Member, bucket, reason string) *apitest.Resp {
	t.Helper()
	return e.Do(t, "POST", resetsPath, map[string]any{"bucketId": bucket, "reason": reason}, m.As()...)
}

func decodeReset(t *testing.T, r *apitest.Resp) resetRequest {
	t.Helper()
	var rr resetRequest
	r.Decode(t, &rr)
	return rr
}

// recorder records entitlement notifications.
type recorder struct {
	mu      sync.Mutex
	changed [][]string
}

func (r *recorder) CredentialsRevoked(context.Context, []string, []string) {}
func (r *recorder) SessionsRevoked(context.Context, [][]byte)              {}
func (r *recorder) UserSessionsChanged(context.Context, string)            {}
func (r *recorder) EntitlementChanged(_ context.Context, _ string, members []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.changed = append(r.changed, members)
}

func (r *recorder) calls() [][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]string(nil), r.changed...)
}
