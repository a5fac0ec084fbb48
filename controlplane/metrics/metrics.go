// Package metrics declares every metric of the control plane in one place, as
// enforcer/metrics does for the enforcer: one struct, one constructor registering all of
// them on the registry the program passes in. The REST middleware (httpapi), the ledger,
// the mirror writer and the internal API count into the same Metrics; this package only
// declares.
//
// Names start with tollgate_controlplane_ (the enforcer's with tollgate_enforcer_), so a
// series names its program. Label values known in advance are created at construction:
// a fresh control plane already exposes them at 0, so a dashboard panel shows 0, not No
// data, and increase() sees the first event (Prometheus cannot tell the rise of a series
// that appears already at 1). No organization or member ids as labels.
//
// deploy/metrics_test.go reads this catalogue from a registry to check the dashboard and
// the alert rules: change a name, a type or a label here and it shows every query that
// must follow.
package metrics

import (
	"crypto/x509"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the control plane's collectors.
type Metrics struct {
	// HTTPRequests counts REST requests answered, by route pattern (the ServeMux
	// pattern, "unmatched" for none: paths carry ids) and status code.
	HTTPRequests *prometheus.CounterVec
	// HTTPDuration times REST requests by route pattern, 1 ms to the request deadline
	// (50 s). Routes pre-creates its series.
	HTTPDuration *prometheus.HistogramVec

	// Settlements counts settlement items by result (settled, duplicate, promoted,
	// cost_conflict, no_snapshot, invalid, epoch_changed, voided, error).
	Settlements *prometheus.CounterVec
	// Starts counts start items by result (recorded, duplicate, capture_suspended,
	// epoch_changed, limit_reserved, concurrency_limited, invalid, error).
	Starts *prometheus.CounterVec
	// BatchSize observes the items per committed batch, by kind (start, settle).
	BatchSize *prometheus.HistogramVec
	// StartBatches counts start batches by path: fenced (one round trip, on the fences
	// the ledger remembers), read_first (the fences read before recording: two round
	// trips), fence_moved (a fenced batch that found a fence other than the remembered
	// one and ran those starts again the read_first way).
	StartBatches *prometheus.CounterVec
	// BatchDuration observes the time from a batch's cut to its commit, by kind.
	BatchDuration *prometheus.HistogramVec
	// StoreErrors counts failed database operations of the accounting path by operation
	// (start, settle, resolve, mirror_load, mirror_version, mirror_repair: the durable
	// repair marks of failed record writes, resync, sessions: a user's live sessions read
	// to invalidate their cached identities).
	StoreErrors *prometheus.CounterVec
	// MirrorWrites counts Redis record writes by result (written, stale, error), and the
	// records deleted after their writes failed (deleted), so enforcers resolve instead
	// of trusting them.
	MirrorWrites *prometheus.CounterVec
	// Resyncs counts mirror rebuilds by kind (generation: Redis lost its data; refresh:
	// writes had failed; repair; forced: tollgate resync; failover: a Redis master was
	// replaced, and what it acknowledged last may be lost; restore: Postgres was replaced
	// by a backup, a promoted replica or a snapshot, and lost commits Redis mirrors).
	Resyncs *prometheus.CounterVec
	// RPCs counts internal API calls by method and gRPC code.
	RPCs *prometheus.CounterVec
	// Receipts counts the receipts settlements wrote (first receipts and promotions) by
	// cost_basis (upstream_cost, reported_usage, estimate, none) and price_source
	// (organization, catalog, fallback, none).
	Receipts *prometheus.CounterVec
	// Unpriced counts the receipts settlements wrote that are unpriced, by cost_source:
	// fallback (tokens of a model nobody priced, charged at the fallback price) or unknown
	// (nothing to price). The alert TollgateUnpricedModels watches fallback.
	Unpriced *prometheus.CounterVec
	// ErrorAnswers counts the unpriced receipts of cost_source unknown whose upstream
	// answered an error or a redirect (status 300 and above) and generated nothing: a
	// known 0 (a provider's 429, a rejected key's 401, a 5xx), not a guess. The alert
	// TollgateCostsUnknown leaves them out.
	ErrorAnswers prometheus.Counter
	// Adjusted counts settlements whose values were cleaned or bounded before they were
	// stored, by adjustment: model_cleaned (control characters, invalid UTF-8, length),
	// usage_bounded (a token count or upstream cost out of range), cost_capped (a priced
	// cost above the allowance bound), stored_without_model (the database refused the
	// receipt and it was stored again without its model name).
	Adjusted *prometheus.CounterVec
	// RetentionRuns counts retention runs by result: applied, preview or error (a failed
	// run; the serve schedule tries again at its next interval).
	RetentionRuns *prometheus.CounterVec
	// RetentionRemoved counts what applied retention runs removed, by kind:
	// start_snapshot, receipt_detail, quarantine_record, void_record, session, invitation.
	RetentionRemoved *prometheus.CounterVec
	// Reconciliations counts quarantined settlements charged by reviewed reconciliation.
	Reconciliations prometheus.Counter
	// QuarantineApplied counts reports quarantined without a snapshot that the ledger
	// applied itself, when their request's settlement with its snapshot created the
	// event (docs/accounting.md, "A report without a snapshot that came first").
	QuarantineApplied prometheus.Counter
	// GRPCTLSExpiry is when the internal API's certificate (TOLLGATE_GRPC_TLS_CERT)
	// expires, its Unix time; 0 without TLS. Set at each load (GRPCTLSLoaded).
	GRPCTLSExpiry prometheus.Gauge
	// GRPCClientCAExpiry is when the first CA of the bundle enforcers' client
	// certificates are verified against (TOLLGATE_GRPC_CLIENT_CA) expires; 0 without
	// mTLS. Set at each load (GRPCClientCALoaded).
	GRPCClientCAExpiry prometheus.Gauge

	pending atomic.Int64
	// restDB reads the REST API's share of the database pool (ObserveRESTDatabase).
	restDB atomic.Pointer[func() PoolShare]
}

// PoolShare is the state of the REST API's share of the database pool
// (store.ShareStat): its size, the connections its requests hold and the statements
// waiting for one, and the waits so far and their total length.
type PoolShare struct {
	Size, InUse, Waiting int64
	Waits                int64
	Waited               time.Duration
}

// The label values known in advance, created at construction.
var (
	settleResults   = []string{"settled", "duplicate", "promoted", "cost_conflict", "no_snapshot", "invalid", "epoch_changed", "voided", "error"}
	startResults    = []string{"recorded", "duplicate", "capture_suspended", "epoch_changed", "limit_reserved", "concurrency_limited", "invalid", "error"}
	batchKinds      = []string{"start", "settle"}
	startBatchPaths = []string{"fenced", "read_first", "fence_moved"}
	storeOps        = []string{"start", "settle", "resolve", "mirror_load", "mirror_version", "mirror_repair", "resync", "sessions"}
	mirrorResults   = []string{"written", "stale", "error", "deleted"}
	resyncKinds     = []string{"generation", "failover", "refresh", "repair", "forced", "restore"}
	costBases       = []string{"upstream_cost", "reported_usage", "estimate", "none"}
	priceSources    = []string{"organization", "catalog", "fallback", "none"}
	unpricedSources = []string{"fallback", "unknown"}
	adjustments     = []string{"model_cleaned", "usage_bounded", "cost_capped", "stored_without_model"}
	retentionRuns   = []string{"applied", "preview", "error"}
	retentionKinds  = []string{"start_snapshot", "receipt_detail", "quarantine_record", "void_record", "session", "invitation"}
)

// New registers the control plane's metrics on reg.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		HTTPRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tollgate_controlplane_http_requests_total",
			Help: "REST requests answered, by route pattern and status code."}, []string{"route", "code"}),
		HTTPDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "tollgate_controlplane_http_request_duration_seconds",
			Help: "Time to answer a REST request, by route pattern.",
			// Up to the request deadline (httpapi.DefaultRequestTimeout, 50 s: an
			// organization-wide change in a very large organization takes 16 s) and the
			// server's write timeout (60 s), so a slow route's p99 is a duration, not the
			// last bucket's bound.
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 25, 50, 60}}, []string{"route"}),
		Settlements: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tollgate_controlplane_accounting_settlements_total",
			Help: "Settlement items by result."}, []string{"result"}),
		Starts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tollgate_controlplane_accounting_starts_total",
			Help: "Write-ahead start items by result."}, []string{"result"}),
		BatchSize: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "tollgate_controlplane_accounting_batch_size",
			Help: "Items per group-committed batch.", Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512}}, []string{"kind"}),
		StartBatches: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tollgate_controlplane_accounting_start_batches_total",
			Help: "Start batches by path (fenced, read_first, fence_moved)."}, []string{"path"}),
		BatchDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "tollgate_controlplane_accounting_batch_duration_seconds",
			Help: "Time from cutting a batch to its commit.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}, []string{"kind"}),
		StoreErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tollgate_controlplane_store_errors_total",
			Help: "Failed database operations of the accounting path, by operation."}, []string{"op"}),
		MirrorWrites: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tollgate_controlplane_mirror_writes_total",
			Help: "Redis mirror record writes by result."}, []string{"result"}),
		Resyncs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tollgate_controlplane_mirror_resyncs_total",
			Help: "Mirror rebuilds by kind."}, []string{"kind"}),
		RPCs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tollgate_controlplane_internal_rpcs_total",
			Help: "Internal API calls by method and code."}, []string{"method", "code"}),
		Receipts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tollgate_controlplane_accounting_receipts_total",
			Help: "Receipts written by settlements (first receipts and promotions), by how the cost was known and which price was used."},
			[]string{"cost_basis", "price_source"}),
		Unpriced: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tollgate_controlplane_accounting_unpriced_settlements_total",
			Help: "Unpriced receipts written by settlements, by cost source (fallback: charged at the fallback price; unknown: nothing to price)."},
			[]string{"cost_source"}),
		ErrorAnswers: prometheus.NewCounter(prometheus.CounterOpts{Name: "tollgate_controlplane_accounting_error_answer_receipts_total",
			Help: "Receipts of upstream error answers (status 300 and above: a rate limit's 429, a rejected key's 401, a 5xx) that generated nothing, charged 0; counted in unpriced_settlements_total{cost_source=\"unknown\"} too."}),
		Adjusted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tollgate_controlplane_accounting_adjusted_settlements_total",
			Help: "Settlements whose values were cleaned or bounded before they were stored, by adjustment."}, []string{"adjustment"}),
		RetentionRuns: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tollgate_controlplane_retention_runs_total",
			Help: "Retention runs by result (applied, preview, error)."}, []string{"result"}),
		RetentionRemoved: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tollgate_controlplane_retention_removed_total",
			Help: "Rows (or their raw detail) removed by applied retention runs, by kind: request-level data, ended sessions and invitations."}, []string{"kind"}),
		Reconciliations: prometheus.NewCounter(prometheus.CounterOpts{Name: "tollgate_controlplane_accounting_reconciliations_total",
			Help: "Quarantined settlements charged by reviewed reconciliation."}),
		QuarantineApplied: prometheus.NewCounter(prometheus.CounterOpts{Name: "tollgate_controlplane_accounting_quarantine_applied_total",
			Help: "Settlements quarantined without a snapshot, applied by the ledger when their request's settlement with its snapshot created the event."}),
		GRPCTLSExpiry: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tollgate_controlplane_grpc_tls_certificate_expiration_timestamp_seconds",
			Help: "When the internal API's certificate (TOLLGATE_GRPC_TLS_CERT) expires, in Unix seconds; 0 without TLS. It moves when a renewal is loaded (the files are read every 10s; one that does not load is logged \"internal API TLS: the renewed certificate does not load\")."}),
		GRPCClientCAExpiry: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tollgate_controlplane_grpc_tls_client_ca_expiration_timestamp_seconds",
			Help: "When the first CA certificate of the bundle enforcers' client certificates are verified against (TOLLGATE_GRPC_CLIENT_CA, mTLS) expires, in Unix seconds; 0 without mTLS. It moves when a changed bundle is loaded (the file is read every 10s): past it, what that CA signed no longer verifies."}),
	}
	pending := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tollgate_controlplane_accounting_pending_starts",
		Help: "Durable starts not yet settled in the whole database, across all members: the same on every control plane (aggregate with max, not sum); refreshed by each one's mirror maintenance."},
		func() float64 { return float64(m.pending.Load()) })
	restDB := func(f func(PoolShare) float64) func() float64 {
		return func() float64 {
			if read := m.restDB.Load(); read != nil {
				return f((*read)())
			}
			return 0
		}
	}
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tollgate_controlplane_rest_database_connections_max",
			Help: "The REST API's share of the database pool: the most connections its requests hold at once (TOLLGATE_REST_DATABASE_CONNS); the rest is accounting's."},
			restDB(func(s PoolShare) float64 { return float64(s.Size) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tollgate_controlplane_rest_database_connections_in_use",
			Help: "Database connections the REST API's requests hold now."},
			restDB(func(s PoolShare) float64 { return float64(s.InUse) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tollgate_controlplane_rest_database_waiting",
			Help: "REST statements and transactions waiting now for a connection of the REST API's share (all of it in use)."},
			restDB(func(s PoolShare) float64 { return float64(s.Waiting) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tollgate_controlplane_rest_database_waits_total",
			Help: "REST statements and transactions that had to wait for a connection of the REST API's share."},
			restDB(func(s PoolShare) float64 { return float64(s.Waits) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tollgate_controlplane_rest_database_wait_seconds_total",
			Help: "Total time REST statements and transactions waited for a connection of the REST API's share."},
			restDB(func(s PoolShare) float64 { return s.Waited.Seconds() })),
	)
	reg.MustRegister(m.HTTPRequests, m.HTTPDuration, m.Settlements, m.Starts, m.StartBatches, m.BatchSize, m.BatchDuration,
		m.StoreErrors, m.MirrorWrites, m.Resyncs, m.RPCs, m.Receipts, m.Unpriced, m.ErrorAnswers, m.Adjusted, pending,
		m.RetentionRuns, m.RetentionRemoved, m.Reconciliations, m.QuarantineApplied, m.GRPCTLSExpiry, m.GRPCClientCAExpiry)

	precreate(m.Settlements, settleResults)
	precreate(m.Starts, startResults)
	precreate(m.StartBatches, startBatchPaths)
	precreate(m.StoreErrors, storeOps)
	precreate(m.MirrorWrites, mirrorResults)
	precreate(m.Resyncs, resyncKinds)
	precreate(m.Unpriced, unpricedSources)
	precreate(m.Adjusted, adjustments)
	precreate(m.RetentionRuns, retentionRuns)
	precreate(m.RetentionRemoved, retentionKinds)
	for _, k := range batchKinds {
		m.BatchSize.WithLabelValues(k)
		m.BatchDuration.WithLabelValues(k)
	}
	for _, b := range costBases {
		for _, p := range priceSources {
			m.Receipts.WithLabelValues(b, p)
		}
	}
	m.HTTPDuration.WithLabelValues(Unmatched)
	return m
}

// Discard returns metrics registered nowhere, for tests and tools that do not serve them.
func Discard() *Metrics { return New(prometheus.NewRegistry()) }

// Routes creates the REST series of these route patterns ("METHOD /path"), so that a
// fresh control plane shows every route's latency at 0 requests. The status codes are
// only known once answered.
func (m *Metrics) Routes(patterns ...string) {
	for _, p := range patterns {
		m.HTTPDuration.WithLabelValues(p)
	}
}

// Unmatched is the route label of requests no route matched.
const Unmatched = "unmatched"

// ObserveRESTDatabase makes the tollgate_controlplane_rest_database_* series read the
// REST API's share of the pool through read, at each scrape (they are 0 until then).
func (m *Metrics) ObserveRESTDatabase(read func() PoolShare) { m.restDB.Store(&read) }

// SetPending records the latest count of pending starts.
func (m *Metrics) SetPending(n int64) { m.pending.Store(n) }

func precreate(v *prometheus.CounterVec, values []string) {
	for _, x := range values {
		v.WithLabelValues(x)
	}
}

// GRPCTLSLoaded records the expiry of the internal API's certificate served from now on.
func (m *Metrics) GRPCTLSLoaded(leaf *x509.Certificate) {
	m.GRPCTLSExpiry.Set(float64(leaf.NotAfter.Unix()))
}

// GRPCClientCALoaded records the expiry of the first CA of the client CA bundle used from
// now on.
func (m *Metrics) GRPCClientCALoaded(expiry time.Time) {
	m.GRPCClientCAExpiry.Set(float64(expiry.Unix()))
}
