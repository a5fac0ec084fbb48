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
	"time"

	cpapp "github.com/tollgate-dev/tollgate/controlplane/app"
	"github.com/tollgate-dev/tollgate/pkg/envflag"
)

// apiFlags are what every command that talks to a running control plane needs: where it
// is and an owner's or admin's API key (or session token).
type apiFlags struct {
	api, key, org string
}

func (a *apiFlags) register(fs *flag.FlagSet, getenv func(string) string) {
	fs.StringVar(&a.api, "api", envOr(getenv, "TOLLGATE_API_URL", "http://"+envOr(getenv, "TOLLGATE_HTTP_ADDR", cpapp.DefaultHTTPAddr)), "the control plane's REST API (TOLLGATE_API_URL)")
	fs.StringVar(&a.key, "key", getenv("TOLLGATE_API_KEY"), "an owner's or admin's API key (TOLLGATE_API_KEY)")
	envflag.HideDefaults(fs, "key")
	fs.StringVar(&a.org, "org", getenv("TOLLGATE_ORG_ID"), "organization id, for session tokens (TOLLGATE_ORG_ID)")
}

// do calls the REST API with the key.
func (a *apiFlags) do(ctx context.Context, method, path string, body, out any) error {
	if a.key == "" {
		return errors.New("an API key is required: --key or TOLLGATE_API_KEY")
	}
	c := client{ctx: ctx, base: strings.TrimRight(a.api, "/"), apiKey: a.key}
	_, err := c.call(method, path, "", a.org, body, http.StatusOK, out)
	return err
}

func newFlagSet(name, usage string, stdio IO) *flag.FlagSet {
	fs := flag.NewFlagSet("tollgate "+name, flag.ContinueOnError)
	fs.SetOutput(stdio.Stderr)
	fs.Usage = func() {
		fmt.Fprintln(stdio.Stderr, usage+"\n\nFlags:")
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
	if !ok || id == "" || err != nil || n < 0 {
		return errors.New("want MEMBER_ID:TRACKING_VERSION, e.g. om_01h...:3 (the version from the member's status coverage)")
	}
	*m = append(*m, map[string]any{"memberId": id, "trackingVersion": n})
	return nil
}

// capture suspends or resumes usage capture for members (the capture fence).
func capture(ctx context.Context, args []string, getenv func(string) string, stdio IO) error {
	if len(args) == 0 || (args[0] != "suspend" && args[0] != "resume") {
		fmt.Fprintln(stdio.Stderr, "Usage: tollgate capture suspend|resume --member om_...:VERSION --reference TEXT [--apply]")
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			return nil
		}
		return errors.New("capture needs suspend or resume")
	}
	action := args[0]
	fs := newFlagSet("capture "+action, "Usage: tollgate capture "+action+" --member om_...:VERSION [--member ...] --reference TEXT [--apply]\n\n"+
		"Suspends or resumes usage capture of members (at most 100), each with the tracking version\n"+
		"you expect (coverage.trackingVersion of their status). Without --apply it previews.", stdio)
	var a apiFlags
	a.register(fs, getenv)
	var members memberVersions
	fs.Var(&members, "member", "MEMBER_ID:TRACKING_VERSION (repeatable)")
	ref := fs.String("reference", "", "review reference recorded in the audit trail (1 to 200 characters)")
	apply := fs.Bool("apply", false, "write the change (default: preview only)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if len(members) == 0 || *ref == "" {
		fs.Usage()
		return errors.New("--member and --reference are required")
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
// batches of 100, printing progress.
func recoverCmd(ctx context.Context, args []string, getenv func(string) string, stdio IO) error {
	fs := newFlagSet("recover", "Usage: tollgate recover --reference TEXT [--before RFC3339] [--apply]\n\n"+
		"Lists the durable starts still pending that were admitted before the cutoff and closes them\n"+
		"as unknown/incomplete (abandonment recovery), 100 at a time. Without --apply it previews.", stdio)
	var a apiFlags
	a.register(fs, getenv)
	before := fs.String("before", "", "cutoff (RFC 3339); default: the control plane's (one hour ago)")
	ref := fs.String("reference", "", "review reference recorded in the audit trail (1 to 200 characters)")
	apply := fs.Bool("apply", false, "close them (default: preview only)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *ref == "" {
		fs.Usage()
		return errors.New("--reference is required")
	}
	if *before != "" {
		if _, err := time.Parse(time.RFC3339, *before); err != nil {
			return fmt.Errorf("--before: %w", err)
		}
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
			return err
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
	counts := map[string]int{}
	for i := 0; i < len(ids); i += 100 {
		chunk := ids[i:min(i+100, len(ids))]
		var out struct {
			Results []struct{ Outcome string }
		}
		body := map[string]any{"requestIds": chunk, "reviewReference": *ref, "apply": *apply}
		if err := a.do(ctx, "POST", "/v1/gateway/usage-recovery/recover", body, &out); err != nil {
			return fmt.Errorf("after %d of %d: %w", i, len(ids), err)
		}
		for _, r := range out.Results {
			counts[r.Outcome]++
		}
		fmt.Fprintf(stdio.Stdout, "%s %d/%d\n", map[bool]string{true: "recovered", false: "previewed"}[*apply], i+len(chunk), len(ids))
	}
	if len(ids) == 0 {
		fmt.Fprintln(stdio.Stdout, "Nothing to recover: no start admitted before the cutoff is pending.")
		return nil
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
