package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/controlplane/fault"
	"github.com/tollgate-dev/tollgate/controlplane/jsonx"
	"github.com/tollgate-dev/tollgate/controlplane/limits"
	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/pkg/money"
	"github.com/tollgate-dev/tollgate/pkg/typeid"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// maxRevision is the specification's bound for a policy revision (2^53-1, the largest
// integer every JSON client reads exactly). A policy at the bound cannot change again.
const maxRevision int64 = 1<<53 - 1

// maxUsageIDLen bounds the plain-string ids of the gateway usage routes (path parameters
// and ids in bodies), as the specification does for policyId and assignmentId.
const maxUsageIDLen = 64

// usagePathID reads a plain-string path id of 1 to 64 characters. Its shape is not
// checked further: an id of the right length that names nothing is a 404, not a 400.
func (c *Call) usagePathID(name string) (string, error) {
	v := c.Path(name)
	if n := utf8.RuneCountInString(v); n < 1 || n > maxUsageIDLen {
		return "", fault.InvalidAt(lengthMessage(1, maxUsageIDLen), name)
	}
	return v, nil
}

// usagePlainID checks an id given in a body: a string of 1 to 64 characters.
func usagePlainID(p *fault.Problems, v string, path ...any) {
	if n := utf8.RuneCountInString(v); n < 1 || n > maxUsageIDLen {
		p.Add(lengthMessage(1, maxUsageIDLen), path...)
	}
}

func errPolicyNotFound() error {
	return fault.NotFoundf("policy_not_found", "No usage limit policy with this id in the organization.")
}

// Views: the specification's Usage limit policy, exactly.

type usagePolicyView struct {
	ID                string           `json:"id"`
	Name              string           `json:"name"`
	HardLimit         bool             `json:"hardLimit"`
	AllowRequestReset bool             `json:"allowRequestReset"`
	Revision          int64            `json:"revision"`
	Limits            []usageLimitView `json:"limits"`
	// InFlight is Tollgate's extension of the policy: its in-flight guard.
	InFlight    usageInFlightView     `json:"inFlight"`
	Assignments []usageAssignmentView `json:"assignments"`
	// ArchivedAt is null while the policy is active.
	ArchivedAt *jsonx.Time `json:"archivedAt"`
}

type usageLimitView struct {
	Timeframe         string `json:"timeframe"`
	CostLimitMicroUsd int64  `json:"costLimitMicroUsd"`
}

// usageInFlightView is a policy's in-flight guard (docs/usage-limits.md, "Bounded
// overshoot"); every read shows it, with reserve false and maxRequests null by default.
type usageInFlightView struct {
	Reserve             bool   `json:"reserve"`
	ReservationMicroUsd int64  `json:"reservationMicroUsd"`
	MaxRequests         *int32 `json:"maxRequests"`
}

func viewInFlight(g limits.Guard) usageInFlightView {
	v := usageInFlightView{Reserve: g.ReserveInFlight, ReservationMicroUsd: g.ReservationMicroUSD}
	if g.MaxInFlight > 0 {
		v.MaxRequests = &g.MaxInFlight
	}
	return v
}

type usageAssignmentView struct {
	ID           string  `json:"id"`
	MemberID     *string `json:"memberId"`
	TeamID       *string `json:"teamId"`
	Organization bool    `json:"organization"`
}

func viewUsagePolicy(p store.UsagePolicy) usagePolicyView {
	v := usagePolicyView{ID: p.ID, Name: p.Name, HardLimit: p.HardLimit, AllowRequestReset: p.AllowRequestReset,
		Revision: p.Revision, Limits: make([]usageLimitView, len(p.Limits)), Assignments: make([]usageAssignmentView, len(p.Assignments)),
		ArchivedAt: jsonx.TimePtr(p.ArchivedAt), InFlight: viewInFlight(p.Guard)}
	for i, l := range p.Limits {
		v.Limits[i] = usageLimitView{Timeframe: string(l.Timeframe), CostLimitMicroUsd: l.MicroUSD}
	}
	for i, a := range p.Assignments {
		v.Assignments[i] = viewUsageAssignment(a)
	}
	return v
}

