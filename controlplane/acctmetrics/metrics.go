// Package acctmetrics declares the accounting metrics in one place: the ledger, the
// mirror writer and the internal API all count into the same Metrics, registered once
// on the registry the program passes in. No organization or member ids as labels.
package acctmetrics

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the accounting series.
type Metrics struct {
	// Settlements counts settlement items by result (settled, duplicate, promoted,
	// cost_conflict, no_snapshot, invalid, epoch_changed, error).
	Settlements *prometheus.CounterVec
	// Starts counts start items by result (recorded, duplicate, capture_suspended,
	// epoch_changed, invalid, cancelled, error).
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
	// StoreErrors counts failed database operations by operation.
	StoreErrors *prometheus.CounterVec
	// MirrorWrites counts Redis record writes by result (written, stale, error).
	MirrorWrites *prometheus.CounterVec
	// Resyncs counts mirror rebuilds by kind (generation: Redis lost its data; refresh:
	// writes had failed).
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
	// Adjusted counts settlements whose values were cleaned or bounded before they were
	// stored, by adjustment: model_cleaned (control characters, invalid UTF-8, length),
	// usage_bounded (a token count or upstream cost out of range), cost_capped (a priced
	// cost above the allowance bound), stored_without_model (the database refused the
	// receipt and it was stored again without its model name).
	Adjusted *prometheus.CounterVec

	pending atomic.Int64
}

// New registers the metrics on reg (a fresh registry when nil).
func New(reg prometheus.Registerer) *Metrics {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m := &Metrics{
		Settlements: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tollgate_accounting_settlements_total",
			Help: "Settlement items by result."}, []string{"result"}),
		Starts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tollgate_accounting_starts_total",
			Help: "Write-ahead start items by result."}, []string{"result"}),
		BatchSize: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "tollgate_accounting_batch_size",
			Help: "Items per group-committed batch.", Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512}}, []string{"kind"}),
		StartBatches: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tollgate_accounting_start_batches_total",
			Help: "Start batches by path (fenced, read_first, fence_moved)."}, []string{"path"}),
		BatchDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "tollgate_accounting_batch_duration_seconds",
			Help: "Time from cutting a batch to its commit.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}, []string{"kind"}),
		StoreErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tollgate_store_errors_total",
			Help: "Failed database operations of the accounting path."}, []string{"op"}),
		MirrorWrites: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tollgate_mirror_writes_total",
			Help: "Redis mirror record writes by result."}, []string{"result"}),
		Resyncs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tollgate_mirror_resyncs_total",
			Help: "Mirror rebuilds by kind."}, []string{"kind"}),
		RPCs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tollgate_internal_rpcs_total",
			Help: "Internal API calls by method and code."}, []string{"method", "code"}),
		Receipts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tollgate_accounting_receipts_total",
			Help: "Receipts written by settlements (first receipts and promotions), by how the cost was known and which price was used."},
			[]string{"cost_basis", "price_source"}),
		Unpriced: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tollgate_accounting_unpriced_settlements_total",
			Help: "Unpriced receipts written by settlements, by cost source (fallback: charged at the fallback price; unknown: nothing to price)."},
			[]string{"cost_source"}),
		Adjusted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tollgate_accounting_adjusted_settlements_total",
			Help: "Settlements whose values were cleaned or bounded before they were stored, by adjustment."}, []string{"adjustment"}),
	}
	pending := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tollgate_accounting_pending_starts",
		Help: "Durable starts not yet settled, across all members (refreshed periodically)."},
		func() float64 { return float64(m.pending.Load()) })
	reg.MustRegister(m.Settlements, m.Starts, m.StartBatches, m.BatchSize, m.BatchDuration, m.StoreErrors, m.MirrorWrites, m.Resyncs, m.RPCs,
		m.Receipts, m.Unpriced, m.Adjusted, pending)
	return m
}

// SetPending records the latest count of pending starts.
func (m *Metrics) SetPending(n int64) { m.pending.Store(n) }
