package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/controlplane/orgslug"
)

// Sentinel errors of the accounts tables.
var (
	ErrEmailTaken    = errors.New("email already registered")
	ErrSlugTaken     = orgslug.ErrTaken // the domain's own sentinel, which orgslug.Claim retries on
	ErrTeamNameTaken = errors.New("team name already taken")
	ErrAlreadyMember = errors.New("already an active member of the organization")
)

// User is a person who can sign in.
type User struct {
	ID                   string
	Email                string
	EmailNormalized      string
	Name                 string
	PasswordHash         string
	ActiveOrganizationID *string
	CreatedAt            time.Time
}

const userColumns = `id, email, email_normalized, name, password_hash, active_organization_id, created_at`

func scanUser(row pgx.Row) (User, error) {
	var u User
	err := row.Scan(&u.ID, &u.Email, &u.EmailNormalized, &u.Name, &u.PasswordHash, &u.ActiveOrganizationID, &u.CreatedAt)
	return u, notFound(err)
}

// CreateUser inserts a user; ErrEmailTaken when the normalized email exists.
func CreateUser(ctx context.Context, q Querier, u User) error {
	_, err := q.Exec(ctx, `INSERT INTO users (id, email, email_normalized, name, password_hash, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $6)`, u.ID, u.Email, u.EmailNormalized, u.Name, u.PasswordHash, u.CreatedAt)
	if IsUniqueViolation(err, "users_email_normalized_key") {
		return ErrEmailTaken
	}
	return err
}

// UserByEmail reads a user by normalized email.
func UserByEmail(ctx context.Context, q Querier, emailNormalized string) (User, error) {
	return scanUser(q.QueryRow(ctx, `SELECT `+userColumns+` FROM users WHERE email_normalized = $1`, emailNormalized))
}

// UserByID reads a user.
func UserByID(ctx context.Context, q Querier, id string) (User, error) {
	return scanUser(q.QueryRow(ctx, `SELECT `+userColumns+` FROM users WHERE id = $1`, id))
}

// SetPassword replaces a user's password hash and revokes every session of theirs; it
// returns the revoked sessions' token hashes, for the invalidation enforcers need. It
// leaves their API keys alone: a reset that must shut the account's holder out
// (bootstrap-admin's, platform.ProvisionAdmin) revokes them too, with RevokeUserAPIKeys.
func SetPassword(ctx context.Context, q Querier, userID, hash string, now time.Time) ([][]byte, error) {
	if _, err := q.Exec(ctx, `UPDATE users SET password_hash = $2, updated_at = $3 WHERE id = $1`, userID, hash, now); err != nil {
		return nil, err
	}
	rows, err := q.Query(ctx, `UPDATE sessions SET revoked_at = $2 WHERE user_id = $1 AND revoked_at IS NULL RETURNING token_hash`, userID, now)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[[]byte])
}

