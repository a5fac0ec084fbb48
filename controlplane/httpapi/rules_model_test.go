package httpapi_test

// A second, independent statement of the usage-limit rules (the specification's "Usage
// limit semantics" and ACCOUNTING.md), written from their text and not from the code, and
// a random walk that drives the real control plane (the REST API, the ledger through its
// start and settle calls, the Redis mirror the enforcers decide from) and compares, after
// every step, what the model says with what the API reports, what an enforcer would
// decide from the record it reads (with the 429's headers), and that every counter is the
// sum of its receipts.
//
// The model is deliberately naive: maps, loops, no SQL, its own windows and bucket ids.
// Where its first reading of the rules disagreed with the code and the model was the one
// that was wrong, the comment at that rule says why.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	at "github.com/tollgate-dev/tollgate/controlplane/internal/accountingtest"
	"github.com/tollgate-dev/tollgate/controlplane/ledger"
	"github.com/tollgate-dev/tollgate/controlplane/metrics"
	"github.com/tollgate-dev/tollgate/controlplane/mirrorsync"
	"github.com/tollgate-dev/tollgate/enforcer/decision"
	"github.com/tollgate-dev/tollgate/enforcer/gate"
	"github.com/tollgate-dev/tollgate/internal/apitest"
	"github.com/tollgate-dev/tollgate/internal/testredis"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
)

// ---------------------------------------------------------------------------------------
// The model.

// Timeframes in the order status reads list their windows.
var modelTimeframes = []string{"day", "week", "month"}

// windowOf (spec rule 2, ACCOUNTING "Windows"): calendar windows that reset at 05:00 UTC,
// weeks on Monday, months on day 1. Shift the instant back five hours, take that calendar
// day (its Monday, its day 1), and the window starts there at 05:00.
func windowOf(tf string, t time.Time) (start, end time.Time) {
	d := t.UTC().Add(-5 * time.Hour)
	day := time.Date(d.Year(), d.Month(), d.Day(), 5, 0, 0, 0, time.UTC)
	switch tf {
	case "day":
		return day, day.AddDate(0, 0, 1)
	case "week":
		back := (int(day.Weekday()) + 6) % 7 // days since Monday
		s := day.AddDate(0, 0, -back)
		return s, s.AddDate(0, 0, 7)
	default:
		s := time.Date(day.Year(), day.Month(), 1, 5, 0, 0, 0, time.UTC)
		return s, s.AddDate(0, 1, 0)
	}
}

// bucketIDOf: hex SHA-256 of <org>/<member>/<timeframe>/<window start, RFC 3339 with ms>.
func bucketIDOf(org, member, tf string, start time.Time) string {
	sum := sha256.Sum256([]byte(org + "/" + member + "/" + tf + "/" + start.UTC().Format("2006-01-02T15:04:05.000Z")))
	return hex.EncodeToString(sum[:])
}

type mPolicy struct {
	id, name         string
	hard, allowReset bool
	revision         int64
	limits           map[string]int64 // timeframe -> base allowance, micro-USD
	archived         bool
	// The in-flight guard (docs/usage-limits.md, "Bounded overshoot"): reserve while in
	// flight (reservation, micro-USD) and a cap of requests in flight (0: none).
	reserve     bool
	reservation int64
	maxRequests int
}

type mAssignment struct {
	id, policy, member, team string
	org                      bool
}

type mRequest struct {
	id, member, tf, bucket string
	windowEnd              time.Time
	policy                 string
	revision, base         int64
	status, expiredReason  string
}

// mWinner is the winning policy of one timeframe for one member.
type mWinner struct {
	policy *mPolicy
	base   int64
}

type mStart struct {
	requestID, member string
	buckets           map[string]string // timeframe -> bucket id of the admission windows
	admittedAt        time.Time
	reservation       int64
}

type model struct {
	org           string
	now           time.Time
	policies      map[string]*mPolicy
	assigns       map[string]*mAssignment
	teams         map[string]map[string]bool // team -> members
	active        map[string]bool            // member -> still a member
	used          map[string]int64           // bucket id -> settled spend
	ext           map[string]int64           // bucket id -> granted extension
	requests      []*mRequest                // in creation order
	inFlight      []mStart                   // admitted, started, not settled yet
	tracked       map[string]time.Time       // members with a tracking row: when their first start came
	lastSettled   map[string]string          // member -> the request id of their latest settled receipt
	lastSettledAt map[string]time.Time
	// The capture fence (spec rule 14): member -> tracking version (absent: no row, read
	// as 0) and whether capture is suspended.
	version   map[string]int64
	suspended map[string]bool
}

// reaches (spec rule 9): an assignment targets a member, a team the member is in, or the
// whole organization (current and future members).
func (m *model) reaches(a *mAssignment, member string) bool {
	switch {
	case a.org:
		return true
	case a.team != "":
		return m.teams[a.team][member]
	}
	return a.member == member
}

// winner (spec rule 9 and ACCOUNTING "Policies and winners"): among the non-archived
// policies that reach the member and limit the timeframe, the highest allowance wins;
// ties: hard before soft, reset-requests allowed before not, then the smaller policy id.
func (m *model) winner(member, tf string) *mWinner {
	var best *mPolicy
	for _, a := range m.assigns {
		p := m.policies[a.policy]
		if _, limits := p.limits[tf]; p.archived || !limits || !m.reaches(a, member) {
			continue
		}
		if best == nil || better(p, best, tf) {
			best = p
		}
	}
	if best == nil {
		return nil
	}
	return &mWinner{policy: best, base: best.limits[tf]}
}

func better(a, b *mPolicy, tf string) bool {
	if a.limits[tf] != b.limits[tf] {
		return a.limits[tf] > b.limits[tf]
	}
	if a.hard != b.hard {
		return a.hard
	}
	if a.allowReset != b.allowReset {
		return a.allowReset
	}
	return a.id < b.id
}

// provenance: every assignment of the winning policy that reaches the member, by id.
func (m *model) provenance(member string, w *mWinner) []string {
	var out []string
	for _, a := range m.assigns {
		if a.policy == w.policy.id && m.reaches(a, member) {
			kind := "direct"
			if a.org {
				kind = "organization"
			} else if a.team != "" {
				kind = "team"
			}
			out = append(out, a.id+":"+kind)
		}
	}
	slices.Sort(out)
	return out
}

func (m *model) bucket(member, tf string) string {
	s, _ := windowOf(tf, m.now)
	return bucketIDOf(m.org, member, tf, s)
}

// entitlement is what the fence compares: per member and timeframe, the winner.
type entitlement map[string]*mWinner // member/tf -> winner

func (m *model) entitlements() entitlement {
	out := entitlement{}
	for member, on := range m.active {
		if !on {
			continue
		}
		for _, tf := range modelTimeframes {
			out[member+"/"+tf] = m.winner(member, tf)
		}
	}
	return out
}

