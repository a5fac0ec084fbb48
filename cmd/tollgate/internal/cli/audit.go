package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"text/tabwriter"

	"github.com/tollgate-dev/tollgate/pkg/typeid"
)

// maxAuditEvents bounds what one run prints; narrow the filters to see further back.
const maxAuditEvents = 10_000

// auditCmd prints an audit trail, newest first: the API key's organization's or, with
// --platform, the platform's. It follows the API's pages until it has
// --limit events or the trail ends.
func auditCmd(ctx context.Context, args []string, getenv func(string) string, stdio IO) error {
	fs := newFlagSet("audit", "Usage: tollgate audit [--platform] [--actor ID] [--action NAME] [--since RFC3339] [--until RFC3339] [--limit N] [--json]\n\n"+
		"Prints the audit trail, newest first: the API key's organization's (an owner's or admin's key)\n"+
		"or, with --platform, the platform's (a platform administrator's key).\n\n"+
		"Example:\n"+
		"  tollgate audit --action usage.capture.suspend --since 2026-01-01T00:00:00Z\n"+
		"  tollgate audit --platform --limit 200 --json", stdio)
	var a apiFlags
	a.register(fs, getenv)
	platform := fs.Bool("platform", false, "read the platform's trail instead of an organization's")
	actor := fs.String("actor", "", "only events of this member (om_...) or user (usr_...)")
	action := fs.String("action", "", "only events with exactly this action (plugin.create, ...)")
	since := fs.String("since", "", "only events at or after this instant (RFC 3339)")
	until := fs.String("until", "", "only events before this instant (RFC 3339)")
	limit := fs.Int("limit", 50, "print at most this many events (1 to 10000)")
	asJSON := fs.Bool("json", false, "print the events as one JSON array (the API's event objects), for scripts")
	if err := parseFlags(fs, args, stdio); err != nil {
		return err
	}
	if *limit < 1 || *limit > maxAuditEvents {
		return usagef("--limit: %d is out of range; want 1 to %d", *limit, maxAuditEvents)
	}
	var actorCheck error
	if *actor != "" {
		if *platform {
			actorCheck = checkID("actor", *actor, typeid.User)
		} else {
			actorCheck = checkID("actor", *actor, typeid.Member, typeid.User)
		}
	}
	if err := checkAll(actorCheck, checkTime("since", *since), checkTime("until", *until), a.check()); err != nil {
		return err
	}
	if *platform {
		a.role = "a platform administrator's API key (TOLLGATE_API_KEY)"
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
	if !*asJSON {
		fmt.Fprintln(tw, "OCCURRED AT\tACTION\tACTOR\tORGANIZATION\tTARGET")
	}
	events := []json.RawMessage{}
	printed := 0
	for printed < *limit {
		q.Set("limit", strconv.Itoa(min(100, *limit-printed)))
		var page struct {
			Events     []json.RawMessage
			HasMore    bool
			NextCursor *string
		}
		if err := a.do(ctx, "GET", path+"?"+q.Encode(), nil, &page); err != nil {
			return err
		}
		for _, raw := range page.Events {
			var ev struct {
				OccurredAt                                           string
				Action                                               string
				OrganizationID, ActorUserID, ActorMemberID, TargetID *string
			}
			if err := json.Unmarshal(raw, &ev); err != nil {
				return fmt.Errorf("an audit event of %s is not the control plane's: %w", a.api, err)
			}
			events = append(events, raw)
			who := orDash(ev.ActorMemberID)
			if who == "-" {
				who = orDash(ev.ActorUserID)
			}
			if !*asJSON {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", ev.OccurredAt, oneLine(ev.Action, 100), who, orDash(ev.OrganizationID), orDash(ev.TargetID))
			}
			printed++
		}
		if !page.HasMore || page.NextCursor == nil {
			break
		}
		q.Set("cursor", *page.NextCursor)
	}
	if *asJSON {
		return printJSON(stdio.Stdout, events)
	}
	tw.Flush()
	fmt.Fprintf(stdio.Stdout, "%d event(s)\n", printed)
	return nil
}

// printJSON prints v as indented JSON, for scripts (--json).
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func orDash(s *string) string {
	if s == nil || *s == "" {
		return "-"
	}
	return oneLine(*s, 100)
}