// PasswordStill locks the user's row FOR SHARE and tells whether its password hash is
// still hash, the one a sign-in checked: a password reset (SetPassword) that committed
// meanwhile changed it, and one under way waits for the sign-in's transaction, then
// revokes the session it opened. Without it a sign-in that read the old hash opened a
// session just after the reset had revoked the others.
func PasswordStill(ctx context.Context, q Querier, userID, hash string) (bool, error) {
	var one int
	err := q.QueryRow(ctx, `SELECT 1 FROM users WHERE id = $1 AND password_hash = $2 FOR SHARE`, userID, hash).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// SetActiveOrganization records the organization a user's sessions act in by default.
func SetActiveOrganization(ctx context.Context, q Querier, userID string, orgID *string, now time.Time) error {
	_, err := q.Exec(ctx, `UPDATE users SET active_organization_id = $2, updated_at = $3 WHERE id = $1`, userID, orgID, now)
	return err
}

// SetActiveOrganizationIfNone makes orgID the user's active organization when they have
// none, deciding on the user's row as it is when the update runs (a switch or a removal
// committing meanwhile is waited for and seen), and reports whether it did. The row read
// at authentication is not enough: a removal from the active organization committing in
// between clears it, and a join decided on the old row left the user with none.
func SetActiveOrganizationIfNone(ctx context.Context, q Querier, userID, orgID string, now time.Time) (bool, error) {
	tag, err := q.Exec(ctx, `UPDATE users SET active_organization_id = $2, updated_at = $3
		WHERE id = $1 AND active_organization_id IS NULL`, userID, orgID, now)
	return tag.RowsAffected() == 1, err
}

// ClearActiveOrganization leaves the user without an active organization if it is still
// orgID (they were removed from it), and reports whether it did. Deciding on the row as
// it is when the update runs keeps a switch to another organization that committed after
// the caller read the user.
func ClearActiveOrganization(ctx context.Context, q Querier, userID, orgID string, now time.Time) (bool, error) {
	tag, err := q.Exec(ctx, `UPDATE users SET active_organization_id = NULL, updated_at = $3
		WHERE id = $1 AND active_organization_id = $2`, userID, orgID, now)
	return tag.RowsAffected() == 1, err
}

// Session is a signed-in user's bearer token (stored as a hash).
type Session struct {
	ID              string
	UserID          string
	TokenHash       []byte
	AuthenticatedAt time.Time
	CreatedAt       time.Time
	ExpiresAt       time.Time
}

// CreateSession stores a new session.
func CreateSession(ctx context.Context, q Querier, s Session) error {
	_, err := q.Exec(ctx, `INSERT INTO sessions (id, user_id, token_hash, authenticated_at, created_at, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6)`, s.ID, s.UserID, s.TokenHash, s.AuthenticatedAt, s.CreatedAt, s.ExpiresAt)
	return err
}

// SessionByTokenHash reads a live session (not revoked, not expired at now) and its user.
func SessionByTokenHash(ctx context.Context, q Querier, hash []byte, now time.Time) (Session, User, error) {
	var s Session
	var u User
	err := q.QueryRow(ctx, `SELECT s.id, s.user_id, s.authenticated_at, s.created_at, s.expires_at,
			u.id, u.email, u.email_normalized, u.name, u.password_hash, u.active_organization_id, u.created_at
		FROM sessions s JOIN users u ON u.id = s.user_id
		WHERE s.token_hash = $1 AND s.revoked_at IS NULL AND s.expires_at > $2`, hash, now).
		Scan(&s.ID, &s.UserID, &s.AuthenticatedAt, &s.CreatedAt, &s.ExpiresAt,
			&u.ID, &u.Email, &u.EmailNormalized, &u.Name, &u.PasswordHash, &u.ActiveOrganizationID, &u.CreatedAt)
	return s, u, notFound(err)
}

// SessionLive locks a session's row FOR SHARE and tells whether it is still live at now
// (not revoked, not expired): a write that must not outlive its session (minting an API
// key) checks it in its transaction, so that a sign-out or a password reset under way
// waits for it and a committed one is seen.
func SessionLive(ctx context.Context, q Querier, id string, now time.Time) (bool, error) {
	var one int
	err := q.QueryRow(ctx, `SELECT 1 FROM sessions WHERE id = $1 AND revoked_at IS NULL AND expires_at > $2 FOR SHARE`, id, now).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// RevokeSession ends a session and returns its token's hash (nil when it had already
// ended), for the invalidation enforcers need.
func RevokeSession(ctx context.Context, q Querier, id string, now time.Time) ([]byte, error) {
	var hash []byte
	err := q.QueryRow(ctx, `UPDATE sessions SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL RETURNING token_hash`, id, now).Scan(&hash)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return hash, err
}

// LiveSessionHashes returns the token hashes of a user's live sessions (not revoked, not
// expired at now): what enforcers must forget when the identity they authenticate as
// changes (the user's active organization).
func LiveSessionHashes(ctx context.Context, q Querier, userID string, now time.Time) ([][]byte, error) {
	rows, err := q.Query(ctx, `SELECT token_hash FROM sessions WHERE user_id = $1 AND revoked_at IS NULL AND expires_at > $2`, userID, now)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[[]byte])
}

// Organization is a tenant.
type Organization struct {
	ID        string
	Name      string
	Slug      string
	CreatedAt time.Time
}

// CreateOrganization inserts an organization; ErrSlugTaken when the slug exists.
func CreateOrganization(ctx context.Context, q Querier, o Organization) error {
	// ON CONFLICT keeps the transaction usable, so the caller can retry another slug.
	tag, err := q.Exec(ctx, `INSERT INTO organizations (id, name, slug, created_at) VALUES ($1, $2, $3, $4)
		ON CONFLICT (slug) DO NOTHING`, o.ID, o.Name, o.Slug, o.CreatedAt)
	if err == nil && tag.RowsAffected() == 0 {
		return ErrSlugTaken
	}
	return err
}

// OrganizationByID reads an organization.
func OrganizationByID(ctx context.Context, q Querier, id string) (Organization, error) {
	var o Organization
	err := q.QueryRow(ctx, `SELECT id, name, slug, created_at FROM organizations WHERE id = $1`, id).
		Scan(&o.ID, &o.Name, &o.Slug, &o.CreatedAt)
	return o, notFound(err)
}

// Member is a user's membership of one organization.
type Member struct {
	ID             string
	OrganizationID string
	UserID         string
	Role           string
	CreatedAt      time.Time
	RemovedAt      *time.Time
	// Name and Email are the user's, joined for listings.
	Name  string
	Email string
}

const memberColumns = `m.id, m.organization_id, m.user_id, m.role, m.created_at, m.removed_at, u.name, u.email`

func scanMember(row pgx.Row) (Member, error) {
	var m Member
	err := row.Scan(&m.ID, &m.OrganizationID, &m.UserID, &m.Role, &m.CreatedAt, &m.RemovedAt, &m.Name, &m.Email)
	return m, notFound(err)
}

// CreateMember inserts a membership; ErrAlreadyMember when the user already has an
// active one in the organization. Checking first is not enough: two acceptances of
// different invitations of one user can both check before either inserts, and only the
// unique index sees the second.
func CreateMember(ctx context.Context, q Querier, m Member) error {
	_, err := q.Exec(ctx, `INSERT INTO members (id, organization_id, user_id, role, created_at) VALUES ($1, $2, $3, $4, $5)`,
		m.ID, m.OrganizationID, m.UserID, m.Role, m.CreatedAt)
	if IsUniqueViolation(err, "members_one_active_per_user") {
		return ErrAlreadyMember
	}
	return err
}

// ActiveMember reads a user's active membership of an organization, with an optional
// lock on the member's row (see MemberInOrg).
func ActiveMember(ctx context.Context, q Querier, orgID, userID string, lock Lock) (Member, error) {
	return scanMember(q.QueryRow(ctx, `SELECT `+memberColumns+` FROM members m JOIN users u ON u.id = m.user_id
		WHERE m.organization_id = $1 AND m.user_id = $2 AND m.removed_at IS NULL`+memberLock(lock), orgID, userID))
}

// MemberInOrg reads an active member of an organization by member id, with an optional
// lock on the member's row held until the caller's transaction ends:
//
//   - ForShare, before writing a row that names the member and that a removal cleans up
//     (a team membership, an API key, the user's active organization, a pending
//     extension request). Unlocked, the check passes while a removal is still
//     uncommitted, the removal's cleanup cannot see the row written meanwhile, and both
//     commit; the foreign key's own lock (KEY SHARE) does not conflict with the removal's
//     UPDATE. Locked, the removal's UPDATE waits for the writer and its cleanup then sees
//     the row; or the read waits for the removal and then finds no active member
//     (ErrNotFound).
//   - ForNoKeyUpdate, before changing the member's own row (role, removal): the lock
//     those UPDATEs take, taken before the checks that lead to them.
func MemberInOrg(ctx context.Context, q Querier, orgID, memberID string, lock Lock) (Member, error) {
	return scanMember(q.QueryRow(ctx, `SELECT `+memberColumns+` FROM members m JOIN users u ON u.id = m.user_id
		WHERE m.organization_id = $1 AND m.id = $2 AND m.removed_at IS NULL`+memberLock(lock), orgID, memberID))
}

// memberLock is the locking clause of the member reads: it locks the member's row only,
// not the user's, which the caller may update (its active organization).
func memberLock(lock Lock) string {
	if lock == NoLock {
		return ""
	}
	return string(lock) + " OF m"
}

// ListMembers lists an organization's active members, oldest first.
func ListMembers(ctx context.Context, q Querier, orgID string) ([]Member, error) {
	rows, err := q.Query(ctx, `SELECT `+memberColumns+` FROM members m JOIN users u ON u.id = m.user_id
		WHERE m.organization_id = $1 AND m.removed_at IS NULL ORDER BY m.created_at, m.id`, orgID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Member, error) { return scanMember(r) })
}

