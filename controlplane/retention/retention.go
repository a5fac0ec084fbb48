// Package retention owns the retention job: it removes request-level data, and ended
// login sessions and invitations, older than a configured age, keeping what the
// counters, coverage and audit rest on (rule 15), in bounded batches with progress,
// previewing unless applied.
//
// What goes, per kind:
//   - starts closed (settled or recovered) before the cutoff lose their raw admission
//     snapshot. Their row stays: request id, organization, member, admission instant,
//     tracking version and state are the request's identity and validated attribution,
//     and they keep every late or repeated settlement of the request idempotent (without
//     the row, a settlement bringing its snapshot would create the event again and charge
//     it twice). Settlement derives the charged windows from the admission instant, so
//     nothing reads a closed start's snapshot.
//   - receipts last changed before the cutoff lose their raw detail (model name, token
//     counts, upstream status, finish instant); cost, sources, completeness, outcome,
//     promotion, review reference and the per-bucket charges stay (the counters are their
//     sum, and a later settlement is judged against them).
//   - quarantine records reconciled before the cutoff are deleted; open ones stay until
//     an operator reviews them (rule 18: preserved and excluded from charging). Those
//     that claim no organization (a /settle of a request id no enforcer admitted) can
//     be listed and reconciled by nobody: they are deleted once last seen before the
//     cutoff.
//   - void records (a void that found no start leaves one, so that a start written after
//     it is removed as it is written) voided before the cutoff are deleted: a start comes
//     within seconds of its void, if at all.
//   - login sessions that ended (revoked, or expired) before the cutoff are deleted; a
//     live one stays whatever its age. Nothing references a session row, and a deleted
//     session's token is refused as an unknown one is (401), as it was once it ended.
//   - invitations that ended (accepted, or expired) before the cutoff are deleted; an
//     open one stays. Nothing references an invitation row (audit events keep its id as
//     text); a deleted invitation's token answers what an unknown token answers (404
//     invitation_not_found) instead of invitation_used or invitation_expired.
//
// The guard: a start still pending is never touched, whatever its age; it is reported
// kept ("pending") until it has been durably closed by a settlement or by abandonment
// recovery (the only pending marker since migration 0007 is the pending start itself,
// and the table's CHECK refuses a pending start without its snapshot). Counters,
// tracking rows and audit events are never touched. The age may not be shorter than the
// longest window (a month of 31 days) plus the abandonment period, so nothing of a window
// that can still be charged or recovered goes.
//
// It must not talk HTTP or parse flags; the controlplane and tollgate commands and the
// serve schedule call Run.
package retention

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/controlplane/metrics"
	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/pkg/clock"
	"github.com/tollgate-dev/tollgate/pkg/typeid"

	"github.com/tollgate-dev/tollgate/pkg/lifecycle"
)

// Bounds and defaults.
const (
	// DefaultAge keeps 90 days of request-level data.
	DefaultAge = 90 * 24 * time.Hour
	// AbandonPeriod is how long a start may stay pending before abandonment recovery
	// treats it as abandoned (the recovery list's default cutoff, one hour).
	AbandonPeriod = time.Hour
	// MinAge is the longest window (a month: at most 31 days) plus the abandonment period.
	MinAge = 31*24*time.Hour + AbandonPeriod
	// DefaultBatch rows are examined per transaction.
	DefaultBatch = 1000
	// MaxBatch bounds a batch, and so how long one transaction holds its locks.
	MaxBatch = 10000
)

// Kept reasons.
const (
	KeptPending        = "pending"         // a start not durably closed yet: never discarded
	KeptRecent         = "recent"          // younger than the cutoff
	KeptAlreadyPruned  = "already_pruned"  // an earlier run removed its raw detail
	KeptAwaitingReview = "awaiting_review" // a quarantine record not reconciled yet
	KeptLive           = "live"            // a session not ended, an invitation still open
)

// Options of one run.
type Options struct {
	// Age: data older than now - Age goes (at least MinAge).
	Age time.Duration
	// Batch is the number of rows examined per transaction (1 to MaxBatch).
	Batch int
	// Apply writes; otherwise the run only counts what it would remove.
	Apply bool
	// Scheduled: a run of serve's schedule, audited only when it removed something. An
	// operator's run is always audited; a schedule's that found nothing would add an
	// event per interval to the audit trail for as long as serve runs, saying nothing
	// the runs metric does not.
	Scheduled bool
}