func viewUsageAssignment(a store.UsageAssignment) usageAssignmentView {
	return usageAssignmentView{ID: a.ID, MemberID: a.MemberID, TeamID: a.TeamID, Organization: a.Organization}
}

// Bodies.

// usageLimitBody is one limit of a policy write. The specification's body shows only
// costUsd; timeframe is ours and may be left out only when exactly one limit is given,
// which then limits the day (the specification's example timeframe). A null timeframe
// is not left out: the OpenAPI document's enum has no null (400, as for hardLimit).
type usageLimitBody struct {
	Timeframe jsonx.Optional[string] `json:"timeframe"`
	CostUSD   *string                `json:"costUsd"`
}

// usagePolicyFields are the fields shared by create and the full-replacement PATCH.
// hardLimit and allowRequestReset default to true when absent (in a PATCH too: a full
// replacement does not inherit omitted fields).
type usagePolicyFields struct {
	Name              *string              `json:"name"`
	Limits            []usageLimitBody     `json:"limits"`
	HardLimit         jsonx.Optional[bool] `json:"hardLimit"`
	AllowRequestReset jsonx.Optional[bool] `json:"allowRequestReset"`
	InFlight          *usageInFlightBody   `json:"inFlight"`
}

// usageInFlightBody is the in-flight guard of a policy write; absent or null is the
// specification's behaviour (no reservations, no cap).
type usageInFlightBody struct {
	Reserve jsonx.Optional[bool] `json:"reserve"`
	// ReservationCostUSD is a string or absent; null is refused (the OpenAPI document's
	// type is string), unlike maxRequests, whose null is "no cap".
	ReservationCostUSD jsonx.Optional[string] `json:"reservationCostUsd"`
	MaxRequests        *int64                 `json:"maxRequests"`
}

func (in *usageInFlightBody) validate(p *fault.Problems) limits.Guard {
	var g limits.Guard
	if in == nil {
		return g
	}
	if in.Reserve.Set && in.Reserve.Null {
		p.Add("must be a boolean", "inFlight", "reserve")
	}
	g.ReserveInFlight = in.Reserve.Value
	if r := in.ReservationCostUSD; r.Set {
		micro, err := money.ParseUSD(r.Value)
		if err != nil || r.Null || micro > money.MaxAllowanceMicroUSD {
			p.Add("must be a decimal USD string such as \"0.05\" (no sign, at most 6 decimals, at most "+
				money.FormatUSD(money.MaxAllowanceMicroUSD)+")", "inFlight", "reservationCostUsd")
		}
		g.ReservationMicroUSD = micro
	}
	if g.ReserveInFlight && g.ReservationMicroUSD == 0 {
		p.Add("is required and more than 0 when reserve is true: what a request reserves while in flight when its worst case "+
			"is not known at admission", "inFlight", "reservationCostUsd")
	}
	if in.MaxRequests != nil {
		if *in.MaxRequests < 1 || *in.MaxRequests > limits.MaxInFlightCap {
			p.Add(fmt.Sprintf("must be an integer from 1 to %d, or null for no cap", limits.MaxInFlightCap), "inFlight", "maxRequests")
		} else {
			g.MaxInFlight = int32(*in.MaxRequests)
		}
	}
	return g
}

// validate checks the shared fields and returns the policy they describe.
func (in *usagePolicyFields) validate(p *fault.Problems) store.UsagePolicy {
	out := store.UsagePolicy{HardLimit: true, AllowRequestReset: true}
	out.Name = nameText(p, in.Name, 1, 120, "name")
	for _, f := range []struct {
		o    jsonx.Optional[bool]
		dst  *bool
		name string
	}{{in.HardLimit, &out.HardLimit, "hardLimit"}, {in.AllowRequestReset, &out.AllowRequestReset, "allowRequestReset"}} {
		if f.o.Set && f.o.Null {
			p.Add("must be a boolean", f.name)
		} else if f.o.Set {
			*f.dst = f.o.Value
		}
	}
	out.Limits = validateLimits(p, in.Limits)
	out.Guard = in.InFlight.validate(p)
	return out
}