// ListPage selects one page of a list read in (created_at, id) order: at most Limit+1
// rows, so that the caller can tell whether more follow, after the position After when
// it is set. A row added or removed meanwhile never moves another across pages.
type ListPage struct {
	Limit int
	After *UsageRequestPosition
}

// sql is the page's condition (after the list's own WHERE), order and limit; alias
// qualifies the columns ("m." or empty), and the arguments are appended to args.
func (p ListPage) sql(args *[]any, alias string) string {
	s := ""
	if p.After != nil {
		*args = append(*args, p.After.CreatedAt, p.After.ID)
		s = fmt.Sprintf(` AND (%[1]screated_at, %[1]sid) > ($%[2]d, $%[3]d)`, alias, len(*args)-1, len(*args))
	}
	*args = append(*args, p.Limit+1)
	return s + fmt.Sprintf(` ORDER BY %[1]screated_at, %[1]sid LIMIT $%[2]d`, alias, len(*args))
}

// ListMembersPage reads one page of an organization's active members, oldest first,
// through members_org_live (migration 0033).
func ListMembersPage(ctx context.Context, q Querier, orgID string, p ListPage) ([]Member, error) {
	args := []any{orgID}
	rows, err := q.Query(ctx, `SELECT `+memberColumns+` FROM members m JOIN users u ON u.id = m.user_id
		WHERE m.organization_id = $1 AND m.removed_at IS NULL`+p.sql(&args, "m."), args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Member, error) { return scanMember(r) })
}