// fence (ACCOUNTING "Extension (reset) requests"): any change of a member's winner for a
// timeframe expires that member's pending requests for it whose window has not ended and
// removes a granted extension of the current bucket; spend stays. An edit of the winning
// policy (a new revision) makes pending requests stale too (spec rule 8). The granted
// extension survives an edit that keeps the same policy and base (docs/usage-limits.md
// records this decision: the extension is ceil(base/4) of an unchanged base).
func (m *model) fence(before entitlement) {
	for key, b := range before {
		member, tf, _ := strings.Cut(key, "/")
		a := m.winner(member, tf)
		if !m.active[member] {
			continue // removal is fenced by removeMember
		}
		if sameWinner(b, a) {
			continue
		}
		reason := "winner_changed"
		keep := false
		if b != nil && a != nil && b.policy.id == a.policy.id {
			reason, keep = "policy_revision_changed", b.base == a.base
		}
		// sameWinner compares the pointer's current revision, so a before-image is kept.
		m.expire(member, tf, reason)
		if !keep {
			delete(m.ext, m.bucket(member, tf))
		}
	}
}

func sameWinner(b, a *mWinner) bool {
	if b == nil || a == nil {
		return b == nil && a == nil
	}
	return b.policy.id == a.policy.id && b.policy.revision == a.policy.revision && b.base == a.base
}

func (m *model) expire(member, tf, reason string) {
	for _, r := range m.requests {
		if r.member == member && r.tf == tf && r.status == "pending" && m.now.Before(r.windowEnd) {
			r.status, r.expiredReason = "expired", reason
		}
	}
}

// snapshotEntitlements copies winners so that a later edit of the policy in place does
// not change the before-image.
func (m *model) snapshotEntitlements() entitlement {
	out := entitlement{}
	for k, w := range m.entitlements() {
		if w != nil {
			p := *w.policy
			out[k] = &mWinner{policy: &p, base: w.base}
		} else {
			out[k] = nil
		}
	}
	return out
}

// state and admission (spec rules 3 and the 429 signal; ACCOUNTING "Status"): a hard
// bucket whose settled spend reached its allowance (base + extension) blocks; a soft one
// is over_limit; no limited timeframe at all is unlimited.
func (m *model) state(member string) (state string, retryAt time.Time) {
	limited, over, blocked := false, false, false
	for _, tf := range modelTimeframes {
		w := m.winner(member, tf)
		if w == nil {
			continue
		}
		limited = true
		b := m.bucket(member, tf)
		if m.used[b] >= w.base+m.ext[b] {
			if w.policy.hard {
				blocked = true
				if _, end := windowOf(tf, m.now); end.After(retryAt) {
					retryAt = end
				}
			} else {
				over = true
			}
		}
	}
	switch {
	case blocked:
		return "blocked", retryAt
	case !limited:
		return "unlimited", retryAt
	case over:
		return "over_limit", retryAt
	}
	return "within_limit", retryAt
}

// eligibility of an extension request (ACCOUNTING): a winner, requests allowed, base > 0,
// the bucket's one extension unused, spend reached the allowance. "" means eligible.
func (m *model) eligibility(member, tf string) string {
	w := m.winner(member, tf)
	b := m.bucket(member, tf)
	switch {
	case w == nil:
		return "no_usage_limit"
	case !w.policy.allowReset:
		return "reset_requests_disabled"
	case w.base <= 0:
		return "zero_base_allowance"
	case m.ext[b] > 0:
		return "extension_already_used"
	case m.used[b] < w.base+m.ext[b]:
		return "usage_limit_not_reached"
	}
	return ""
}

func (m *model) pendingFor(bucket string) *mRequest {
	for _, r := range m.requests {
		if r.bucket == bucket && r.status == "pending" {
			return r
		}
	}
	return nil
}

func (m *model) newestFor(bucket string) *mRequest {
	var out *mRequest
	for _, r := range m.requests {
		if r.bucket == bucket {
			out = r
		}
	}
	return out
}

// staleness (spec rule 8, ACCOUNTING): the member left, the bucket's window ended, the
// winner of the timeframe changed, or the policy revision changed.
func (m *model) staleness(r *mRequest) string {
	w := m.winner(r.member, r.tf)
	switch {
	case !m.active[r.member]:
		return "member_removed"
	case !m.now.Before(r.windowEnd):
		return "window_ended"
	case w == nil || w.policy.id != r.policy:
		return "winner_changed"
	case w.policy.revision != r.revision:
		return "policy_revision_changed"
	}
	return ""
}

// guardHorizon: the guard counts the starts admitted in the last 20 minutes only; an
// older pending start is taken for abandoned (docs/usage-limits.md).
const guardHorizon = 20 * time.Minute

// reserved is what the member's requests in flight reserve in a current bucket: those
// admitted in that window (they will charge it, rule 11) within the horizon.
func (m *model) reserved(member, tf string) int64 {
	b, sum := m.bucket(member, tf), int64(0)
	for _, s := range m.inFlight {
		if s.member == member && s.buckets[tf] == b && m.now.Sub(s.admittedAt) < guardHorizon {
			sum += s.reservation
		}
	}
	return sum
}

// guard is the in-flight guard's verdict on a start the enforcer admitted: "" admits,
// else the refusal; reservation is what the start reserves. A request reserves the
// largest reservation among its winners that reserve; the cap is the smallest among the
// winners that set one. In every window won by a hard, reserving policy, settled spend
// plus the reservations in flight must stay below the allowance; then the cap.
func (m *model) guard(member string) (verdict string, reservation int64) {
	limit := 0
	for _, tf := range modelTimeframes {
		if w := m.winner(member, tf); w != nil {
			if w.policy.reserve {
				reservation = max(reservation, w.policy.reservation)
			}
			if c := w.policy.maxRequests; c > 0 && (limit == 0 || c < limit) {
				limit = c
			}
		}
	}
	for _, tf := range modelTimeframes {
		w := m.winner(member, tf)
		if w == nil || !w.policy.reserve || !w.policy.hard {
			continue
		}
		b := m.bucket(member, tf)
		if m.used[b]+m.reserved(member, tf) >= w.base+m.ext[b] {
			return "in_flight_reserved", reservation
		}
	}
	inFlight := 0
	for _, s := range m.inFlight {
		if s.member == member && m.now.Sub(s.admittedAt) < guardHorizon {
			inFlight++
		}
	}
	if limit > 0 && inFlight >= limit {
		return "concurrency_limit", reservation
	}
	return "", reservation
}

// ceilQuarter (spec rule 7): one extension of ceil(base/4) per bucket.
func ceilQuarter(base int64) int64 { return (base + 3) / 4 }

// ---------------------------------------------------------------------------------------
// The real system.

// lateEvents lets the API be built before the mirror writer that needs its store.
type lateEvents struct{ w *mirrorsync.Writer }