// Validate lists the problems of o.
func (o Options) Validate() []string {
	var p []string
	if o.Age < MinAge {
		p = append(p, fmt.Sprintf("TOLLGATE_RETENTION_AGE: must be at least %s (the longest window, 31 days, plus the abandonment period, %s)",
			MinAge, AbandonPeriod))
	}
	if o.Batch < 1 || o.Batch > MaxBatch {
		p = append(p, fmt.Sprintf("TOLLGATE_RETENTION_BATCH: must be 1 to %d", MaxBatch))
	}
	return p
}

// Deps are what a run needs.
type Deps struct {
	Store *store.Store
	Clock clock.Clock
	Log   *slog.Logger
	// Metrics counts runs and what they removed; nil discards.
	Metrics *metrics.Metrics
}

// Kind is what a run did to one kind of data.
type Kind struct {
	Examined int64
	// Removed rows (deleted, or their raw detail cleared); in a preview, what would be.
	Removed int64
	// Kept counts the rows examined and kept, by reason.
	Kept map[string]int64
}

func (k *Kind) keep(reason string) { k.Kept[reason]++ }

// Report is the outcome of a run.
type Report struct {
	Cutoff  time.Time
	Applied bool
	// Interrupted: the run ended with an error; the counts are what it did before.
	Interrupted                  bool
	Starts, Receipts, Quarantine Kind
	// Sessions and Invitations: ended login sessions and invitations, deleted.
	Sessions, Invitations Kind
	// Voids: void records (usage_voided_requests) voided before the cutoff, deleted.
	Voids Kind
}

func newReport(cutoff time.Time, apply bool) Report {
	return Report{Cutoff: cutoff, Applied: apply, Starts: Kind{Kept: map[string]int64{}}, Receipts: Kind{Kept: map[string]int64{}},
		Quarantine: Kind{Kept: map[string]int64{}}, Sessions: Kind{Kept: map[string]int64{}}, Invitations: Kind{Kept: map[string]int64{}},
		Voids: Kind{Kept: map[string]int64{}}}
}

// Run walks starts, receipts, quarantine records, void records, sessions and invitations once, in
// batches of o.Batch rows (one transaction each), logging progress per batch. An applied
// run is audited (usage.retention.apply) with its summary, a scheduled one only when it
// removed something; one that ends with an error after removing anything is audited too,
// with what it removed, interrupted: true and the error, even when ctx is cancelled, and
// the partial report is returned with the error. Running it again right after removes
// nothing more: every kind it removes is marked or gone.
func Run(ctx context.Context, d Deps, o Options) (Report, error) {
	if p := o.Validate(); len(p) > 0 {
		return Report{}, fmt.Errorf("retention: %v", p)
	}
	if d.Metrics == nil {
		d.Metrics = metrics.Discard()
	}
	r, err := run(ctx, d, o)
	switch {
	case err != nil:
		d.Metrics.RetentionRuns.WithLabelValues("error").Inc()
	case o.Apply:
		d.Metrics.RetentionRuns.WithLabelValues("applied").Inc()
	default:
		d.Metrics.RetentionRuns.WithLabelValues("preview").Inc()
	}
	if o.Apply {
		// What an applied run removed is gone even when a later kind failed.
		d.Metrics.RetentionRemoved.WithLabelValues("start_snapshot").Add(float64(r.Starts.Removed))
		d.Metrics.RetentionRemoved.WithLabelValues("receipt_detail").Add(float64(r.Receipts.Removed))
		d.Metrics.RetentionRemoved.WithLabelValues("quarantine_record").Add(float64(r.Quarantine.Removed))
		d.Metrics.RetentionRemoved.WithLabelValues("void_record").Add(float64(r.Voids.Removed))
		d.Metrics.RetentionRemoved.WithLabelValues("session").Add(float64(r.Sessions.Removed))
		d.Metrics.RetentionRemoved.WithLabelValues("invitation").Add(float64(r.Invitations.Removed))
	}
	return r, err
}