// CountOwners counts an organization's active owners, locking them so that two
// concurrent demotions cannot both see a second owner.
func CountOwners(ctx context.Context, q Querier, orgID string) (int, error) {
	rows, err := q.Query(ctx, `SELECT id FROM members WHERE organization_id = $1 AND role = 'owner' AND removed_at IS NULL FOR UPDATE`, orgID)
	if err != nil {
		return 0, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return len(ids), err
}

// SetMemberRole changes a member's role.
func SetMemberRole(ctx context.Context, q Querier, memberID, role string) error {
	_, err := q.Exec(ctx, `UPDATE members SET role = $2 WHERE id = $1`, memberID, role)
	return err
}

// RemoveMember ends a membership: the row stays, their API keys stop working, and they
// leave every team. Writers of rows naming the member read it ForShare (MemberInOrg), so
// the first UPDATE here waits for them and the cleanup that follows sees their rows.
func RemoveMember(ctx context.Context, q Querier, memberID string, now time.Time) (Removed, error) {
	var r Removed
	if _, err := q.Exec(ctx, `UPDATE members SET removed_at = $2 WHERE id = $1 AND removed_at IS NULL`, memberID, now); err != nil {
		return r, err
	}
	rows, err := q.Query(ctx, `UPDATE api_keys SET revoked_at = $2 WHERE member_id = $1 AND revoked_at IS NULL RETURNING id`, memberID, now)
	if err != nil {
		return r, err
	}
	if r.APIKeys, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return r, err
	}
	rows, err = q.Query(ctx, `DELETE FROM team_members WHERE member_id = $1 RETURNING team_id`, memberID)
	if err != nil {
		return r, err
	}
	r.Teams, err = pgx.CollectRows(rows, pgx.RowTo[string])
	slices.Sort(r.APIKeys)
	slices.Sort(r.Teams)
	return r, err
}

// Removed is what a member's removal ended with them: the ids of their API keys it
// revoked and of the teams it took them out of (sorted), for the audit event.
type Removed struct {
	APIKeys []string
	Teams   []string
}

// Membership pairs an organization with the caller's member record in it.
type Membership struct {
	Organization Organization
	Member       Member
}

// MembershipsOfUser lists a user's active memberships, oldest first.
func MembershipsOfUser(ctx context.Context, q Querier, userID string) ([]Membership, error) {
	rows, err := q.Query(ctx, `SELECT o.id, o.name, o.slug, o.created_at, `+memberColumns+`
		FROM members m JOIN organizations o ON o.id = m.organization_id JOIN users u ON u.id = m.user_id
		WHERE m.user_id = $1 AND m.removed_at IS NULL ORDER BY m.created_at, m.id`, userID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Membership, error) {
		var ms Membership
		o, m := &ms.Organization, &ms.Member
		err := r.Scan(&o.ID, &o.Name, &o.Slug, &o.CreatedAt,
			&m.ID, &m.OrganizationID, &m.UserID, &m.Role, &m.CreatedAt, &m.RemovedAt, &m.Name, &m.Email)
		return ms, err
	})
}

