package cli

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"text/tabwriter"
)

// maxAuditEvents bounds what one run prints; narrow the filters to see further back.
const maxAuditEvents = 10_000

// auditCmd prints an audit trail, newest first: the API key's organization's or, with
// --platform, the platform's. It follows the API's pages until it has
// --limit events or the trail ends.
func auditCmd(ctx context.Context, args []string, getenv func(string) string, stdio IO) error {
	fs := newFlagSet("audit", "Usage: tollgate audit [--platform] [--actor ID] [--action NAME] [--since RFC3339] [--until RFC3339] [--limit N]\n\n"+
		"Prints the audit trail, newest first: the API key's organization's (an owner's or admin's key)\n"+
		"or, with --platform, the platform's (a platform administrator's key).", stdio)
	var a apiFlags
	a.register(fs, getenv)
	platform := fs.Bool("platform", false, "read the platform's trail instead of an organization's")
	actor := fs.String("actor", "", "only events of this member (om_...) or user (usr_...)")
	action := fs.String("action", "", "only events with exactly this action (plugin.create, ...)")
	since := fs.String("since", "", "only events at or after this instant (RFC 3339)")
	until := fs.String("until", "", "only events before this instant (RFC 3339)")
	limit := fs.Int("limit", 50, "print at most this many events (1 to 10000)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *limit < 1 || *limit > maxAuditEvents {
		return fmt.Errorf("--limit must be 1 to %d", maxAuditEvents)
	}
	path := "/v1/admin/audit-events"
	if !*platform {
		org := a.org
		if org == "" {
			// An API key acts in its own organization; /v1/me names it.
			var me struct{ ActiveOrganizationID *string }
			if err := a.do(ctx, "GET", "/v1/me", nil, &me); err != nil {
				return err
			}
			if me.ActiveOrganizationID == nil {
				return errors.New("no organization: pass --org")
			}
			org = *me.ActiveOrganizationID
		}
		path = "/v1/organizations/" + url.PathEscape(org) + "/audit-events"
	}
	q := url.Values{}
	for name, v := range map[string]string{"actor": *actor, "action": *action, "since": *since, "until": *until} {
		if v != "" {
			q.Set(name, v)
		}
	}
	tw := tabwriter.NewWriter(stdio.Stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "OCCURRED AT\tACTION\tACTOR\tORGANIZATION\tTARGET")
	printed := 0
	for printed < *limit {
		q.Set("limit", strconv.Itoa(min(100, *limit-printed)))
		var page struct {
			Events []struct {
				OccurredAt                                           string
				Action                                               string
				OrganizationID, ActorUserID, ActorMemberID, TargetID *string
			}
			HasMore    bool
			NextCursor *string
		}
		if err := a.do(ctx, "GET", path+"?"+q.Encode(), nil, &page); err != nil {
			return err
		}
		for _, ev := range page.Events {
			who := orDash(ev.ActorMemberID)
			if who == "-" {
				who = orDash(ev.ActorUserID)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", ev.OccurredAt, ev.Action, who, orDash(ev.OrganizationID), orDash(ev.TargetID))
			printed++
		}
		if !page.HasMore || page.NextCursor == nil {
			break
		}
		q.Set("cursor", *page.NextCursor)
	}
	tw.Flush()
	fmt.Fprintf(stdio.Stdout, "%d event(s)\n", printed)
	return nil
}

func orDash(s *string) string {
	if s == nil || *s == "" {
		return "-"
	}
	return *s
}