func (l *lateEvents) CredentialsRevoked(ctx context.Context, m []string, k []string) {
	l.w.CredentialsRevoked(ctx, m, k)
}
func (l *lateEvents) EntitlementChanged(ctx context.Context, org string, m []string) {
	l.w.EntitlementChanged(ctx, org, m)
}
func (l *lateEvents) SessionsRevoked(ctx context.Context, h [][]byte) { l.w.SessionsRevoked(ctx, h) }
func (l *lateEvents) UserSessionsChanged(ctx context.Context, u string) {
	l.w.UserSessionsChanged(ctx, u)
}

type person struct {
	user   apitest.User
	member apitest.Member
	key    string
}

type walk struct {
	t      *testing.T
	rng    *rand.Rand
	e      *apitest.Env
	ledger *ledger.Ledger
	mirror *mirrorsync.Writer
	rdb    redis.UniversalClient
	layout mirror.Layout
	owner  person
	people []*person // the members the walk moves around (the owner is people[0])
	teams  []string
	m      *model
	log    []string
	reqSeq int
}

func (w *walk) fail(format string, args ...any) {
	w.t.Helper()
	w.t.Fatalf("%s\nsteps so far:\n  %s", fmt.Sprintf(format, args...), strings.Join(w.log, "\n  "))
}

func (w *walk) note(format string, args ...any) { w.log = append(w.log, fmt.Sprintf(format, args...)) }

func (w *walk) do(method, path string, body any) *apitest.Resp {
	w.t.Helper()
	return w.e.Do(w.t, method, path, body, apitest.Key(w.owner.key))
}

func usdString(micro int64) string { return fmt.Sprintf("%d.%06d", micro/1_000_000, micro%1_000_000) }

func (w *walk) randomLimits() (map[string]int64, []map[string]any) {
	limits := map[string]int64{}
	var body []map[string]any
	for _, tf := range modelTimeframes {
		if w.rng.IntN(3) == 0 && !(tf == "month" && len(limits) == 0) {
			continue
		}
		v := []int64{0, 100, 150, 200, 200, 300, 450}[w.rng.IntN(7)]
		limits[tf] = v
		body = append(body, map[string]any{"timeframe": tf, "costUsd": usdString(v)})
	}
	// ACCOUNTING.md: a lone limit may leave its timeframe out; it is then the day's.
	if len(body) == 1 && body[0]["timeframe"] == "day" && w.rng.IntN(2) == 0 {
		delete(body[0], "timeframe")
	}
	return limits, body
}

// randomGuard gives a policy body an in-flight guard, or none (absent or null: none).
func (w *walk) randomGuard(body map[string]any, mp *mPolicy) {
	mp.reserve, mp.reservation, mp.maxRequests = false, 0, 0
	g := map[string]any{}
	switch w.rng.IntN(5) {
	case 0:
		mp.reserve, mp.reservation = true, []int64{40, 90}[w.rng.IntN(2)]
		g["reserve"], g["reservationCostUsd"] = true, usdString(mp.reservation)
	case 1:
		mp.maxRequests = 1 + w.rng.IntN(2)
		g["maxRequests"] = mp.maxRequests
	case 2:
		body["inFlight"] = nil
		return
	default:
		return
	}
	body["inFlight"] = g
}

// flags puts hardLimit and allowRequestReset in a body, or leaves one out: both default
// to true, in a PATCH too (a full replacement does not inherit).
func (w *walk) flags(body map[string]any, hard, allow bool) (bool, bool) {
	switch w.rng.IntN(6) {
	case 0:
		delete(body, "hardLimit")
		hard = true
	case 1:
		delete(body, "allowRequestReset")
		allow = true
	}
	return hard, allow
}

func (w *walk) activePeople() []*person {
	var out []*person
	for _, p := range w.people {
		if w.m.active[p.member.MemberID] {
			out = append(out, p)
		}
	}
	return out
}