// Invitation asks someone, by email, to join an organization.
type Invitation struct {
	ID                string
	OrganizationID    string
	EmailNormalized   string
	Role              string
	TokenHash         []byte
	InvitedByMemberID string
	CreatedAt         time.Time
	ExpiresAt         time.Time
	AcceptedAt        *time.Time
}

// CreateInvitation stores an invitation.
func CreateInvitation(ctx context.Context, q Querier, inv Invitation) error {
	_, err := q.Exec(ctx, `INSERT INTO invitations (id, organization_id, email_normalized, role, token_hash, invited_by_member_id, created_at, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, inv.ID, inv.OrganizationID, inv.EmailNormalized, inv.Role, inv.TokenHash,
		inv.InvitedByMemberID, inv.CreatedAt, inv.ExpiresAt)
	return err
}

// InvitationByTokenHash reads an invitation and locks it, so it is accepted at most once.
func InvitationByTokenHash(ctx context.Context, q Querier, hash []byte) (Invitation, error) {
	var inv Invitation
	err := q.QueryRow(ctx, `SELECT id, organization_id, email_normalized, role, invited_by_member_id, created_at, expires_at, accepted_at
		FROM invitations WHERE token_hash = $1 FOR UPDATE`, hash).
		Scan(&inv.ID, &inv.OrganizationID, &inv.EmailNormalized, &inv.Role, &inv.InvitedByMemberID, &inv.CreatedAt, &inv.ExpiresAt, &inv.AcceptedAt)
	return inv, notFound(err)
}

// RemovedSince tells whether the user had a membership of the organization that was
// removed after instant since: a removal ends the invitations to them issued before it.
func RemovedSince(ctx context.Context, q Querier, orgID, userID string, since time.Time) (bool, error) {
	var removed bool
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM members
		WHERE organization_id = $1 AND user_id = $2 AND removed_at > $3)`, orgID, userID, since).Scan(&removed)
	return removed, err
}

// AcceptInvitation marks an invitation used by a member.
func AcceptInvitation(ctx context.Context, q Querier, id, memberID string, now time.Time) error {
	_, err := q.Exec(ctx, `UPDATE invitations SET accepted_at = $2, accepted_member_id = $3 WHERE id = $1`, id, now, memberID)
	return err
}

// Team is a named group of members inside one organization.
type Team struct {
	ID             string
	OrganizationID string
	Name           string
	CreatedAt      time.Time
	MemberIDs      []string
}

// CreateTeam inserts a team; ErrTeamNameTaken when the name (case-insensitive) exists.
func CreateTeam(ctx context.Context, q Querier, t Team) error {
	_, err := q.Exec(ctx, `INSERT INTO teams (id, organization_id, name, created_at) VALUES ($1, $2, $3, $4)`,
		t.ID, t.OrganizationID, t.Name, t.CreatedAt)
	if IsUniqueViolation(err, "teams_name_per_org") {
		return ErrTeamNameTaken
	}
	return err
}

const teamSelect = `SELECT t.id, t.organization_id, t.name, t.created_at,
		coalesce(array_agg(tm.member_id ORDER BY tm.member_id) FILTER (WHERE tm.member_id IS NOT NULL), '{}')
	FROM teams t LEFT JOIN team_members tm ON tm.team_id = t.id`

func scanTeam(row pgx.Row) (Team, error) {
	var t Team
	err := row.Scan(&t.ID, &t.OrganizationID, &t.Name, &t.CreatedAt, &t.MemberIDs)
	return t, notFound(err)
}

// TeamInOrg reads a live team of an organization with its member ids, with an optional
// lock on the team's row held until the caller's transaction ends:
//
//   - ForShare, before adding or removing a member: a concurrent delete (which locks the
//     row ForNoKeyUpdate) waits for the change and then empties the team of whoever is
//     in it, or, when it committed first, the team is not found.
//   - ForNoKeyUpdate, before deleting the team: the lock its UPDATE takes. It lets
//     inserts of rows that reference the team through (a policy assignment, written
//     under the usage lock that the delete's fence takes next); FOR UPDATE would hold
//     them off, and the two would wait for each other.
func TeamInOrg(ctx context.Context, q Querier, orgID, teamID string, lock Lock) (Team, error) {
	if lock != NoLock {
		// A locking read cannot aggregate; the read that follows sees what committed
		// before the lock was granted.
		var id string
		err := q.QueryRow(ctx, `SELECT id FROM teams WHERE organization_id = $1 AND id = $2 AND deleted_at IS NULL`+string(lock),
			orgID, teamID).Scan(&id)
		if err != nil {
			return Team{}, notFound(err)
		}
	}
	return scanTeam(q.QueryRow(ctx, teamSelect+` WHERE t.organization_id = $1 AND t.id = $2 AND t.deleted_at IS NULL
		GROUP BY t.id`, orgID, teamID))
}

