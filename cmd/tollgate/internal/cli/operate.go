package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	cpapp "github.com/tollgate-dev/tollgate/controlplane/app"
	"github.com/tollgate-dev/tollgate/pkg/envflag"
	"github.com/tollgate-dev/tollgate/pkg/typeid"
)

// apiFlags are what every command that talks to a running control plane needs: where it
// is and an owner's or admin's API key (or session token).
type apiFlags struct {
	api, key, org string
	// role is the credential the command needs, for the hint of a 403.
	role string
}

func (a *apiFlags) register(fs *flag.FlagSet, getenv func(string) string) {
	fs.StringVar(&a.api, "api", envOr(getenv, "TOLLGATE_API_URL", "http://"+envOr(getenv, "TOLLGATE_HTTP_ADDR", cpapp.DefaultHTTPAddr)), "the control plane's REST API (TOLLGATE_API_URL)")
	fs.StringVar(&a.key, "key", getenv("TOLLGATE_API_KEY"), "an owner's or admin's API key (tgk_...) or session token (tgs_...) (TOLLGATE_API_KEY)")
	envflag.HideDefaults(fs, "key")
	fs.StringVar(&a.org, "org", getenv("TOLLGATE_ORG_ID"), "organization id (org_...) a session token acts in; an API key acts in its own (TOLLGATE_ORG_ID)")
	a.role = "an owner's or admin's API key of the organization (TOLLGATE_API_KEY)"
}

// check refuses, before any call, a malformed --api or --org and a missing key.
func (a *apiFlags) check() error {
	if err := checkAPI(a.api); err != nil {
		return err
	}
	if a.org != "" {
		if err := checkID("org", a.org, typeid.Org); err != nil {
			return err
		}
	}
	if a.key == "" {
		return errKeyRequired
	}
	return nil
}

// do calls the REST API with the key.
func (a *apiFlags) do(ctx context.Context, method, path string, body, out any) error {
	if a.key == "" {
		return errKeyRequired
	}
	c := client{ctx: ctx, base: strings.TrimRight(a.api, "/"), apiKey: a.key, role: a.role}
	_, err := c.call(method, path, "", a.org, body, http.StatusOK, out)
	return err
}

func newFlagSet(name, usage string, stdio IO) *flag.FlagSet {
	fs := flag.NewFlagSet("tollgate "+name, flag.ContinueOnError)
	fs.SetOutput(stdio.Stdout)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), usage+"\n\nFlags:")
		fs.PrintDefaults()
	}
	return fs
}

// memberVersions collects repeated --member om_...:VERSION flags.
type memberVersions []map[string]any

func (m *memberVersions) String() string { return fmt.Sprint(len(*m)) }

func (m *memberVersions) Set(v string) error {
	id, ver, ok := strings.Cut(v, ":")
	n, err := strconv.ParseInt(ver, 10, 64)
	if !ok || !typeid.Valid(id, typeid.Member) || err != nil || n < 0 {
		return errors.New("want MEMBER_ID:TRACKING_VERSION, e.g. " + typeid.New(typeid.Member) + ":3 (the member's id, then coverage.trackingVersion of GET /v1/gateway/usage-limits/members/MEMBER_ID)")
	}
	*m = append(*m, map[string]any{"memberId": id, "trackingVersion": n})
	return nil
}

// captureExample shows capture's two steps: the preview, then the same with --apply.
const captureExample = `Example:
  # the member's coverage.trackingVersion (3 here), from their status:
  curl -s "$TOLLGATE_API_URL/v1/gateway/usage-limits/members/om_01jq3m5v8zf0a7c9d2e4g6h8jk" \
    -H "x-api-key: $TOLLGATE_API_KEY" | jq .coverage.trackingVersion
  tollgate capture suspend --member om_01jq3m5v8zf0a7c9d2e4g6h8jk:3 --reference INC-1234
  tollgate capture suspend --member om_01jq3m5v8zf0a7c9d2e4g6h8jk:3 --reference INC-1234 --apply
  # later, with the version the suspension printed (3 -> 4)
  tollgate capture resume --member om_01jq3m5v8zf0a7c9d2e4g6h8jk:4 --reference INC-1234 --apply`

