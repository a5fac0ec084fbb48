package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tollgate-dev/tollgate/pkg/typeid"
)

// maxReconcileCost is the largest charge the API takes (docs/accounting.md).
const maxReconcileCost = 1_000_000_000

const reconcileUsage = "Usage: tollgate reconcile list [--state open|reconciled|all] [--member om_...] [--json]\n" +
	"       tollgate reconcile charge --request ID --member om_... --admitted-at RFC3339 --cost-micro-usd N --reference TEXT [--apply]\n\n" +
	"Reviewed reconciliation of the settlements the ledger recorded but could not charge (quarantined:\n" +
	"no snapshot, a stale capture epoch, capture suspended): list shows them with what each claimed;\n" +
	"charge charges one, once, with the proof you reviewed. Each action's help follows (tollgate\n" +
	"reconcile list -h, tollgate reconcile charge -h).\n\n" +
	"Example:\n" +
	"  tollgate reconcile list --member om_01jq3m5v8zf0a7c9d2e4g6h8jk\n" +
	"  tollgate reconcile charge --request req-42 --member om_01jq3m5v8zf0a7c9d2e4g6h8jk \\\n" +
	"    --admitted-at 2026-01-31T05:00:00Z --cost-micro-usd 1200 --reference INC-1234 --apply"

const reconcileListExample = "Example:\n" +
	"  tollgate reconcile list                        # the open ones, as a table\n" +
	"  tollgate reconcile list --state all --json     # every record, for a script"

const reconcileChargeExample = "Example:\n" +
	"  # preview, then the same with --apply\n" +
	"  tollgate reconcile charge --request req-42 --member om_01jq3m5v8zf0a7c9d2e4g6h8jk \\\n" +
	"    --admitted-at 2026-01-31T05:00:00Z --cost-micro-usd 1200 --reference INC-1234"

// reconcileCmd lists quarantined settlements or charges one with reviewed proof
// (GET /v1/gateway/usage-reconciliation/quarantined, POST .../reconcile).
func reconcileCmd(ctx context.Context, args []string, getenv func(string) string, stdio IO) error {
	if len(args) == 0 || (args[0] != "list" && args[0] != "charge") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
			fmt.Fprintln(stdio.Stdout, reconcileUsage)
			for _, action := range []func(context.Context, []string, func(string) string, IO) error{reconcileList, reconcileCharge} {
				fmt.Fprintln(stdio.Stdout)
				if err := action(ctx, []string{"-h"}, getenv, stdio); !errors.Is(err, flag.ErrHelp) {
					return err
				}
			}
			return nil
		}
		if len(args) == 0 {
			return usagef("reconcile needs list or charge (see tollgate reconcile -h)")
		}
		return usagef("reconcile needs list or charge, not %q (see tollgate reconcile -h)", oneLine(args[0], 80))
	}
	if args[0] == "list" {
		return reconcileList(ctx, args[1:], getenv, stdio)
	}
	return reconcileCharge(ctx, args[1:], getenv, stdio)
}

func reconcileList(ctx context.Context, args []string, getenv func(string) string, stdio IO) error {
	fs := newFlagSet("reconcile list", "Usage: tollgate reconcile list [--state open|reconciled|all] [--member om_...] [--json]\n\n"+
		"Lists the organization's quarantined settlements (recorded, never charged: no snapshot, a stale\n"+
		"capture epoch, a fail-open admission the fence refused), oldest first, with what each claimed.\n"+
		"ADMITTED AT is the admission instant of the snapshot a record brought: charge it with exactly\n"+
		"that --admitted-at (\"-\": no snapshot, the proof is yours).\n\n"+reconcileListExample, stdio)
	var a apiFlags
	a.register(fs, getenv)
	state := fs.String("state", "open", "open (not reconciled yet), reconciled or all")
	member := fs.String("member", "", "only records that claim this member (om_...)")
	asJSON := fs.Bool("json", false, "print the records as one JSON array (the API's objects), for scripts")
	if err := parseFlags(fs, args, stdio); err != nil {
		return err
	}
	var stateCheck, memberCheck error
	if *state != "open" && *state != "reconciled" && *state != "all" {
		stateCheck = usagef("--state: %q; want open, reconciled or all", oneLine(*state, 80))
	}
	if *member != "" {
		memberCheck = checkID("member", *member, typeid.Member)
	}
	if err := checkAll(stateCheck, memberCheck, a.check()); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdio.Stdout, 2, 4, 2, ' ', 0)
	if !*asJSON {
		fmt.Fprintln(tw, "REQUEST\tREASON\tMEMBER\tFIRST SEEN\tADMITTED AT\tCLAIMED COST\tRECONCILED")
	}
	records := []json.RawMessage{}
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
			Quarantined []json.RawMessage
			HasMore     bool
			NextCursor  *string
		}
		if err := a.do(ctx, "GET", "/v1/gateway/usage-reconciliation/quarantined?"+q.Encode(), nil, &page); err != nil {
			return err
		}
		for _, raw := range page.Quarantined {
			var r struct {
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
			if err := json.Unmarshal(raw, &r); err != nil {
				return fmt.Errorf("a quarantined settlement of %s is not the control plane's: %w", a.api, err)
			}
			records = append(records, raw)
			n++
			if *asJSON {
				continue
			}
			m, admitted, claimed, done := "-", "-", "-", "-"
			if r.MemberID != nil {
				m = *r.MemberID
			}
			if at, ok := snapshotAdmission(raw); ok {
				admitted = at
			}
			if c, ok := r.Settlement["upstreamCostMicroUsd"]; ok {
				claimed = fmt.Sprint(c)
			}
			if r.Reconciliation != nil {
				done = fmt.Sprintf("%d micro-USD (%s)", r.Reconciliation.CostMicroUsd, r.Reconciliation.ReviewReference)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", oneLine(r.RequestID, 100), r.Reason, m, r.FirstSeenAt, admitted, claimed, done)
		}
		if !page.HasMore || page.NextCursor == nil {
			break
		}
		cursor = *page.NextCursor
	}
	if *asJSON {
		return printJSON(stdio.Stdout, records)
	}
	tw.Flush()
	fmt.Fprintf(stdio.Stdout, "%d record(s)\n", n)
	return nil
}

