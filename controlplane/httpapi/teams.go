package httpapi

import (
	"errors"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/controlplane/fault"
	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/pkg/typeid"
)

func (s *Server) createTeam(c *Call) error {
	var in struct {
		Name *string `json:"name"`
	}
	if err := c.Decode(&in); err != nil {
		return err
	}
	var p fault.Problems
	name := nameText(&p, in.Name, 1, 120, "name")
	if err := p.Err(); err != nil {
		return err
	}
	t := store.Team{ID: newID(typeid.Team), OrganizationID: c.OrgID(), Name: name, CreatedAt: c.now}
	err := c.Tx(func(tx pgx.Tx) error {
		if err := store.CreateTeam(c.Ctx, tx, t); err != nil {
			return err
		}
		return c.Audit(tx, "team.create", t.ID, map[string]any{"name": name})
	})
	if errors.Is(err, store.ErrTeamNameTaken) {
		return fault.Conflictf("team_name_taken", "The organization already has a team with this name.")
	}
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, viewTeam(t))
}

// listTeams answers the organization's live teams with their member ids: all of them,
// by name, or one page, oldest first, when the call asks for one (orgListPage).
func (s *Server) listTeams(c *Call) error {
	want := resetCursor{List: "teams", Org: c.OrgID()}
	page, err := orgListPage(c, want)
	if err != nil {
		return err
	}
	if page != nil {
		ts, err := store.ListTeamsPage(c.Ctx, c.DB(), c.OrgID(), *page)
		if err != nil {
			return err
		}
		return answerPage(c, "teams", ts, page, want, func(t store.Team) (time.Time, string) { return t.CreatedAt, t.ID }, viewTeam)
	}
	ts, err := store.ListTeams(c.Ctx, c.DB(), c.OrgID())
	if err != nil {
		return err
	}
	views := make([]teamView, len(ts))
	for i, t := range ts {
		views[i] = viewTeam(t)
	}
	return c.JSON(http.StatusOK, map[string]any{"teams": views})
}

func errTeamNotFound() error {
	return fault.NotFoundf("team_not_found", "No team with this id in the organization.")
}

// targetTeam reads the team named in the path, locking its row (see store.TeamInOrg):
// ForShare to change who is in it, ForNoKeyUpdate to delete it. The lock comes before
// the member's row lock and the usage lock, as everywhere.
func (c *Call) targetTeam(tx pgx.Tx, lock store.Lock) (store.Team, error) {
	id, err := c.pathID("teamId", typeid.Team)
	if err != nil {
		return store.Team{}, err
	}
	t, err := store.TeamInOrg(c.Ctx, tx, c.OrgID(), id, lock)
	if errors.Is(err, store.ErrNotFound) {
		return t, errTeamNotFound()
	}
	return t, err
}

func (s *Server) addTeamMember(c *Call) error {
	var in struct {
		MemberID *string `json:"memberId"`
	}
	if err := c.Decode(&in); err != nil {
		return err
	}
	if in.MemberID == nil {
		return fault.InvalidAt("is required", "memberId")
	}
	if err := typeid.Check(*in.MemberID, typeid.Member); err != nil {
		return fault.InvalidAt(err.Error(), "memberId")
	}
	var team store.Team
	err := c.Tx(func(tx pgx.Tx) error {
		var err error
		if team, err = c.targetTeam(tx, store.ForShare); err != nil {
			return err
		}
		// A member of a team gets what reaches the team (grants, usage-limit policies):
		// only who is an owner or admin now may give it.
		if err := c.managerNow(tx, store.ForShare); err != nil {
			return err
		}
		// FOR SHARE: a concurrent removal of the member waits for this add (and then
		// takes them out of the team), or, when it committed first, they are not found.
		if _, err := store.MemberInOrg(c.Ctx, tx, c.OrgID(), *in.MemberID, store.ForShare); errors.Is(err, store.ErrNotFound) {
			return errMemberNotFound()
		} else if err != nil {
			return err
		}
		added, err := store.AddTeamMember(c.Ctx, tx, team.ID, *in.MemberID, c.now)
		if err != nil || !added {
			return err
		}
		if err := s.onTeamChanged(c, tx, team.ID, *in.MemberID); err != nil {
			return err
		}
		if err := c.Audit(tx, "team.member.add", team.ID, map[string]any{"memberId": *in.MemberID}); err != nil {
			return err
		}
		team, err = store.TeamInOrg(c.Ctx, tx, c.OrgID(), team.ID, store.NoLock)
		return err
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, viewTeam(team))
}

func (s *Server) removeTeamMember(c *Call) error {
	err := c.Tx(func(tx pgx.Tx) error {
		team, err := c.targetTeam(tx, store.ForShare)
		if err != nil {
			return err
		}
		// Taking someone out of a team changes what reaches them (grants, usage-limit
		// policies) as adding them does: only who is an owner or admin now may do it.
		if err := c.managerNow(tx, store.ForShare); err != nil {
			return err
		}
		memberID, err := c.pathID("memberId", typeid.Member)
		if err != nil {
			return err
		}
		removed, err := store.RemoveTeamMember(c.Ctx, tx, team.ID, memberID)
		if err != nil {
			return err
		}
		if !removed {
			return fault.NotFoundf("team_member_not_found", "This member is not in the team.")
		}
		if err := s.onTeamChanged(c, tx, team.ID, memberID); err != nil {
			return err
		}
		return c.Audit(tx, "team.member.remove", team.ID, map[string]any{"memberId": memberID})
	})
	if err != nil {
		return err
	}
	return c.NoContent()
}

func (s *Server) deleteTeam(c *Call) error {
	err := c.Tx(func(tx pgx.Tx) error {
		team, err := c.targetTeam(tx, store.ForNoKeyUpdate)
		if err != nil {
			return err
		}
		// As removeTeamMember: the caller's role as it is now, held until the end.
		if err := c.managerNow(tx, store.ForShare); err != nil {
			return err
		}
		// Fence the members the delete took out of the team, not those read above: a
		// member's removal from the organization does not wait for the team's lock.
		left, err := store.DeleteTeam(c.Ctx, tx, team.ID, c.now)
		if err != nil {
			return err
		}
		for _, m := range left {
			if err := s.onTeamChanged(c, tx, team.ID, m); err != nil {
				return err
			}
		}
		return c.Audit(tx, "team.delete", team.ID, map[string]any{"name": team.Name})
	})
	if err != nil {
		return err
	}
	return c.NoContent()
}

// onTeamChanged runs in the transaction of every change of who is in a team. Usage
// limits hook in here: a team change can change which policy wins for a member, so the
// entitlement fence runs for them.
func (s *Server) onTeamChanged(c *Call, tx pgx.Tx, teamID, memberID string) error {
	return s.fenceTeamChange(c, tx, teamID, memberID)
}