func run(ctx context.Context, d Deps, o Options) (Report, error) {
	now := d.Clock.Now().UTC()
	r := newReport(now.Add(-o.Age), o.Apply)
	log := d.Log.With("apply", o.Apply, "cutoff", r.Cutoff.Format(time.RFC3339))
	log.Info("retention started", "age", o.Age.String(), "batch", o.Batch)
	err := walkAll(ctx, d, o, &r, now, log)
	if err != nil {
		r.Interrupted = true
		if !o.Apply || r.Removed() == 0 {
			return r, err
		}
		// The batches removed so far are committed: the run is audited all the same, as
		// interrupted, even when its context is done (Ctrl-C, serve's SIGTERM).
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), auditTimeout)
		defer cancel()
		if aerr := audit(actx, d, o, r, now, err); aerr != nil {
			return r, errors.Join(err, fmt.Errorf("audit of the interrupted run: %w", aerr))
		}
		return r, err
	}
	if o.Apply && (r.Removed() > 0 || !o.Scheduled) {
		if err := audit(ctx, d, o, r, now, nil); err != nil {
			return r, err
		}
	}
	log.Info("retention finished", "starts_removed", r.Starts.Removed, "receipts_removed", r.Receipts.Removed,
		"quarantine_removed", r.Quarantine.Removed, "voids_removed", r.Voids.Removed, "sessions_removed", r.Sessions.Removed,
		"invitations_removed", r.Invitations.Removed, "starts_kept_pending", r.Starts.Kept[KeptPending])
	return r, nil
}

// auditTimeout bounds the audit of an interrupted run, written on a context that is not
// cancelled with the run's.
const auditTimeout = 10 * time.Second

// walkAll walks the kinds in turn, stopping at the first error.
func walkAll(ctx context.Context, d Deps, o Options, r *Report, now time.Time, log *slog.Logger) error {
	if err := runStarts(ctx, d, o, r, log); err != nil {
		return fmt.Errorf("retention of starts: %w", err)
	}
	if err := runReceipts(ctx, d, o, r, now, log); err != nil {
		return fmt.Errorf("retention of receipts: %w", err)
	}
	if err := runQuarantine(ctx, d, o, r, log); err != nil {
		return fmt.Errorf("retention of quarantine records: %w", err)
	}
	if err := runVoids(ctx, d, o, r, log); err != nil {
		return fmt.Errorf("retention of void records: %w", err)
	}
	if err := runEnded(ctx, d, o, store.SessionsTable, "sessions", &r.Sessions, now, r.Cutoff, log); err != nil {
		return fmt.Errorf("retention of sessions: %w", err)
	}
	if err := runEnded(ctx, d, o, store.InvitationsTable, "invitations", &r.Invitations, now, r.Cutoff, log); err != nil {
		return fmt.Errorf("retention of invitations: %w", err)
	}
	return nil
}

// audit records an applied run (usage.retention.apply) with its summary; a run that
// ended with runErr after removing data is recorded as interrupted, with the error.
func audit(ctx context.Context, d Deps, o Options, r Report, now time.Time, runErr error) error {
	details := map[string]any{"cutoff": r.Cutoff.Format(time.RFC3339), "age": o.Age.String(),
		"startsPruned": r.Starts.Removed, "receiptsPruned": r.Receipts.Removed, "quarantineDeleted": r.Quarantine.Removed,
		"startsKept": r.Starts.Kept, "receiptsKept": r.Receipts.Kept, "quarantineKept": r.Quarantine.Kept,
		"voidsDeleted": r.Voids.Removed, "voidsKept": r.Voids.Kept,
		"sessionsDeleted": r.Sessions.Removed, "invitationsDeleted": r.Invitations.Removed,
		"sessionsKept": r.Sessions.Kept, "invitationsKept": r.Invitations.Kept}
	if runErr != nil {
		details["interrupted"] = true
		details["error"] = runErr.Error()
	}
	return d.Store.InTx(ctx, func(tx pgx.Tx) error {
		return store.RecordAudit(ctx, tx, store.AuditEvent{ID: typeid.New(typeid.AuditEvent), OccurredAt: now, Action: "usage.retention.apply",
			Details: details})
	})
}

// Removed is how many rows the run removed (or, in a preview, would remove), all kinds.
func (r Report) Removed() int64 {
	return r.Starts.Removed + r.Receipts.Removed + r.Quarantine.Removed + r.Voids.Removed + r.Sessions.Removed + r.Invitations.Removed
}

// judgeStart says whether a start's raw snapshot may go, or why it stays. Pending comes
// first: no age, no mark, nothing else lets a pending start be discarded.
func judgeStart(s store.RetainedStart, cutoff time.Time) (remove bool, kept string) {
	switch {
	case s.State == "pending" || s.ClosedAt == nil:
		return false, KeptPending
	case s.Pruned:
		return false, KeptAlreadyPruned
	case !s.ClosedAt.Before(cutoff):
		return false, KeptRecent
	}
	return true, ""
}