// ListTeams lists an organization's live teams by name.
func ListTeams(ctx context.Context, q Querier, orgID string) ([]Team, error) {
	rows, err := q.Query(ctx, teamSelect+` WHERE t.organization_id = $1 AND t.deleted_at IS NULL
		GROUP BY t.id ORDER BY lower(t.name), t.id`, orgID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Team, error) { return scanTeam(r) })
}

// ListTeamsPage reads one page of an organization's live teams with their member ids,
// oldest first (the whole list, ListTeams, is by name): the page's teams are chosen
// through teams_org_live (migration 0033) before their members are joined.
func ListTeamsPage(ctx context.Context, q Querier, orgID string, p ListPage) ([]Team, error) {
	args := []any{orgID}
	rows, err := q.Query(ctx, `WITH page AS (
			SELECT t.id, t.organization_id, t.name, t.created_at FROM teams t
			WHERE t.organization_id = $1 AND t.deleted_at IS NULL`+p.sql(&args, "t.")+`)
		SELECT t.id, t.organization_id, t.name, t.created_at,
			coalesce(array_agg(tm.member_id ORDER BY tm.member_id) FILTER (WHERE tm.member_id IS NOT NULL), '{}')
		FROM page t LEFT JOIN team_members tm ON tm.team_id = t.id
		GROUP BY t.id, t.organization_id, t.name, t.created_at ORDER BY t.created_at, t.id`, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Team, error) { return scanTeam(r) })
}

// AddTeamMember adds a member to a team; adding twice is a no-op. It reports whether a
// row was added.
func AddTeamMember(ctx context.Context, q Querier, teamID, memberID string, now time.Time) (bool, error) {
	tag, err := q.Exec(ctx, `INSERT INTO team_members (team_id, member_id, created_at) VALUES ($1, $2, $3)
		ON CONFLICT DO NOTHING`, teamID, memberID, now)
	return tag.RowsAffected() == 1, err
}

// RemoveTeamMember removes a member from a team and reports whether they were in it.
func RemoveTeamMember(ctx context.Context, q Querier, teamID, memberID string) (bool, error) {
	tag, err := q.Exec(ctx, `DELETE FROM team_members WHERE team_id = $1 AND member_id = $2`, teamID, memberID)
	return tag.RowsAffected() == 1, err
}