// captureFlags are capture's flags, for action (suspend, resume, or both as
// "suspend|resume" for capture's own -h).
func captureFlags(action string, getenv func(string) string, stdio IO) (fs *flag.FlagSet, a *apiFlags, members *memberVersions, ref *string, apply *bool) {
	fs = newFlagSet("capture "+action, "Usage: tollgate capture "+action+" --member om_...:VERSION [--member ...] --reference TEXT [--apply]\n\n"+
		"Suspends (suspend) or resumes (resume) usage capture of members, at most 100: the capture\n"+
		"fence. While suspended, a member's new requests are refused (503), and a settlement with\n"+
		"no durable start to close is quarantined, never charged, until reviewed (tollgate\n"+
		"reconcile); requests started before are settled as usual. Each\n"+
		"member is given with the tracking version you expect (coverage.trackingVersion of their\n"+
		"status); the call is all or nothing: when one member's version moved since, or one is\n"+
		"already in that state, nothing is written. Without --apply it previews.\n\n"+captureExample, stdio)
	a = &apiFlags{}
	a.register(fs, getenv)
	members = &memberVersions{}
	fs.Var(members, "member", "MEMBER_ID:TRACKING_VERSION (repeatable)")
	ref = fs.String("reference", "", "review reference recorded in the audit trail (1 to 200 characters)")
	apply = fs.Bool("apply", false, "write the change (default: preview only)")
	return fs, a, members, ref, apply
}

// capture suspends or resumes usage capture for members (the capture fence).
func capture(ctx context.Context, args []string, getenv func(string) string, stdio IO) error {
	const usage = "Usage: tollgate capture suspend|resume --member om_...:VERSION --reference TEXT [--apply]"
	if len(args) == 0 || (args[0] != "suspend" && args[0] != "resume") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
			fs, _, _, _, _ := captureFlags("suspend|resume", getenv, stdio)
			fs.Usage()
			return nil
		}
		if len(args) == 0 {
			return usagef("capture needs suspend or resume: %s", usage)
		}
		return usagef("capture needs suspend or resume, not %q: %s", oneLine(args[0], 80), usage)
	}
	action := args[0]
	fs, a, membersp, ref, apply := captureFlags(action, getenv, stdio)
	if err := parseFlags(fs, args[1:], stdio); err != nil {
		return err
	}
	members := *membersp
	if len(members) == 0 {
		return usagef("--member is required: MEMBER_ID:TRACKING_VERSION, once per member (see %s -h)", fs.Name())
	}
	if err := checkAll(checkReference(*ref), a.check()); err != nil {
		return err
	}
	var out struct {
		Applied bool
		Members []struct {
			MemberID                string
			PreviousTrackingVersion int64
			TrackingVersion         int64
			CaptureEnabled          bool
		}
	}
	body := map[string]any{"members": members, "reviewReference": *ref, "apply": *apply}
	if err := a.do(ctx, "POST", "/v1/gateway/usage-capture/"+action, body, &out); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdio.Stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MEMBER\tVERSION\tCAPTURE")
	for _, m := range out.Members {
		fmt.Fprintf(tw, "%s\t%d -> %d\t%v\n", m.MemberID, m.PreviousTrackingVersion, m.TrackingVersion, onOff(m.CaptureEnabled))
	}
	tw.Flush()
	if !out.Applied {
		fmt.Fprintln(stdio.Stdout, "Preview only: run again with --apply to write it.")
	}
	return nil
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "suspended"
}