func validateLimits(p *fault.Problems, in []usageLimitBody) []store.UsageLimit {
	if in == nil {
		p.Add("is required", "limits")
		return nil
	}
	if len(in) < 1 || len(in) > 3 {
		p.Add("must have 1 to 3 items", "limits")
		return nil
	}
	var out []store.UsageLimit
	seen := map[window.Timeframe]bool{}
	for i, l := range in {
		tf := window.Day
		switch {
		case l.Timeframe.Set:
			t, err := window.ParseTimeframe(l.Timeframe.Value)
			if err != nil || l.Timeframe.Null {
				p.Add("must be day, week or month", "limits", i, "timeframe")
				continue
			}
			tf = t
		case len(in) > 1:
			p.Add("is required when more than one limit is given", "limits", i, "timeframe")
			continue
		}
		if seen[tf] {
			p.Add("repeats a timeframe; each timeframe may have one limit", "limits", i, "timeframe")
			continue
		}
		seen[tf] = true
		if l.CostUSD == nil {
			p.Add("is required", "limits", i, "costUsd")
			continue
		}
		micro, err := money.ParseUSD(*l.CostUSD)
		if err != nil || micro > money.MaxAllowanceMicroUSD {
			p.Add("must be a decimal USD string such as \"12.5\" (no sign, at most 6 decimals, at most 32 characters, at most "+
				money.FormatUSD(money.MaxAllowanceMicroUSD)+")", "limits", i, "costUsd")
			continue
		}
		out = append(out, store.UsageLimit{Timeframe: tf, MicroUSD: micro})
	}
	slices.SortFunc(out, func(a, b store.UsageLimit) int { return limits.Index(a.Timeframe) - limits.Index(b.Timeframe) })
	return out
}

// revisionField reads a required revision: an integer from 1 to 2^53-1. It is decoded
// as a number first so that 1.5 or 1e300 get a clear message rather than a type error.
func revisionField(p *fault.Problems, v jsonx.Optional[jsonNumber]) int64 {
	if !v.Set || v.Null {
		p.Add("is required", "revision")
		return 0
	}
	n, err := strconv.ParseInt(string(v.Value), 10, 64)
	if err != nil || n < 1 || n > maxRevision {
		p.Add("must be an integer from 1 to "+strconv.FormatInt(maxRevision, 10), "revision")
		return 0
	}
	return n
}

// jsonNumber keeps a JSON number's text, so integers are read exactly (never through a
// float) and non-numbers are refused by the decoder.
type jsonNumber string

func (n *jsonNumber) UnmarshalJSON(b []byte) error {
	s := string(b)
	if s == "" || (s[0] != '-' && (s[0] < '0' || s[0] > '9')) {
		return fault.InvalidAt("must be an integer", "revision")
	}
	*n = jsonNumber(s)
	return nil
}

// Handlers.

// listUsagePolicies answers the organization's policies. The policies, their limits and
// their assignments are separate statements, read in one snapshot (Call.ReadTx): an edit
// committing meanwhile shows whole or not at all, never a revision next to the limits
// of the next one.
func (s *Server) listUsagePolicies(c *Call) error {
	var ps []store.UsagePolicy
	err := c.ReadTx(func(tx pgx.Tx) error {
		var err error
		ps, err = store.ListUsagePolicies(c.Ctx, tx, c.OrgID())
		return err
	})
	if err != nil {
		return err
	}
	views := make([]usagePolicyView, len(ps))
	for i, p := range ps {
		views[i] = viewUsagePolicy(p)
	}
	return c.JSON(http.StatusOK, map[string]any{"policies": views})
}

