package cli

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"text/tabwriter"
	"time"
)

const reconcileUsage = "Usage: tollgate reconcile list [--state open|reconciled|all] [--member om_...]\n" +
	"       tollgate reconcile charge --request ID --member om_... --admitted-at RFC3339 --cost-micro-usd N --reference TEXT [--apply]"

// reconcileCmd lists quarantined settlements or charges one with reviewed proof
// (GET /v1/gateway/usage-reconciliation/quarantined, POST .../reconcile).
func reconcileCmd(ctx context.Context, args []string, getenv func(string) string, stdio IO) error {
	if len(args) == 0 || (args[0] != "list" && args[0] != "charge") {
		fmt.Fprintln(stdio.Stderr, reconcileUsage)
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			return nil
		}
		return errors.New("reconcile needs list or charge")
	}
	if args[0] == "list" {
		return reconcileList(ctx, args[1:], getenv, stdio)
	}
	return reconcileCharge(ctx, args[1:], getenv, stdio)
}

func reconcileList(ctx context.Context, args []string, getenv func(string) string, stdio IO) error {
	fs := newFlagSet("reconcile list", "Usage: tollgate reconcile list [--state open|reconciled|all] [--member om_...]\n\n"+
		"Lists the organization's quarantined settlements (recorded, never charged: no snapshot, a stale\n"+
		"capture epoch, a fail-open admission the fence refused), oldest first, with what each claimed.", stdio)
	var a apiFlags
	a.register(fs, getenv)
	state := fs.String("state", "open", "open (not reconciled yet), reconciled or all")
	member := fs.String("member", "", "only records that claim this member")
	if err := fs.Parse(args); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdio.Stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REQUEST\tREASON\tMEMBER\tFIRST SEEN\tCLAIMED COST\tRECONCILED")
	cursor, n := "", 0
	for {
		q := url.Values{"limit": {"100"}, "state": {*state}}
		if *member != "" {
			q.Set("memberId", *member)
		}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var page struct {
			Quarantined []struct {
				RequestID      string
				Reason         string
				MemberID       *string
				FirstSeenAt    string
				Settlement     map[string]any
				Reconciliation *struct {
					ReviewReference string
					CostMicroUsd    int64
				}
			}
			HasMore    bool
			NextCursor *string
		}
		if err := a.do(ctx, "GET", "/v1/gateway/usage-reconciliation/quarantined?"+q.Encode(), nil, &page); err != nil {
			return err
		}
		for _, r := range page.Quarantined {
			m, claimed, done := "-", "-", "-"
			if r.MemberID != nil {
				m = *r.MemberID
			}
			if c, ok := r.Settlement["upstreamCostMicroUsd"]; ok {
				claimed = fmt.Sprint(c)
			}
			if r.Reconciliation != nil {
				done = fmt.Sprintf("%d micro-USD (%s)", r.Reconciliation.CostMicroUsd, r.Reconciliation.ReviewReference)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.RequestID, r.Reason, m, r.FirstSeenAt, claimed, done)
			n++
		}
		if !page.HasMore || page.NextCursor == nil {
			break
		}
		cursor = *page.NextCursor
	}
	tw.Flush()
	fmt.Fprintf(stdio.Stdout, "%d record(s)\n", n)
	return nil
}

func reconcileCharge(ctx context.Context, args []string, getenv func(string) string, stdio IO) error {
	fs := newFlagSet("reconcile charge", "Usage: tollgate reconcile charge --request ID --member om_... --admitted-at RFC3339 --cost-micro-usd N --reference TEXT [--apply]\n\n"+
		"Charges one quarantined settlement with reviewed proof: the member, the admission instant (at most\n"+
		"7 days before the settlement was first seen) and the charge (0 to 1000000000 micro-USD), once, on\n"+
		"the windows of the admission instant. Refused when the request was charged or reconciled before, or\n"+
		"when a counter of those windows holds spend its receipts do not explain. Without --apply it previews.", stdio)
	var a apiFlags
	a.register(fs, getenv)
	request := fs.String("request", "", "the quarantined request id")
	member := fs.String("member", "", "the member charged")
	admitted := fs.String("admitted-at", "", "the request's admission instant (RFC 3339)")
	cost := fs.Int64("cost-micro-usd", -1, "the proven charge in micro-USD")
	ref := fs.String("reference", "", "review reference recorded with the charge and in the audit trail (1 to 200 characters)")
	apply := fs.Bool("apply", false, "charge it (default: preview only)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *request == "" || *member == "" || *admitted == "" || *cost < 0 || *ref == "" {
		fs.Usage()
		return errors.New("--request, --member, --admitted-at, --cost-micro-usd and --reference are required")
	}
	if _, err := time.Parse(time.RFC3339Nano, *admitted); err != nil {
		return fmt.Errorf("--admitted-at: %w", err)
	}
	var out struct {
		Applied bool
		Results []struct {
			RequestID string
			Outcome   string
			Message   *string
			Buckets   []struct{ Timeframe, WindowStart string }
		}
	}
	body := map[string]any{"items": []map[string]any{{"requestId": *request, "memberId": *member, "admittedAt": *admitted,
		"costMicroUsd": *cost}}, "reviewReference": *ref, "apply": *apply}
	if err := a.do(ctx, "POST", "/v1/gateway/usage-reconciliation/reconcile", body, &out); err != nil {
		return err
	}
	for _, r := range out.Results {
		fmt.Fprintf(stdio.Stdout, "%s: %s\n", r.RequestID, r.Outcome)
		if r.Message != nil {
			fmt.Fprintf(stdio.Stdout, "  %s\n", *r.Message)
		}
		for _, b := range r.Buckets {
			fmt.Fprintf(stdio.Stdout, "  %s window from %s\n", b.Timeframe, b.WindowStart)
		}
	}
	if !out.Applied {
		for _, r := range out.Results {
			if r.Outcome != "would_reconcile" {
				return errors.New("refused: nothing was charged")
			}
		}
		fmt.Fprintln(stdio.Stdout, "Preview only: run again with --apply to charge it.")
	}
	return nil
}
