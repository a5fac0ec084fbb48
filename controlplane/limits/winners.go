package limits

import (
	"slices"
	"strings"

	"github.com/tollgate-dev/tollgate/pkg/window"
)

// Policy is a usage-limit policy as winner selection sees it.
type Policy struct {
	ID                string
	Name              string
	HardLimit         bool
	AllowRequestReset bool
	Revision          int64
	// Limits holds the base allowance in micro-USD per timeframe the policy limits; a
	// timeframe it does not name is not limited by it (it does not compete there).
	Limits map[window.Timeframe]int64
	// Guard is the policy's in-flight guard; it plays no part in choosing winners.
	Guard Guard
}

// Guard is a policy's in-flight guard (docs/usage-limits.md, "Bounded overshoot"). The
// zero Guard is the specification's behaviour: admission looks at settled spend only and
// in-flight work may overshoot.
type Guard struct {
	// ReserveInFlight: in the windows this policy wins, admission counts settled spend
	// plus the reservations of the member's requests still in flight.
	ReserveInFlight bool
	// ReservationMicroUSD is what a request reserves when its worst case is not known at
	// admission (positive whenever ReserveInFlight is set).
	ReservationMicroUSD int64
	// MaxInFlight caps the member's requests in flight across all enforcers; 0: no cap.
	MaxInFlight int32
}

// MaxInFlightCap bounds Guard.MaxInFlight.
const MaxInFlightCap = 100_000

// Kind is how an assignment reaches a member.
type Kind string

// The assignment kinds, as the API spells them in provenance.
const (
	Direct       Kind = "direct"
	Team         Kind = "team"
	Organization Kind = "organization"
)

// Assignment attaches a policy to exactly one target.
type Assignment struct {
	ID       string
	PolicyID string
	// MemberID is set for a direct assignment, TeamID for a team assignment; both are
	// empty for an organization assignment.
	MemberID     string
	TeamID       string
	Organization bool
}

// Kind tells the assignment's target kind.
func (a Assignment) Kind() Kind {
	switch {
	case a.Organization:
		return Organization
	case a.TeamID != "":
		return Team
	default:
		return Direct
	}
}

// Model is what winner selection needs to know about one organization: its active
// (non-archived) policies, the assignments of those policies, and team names for
// provenance. Assignments of policies missing from Policies are ignored, so callers may
// pass archived ones without harm.
type Model struct {
	Policies    map[string]Policy
	Assignments []Assignment
	TeamNames   map[string]string
}

// Subject is a member as winner selection sees them: their id and the live teams they
// belong to.
type Subject struct {
	MemberID string
	TeamIDs  []string
}

// Source is one assignment through which the winning policy reaches the member.
type Source struct {
	Kind         Kind
	AssignmentID string
	MemberID     string // direct assignments only
	TeamID       string // team assignments only
	TeamName     string // team assignments only
}

// Winner is the policy that limits one timeframe for a member.
type Winner struct {
	Timeframe window.Timeframe
	Policy    Policy
	// Base is the winning policy's limit for the timeframe, in micro-USD.
	Base int64
	// Provenance lists every assignment of the winning policy that reaches the member,
	// sorted by assignment id.
	Provenance []Source
}

// Winners holds the winner of each timeframe, indexed like window.Timeframes; nil means
// no policy limits that timeframe (unlimited there, but spend is still counted).
type Winners [3]*Winner

// Get returns the winner of a timeframe.
func (w Winners) Get(tf window.Timeframe) *Winner { return w[Index(tf)] }

// Any tells whether at least one timeframe has a winner.
func (w Winners) Any() bool { return w[0] != nil || w[1] != nil || w[2] != nil }

// Index is the position of a timeframe in window.Timeframes (day 0, week 1, month 2).
func Index(tf window.Timeframe) int {
	switch tf {
	case window.Day:
		return 0
	case window.Week:
		return 1
	case window.Month:
		return 2
	}
	panic("usage.Index: unknown timeframe " + string(tf))
}

// Reaches tells whether an assignment applies to the subject. Organization assignments
// reach every member, including those who joined after the assignment was made.
func (s Subject) Reaches(a Assignment) bool {
	switch a.Kind() {
	case Organization:
		return true
	case Team:
		return slices.Contains(s.TeamIDs, a.TeamID)
	default:
		return a.MemberID == s.MemberID
	}
}

// Beats reports whether policy a wins over policy b for timeframe tf. Both must limit
// tf. The order is the one ACCOUNTING.md fixes: the highest limit; then a hard limit
// before a soft one; then request-reset allowed before not allowed; then the smaller
// policy id. The last step makes the order total, so the winner never depends on the
// order rows came back from the database.
func Beats(a, b Policy, tf window.Timeframe) bool {
	la, lb := a.Limits[tf], b.Limits[tf]
	if la != lb {
		return la > lb
	}
	if a.HardLimit != b.HardLimit {
		return a.HardLimit
	}
	if a.AllowRequestReset != b.AllowRequestReset {
		return a.AllowRequestReset
	}
	return strings.Compare(a.ID, b.ID) < 0
}

// Winners chooses, for each timeframe, the winning policy among the model's policies
// that reach the subject, the same way for every kind of target.
func (m Model) Winners(s Subject) Winners {
	// The set of policies reaching the member, with the assignments that reach.
	reaching := map[string][]Assignment{}
	for _, a := range m.Assignments {
		if _, ok := m.Policies[a.PolicyID]; ok && s.Reaches(a) {
			reaching[a.PolicyID] = append(reaching[a.PolicyID], a)
		}
	}
	var out Winners
	for i, tf := range window.Timeframes {
		var best *Policy
		for id := range reaching {
			p := m.Policies[id]
			if _, limited := p.Limits[tf]; !limited {
				continue
			}
			if best == nil || Beats(p, *best, tf) {
				best = &p
			}
		}
		if best == nil {
			continue
		}
		out[i] = &Winner{Timeframe: tf, Policy: *best, Base: best.Limits[tf], Provenance: m.provenance(reaching[best.ID])}
	}
	return out
}

func (m Model) provenance(as []Assignment) []Source {
	out := make([]Source, 0, len(as))
	for _, a := range as {
		src := Source{Kind: a.Kind(), AssignmentID: a.ID}
		switch src.Kind {
		case Direct:
			src.MemberID = a.MemberID
		case Team:
			src.TeamID = a.TeamID
			src.TeamName = m.TeamNames[a.TeamID]
		}
		out = append(out, src)
	}
	slices.SortFunc(out, func(x, y Source) int { return strings.Compare(x.AssignmentID, y.AssignmentID) })
	return out
}

// Same tells whether two winners are the same entitlement: the same policy at the same
// revision (a revision names the policy's name, limits and flags, so the base is the
// same too). Nil equals nil: unlimited stays unlimited. Two winners that are not Same
// may still keep a granted extension (Diff: same policy, same base).
func Same(a, b *Winner) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Policy.ID == b.Policy.ID && a.Policy.Revision == b.Policy.Revision && a.Base == b.Base
}