// DeleteTeam marks a team deleted, empties it and returns the ids of the members it took
// out (sorted): they, and no one else, left the team now.
func DeleteTeam(ctx context.Context, q Querier, teamID string, now time.Time) ([]string, error) {
	if _, err := q.Exec(ctx, `UPDATE teams SET deleted_at = $2 WHERE id = $1 AND deleted_at IS NULL`, teamID, now); err != nil {
		return nil, err
	}
	rows, err := q.Query(ctx, `DELETE FROM team_members WHERE team_id = $1 RETURNING member_id`, teamID)
	if err != nil {
		return nil, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	slices.Sort(ids)
	return ids, err
}

// APIKey is a member's long-lived credential (stored as a hash).
type APIKey struct {
	ID             string
	OrganizationID string
	MemberID       string
	UserID         string
	Name           string
	KeyHash        []byte
	Start          string
	CreatedAt      time.Time
	ExpiresAt      *time.Time
	RevokedAt      *time.Time
}

// CreateAPIKey stores a key.
func CreateAPIKey(ctx context.Context, q Querier, k APIKey) error {
	_, err := q.Exec(ctx, `INSERT INTO api_keys (id, organization_id, member_id, user_id, name, key_hash, start, created_at, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`, k.ID, k.OrganizationID, k.MemberID, k.UserID, k.Name, k.KeyHash, k.Start, k.CreatedAt, k.ExpiresAt)
	return err
}

// ErrAPIKeyLimit: the member already holds MaxLiveAPIKeysPerMember live keys.
var ErrAPIKeyLimit = errors.New("api key limit reached")

// MaxLiveAPIKeysPerMember bounds a member's live keys (neither revoked nor expired).
// Every live key is a credential the enforcers resolve and cache, and a row no retention
// removes; a script minting keys in a loop would otherwise grow both without end. A
// hundred is far beyond one key per tool and machine; revoking one frees its place.
const MaxLiveAPIKeysPerMember = 100

// apiKeyLockClass is the first key of the two-key advisory lock that serializes a
// member's key creations, so two at once cannot both see room for one. The second key is
// a hash of the member id; a collision only serializes two members.
const apiKeyLockClass = 7_311_007

// CreateAPIKeyWithinLimit creates k unless its member already holds
// MaxLiveAPIKeysPerMember live keys at k.CreatedAt: then ErrAPIKeyLimit, and nothing is
// written.
func CreateAPIKeyWithinLimit(ctx context.Context, tx pgx.Tx, k APIKey) error {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, apiKeyLockClass, k.MemberID); err != nil {
		return err
	}
	var live int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM api_keys
		WHERE member_id = $1 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > $2)`, k.MemberID, k.CreatedAt).Scan(&live); err != nil {
		return err
	}
	if live >= MaxLiveAPIKeysPerMember {
		return ErrAPIKeyLimit
	}
	return CreateAPIKey(ctx, tx, k)
}

// KeyIdentity is what a live API key resolves to.
type KeyIdentity struct {
	Key    APIKey
	User   User
	Member Member
}

// APIKeyByHash resolves a live key: not revoked, not expired, its member still active.
func APIKeyByHash(ctx context.Context, q Querier, hash []byte, now time.Time) (KeyIdentity, error) {
	var id KeyIdentity
	k, u, m := &id.Key, &id.User, &id.Member
	err := q.QueryRow(ctx, `SELECT k.id, k.organization_id, k.member_id, k.user_id, k.name, k.start, k.created_at, k.expires_at,
			`+memberColumns+`, u.email_normalized, u.password_hash, u.active_organization_id, u.created_at
		FROM api_keys k JOIN members m ON m.id = k.member_id AND m.removed_at IS NULL
		JOIN users u ON u.id = k.user_id
		WHERE k.key_hash = $1 AND k.revoked_at IS NULL AND (k.expires_at IS NULL OR k.expires_at > $2)`, hash, now).
		Scan(&k.ID, &k.OrganizationID, &k.MemberID, &k.UserID, &k.Name, &k.Start, &k.CreatedAt, &k.ExpiresAt,
			&m.ID, &m.OrganizationID, &m.UserID, &m.Role, &m.CreatedAt, &m.RemovedAt, &m.Name, &m.Email,
			&u.EmailNormalized, &u.PasswordHash, &u.ActiveOrganizationID, &u.CreatedAt)
	u.ID, u.Name, u.Email = m.UserID, m.Name, m.Email
	return id, notFound(err)
}

// ListAPIKeys lists an organization's live keys, of one member when memberID is set,
// oldest first.
func ListAPIKeys(ctx context.Context, q Querier, orgID, memberID string) ([]APIKey, error) {
	return listAPIKeys(ctx, q, orgID, memberID, nil)
}

// ListAPIKeysPage reads one page of ListAPIKeys's list.
func ListAPIKeysPage(ctx context.Context, q Querier, orgID, memberID string, p ListPage) ([]APIKey, error) {
	return listAPIKeys(ctx, q, orgID, memberID, &p)
}

// listAPIKeys reads the whole list (page nil) or one page of it. The member's list and
// the organization's are two statements: one for both, where an empty member id
// matched every member, has a generic plan (the one a prepared statement settles on)
// that can use neither index, and scanned every key of every organization, revoked ones
// included. The member's is served by api_keys_member, the organization's by
// api_keys_org_live (migration 0033), in the list's order.
func listAPIKeys(ctx context.Context, q Querier, orgID, memberID string, page *ListPage) ([]APIKey, error) {
	where, args := `organization_id = $1 AND revoked_at IS NULL`, []any{orgID}
	if memberID != "" {
		where, args = `member_id = $2 AND `+where, append(args, memberID)
	}
	sql := `SELECT id, organization_id, member_id, user_id, name, start, created_at, expires_at, revoked_at
		FROM api_keys WHERE ` + where
	if page == nil {
		sql += ` ORDER BY created_at, id`
	} else {
		sql += page.sql(&args, "")
	}
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (APIKey, error) {
		var k APIKey
		err := r.Scan(&k.ID, &k.OrganizationID, &k.MemberID, &k.UserID, &k.Name, &k.Start, &k.CreatedAt, &k.ExpiresAt, &k.RevokedAt)
		return k, err
	})
}

// APIKeyInOrg reads a live key of an organization.
func APIKeyInOrg(ctx context.Context, q Querier, orgID, keyID string) (APIKey, error) {
	var k APIKey
	err := q.QueryRow(ctx, `SELECT id, organization_id, member_id, user_id, name, start, created_at, expires_at
		FROM api_keys WHERE organization_id = $1 AND id = $2 AND revoked_at IS NULL`, orgID, keyID).
		Scan(&k.ID, &k.OrganizationID, &k.MemberID, &k.UserID, &k.Name, &k.Start, &k.CreatedAt, &k.ExpiresAt)
	return k, notFound(err)
}

// RevokeAPIKey stops a key from working.
func RevokeAPIKey(ctx context.Context, q Querier, keyID string, now time.Time) error {
	_, err := q.Exec(ctx, `UPDATE api_keys SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL`, keyID, now)
	return err
}

// RevokeUserAPIKeys stops every live key of a user, in all their organizations, and
// returns the revoked keys' ids, for the invalidation enforcers need.
func RevokeUserAPIKeys(ctx context.Context, q Querier, userID string, now time.Time) ([]string, error) {
	rows, err := q.Query(ctx, `UPDATE api_keys SET revoked_at = $2 WHERE user_id = $1 AND revoked_at IS NULL RETURNING id`, userID, now)
	if err != nil {
		return nil, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	slices.Sort(ids)
	return ids, err
}

// IsPlatformAdmin tells whether a normalized email is on the platform-admin allowlist.
func IsPlatformAdmin(ctx context.Context, q Querier, emailNormalized string) (bool, error) {
	var ok bool
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM platform_admins WHERE email_normalized = $1)`, emailNormalized).Scan(&ok)
	return ok, err
}