// judgeEnded says whether a row that ends (a session, an invitation) may go: one not
// ended at now stays (live), one that ended at or after the cutoff stays (recent).
// ended is when it ended or will end: the earliest of its expiry and the instant it was
// revoked or accepted (nil when it was not).
func judgeEnded(expires time.Time, endedEarly *time.Time, now, cutoff time.Time) (remove bool, kept string) {
	ended := expires
	if endedEarly != nil && endedEarly.Before(ended) {
		ended = *endedEarly
	}
	switch {
	case endedEarly == nil && now.Before(expires):
		return false, KeptLive
	case !ended.Before(cutoff):
		return false, KeptRecent
	}
	return true, ""
}

// table is one kind of data as retention walks it: rows read in key order
// after a position, judged one by one, and the chosen ones pruned in the same transaction.
type table[R any, K any] struct {
	name string // the log's kind
	// read reads at most limit rows after the position after (the zero K: from the start).
	read func(ctx context.Context, tx pgx.Tx, after K, limit int) ([]R, error)
	// judge says whether a row may go, or why it stays.
	judge func(R) (remove bool, kept string)
	// prune removes the chosen rows, by their keys (applied runs only), and says how many
	// it removed: the write checks them again, so a row that changed since the read stays.
	prune func(ctx context.Context, tx pgx.Tx, keys []K) (int64, error)
	// key is a row's position.
	key func(R) K
}

// walk runs retention over one table in batches of o.Batch rows, one transaction each,
// counting into kind and logging progress after every batch. A row closed or pruned
// between the read and the write is counted as it was read; the write re-checked it.
func walk[R any, K any](ctx context.Context, d Deps, o Options, t table[R, K], kind *Kind, log *slog.Logger) error {
	var after K
	for {
		var rows []R
		var removed int64
		err := d.Store.InTx(ctx, func(tx pgx.Tx) error {
			var err error
			if rows, err = t.read(ctx, tx, after, o.Batch); err != nil || len(rows) == 0 {
				return err
			}
			var chosen []K
			for _, row := range rows {
				if ok, _ := t.judge(row); ok {
					chosen = append(chosen, t.key(row))
				}
			}
			removed = int64(len(chosen))
			if o.Apply && len(chosen) > 0 {
				removed, err = t.prune(ctx, tx, chosen)
			}
			return err
		})
		if err != nil {
			return err
		}
		if len(rows) == 0 {
			return nil
		}
		for _, row := range rows {
			if ok, why := t.judge(row); !ok {
				kind.keep(why)
			}
		}
		kind.Examined += int64(len(rows))
		kind.Removed += removed
		after = t.key(rows[len(rows)-1])
		log.Info("retention batch", "kind", t.name, "examined", kind.Examined, "removed", kind.Removed,
			"kept", kind.Kept)
		if len(rows) < o.Batch {
			return nil
		}
	}
}

func runStarts(ctx context.Context, d Deps, o Options, r *Report, log *slog.Logger) error {
	return walk(ctx, d, o, table[store.RetainedStart, string]{
		name: "starts",
		read: func(ctx context.Context, tx pgx.Tx, after string, limit int) ([]store.RetainedStart, error) {
			return store.StartsAfter(ctx, tx, after, limit)
		},
		judge: func(s store.RetainedStart) (bool, string) { return judgeStart(s, r.Cutoff) },
		prune: func(ctx context.Context, tx pgx.Tx, ids []string) (int64, error) {
			return store.PruneStartSnapshots(ctx, tx, ids, r.Cutoff)
		},
		key: func(s store.RetainedStart) string { return s.RequestID },
	}, &r.Starts, log)
}

func runReceipts(ctx context.Context, d Deps, o Options, r *Report, now time.Time, log *slog.Logger) error {
	return walk(ctx, d, o, table[store.RetainedReceipt, string]{
		name: "receipts",
		read: func(ctx context.Context, tx pgx.Tx, after string, limit int) ([]store.RetainedReceipt, error) {
			return store.ReceiptsAfter(ctx, tx, after, limit)
		},
		judge: func(s store.RetainedReceipt) (bool, string) {
			switch {
			case s.Pruned:
				return false, KeptAlreadyPruned
			case !s.UpdatedAt.Before(r.Cutoff):
				return false, KeptRecent
			}
			return true, ""
		},
		prune: func(ctx context.Context, tx pgx.Tx, ids []string) (int64, error) {
			return store.PruneReceiptDetail(ctx, tx, ids, r.Cutoff, now)
		},
		key: func(s store.RetainedReceipt) string { return s.RequestID },
	}, &r.Receipts, log)
}