func (w *walk) policyIDs() []string {
	ids := make([]string, 0, len(w.m.policies))
	for id := range w.m.policies {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// step runs one random operation on both the model and the system.
func (w *walk) step() {
	m := w.m
	before := m.snapshotEntitlements()
	switch op := w.rng.IntN(100); {
	case op < 8 && len(m.policies) < 5:
		w.createPolicy()
	case op < 13 && len(m.policies) > 0:
		w.patchPolicy()
	case op < 16 && len(m.policies) > 0:
		w.archiveOrRestore()
	case op < 28 && len(m.policies) > 0:
		w.assign()
	case op < 32 && len(m.assigns) > 0:
		w.unassign()
	case op < 38:
		w.teamMove()
	case op < 39:
		w.replaceTeam()
	case op < 42:
		w.removeOrReadd()
	case op < 44:
		w.capture()
	case op < 72:
		w.spend()
	case op < 76 && len(m.inFlight) > 0:
		w.settleOne(w.rng.IntN(len(m.inFlight)))
	case op < 84:
		w.submit()
	case op < 92:
		w.review()
	default:
		w.advance()
	}
	m.fence(before)
}

func (w *walk) createPolicy() {
	limits, body := w.randomLimits()
	hard, allow := w.rng.IntN(3) > 0, w.rng.IntN(4) > 0
	name := fmt.Sprintf("P%d", len(w.m.policies)+1)
	in := map[string]any{"name": name, "limits": body, "hardLimit": hard, "allowRequestReset": allow}
	hard, allow = w.flags(in, hard, allow)
	mp := &mPolicy{name: name, hard: hard, allowReset: allow, revision: 1, limits: limits}
	w.randomGuard(in, mp)
	var p policy
	w.do("POST", policiesPath, in).Expect(w.t, http.StatusOK).Decode(w.t, &p)
	mp.id = p.ID
	w.m.policies[p.ID] = mp
	w.note("create %s %s %v hard=%v reset=%v", name, p.ID, limits, hard, allow)
	if p.Revision != 1 || p.ArchivedAt != nil {
		w.fail("a new policy answered revision %d archivedAt %v", p.Revision, p.ArchivedAt)
	}
}

func (w *walk) patchPolicy() {
	ids := w.policyIDs()
	mp := w.m.policies[ids[w.rng.IntN(len(ids))]]
	limits, body := w.randomLimits()
	hard, allow := mp.hard, mp.allowReset
	name := mp.name + "'"
	same := false
	switch w.rng.IntN(5) {
	case 0:
		hard = !hard
	case 1:
		allow = !allow
	case 2, 3:
		limits = mp.limits // a rename, flags only, or (3) the policy as it is
		same = w.rng.IntN(2) == 0
		if same {
			name = mp.name
		}
		body = nil
		for _, tf := range modelTimeframes {
			if v, ok := mp.limits[tf]; ok {
				body = append(body, map[string]any{"timeframe": tf, "costUsd": usdString(v)})
			}
		}
	}
	in := map[string]any{"name": name, "limits": body, "revision": mp.revision, "hardLimit": hard, "allowRequestReset": allow}
	hard, allow = w.flags(in, hard, allow)
	next := *mp
	if same && (next.reserve || next.maxRequests > 0) {
		g := map[string]any{}
		if next.reserve {
			g["reserve"], g["reservationCostUsd"] = true, usdString(next.reservation)
		}
		if next.maxRequests > 0 {
			g["maxRequests"] = next.maxRequests
		}
		in["inFlight"] = g
	} else if !same {
		w.randomGuard(in, &next)
	}
	r := w.do("PATCH", policiesPath+"/"+mp.id, in)
	w.note("patch %s rev %d -> %v hard=%v reset=%v (archived %v)", mp.id, mp.revision, limits, hard, allow, mp.archived)
	if mp.archived { // ACCOUNTING: an archived policy is 409 policy_revision_conflict
		r.ExpectError(w.t, http.StatusConflict, "policy_revision_conflict")
		return
	}
	var p policy
	r.Expect(w.t, http.StatusOK).Decode(w.t, &p)
	// ACCOUNTING.md: the revision moves "+1 per change"; a body that describes the policy
	// as it is changes nothing. (The model said so from the start; the code moved the
	// revision on every PATCH, which expired pending requests for nothing: fixed.)
	changed := name != mp.name || !maps.Equal(limits, mp.limits) || hard != mp.hard || allow != mp.allowReset ||
		next.reserve != mp.reserve || next.reservation != mp.reservation || next.maxRequests != mp.maxRequests
	mp.name, mp.limits, mp.hard, mp.allowReset = name, limits, hard, allow
	mp.reserve, mp.reservation, mp.maxRequests = next.reserve, next.reservation, next.maxRequests
	if changed {
		mp.revision++
	}
	if p.Revision != mp.revision {
		w.fail("patch answered revision %d, want %d", p.Revision, mp.revision)
	}
}

func (w *walk) archiveOrRestore() {
	ids := w.policyIDs()
	mp := w.m.policies[ids[w.rng.IntN(len(ids))]]
	path := "/archive"
	if mp.archived {
		path = "/restore"
	}
	var p policy
	w.do("POST", policiesPath+"/"+mp.id+path, map[string]any{"revision": mp.revision}).Expect(w.t, http.StatusOK).Decode(w.t, &p)
	mp.archived = !mp.archived
	mp.revision++
	w.note("%s %s -> rev %d", path[1:], mp.id, mp.revision)
	if p.Revision != mp.revision || (p.ArchivedAt != nil) != mp.archived {
		w.fail("%s answered revision %d archivedAt %v, want %d %v", path, p.Revision, p.ArchivedAt, mp.revision, mp.archived)
	}
}

func (w *walk) assign() {
	ids := w.policyIDs()
	mp := w.m.policies[ids[w.rng.IntN(len(ids))]]
	var target map[string]any
	a := &mAssignment{policy: mp.id}
	switch w.rng.IntN(3) {
	case 0:
		target, a.org = map[string]any{"organization": true}, true
	case 1:
		a.team = w.teams[w.rng.IntN(len(w.teams))]
		target = map[string]any{"teamId": a.team}
	default:
		ppl := w.activePeople()
		a.member = ppl[w.rng.IntN(len(ppl))].member.MemberID
		target = map[string]any{"memberId": a.member}
	}
	r := w.do("POST", policiesPath+"/"+mp.id+"/assignments", target)
	w.note("assign %s to %v (archived %v)", mp.id, target, mp.archived)
	if mp.archived {
		r.ExpectError(w.t, http.StatusConflict, "policy_archived")
		return
	}
	var p policy
	r.Expect(w.t, http.StatusOK).Decode(w.t, &p)
	// Assigning the same target twice is a no-op.
	for _, x := range w.m.assigns {
		if x.policy == a.policy && x.org == a.org && x.team == a.team && x.member == a.member {
			return
		}
	}
	for _, x := range p.Assignments {
		if _, known := w.m.assigns[x.ID]; !known {
			a.id = x.ID
		}
	}
	if a.id == "" {
		w.fail("assign answered no new assignment: %+v", p.Assignments)
	}
	w.m.assigns[a.id] = a
}

func (w *walk) unassign() {
	ids := make([]string, 0, len(w.m.assigns))
	for id := range w.m.assigns {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	a := w.m.assigns[ids[w.rng.IntN(len(ids))]]
	var p policy
	w.do("DELETE", policiesPath+"/"+a.policy+"/assignments/"+a.id, nil).Expect(w.t, http.StatusOK).Decode(w.t, &p)
	delete(w.m.assigns, a.id)
	w.note("unassign %s from %s", a.id, a.policy)
	for _, x := range p.Assignments {
		if x.ID == a.id {
			w.fail("the removed assignment is still answered")
		}
	}
}

// teamMove adds a member to a team or takes them out of one (a move between teams is two
// of these steps).
func (w *walk) teamMove() {
	ppl := w.activePeople()
	p := ppl[w.rng.IntN(len(ppl))]
	team := w.teams[w.rng.IntN(len(w.teams))]
	mid := p.member.MemberID
	if w.m.teams[team][mid] {
		w.do("DELETE", "/v1/teams/"+team+"/members/"+mid, nil).Expect(w.t, http.StatusNoContent)
		delete(w.m.teams[team], mid)
		w.note("team %s - %s", team, p.user.Name)
		return
	}
	w.do("POST", "/v1/teams/"+team+"/members", map[string]any{"memberId": mid}).Expect(w.t, http.StatusOK)
	w.m.teams[team][mid] = true
	w.note("team %s + %s", team, p.user.Name)
}

// replaceTeam deletes a team and creates another of the same name: the old team's
// assignments reach nobody any more (its members left it with it).
func (w *walk) replaceTeam() {
	i := w.rng.IntN(len(w.teams))
	old := w.teams[i]
	w.do("DELETE", "/v1/teams/"+old, nil).Expect(w.t, http.StatusNoContent)
	delete(w.m.teams, old)
	w.m.teams[old] = map[string]bool{} // a deleted team holds nobody
	var team struct{ ID string }
	w.do("POST", "/v1/teams", map[string]any{"name": fmt.Sprintf("team %d", i)}).Expect(w.t, http.StatusCreated).Decode(w.t, &team)
	w.teams[i] = team.ID
	w.m.teams[team.ID] = map[string]bool{}
	w.note("replace team %s by %s", old, team.ID)
}

// removeOrReadd removes a member (not the owner), or brings a removed user back: a new
// membership, with its own buckets (spec rule 9: each member has independent buckets).
func (w *walk) removeOrReadd() {
	for _, p := range w.people[1:] {
		if !w.m.active[p.member.MemberID] {
			// Sessions live a week and the walk spans weeks: both sign in again.
			p.user = w.e.SignIn(w.t, p.user)
			by := w.owner.member
			by.User = w.e.SignIn(w.t, by.User)
			p.member = w.e.Join(w.t, by, p.user, "member")
			p.key = w.e.APIKey(w.t, p.member)
			w.m.active[p.member.MemberID] = true
			w.note("re-add %s as %s", p.user.Name, p.member.MemberID)
			return
		}
	}
	p := w.people[1+w.rng.IntN(len(w.people)-1)]
	mid := p.member.MemberID
	w.do("DELETE", "/v1/members/"+mid, nil).Expect(w.t, http.StatusNoContent)
	w.m.active[mid] = false
	for _, r := range w.m.requests {
		if r.member == mid && r.status == "pending" && w.m.now.Before(r.windowEnd) {
			r.status, r.expiredReason = "expired", "member_removed"
		}
	}
	for team := range w.m.teams {
		delete(w.m.teams[team], mid)
	}
	w.note("remove %s (%s)", p.user.Name, mid)
}

// capture suspends or resumes a member's capture at the version the model holds. Both
// move to a new epoch and restart the tracking epoch (so the current periods are
// historical-unknown again) and never touch spend. A member with no tracking row reads
// version 0, but a row-less member's snapshots (version 0) and the row a first start
// creates (version 1) are one epoch, so the next epoch after either is 2.
func (w *walk) capture() {
	ppl := w.activePeople()
	p := ppl[w.rng.IntN(len(ppl))]
	mid := p.member.MemberID
	path, on := "/v1/gateway/usage-capture/suspend", false
	if w.m.suspended[mid] {
		path, on = "/v1/gateway/usage-capture/resume", true
	}
	body := map[string]any{"members": []map[string]any{{"memberId": mid, "trackingVersion": w.m.version[mid]}},
		"reviewReference": "model walk", "apply": true}
	w.do("POST", path, body).Expect(w.t, http.StatusOK)
	w.m.version[mid] = max(w.m.version[mid], 1) + 1
	w.m.suspended[mid] = !on
	w.m.tracked[mid] = w.m.now
	w.note("%s capture of %s (version %d)", path[strings.LastIndex(path, "/")+1:], p.user.Name, w.m.version[mid])
}

// enforce is what an enforcer decides for the member: from the record in Redis when it
// is usable, else from the control plane's answer (Resolve), as the gate does.
func (w *walk) enforce(member string) decision.Decision {
	ctx := context.Background()
	now := w.e.Clock.Now()
	rec, err := w.layout.Read(ctx, w.rdb, member, w.mirror.Generation())
	if err == nil && rec != nil {
		if d := decision.Decide(rec, now, false); d.Result != decision.Unknown {
			return d
		}
	}
	rec, err = w.mirror.Resolve(ctx, w.m.org, member)
	if err != nil {
		w.fail("resolve %s: %v", member, err)
	}
	return decision.Decide(rec, now, true)
}

func (w *walk) spend() {
	ppl := w.activePeople()
	p := ppl[w.rng.IntN(len(ppl))]
	mid := p.member.MemberID
	d := w.enforce(mid)
	want, _ := w.m.state(mid)
	w.note("spend by %s (model %s, enforcer %s %s)", p.user.Name, want, d.Result, d.State)
	if (d.Result == decision.Blocked) != (want == "blocked") || (d.Result == decision.Suspended) != (want != "blocked" && w.m.suspended[mid]) {
		w.fail("enforcer decided %s (%s) for %s, the model says %s (capture suspended %v)", d.Result, d.State, p.user.Name, want, w.m.suspended[mid])
	}
	if d.Result != decision.Admit {
		return
	}
	w.reqSeq++
	id := fmt.Sprintf("req_model_%d", w.reqSeq)
	snap := d.Snapshot(w.m.org, mid)
	verdict, reservation := w.m.guard(mid)
	if d.Reservation != reservation {
		w.fail("the enforcer reserves %d for %s, the model %d", d.Reservation, p.user.Name, reservation)
	}
	res, err := w.ledger.Start(context.Background(), []*internalv1.StartItem{{RequestId: id, OrganizationId: w.m.org, MemberId: mid,
		Snapshot: snap, ReservationMicroUsd: d.Reservation, MaxInFlight: d.MaxInFlight}})
	if err != nil {
		w.fail("start %s: %v", id, err)
	}
	wantStart := map[string]internalv1.StartOutcome{"": internalv1.StartOutcome_START_OUTCOME_RECORDED,
		"in_flight_reserved": internalv1.StartOutcome_START_OUTCOME_LIMIT_RESERVED,
		"concurrency_limit":  internalv1.StartOutcome_START_OUTCOME_CONCURRENCY_LIMITED}[verdict]
	w.note("  start %s: %s (model %q)", id, res[0].Outcome, verdict)
	if res[0].Outcome != wantStart {
		w.fail("start %s of %s: %s %s, the model says %q", id, p.user.Name, res[0].Outcome, res[0].Message, verdict)
	}
	if verdict != "" {
		return
	}
	st := mStart{requestID: id, member: mid, buckets: map[string]string{}, admittedAt: w.m.now, reservation: reservation}
	for _, tf := range modelTimeframes {
		st.buckets[tf] = w.m.bucket(mid, tf)
	}
	if _, ok := w.m.tracked[mid]; !ok {
		w.m.tracked[mid], w.m.version[mid] = w.m.now, 1
	}
	w.m.inFlight = append(w.m.inFlight, st)
	// Most requests finish at once; some stay in flight across later steps (and maybe a
	// reset), which spec rule 11 says still charges the admission windows.
	if w.rng.IntN(2) > 0 {
		w.settleOne(len(w.m.inFlight) - 1)
	}
}

func (w *walk) settleOne(i int) {
	st := w.m.inFlight[i]
	w.m.inFlight = slices.Delete(w.m.inFlight, i, i+1)
	cost := []int64{30, 50, 80, 120}[w.rng.IntN(4)]
	res, err := w.ledger.Settle(context.Background(), []*internalv1.SettleItem{{RequestId: st.requestID, OrganizationId: w.m.org,
		MemberId: st.member, UpstreamCostMicroUsd: at.Cost(cost), Complete: true}})
	if err != nil || res[0].Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED {
		w.fail("settle %s: %v %v", st.requestID, res, err)
	}
	// Spec rule 5: every admitted response updates all three member-period counters,
	// limited or not; rule 11: in the windows of its admission.
	for _, b := range st.buckets {
		w.m.used[b] += cost
	}
	w.m.lastSettled[st.member], w.m.lastSettledAt[st.member] = st.requestID, w.m.now
	w.note("settle %s of %s: %d", st.requestID, st.member, cost)
}

func (w *walk) submit() {
	ppl := w.activePeople()
	p := ppl[w.rng.IntN(len(ppl))]
	tf := modelTimeframes[w.rng.IntN(3)]
	// Mostly a bucket the member may ask about, when there is one: refusals are cheap
	// to find, approvals are where the rules are.
	if w.rng.IntN(4) > 0 {
		var ok [][2]int
		for i, q := range ppl {
			for j, x := range modelTimeframes {
				if w.m.eligibility(q.member.MemberID, x) == "" {
					ok = append(ok, [2]int{i, j})
				}
			}
		}
		if len(ok) > 0 {
			pick := ok[w.rng.IntN(len(ok))]
			p, tf = ppl[pick[0]], modelTimeframes[pick[1]]
		}
	}
	mid := p.member.MemberID
	b := w.m.bucket(mid, tf)
	// Spec rule 6: members request extensions only for themselves; another member's
	// bucket is none of the caller's (404 bucket_not_found), eligible or not.
	if other := ppl[w.rng.IntN(len(ppl))]; other != p && w.rng.IntN(4) == 0 {
		w.note("submit by %s for %s's %s bucket", other.user.Name, p.user.Name, tf)
		w.e.Do(w.t, "POST", resetsPath, map[string]any{"bucketId": b, "reason": "not mine"}, apitest.Key(other.key)).
			ExpectError(w.t, http.StatusNotFound, "bucket_not_found")
		return
	}
	r := w.e.Do(w.t, "POST", resetsPath, map[string]any{"bucketId": b, "reason": "model walk"}, apitest.Key(p.key))
	w.note("submit %s %s", p.user.Name, tf)
	if pend := w.m.pendingFor(b); pend != nil { // a duplicate answers the pending request
		var got resetRequest
		r.Expect(w.t, http.StatusOK).Decode(w.t, &got)
		if got.ID != pend.id || got.Status != "pending" {
			w.fail("duplicate submit answered %+v, want the pending %s", got, pend.id)
		}
		return
	}
	if refusal := w.m.eligibility(mid, tf); refusal != "" {
		if r.Status != http.StatusConflict || !strings.Contains(string(r.Body), `"`+refusal+`"`) {
			w.fail("submit for %s %s answered %d %s, the model refuses %s", p.user.Name, tf, r.Status, r.Body, refusal)
		}
		return
	}
	var got resetRequest
	if r.Status != http.StatusOK {
		w.fail("submit for %s %s answered %d %s, the model accepts", p.user.Name, tf, r.Status, r.Body)
	}
	r.Decode(w.t, &got)
	win := w.m.winner(mid, tf)
	_, end := windowOf(tf, w.m.now)
	w.m.requests = append(w.m.requests, &mRequest{id: got.ID, member: mid, tf: tf, bucket: b, windowEnd: end,
		policy: win.policy.id, revision: win.policy.revision, base: win.base, status: "pending"})
	if got.Status != "pending" || got.PolicyID != win.policy.id || got.PolicyRevision != win.policy.revision ||
		got.BaseAllowanceMicroUsd != win.base || got.ExtensionMicroUsd != ceilQuarter(win.base) {
		w.fail("submit answered %+v; the model: policy %s rev %d base %d extension %d", got, win.policy.id, win.policy.revision, win.base, ceilQuarter(win.base))
	}
}

// review approves or denies one of the requests (pending ones mostly).
func (w *walk) review() {
	if len(w.m.requests) == 0 {
		return
	}
	r := w.m.requests[w.rng.IntN(len(w.m.requests))]
	if pend := w.m.pendingOf(); len(pend) > 0 && w.rng.IntN(4) > 0 {
		r = pend[w.rng.IntN(len(pend))]
	}
	to, verb := "approved", "approve"
	if w.rng.IntN(3) == 0 {
		to, verb = "denied", "deny"
	}
	resp := w.do("POST", resetsPath+"/"+r.id+"/"+verb, map[string]any{})
	w.note("%s %s (%s, was %s)", verb, r.id, r.tf, r.status)
	var got resetRequest
	switch {
	case r.status == "pending":
		if reason := w.m.staleness(r); reason != "" {
			r.status, r.expiredReason = "expired", reason
		} else {
			r.status = to
			if to == "approved" {
				w.m.ext[r.bucket] = ceilQuarter(r.base) // spec rule 7: spend is not cleared
			}
		}
	case r.status == "expired" || r.status == to:
		// answered as it is
	default:
		resp.ExpectError(w.t, http.StatusConflict, "reset_request_decided")
		return
	}
	resp.Expect(w.t, http.StatusOK).Decode(w.t, &got)
	gotReason := ""
	if got.ExpiredReason != nil {
		gotReason = *got.ExpiredReason
	}
	if got.Status != r.status || gotReason != r.expiredReason {
		w.fail("%s %s answered %s (%s), the model says %s (%s)", verb, r.id, got.Status, gotReason, r.status, r.expiredReason)
	}
}

func (m *model) pendingOf() []*mRequest {
	var out []*mRequest
	for _, r := range m.requests {
		if r.status == "pending" {
			out = append(out, r)
		}
	}
	return out
}

// advance moves the clock, often across a 05:00 reset, sometimes across a week's or a
// month's.
func (w *walk) advance() {
	d := []time.Duration{time.Minute, 3 * time.Hour, 17 * time.Hour, 26 * time.Hour, 4 * 24 * time.Hour, 0, -1}[w.rng.IntN(7)]
	if d <= 0 { // to the next reset exactly, or to its last millisecond before
		_, end := windowOf("day", w.m.now)
		d = end.Sub(w.m.now) + d*time.Millisecond
		if d <= 0 {
			d += 24 * time.Hour
		}
	}
	w.e.Clock.Advance(d)
	w.m.now = w.e.Clock.Now()
	w.note("advance %s to %s", d, w.m.now.Format(time.RFC3339))
}

// ---------------------------------------------------------------------------------------
// The comparison.

func (w *walk) compare() {
	m := w.m
	for _, p := range w.activePeople() {
		mid := p.member.MemberID
		var st status
		w.do("GET", "/v1/gateway/usage-limits/members/"+mid, nil).Expect(w.t, http.StatusOK).Decode(w.t, &st)
		want, retryAt := m.state(mid)
		if st.State != want {
			w.fail("%s: status state %q, the model says %q\n%+v", p.user.Name, st.State, want, st)
		}
		var limited []string
		for i, tf := range modelTimeframes {
			start, _ := windowOf(tf, m.now)
			b := bucketIDOf(m.org, mid, tf, start)
			win := st.Windows[i]
			if win.Timeframe != tf || win.BucketID != b || win.UsedMicroUsd != m.used[b] || win.Limited != (m.winner(mid, tf) != nil) {
				w.fail("%s: %s window %+v; the model: bucket %s used %d limited %v", p.user.Name, tf, win, b, m.used[b], m.winner(mid, tf) != nil)
			}
			if m.winner(mid, tf) != nil {
				limited = append(limited, tf)
			}
		}
		if len(st.Buckets) != len(limited) {
			w.fail("%s: %d buckets, the model limits %v\n%+v", p.user.Name, len(st.Buckets), limited, st.Buckets)
		}
		for i, tf := range limited {
			w.compareBucket(p, tf, st, i)
		}
		// The enforcer's decision from the record it reads.
		d := w.enforce(mid)
		switch {
		case want == "blocked":
			if d.Result != decision.Blocked || !d.RetryAt.Equal(retryAt) {
				w.fail("%s: the enforcer decided %s (retry at %s), the model blocks until %s", p.user.Name, d.Result, d.RetryAt, retryAt)
			}
			a := gate.Refusal(gate.ReasonUsageLimit)
			a.RetryAfter = strconv.FormatInt(d.RetryAfter, 10)
			h := map[string]string{}
			for _, x := range a.DeniedHeaders() {
				h[x.Name] = x.Value
			}
			if a.Status != http.StatusTooManyRequests || h[gate.HeaderErrorCode] != "service_gateway_usage_limit_exceeded" ||
				h[gate.HeaderUsageState] != "blocked" {
				w.fail("%s: the 429 is %d %v", p.user.Name, a.Status, h)
			}
		case m.suspended[mid]: // spec rule 14: new starts are blocked while capture is suspended
			if d.Result != decision.Suspended {
				w.fail("%s: the enforcer decided %s %s, the model: capture suspended", p.user.Name, d.Result, d.State)
			}
		case d.Result != decision.Admit || string(d.State) != want:
			w.fail("%s: the enforcer decided %s %s, the model says %s", p.user.Name, d.Result, d.State, want)
		}
		// The record's view of every window, which the admission snapshot copies: the
		// winner's policy, revision, base and flags, the extension, the spend.
		for i, tf := range modelTimeframes {
			b, win := d.Buckets[i], m.winner(mid, tf)
			start, _ := windowOf(tf, m.now)
			bid := bucketIDOf(m.org, mid, tf, start)
			if !b.Window.Start.Equal(start) || b.Limited != (win != nil) {
				w.fail("%s: the enforcer's %s window %+v, the model: start %s limited %v", p.user.Name, tf, b, start, win != nil)
			}
			if win != nil && (b.PolicyID != win.policy.id || b.PolicyRevision != win.policy.revision || b.Base != win.base ||
				b.Extension != m.ext[bid] || b.Used != m.used[bid] || b.HardLimit != win.policy.hard ||
				b.AllowRequestReset != win.policy.allowReset || b.PolicyName != win.policy.name) {
				w.fail("%s: the enforcer's %s bucket %+v, the model: policy %s %q rev %d base %d ext %d used %d hard %v reset %v",
					p.user.Name, tf, b, win.policy.id, win.policy.name, win.policy.revision, win.base, m.ext[bid], m.used[bid],
					win.policy.hard, win.policy.allowReset)
			}
		}
		// The member's own read says what the owner's says.
		var mine status
		w.e.Do(w.t, "GET", mePath, nil, apitest.Key(p.key)).Expect(w.t, http.StatusOK).Decode(w.t, &mine)
		if a, b := mustMarshal(w.t, mine), mustMarshal(w.t, st); a != b {
			w.fail("%s: /me answers\n%s\nthe owner reads\n%s", p.user.Name, a, b)
		}
		// Coverage: pending starts (null before the first), settlementReady.
		pending := 0
		for _, s := range m.inFlight {
			if s.member == mid {
				pending++
			}
		}
		w.compareCoverage(p, st.Coverage, pending)
	}
	// A removed member is refused by any enforcer that still finds their record.
	for member, on := range m.active {
		if on {
			continue
		}
		rec, err := w.layout.Read(context.Background(), w.rdb, member, w.mirror.Generation())
		if err == nil && rec != nil {
			if d := decision.Decide(rec, m.now, false); d.Result == decision.Admit || d.Result == decision.Blocked {
				w.fail("removed member %s: the enforcer decides %s from the record in Redis", member, d.Result)
			}
		}
	}
	// The pending queue (whose windows have not ended), as the owner lists it.
	var page resetPage
	w.do("GET", resetsPath+"?view=pending&limit=100", nil).Expect(w.t, http.StatusOK).Decode(w.t, &page)
	var got, want []string
	for _, r := range page.Requests {
		got = append(got, r.ID)
	}
	for _, r := range m.requests {
		if r.status == "pending" && m.now.Before(r.windowEnd) {
			want = append(want, r.id)
		}
	}
	if !slices.Equal(got, want) || page.PendingCount != int64(len(want)) {
		w.fail("pending queue %v (count %d), the model %v", got, page.PendingCount, want)
	}
	// The history, newest first: every request that is no longer in the pending queue,
	// a pending one whose window ended shown as expired (window_ended) without being
	// rewritten. (The model's first reading put every request in the history; ACCOUNTING
	// says "history (newest first, including pending requests whose window ended)": the
	// live queue is the pending view's, and the code agrees with that reading.)
	shown := map[string]string{}
	var last string
	for cursor := ""; ; {
		var hp resetPage
		path := resetsPath + "?view=history&limit=100"
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		w.do("GET", path, nil).Expect(w.t, http.StatusOK).Decode(w.t, &hp)
		for _, r := range hp.Requests {
			reason := ""
			if r.ExpiredReason != nil {
				reason = *r.ExpiredReason
			}
			shown[r.ID] = r.Status + "/" + reason
			if last != "" && r.CreatedAt > last {
				w.fail("history is not newest first: %s after %s", r.CreatedAt, last)
			}
			last = r.CreatedAt
		}
		if !hp.HasMore || hp.NextCursor == nil {
			break
		}
		cursor = *hp.NextCursor
	}
	inHistory := 0
	for _, r := range m.requests {
		want := r.status + "/" + r.expiredReason
		if r.status == "pending" {
			if m.now.Before(r.windowEnd) {
				continue
			}
			want = "expired/window_ended"
		}
		inHistory++
		if shown[r.id] != want {
			w.fail("history shows %s as %s, the model %s", r.id, shown[r.id], want)
		}
	}
	if len(shown) != inHistory {
		w.fail("history lists %d requests, the model %d", len(shown), inHistory)
	}
	// Every counter is the sum of its receipts.
	at.Check(w.t, w.e.Store)
}

// compareCoverage (spec rules 13, 15, 17, 18; ACCOUNTING "Coverage"): pendingRequests is
// null before tracking starts (the member's first start) and then counts the starts not
// settled; settlementReady is a tracking row with nothing pending; history is unknown
// before tracking (tracking_not_started) and while any current window began before the
// tracking epoch or capture is suspended (period_predates_tracking); complete needs known history, no incomplete
// receipt (the walk settles complete ones only) and settlementReady; lastSettlement* name
// the latest settled receipt.
func (w *walk) compareCoverage(p *person, cv map[string]any, pending int) {
	mid := p.member.MemberID
	epoch, tracked := w.m.tracked[mid]
	reason := any(nil)
	switch {
	case !tracked:
		reason = "tracking_not_started"
	case w.m.suspended[mid]:
		// Nothing is tracked while capture is suspended: the next epoch begins at the
		// resume, and every current period predates it.
		reason = "period_predates_tracking"
	default:
		for _, tf := range modelTimeframes {
			if start, _ := windowOf(tf, w.m.now); start.Before(epoch) {
				reason = "period_predates_tracking"
			}
		}
	}
	historical := "tracked_since_epoch"
	if reason != nil {
		historical = "unknown"
	}
	ready := tracked && pending == 0
	var wantPending, wantStarted, wantLast, wantLastAt any
	if tracked {
		wantPending, wantStarted = float64(pending), epoch.Format("2006-01-02T15:04:05.000Z")
	}
	if id, ok := w.m.lastSettled[mid]; ok {
		wantLast, wantLastAt = id, w.m.lastSettledAt[mid].Format("2006-01-02T15:04:05.000Z")
	}
	if cv["pendingRequests"] != wantPending || cv["settlementReady"] != ready || cv["historicalCoverage"] != historical ||
		cv["historicalUnknownReason"] != reason || cv["complete"] != (reason == nil && ready) ||
		cv["trackingStartedAt"] != wantStarted || cv["lastSettlementRequestId"] != wantLast || cv["lastSettlementAt"] != wantLastAt ||
		cv["captureEnabled"] != !w.m.suspended[mid] || cv["trackingVersion"] != float64(w.m.version[mid]) ||
		cv["incompleteRequests"] != float64(0) {
		w.fail("%s: coverage %v\nthe model: version %d suspended %v pending %v ready %v history %s (%v) started %v last %v at %v", p.user.Name, cv,
			w.m.version[mid], w.m.suspended[mid], wantPending, ready, historical, reason, wantStarted, wantLast, wantLastAt)
	}
}

func (w *walk) compareBucket(p *person, tf string, st status, i int) {
	m := w.m
	mid := p.member.MemberID
	got := st.Buckets[i]
	win := m.winner(mid, tf)
	start, end := windowOf(tf, m.now)
	b := bucketIDOf(m.org, mid, tf, start)
	ext := m.ext[b]
	// A bucket shows the reservations in flight only where its winner reserves: the
	// guard weighs them against that window's allowance alone (the window view shows
	// them all).
	reserved := int64(0)
	if win.policy.reserve {
		reserved = m.reserved(mid, tf)
	}
	can := m.eligibility(mid, tf) == "" && m.pendingFor(b) == nil
	var newest *string
	if r := m.newestFor(b); r != nil {
		newest = &r.status
	}
	var prov []string
	for _, x := range got.Provenance {
		prov = append(prov, x.AssignmentID+":"+x.Kind)
	}
	gotNewest := "<nil>"
	if got.ResetRequestStatus != nil {
		gotNewest = *got.ResetRequestStatus
	}
	wantNewest := "<nil>"
	if newest != nil {
		wantNewest = *newest
	}
	if got.Timeframe != tf || got.ID != b || got.PolicyID != win.policy.id || got.PolicyRevision != win.policy.revision ||
		got.BaseAllowanceMicroUsd != win.base || got.ExtensionMicroUsd != ext || got.AllowanceMicroUsd != win.base+ext ||
		got.UsedMicroUsd != m.used[b] || got.RemainingMicroUsd != win.base+ext-m.used[b] || got.ReservedMicroUsd != reserved ||
		!sameInstant(got.WindowStart, start) || !sameInstant(got.ResetAt, end) || got.HardLimit != win.policy.hard ||
		got.AllowRequestReset != win.policy.allowReset || got.CanRequestReset != can || gotNewest != wantNewest ||
		!slices.Equal(prov, m.provenance(mid, win)) {
		w.fail("%s: %s bucket %+v\nthe model: id %s policy %s rev %d base %d ext %d used %d reserved %d window %s..%s hard %v reset %v can %v newest %s provenance %v",
			p.user.Name, tf, got, b, win.policy.id, win.policy.revision, win.base, ext, m.used[b], reserved, start, end,
			win.policy.hard, win.policy.allowReset, can, wantNewest, m.provenance(mid, win))
	}
}

func mustMarshal(t *testing.T, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func sameInstant(s string, t time.Time) bool {
	got, err := time.Parse(time.RFC3339Nano, s)
	return err == nil && got.Equal(t)
}

// TestRulesModelRandomWalk drives the control plane with random operations and compares
// it with the model after every step. TOLLGATE_TEST_RULES_SEED replays one walk; the seed is
// printed on failure.
func TestRulesModelRandomWalk(t *testing.T) {
	t.Parallel()
	seeds := []uint64{1, 2, 3}
	if s := os.Getenv("TOLLGATE_TEST_RULES_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		seeds = []uint64{v}
	} else {
		seeds = append(seeds, uint64(time.Now().UnixNano()))
	}
	steps := 150
	if s := os.Getenv("TOLLGATE_TEST_RULES_STEPS"); s != "" {
		steps, _ = strconv.Atoi(s)
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			runWalk(t, seed, steps)
		})
	}
}

func runWalk(t *testing.T, seed uint64, steps int) {
	t.Logf("seed %d (replay with TOLLGATE_TEST_RULES_SEED=%d)", seed, seed)
	ev := &lateEvents{}
	e := apitest.NewWith(t, apitest.Options{Events: ev})
	rdb, layout := testredis.New(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	met := metrics.New(prometheus.NewRegistry())
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ev.w = mirrorsync.New(mirrorsync.Deps{Store: e.Store, Redis: rdb, Layout: layout, Clock: e.Clock, Log: log, Metrics: met})
	if err := ev.w.Check(ctx); err != nil {
		t.Fatal(err)
	}
	l := ledger.New(ledger.Deps{Store: e.Store, Clock: e.Clock, Log: log, Metrics: met, Mirror: ev.w})
	stopped := make(chan error, 1)
	go func() { stopped <- l.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-stopped })

	w := &walk{t: t, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), e: e, ledger: l, mirror: ev.w, rdb: rdb, layout: layout}
	owner := e.NewOrg(t, "Model")
	w.owner = person{user: owner.User, member: owner, key: e.APIKey(t, owner)}
	w.m = &model{org: owner.OrgID, now: e.Clock.Now(), policies: map[string]*mPolicy{}, assigns: map[string]*mAssignment{},
		teams: map[string]map[string]bool{}, active: map[string]bool{owner.MemberID: true}, used: map[string]int64{},
		ext: map[string]int64{}, tracked: map[string]time.Time{}, lastSettled: map[string]string{}, lastSettledAt: map[string]time.Time{},
		version: map[string]int64{}, suspended: map[string]bool{}}
	w.people = []*person{&w.owner}
	for _, name := range []string{"ana", "ben", "cy"} {
		mb := e.AddMember(t, owner, name, "member")
		w.people = append(w.people, &person{user: mb.User, member: mb, key: e.APIKey(t, mb)})
		w.m.active[mb.MemberID] = true
	}
	for i := range 2 {
		var team struct{ ID string }
		w.do("POST", "/v1/teams", map[string]any{"name": fmt.Sprintf("team %d", i)}).Expect(t, http.StatusCreated).Decode(t, &team)
		w.teams = append(w.teams, team.ID)
		w.m.teams[team.ID] = map[string]bool{}
	}
	for range steps {
		w.step()
		w.compare()
	}
	if os.Getenv("TOLLGATE_TEST_RULES_TRACE") != "" {
		t.Logf("steps:\n  %s", strings.Join(w.log, "\n  "))
	}
}