// snapshotAdmission is the admission instant of the snapshot a quarantined settlement
// brought, in the form --admitted-at takes: a record with one is charged only with that
// instant, to the millisecond. A record without one (no_snapshot) has none.
func snapshotAdmission(record json.RawMessage) (string, bool) {
	var r struct {
		Settlement struct {
			Snapshot *struct {
				AdmittedAtUnixMs json.Number
			}
		}
	}
	if json.Unmarshal(record, &r) != nil || r.Settlement.Snapshot == nil {
		return "", false
	}
	ms, err := r.Settlement.Snapshot.AdmittedAtUnixMs.Int64()
	if err != nil || ms <= 0 {
		return "", false
	}
	return time.UnixMilli(ms).UTC().Format(time.RFC3339Nano), true
}

func reconcileCharge(ctx context.Context, args []string, getenv func(string) string, stdio IO) error {
	fs := newFlagSet("reconcile charge", "Usage: tollgate reconcile charge --request ID --member om_... --admitted-at RFC3339 --cost-micro-usd N --reference TEXT [--apply]\n\n"+
		"Charges one quarantined settlement with reviewed proof: the member, the admission instant (its\n"+
		"snapshot's when it has one, else at most 7 days before the settlement was first seen) and the\n"+
		"charge (0 to 1000000000 micro-USD), once, on\n"+
		"the windows of the admission instant. Refused when the request was charged or reconciled before, or\n"+
		"when a counter of those windows holds spend its receipts do not explain. Without --apply it previews.\n\n"+reconcileChargeExample, stdio)
	var a apiFlags
	a.register(fs, getenv)
	request := fs.String("request", "", "the quarantined request id")
	member := fs.String("member", "", "the member charged (om_...)")
	admitted := fs.String("admitted-at", "", "the request's admission instant (RFC 3339)")
	cost := int64(-1) // not given
	fs.Func("cost-micro-usd", "the proven charge in micro-USD, 0 to 1000000000 (required)", func(v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 || n > maxReconcileCost {
			return fmt.Errorf("want a whole number of micro-USD from 0 to %d", maxReconcileCost)
		}
		cost = n
		return nil
	})
	ref := fs.String("reference", "", "review reference recorded with the charge and in the audit trail (1 to 200 characters)")
	apply := fs.Bool("apply", false, "charge it (default: preview only)")
	if err := parseFlags(fs, args, stdio); err != nil {
		return err
	}
	var missing []string
	for _, f := range []struct {
		name  string
		unset bool
	}{{"--request", *request == ""}, {"--member", *member == ""}, {"--admitted-at", *admitted == ""}, {"--cost-micro-usd", cost < 0}, {"--reference", *ref == ""}} {
		if f.unset {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return usagef("%s required (see %s -h)", strings.Join(missing, ", ")+map[bool]string{true: " is", false: " are"}[len(missing) == 1], fs.Name())
	}
	if err := checkAll(checkID("member", *member, typeid.Member), checkTime("admitted-at", *admitted), checkReference(*ref), a.check()); err != nil {
		return err
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
		"costMicroUsd": cost}}, "reviewReference": *ref, "apply": *apply}
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