// quarantineKey is a quarantine record's position: its primary key.
type quarantineKey struct{ requestID, reason string }

func runQuarantine(ctx context.Context, d Deps, o Options, r *Report, log *slog.Logger) error {
	return walk(ctx, d, o, table[store.RetainedQuarantine, quarantineKey]{
		name: "quarantine",
		read: func(ctx context.Context, tx pgx.Tx, after quarantineKey, limit int) ([]store.RetainedQuarantine, error) {
			return store.QuarantineAfter(ctx, tx, after.requestID, after.reason, limit)
		},
		judge: func(q store.RetainedQuarantine) (bool, string) {
			switch {
			case q.ReconciledAt == nil && q.OrganizationID == "":
				// Claimed no organization: no owner can list it, so none can ever
				// reconcile it. It goes once nothing reported it within the age.
				if !q.LastSeenAt.Before(r.Cutoff) {
					return false, KeptRecent
				}
				return true, ""
			case q.ReconciledAt == nil:
				return false, KeptAwaitingReview
			case !q.ReconciledAt.Before(r.Cutoff):
				return false, KeptRecent
			}
			return true, ""
		},
		prune: func(ctx context.Context, tx pgx.Tx, keys []quarantineKey) (int64, error) {
			ids, reasons := make([]string, len(keys)), make([]string, len(keys))
			for i, k := range keys {
				ids[i], reasons[i] = k.requestID, k.reason
			}
			return store.DeleteReviewedQuarantine(ctx, tx, ids, reasons, r.Cutoff)
		},
		key: func(q store.RetainedQuarantine) quarantineKey { return quarantineKey{q.RequestID, q.Reason} },
	}, &r.Quarantine, log)
}

// runVoids deletes the void records voided before the cutoff. A void's record waits for a
// start of its request written after it (store.ReadSettleStarts), which comes within
// seconds if at all: the cutoff, at least MinAge ago, is far past any.
func runVoids(ctx context.Context, d Deps, o Options, r *Report, log *slog.Logger) error {
	return walk(ctx, d, o, table[store.RetainedVoid, string]{
		name: "voids",
		read: func(ctx context.Context, tx pgx.Tx, after string, limit int) ([]store.RetainedVoid, error) {
			return store.VoidsAfter(ctx, tx, after, limit)
		},
		judge: func(v store.RetainedVoid) (bool, string) {
			if !v.VoidedAt.Before(r.Cutoff) {
				return false, KeptRecent
			}
			return true, ""
		},
		prune: func(ctx context.Context, tx pgx.Tx, ids []string) (int64, error) {
			return store.DeleteVoids(ctx, tx, ids, r.Cutoff)
		},
		key: func(v store.RetainedVoid) string { return v.RequestID },
	}, &r.Voids, log)
}

// runEnded deletes the rows of t (login sessions, invitations) that ended before the
// cutoff; live ones and those ended since are kept.
func runEnded(ctx context.Context, d Deps, o Options, t store.EndingTable, name string, k *Kind, now, cutoff time.Time, log *slog.Logger) error {
	return walk(ctx, d, o, table[store.RetainedEnding, string]{
		name: name,
		read: func(ctx context.Context, tx pgx.Tx, after string, limit int) ([]store.RetainedEnding, error) {
			return store.EndingAfter(ctx, tx, t, after, limit)
		},
		judge: func(e store.RetainedEnding) (bool, string) {
			return judgeEnded(e.ExpiresAt, e.EndedEarly, now, cutoff)
		},
		prune: func(ctx context.Context, tx pgx.Tx, ids []string) (int64, error) {
			return store.DeleteEnded(ctx, tx, t, ids, cutoff)
		},
		key: func(e store.RetainedEnding) string { return e.ID },
	}, k, log)
}