// accountEmailLockClass is the first key of the two-key advisory lock that serializes,
// per email, the writes that decide whether an account and an allowlist entry may exist
// together: sign-up, allowlisting, bootstrap-admin and the environment's seeding. The
// second key is a hash of the normalized email; a collision only serializes two emails.
const accountEmailLockClass = 7_311_006

// LockAccountEmail takes the lock of a normalized email until the transaction ends. A
// sign-up and an allowlisting of one email, each checking for the other, then run one
// after the other, so neither can miss the other's commit.
func LockAccountEmail(ctx context.Context, tx pgx.Tx, emailNormalized string) error {
	_, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, accountEmailLockClass, emailNormalized)
	return err
}

// AddPlatformAdmin puts a normalized email on the allowlist; it reports whether it was new.
func AddPlatformAdmin(ctx context.Context, q Querier, emailNormalized, addedBy string, now time.Time) (bool, error) {
	tag, err := q.Exec(ctx, `INSERT INTO platform_admins (email_normalized, created_at, added_by) VALUES ($1, $2, $3)
		ON CONFLICT DO NOTHING`, emailNormalized, now, addedBy)
	return tag.RowsAffected() == 1, err
}

// AuditEvent is one durable record of who changed what.
type AuditEvent struct {
	ID             string
	OccurredAt     time.Time
	ActorUserID    string
	ActorMemberID  string
	OrganizationID string
	Action         string
	TargetID       string
	Details        any
}

// RecordAudit writes an audit event in the caller's transaction.
func RecordAudit(ctx context.Context, q Querier, e AuditEvent) error {
	details := []byte("{}")
	if e.Details != nil {
		b, err := json.Marshal(e.Details)
		if err != nil {
			return err
		}
		details = b
	}
	_, err := q.Exec(ctx, `INSERT INTO audit_events (id, occurred_at, actor_user_id, actor_member_id, organization_id, action, target_id, details)
		VALUES ($1, $2, nullif($3, ''), nullif($4, ''), nullif($5, ''), $6, nullif($7, ''), $8)`,
		e.ID, e.OccurredAt, e.ActorUserID, e.ActorMemberID, e.OrganizationID, e.Action, e.TargetID, details)
	return err
}