// recoverCmd closes pending starts admitted before a cutoff as unknown/incomplete, in
// batches of 100, printing progress. Stopped part way (Ctrl-C, an error), it still prints
// the table of what it did and says after how many it stopped.
func recoverCmd(ctx context.Context, args []string, getenv func(string) string, stdio IO) error {
	fs := newFlagSet("recover", "Usage: tollgate recover --reference TEXT [--before RFC3339] [--apply]\n\n"+
		"Lists the durable starts still pending that were admitted before the cutoff and closes them\n"+
		"as unknown/incomplete (abandonment recovery), 100 at a time. Without --apply it previews.\n"+
		"Interrupted (Ctrl-C), it prints what it did so far; run it again to go on.\n\n"+
		"Example:\n"+
		"  tollgate recover --reference INC-1234 --before 2026-01-31T05:00:00Z           # preview\n"+
		"  tollgate recover --reference INC-1234 --before 2026-01-31T05:00:00Z --apply", stdio)
	var a apiFlags
	a.register(fs, getenv)
	before := fs.String("before", "", "cutoff (RFC 3339); default: the control plane's (one hour ago)")
	ref := fs.String("reference", "", "review reference recorded in the audit trail (1 to 200 characters)")
	apply := fs.Bool("apply", false, "close them (default: preview only)")
	if err := parseFlags(fs, args, stdio); err != nil {
		return err
	}
	if err := checkAll(checkReference(*ref), checkTime("before", *before), a.check()); err != nil {
		return err
	}
	var ids []string
	cursor := ""
	for {
		q := url.Values{"limit": {"100"}}
		if *before != "" {
			q.Set("before", *before)
		}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var page struct {
			Pending    []struct{ RequestID string }
			HasMore    bool
			NextCursor *string
		}
		if err := a.do(ctx, "GET", "/v1/gateway/usage-recovery/pending?"+q.Encode(), nil, &page); err != nil {
			if len(ids) == 0 {
				return err
			}
			return fmt.Errorf("stopped while listing the pending starts (%d listed), nothing was closed: %w", len(ids), err)
		}
		for _, p := range page.Pending {
			ids = append(ids, p.RequestID)
		}
		fmt.Fprintf(stdio.Stdout, "listed %d pending start(s)\n", len(ids))
		if !page.HasMore || page.NextCursor == nil {
			break
		}
		cursor = *page.NextCursor
	}
	if len(ids) == 0 {
		fmt.Fprintln(stdio.Stdout, "Nothing to recover: no start admitted before the cutoff is pending.")
		return nil
	}
	verb := map[bool]string{true: "recovered", false: "previewed"}[*apply]
	counts := map[string]int{}
	done := 0
	for done < len(ids) {
		chunk := ids[done:min(done+100, len(ids))]
		var out struct {
			Results []struct{ Outcome string }
		}
		body := map[string]any{"requestIds": chunk, "reviewReference": *ref, "apply": *apply}
		if err := a.do(ctx, "POST", "/v1/gateway/usage-recovery/recover", body, &out); err != nil {
			fmt.Fprintln(stdio.Stdout)
			if done > 0 {
				outcomeTable(stdio.Stdout, counts)
			}
			inFlight := ""
			if *apply && errors.Is(err, errInterrupted) {
				// The batch sent may have been applied before the answer was cut.
				inFlight = fmt.Sprintf("; the batch of %d sent when interrupted may or may not have been applied", len(chunk))
			}
			again := "Run the command again to go on: what was closed is no longer pending."
			if !*apply {
				again = "Nothing was closed (a preview)."
			}
			fmt.Fprintf(stdio.Stdout, "Stopped after %d of %d (%s so far%s). %s\n", done, len(ids), verb, inFlight, again)
			return fmt.Errorf("stopped after %d of %d: %w", done, len(ids), err)
		}
		for _, r := range out.Results {
			counts[r.Outcome]++
		}
		done += len(chunk)
		fmt.Fprintf(stdio.Stdout, "%s %d/%d\n", verb, done, len(ids))
	}
	fmt.Fprintln(stdio.Stdout)
	outcomeTable(stdio.Stdout, counts)
	if !*apply {
		fmt.Fprintln(stdio.Stdout, "Preview only: run again with --apply to close them.")
	}
	return nil
}

// outcomeTable prints how many requests had each outcome, one outcome a row in name
// order, with a header and aligned columns.
func outcomeTable(w io.Writer, counts map[string]int) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "OUTCOME\tREQUESTS")
	for _, outcome := range slices.Sorted(maps.Keys(counts)) {
		fmt.Fprintf(tw, "%s\t%d\n", outcome, counts[outcome])
	}
	tw.Flush()
}