// Write prints the summary: per kind, what was examined, removed (or would be) and kept
// by reason.
func (r Report) Write(w io.Writer) {
	verb := "would remove"
	if r.Applied {
		verb = "removed"
	}
	fmt.Fprintf(w, "retention of request-level data, ended sessions and ended invitations older than %s\n", r.Cutoff.Format(time.RFC3339))
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "DATA\tEXAMINED\t%s\tKEPT (BY REASON)\n", map[bool]string{true: "REMOVED", false: "WOULD REMOVE"}[r.Applied])
	for _, k := range []struct {
		name string
		kind Kind
	}{{"start snapshots", r.Starts}, {"receipt detail", r.Receipts}, {"reviewed quarantine records", r.Quarantine},
		{"void records", r.Voids}, {"ended sessions", r.Sessions}, {"ended invitations", r.Invitations}} {
		kept := ""
		for _, reason := range slices.Sorted(maps.Keys(k.kind.Kept)) {
			if kept != "" {
				kept += ", "
			}
			kept += fmt.Sprintf("%s %d", reason, k.kind.Kept[reason])
		}
		if kept == "" {
			kept = "-"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", k.name, k.kind.Examined, k.kind.Removed, kept)
	}
	tw.Flush()
	if n := r.Starts.Kept[KeptPending]; n > 0 {
		fmt.Fprintf(w, "%d pending start(s) kept: they are never discarded until settled or recovered (tollgate recover)\n", n)
	}
	if n := r.Quarantine.Kept[KeptAwaitingReview]; n > 0 {
		fmt.Fprintf(w, "%d quarantine record(s) kept: they await reviewed reconciliation (tollgate reconcile)\n", n)
	}
	switch {
	case r.Interrupted && r.Applied:
		fmt.Fprintln(w, "Interrupted: the counts above are what this run removed before it stopped (audited as interrupted); run it again to finish.")
	case r.Interrupted:
		// A preview that failed found out nothing about what it did not reach: asking
		// for --apply here would send the operator to run what just failed, unseen.
		fmt.Fprintln(w, "Preview interrupted: the counts above are what it examined before it stopped, nothing was written; fix the error and preview again before --apply.")
	case !r.Applied:
		fmt.Fprintf(w, "Preview only: run again with --apply to %s them.\n", verb[len("would "):])
	}
}

// Schedule runs an applied retention once every Interval across the deployment (serve's
// TOLLGATE_RETENTION_INTERVAL), audited when it removed something. Whether a run is due
// is kept in Postgres (store.ClaimScheduledRun): the schedule looks when it starts and
// then every minute (every Interval when shorter), and runs when the last run, by any
// control plane, began at least an Interval ago, so a control plane restarted more often
// than the interval still runs it and several control planes run it once between them. A
// failed run is logged and tried again once the interval has passed; one cut short after
// removing data (serve stopping, too) is logged as interrupted, at warn, with what it
// removed; one cut short by serve stopping is due again at once.
type Schedule struct {
	Deps     Deps
	Options  Options
	Interval time.Duration
}

// scheduleJob names retention's row in scheduled_runs.
const scheduleJob = "retention"

// scheduleCheck is how often a schedule looks whether its run is due, at most.
const scheduleCheck = time.Minute

// Run is the schedule's loop.
func (s Schedule) Run(ctx context.Context) error {
	s.tick(ctx)
	return lifecycle.Every(ctx, min(s.Interval, scheduleCheck), s.tick)
}

// tick runs retention when its run is due and this control plane claims it.
func (s Schedule) tick(ctx context.Context) {
	began := s.Deps.Clock.Now()
	due, err := store.ClaimScheduledRun(ctx, s.Deps.Store.Pool, scheduleJob, began, s.Interval)
	switch {
	case err != nil && ctx.Err() == nil:
		s.Deps.Log.Error("scheduled retention could not tell whether a run is due; looking again later", "err", err)
		return
	case err != nil || !due:
		return
	}
	o := s.Options
	o.Apply, o.Scheduled = true, true
	r, err := Run(ctx, s.Deps, o)
	if err != nil && ctx.Err() != nil {
		// Cut short by serve stopping (a rollout): the run is due again at once, for
		// the control plane that comes next, instead of an interval later.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), auditTimeout)
		if rerr := store.ReleaseScheduledRun(rctx, s.Deps.Store.Pool, scheduleJob, began); rerr != nil {
			s.Deps.Log.Warn("scheduled retention cut short could not be marked due again; it runs once the interval has passed", "err", rerr)
		}
		cancel()
	}
	switch {
	case err == nil:
	case r.Removed() > 0:
		// Cut short (serve stopping, or a failure) after removing data: what it
		// removed is audited as interrupted; say so whatever the context's state.
		s.Deps.Log.Warn("scheduled retention interrupted after removing data (audited as interrupted); the rest waits for the next run", "err", err,
			"starts_removed", r.Starts.Removed, "receipts_removed", r.Receipts.Removed, "quarantine_removed", r.Quarantine.Removed,
			"voids_removed", r.Voids.Removed,
			"sessions_removed", r.Sessions.Removed, "invitations_removed", r.Invitations.Removed)
	case ctx.Err() == nil:
		s.Deps.Log.Error("scheduled retention failed; trying again once the interval has passed", "err", err)
	}
}