func (s *Server) createUsagePolicy(c *Call) error {
	var in usagePolicyFields
	if err := c.Decode(&in); err != nil {
		return err
	}
	var p fault.Problems
	pol := in.validate(&p)
	if err := p.Err(); err != nil {
		return err
	}
	pol.ID = newID(typeid.Policy)
	pol.OrganizationID = c.OrgID()
	pol.Revision = 1
	pol.CreatedAt, pol.UpdatedAt = c.now, c.now
	var out store.UsagePolicy
	err := c.Tx(func(tx pgx.Tx) error {
		if err := c.usageManagerNow(tx); err != nil {
			return err
		}
		// A policy without assignments reaches nobody, so creating one changes no winner
		// and needs no fence.
		if err := store.CreateUsagePolicy(c.Ctx, tx, pol); err != nil {
			return err
		}
		if err := c.Audit(tx, "usage_policy.create", pol.ID, policyAudit(pol)); err != nil {
			return err
		}
		var err error
		out, err = store.UsagePolicyInOrg(c.Ctx, tx, c.OrgID(), pol.ID)
		return err
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, viewUsagePolicy(out))
}

func policyAudit(p store.UsagePolicy) map[string]any {
	limits := map[string]int64{}
	for _, l := range p.Limits {
		limits[string(l.Timeframe)] = l.MicroUSD
	}
	return map[string]any{"name": p.Name, "limitsMicroUsd": limits, "hardLimit": p.HardLimit,
		"allowRequestReset": p.AllowRequestReset, "revision": p.Revision, "inFlight": viewInFlight(p.Guard)}
}

// usagePolicyUpdate is the specification's update body: a full replacement that must
// name the revision it edits.
type usagePolicyUpdate struct {
	Name              *string                    `json:"name"`
	Limits            []usageLimitBody           `json:"limits"`
	Revision          jsonx.Optional[jsonNumber] `json:"revision"`
	HardLimit         jsonx.Optional[bool]       `json:"hardLimit"`
	AllowRequestReset jsonx.Optional[bool]       `json:"allowRequestReset"`
	InFlight          *usageInFlightBody         `json:"inFlight"`
}

// policyForWrite holds the caller to the role they have now (usageManagerNow), takes the
// organization's usage lock (every write that can change who wins holds it) and reads
// the policy named in the path.
func (c *Call) policyForWrite(tx pgx.Tx, id string) (store.UsagePolicy, error) {
	if err := c.usageManagerNow(tx); err != nil {
		return store.UsagePolicy{}, err
	}
	if err := c.lockUsage(tx); err != nil {
		return store.UsagePolicy{}, err
	}
	p, err := store.UsagePolicyInOrg(c.Ctx, tx, c.OrgID(), id)
	if errors.Is(err, store.ErrNotFound) {
		return p, errPolicyNotFound()
	}
	return p, err
}

// assignablePolicy is policyForWrite for a new assignment, which an archived policy
// refuses (409 policy_archived). Removing an assignment is not refused: the
// specification's remove-assignment transition has no exception for archived policies, and
// an archived policy reaches nobody, so a removal changes no winner.
func (c *Call) assignablePolicy(tx pgx.Tx, id string) (store.UsagePolicy, error) {
	p, err := c.policyForWrite(tx, id)
	if err == nil && p.ArchivedAt != nil {
		return p, errPolicyArchived()
	}
	return p, err
}

// usageManagerNow reads the caller's membership again inside tx, FOR SHARE, and refuses
// them unless they are an owner or admin now (managerNow): the route's role check used
// the membership read at authentication, and a demotion or removal may have committed
// while the request waited, typically for the usage lock behind an organization-wide
// fence. Every usage-limit write calls it before the usage lock, the order in which a
// member's removal takes the member's row and then the usage lock; a demotion or removal
// still to come waits for the write. Without it an admin demoted to member while their
// approval waited still granted the extension (rule 6: owners and admins manage
// policies, assignments and reviews).
func (c *Call) usageManagerNow(tx pgx.Tx) error { return c.managerNow(tx, store.ForShare) }

func errRevisionOverflow() error {
	return fault.Conflictf("policy_revision_overflow", "The policy reached the largest revision and cannot change again; create a new policy.")
}

func (s *Server) updateUsagePolicy(c *Call) error {
	id, err := c.usagePathID("policyId")
	if err != nil {
		return err
	}
	var in usagePolicyUpdate
	if err := c.Decode(&in); err != nil {
		return err
	}
	var p fault.Problems
	fields := usagePolicyFields{Name: in.Name, Limits: in.Limits, HardLimit: in.HardLimit, AllowRequestReset: in.AllowRequestReset,
		InFlight: in.InFlight}
	next := fields.validate(&p)
	revision := revisionField(&p, in.Revision)
	if err := p.Err(); err != nil {
		return err
	}
	var out store.UsagePolicy
	err = c.Tx(func(tx pgx.Tx) error {
		cur, err := c.policyForWrite(tx, id)
		if err != nil {
			return err
		}
		switch {
		case cur.ArchivedAt != nil:
			return fault.Conflictf("policy_revision_conflict", "The policy is archived; restore it before editing.")
		case cur.Revision != revision:
			return fault.Conflictf("policy_revision_conflict",
				"The policy changed since revision %d (it is at revision %d); reload it and edit again.", revision, cur.Revision)
		case next.SameTerms(cur):
			// No change: the policy is answered as it is, at its revision, and nothing
			// is fenced, audited or told to the enforcers.
			out = cur
			return nil
		case cur.Revision >= maxRevision:
			return errRevisionOverflow()
		}
		next.ID, next.OrganizationID = cur.ID, cur.OrganizationID
		next.Revision = cur.Revision + 1
		next.UpdatedAt = c.now
		err = s.fenceChange(c, tx, "usage_policy.update", func() error {
			return store.ReplaceUsagePolicy(c.Ctx, tx, next)
		})
		if err != nil {
			return err
		}
		if err := c.Audit(tx, "usage_policy.update", cur.ID, map[string]any{"from": policyAudit(cur), "to": policyAudit(next)}); err != nil {
			return err
		}
		out, err = store.UsagePolicyInOrg(c.Ctx, tx, c.OrgID(), id)
		return err
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, viewUsagePolicy(out))
}

func (s *Server) archiveUsagePolicy(c *Call) error { return s.setPolicyArchived(c, true) }
func (s *Server) restoreUsagePolicy(c *Call) error { return s.setPolicyArchived(c, false) }

// setPolicyArchived archives or restores a policy. It is idempotent: a policy already in
// the wanted state is answered as it is, whatever revision the body names, so a retried
// request succeeds; otherwise the revision must match.
func (s *Server) setPolicyArchived(c *Call, archive bool) error {
	id, err := c.usagePathID("policyId")
	if err != nil {
		return err
	}
	var in struct {
		Revision jsonx.Optional[jsonNumber] `json:"revision"`
	}
	if err := c.Decode(&in); err != nil {
		return err
	}
	var p fault.Problems
	revision := revisionField(&p, in.Revision)
	if err := p.Err(); err != nil {
		return err
	}
	action := "usage_policy.restore"
	if archive {
		action = "usage_policy.archive"
	}
	var out store.UsagePolicy
	err = c.Tx(func(tx pgx.Tx) error {
		cur, err := c.policyForWrite(tx, id)
		if err != nil {
			return err
		}
		out = cur
		if (cur.ArchivedAt != nil) == archive {
			return nil
		}
		if cur.Revision != revision {
			return fault.Conflictf("policy_revision_conflict",
				"The policy changed since revision %d (it is at revision %d); reload it and try again.", revision, cur.Revision)
		}
		if cur.Revision >= maxRevision {
			return errRevisionOverflow()
		}
		var at *time.Time
		if archive {
			at = &c.now
		}
		err = s.fenceChange(c, tx, action, func() error {
			return store.SetUsagePolicyArchived(c.Ctx, tx, id, at, cur.Revision+1, c.now)
		})
		if err != nil {
			return err
		}
		if err := c.Audit(tx, action, id, map[string]any{"revision": cur.Revision + 1}); err != nil {
			return err
		}
		out, err = store.UsagePolicyInOrg(c.Ctx, tx, c.OrgID(), id)
		return err
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, viewUsagePolicy(out))
}

func (s *Server) listUsageAssignments(c *Call) error {
	id, err := c.usagePathID("policyId")
	if err != nil {
		return err
	}
	var p store.UsagePolicy
	err = c.ReadTx(func(tx pgx.Tx) error { // one snapshot, as listUsagePolicies
		var err error
		p, err = store.UsagePolicyInOrg(c.Ctx, tx, c.OrgID(), id)
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		return errPolicyNotFound()
	}
	if err != nil {
		return err
	}
	views := make([]usageAssignmentView, len(p.Assignments))
	for i, a := range p.Assignments {
		views[i] = viewUsageAssignment(a)
	}
	return c.JSON(http.StatusOK, map[string]any{"assignments": views})
}

func errPolicyArchived() error {
	return fault.Conflictf("policy_archived", "The policy is archived; restore it before assigning it.")
}

func (s *Server) createUsageAssignment(c *Call) error {
	id, err := c.usagePathID("policyId")
	if err != nil {
		return err
	}
	var in struct {
		MemberID     jsonx.Optional[string] `json:"memberId"`
		TeamID       jsonx.Optional[string] `json:"teamId"`
		Organization jsonx.Optional[bool]   `json:"organization"`
	}
	if err := c.Decode(&in); err != nil {
		return err
	}
	// Exactly one target. A null member or team id, or organization:false, names no
	// target, so {"memberId": "om_...", "teamId": null} is a member assignment.
	var p fault.Problems
	a := store.UsageAssignment{ID: newID(typeid.Assignment), PolicyID: id, CreatedAt: c.now}
	targets := 0
	if in.MemberID.Set && !in.MemberID.Null {
		usagePlainID(&p, in.MemberID.Value, "memberId")
		a.MemberID = &in.MemberID.Value
		targets++
	}
	if in.TeamID.Set && !in.TeamID.Null {
		usagePlainID(&p, in.TeamID.Value, "teamId")
		a.TeamID = &in.TeamID.Value
		targets++
	}
	if in.Organization.Set && !in.Organization.Null && in.Organization.Value {
		a.Organization = true
		targets++
	}
	if targets != 1 {
		p.Add("give exactly one target: memberId, teamId, or organization: true")
	}
	if err := p.Err(); err != nil {
		return err
	}
	var out store.UsagePolicy
	err = c.Tx(func(tx pgx.Tx) error {
		if _, err := c.assignablePolicy(tx, id); err != nil {
			return err
		}
		switch {
		case a.MemberID != nil:
			ok, err := store.ActiveMemberExists(c.Ctx, tx, c.OrgID(), *a.MemberID)
			if err != nil {
				return err
			}
			if !ok {
				return errMemberNotFound()
			}
		case a.TeamID != nil:
			if _, err := store.TeamInOrg(c.Ctx, tx, c.OrgID(), *a.TeamID, store.NoLock); errors.Is(err, store.ErrNotFound) {
				return errTeamNotFound()
			} else if err != nil {
				return err
			}
		}
		added := false
		err = s.fenceChange(c, tx, "usage_policy.assign", func() error {
			var err error
			added, err = store.CreateUsageAssignment(c.Ctx, tx, c.OrgID(), a)
			return err
		})
		if err != nil {
			return err
		}
		if added {
			if err := c.Audit(tx, "usage_policy.assign", id, assignmentAudit(a)); err != nil {
				return err
			}
		}
		out, err = store.UsagePolicyInOrg(c.Ctx, tx, c.OrgID(), id)
		return err
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, viewUsagePolicy(out))
}

func assignmentAudit(a store.UsageAssignment) map[string]any {
	return map[string]any{"assignmentId": a.ID, "memberId": a.MemberID, "teamId": a.TeamID, "organization": a.Organization}
}

// deleteUsageAssignment is the specification's remove-assignment operation. It answers
// the policy after removal; an assignment id the policy does not have changes nothing
// and still answers the policy.
func (s *Server) deleteUsageAssignment(c *Call) error {
	id, err := c.usagePathID("policyId")
	if err != nil {
		return err
	}
	assignmentID, err := c.usagePathID("assignmentId")
	if err != nil {
		return err
	}
	var out store.UsagePolicy
	err = c.Tx(func(tx pgx.Tx) error {
		// An archived policy's assignments may be removed too (assignablePolicy says why);
		// the fence still runs, and finds no winner changed.
		if _, err := c.policyForWrite(tx, id); err != nil {
			return err
		}
		var removed *store.UsageAssignment
		err = s.fenceChange(c, tx, "usage_policy.unassign", func() error {
			a, err := store.DeleteUsageAssignment(c.Ctx, tx, id, assignmentID)
			if errors.Is(err, store.ErrNotFound) {
				return nil
			}
			removed = &a
			return err
		})
		if err != nil {
			return err
		}
		if removed != nil {
			if err := c.Audit(tx, "usage_policy.unassign", id, assignmentAudit(*removed)); err != nil {
				return err
			}
		}
		out, err = store.UsagePolicyInOrg(c.Ctx, tx, c.OrgID(), id)
		return err
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, viewUsagePolicy(out))
}
