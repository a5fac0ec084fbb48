package metrics

import (
	"crypto/x509"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics holds the enforcer's collectors.
type Metrics struct {
	// Decisions counts answered checks by decision (admitted, blocked, unavailable,
	// unauthorized, fail_open) and reason (within_limit, over_limit, unlimited,
	// usage_limit, capture_suspended, redis, controlplane, start_queue, ...).
	Decisions *prometheus.CounterVec
	// CheckDuration times a check from request to answer, by decision.
	CheckDuration *prometheus.HistogramVec

	// IdentityCache counts credential look-ups by result (hit, miss, negative_hit).
	IdentityCache *prometheus.CounterVec
	// IdentityRefreshes counts background refreshes of cached identities.
	IdentityRefreshes prometheus.Counter
	// RecordReads counts member record reads by source (redis, resolve).
	RecordReads *prometheus.CounterVec
	// BlockedCacheHits counts checks refused from a kept blocked decision, without
	// reading the member's record.
	BlockedCacheHits prometheus.Counter
	// TrailingRequests counts requests opened without a check to charge what a session
	// used after a check refused its member (gate.Gate.Trailing).
	TrailingRequests prometheus.Counter
	// SpeculativeStarts counts the durable starts a check made beside its record read,
	// by what became of them (SpeculativeStartResults; gate.Gate).
	SpeculativeStarts *prometheus.CounterVec

	RedisDuration        *prometheus.HistogramVec
	RedisErrors          prometheus.Counter
	RedisGenerationLost  prometheus.Counter
	ControlPlaneDuration *prometheus.HistogramVec
	ControlPlaneErrors   *prometheus.CounterVec
	StartQueueDepth      prometheus.Gauge
	StartQueueRejections *prometheus.CounterVec
	StartBatchSize       prometheus.Histogram
	// StartWait is the time from queuing a start to its answer: the queue's wait for a
	// Start call, and the call.
	StartWait prometheus.Histogram
	// SettleQueueDepth and SettleOldestAge are the settlement backlog: how many
	// settlements the control plane has not acknowledged yet, and how long the oldest of
	// them has waited (SetSettleOldest; 0 when none waits). The alert
	// TollgateSettlementBacklog watches both.
	SettleQueueDepth prometheus.Gauge
	SettleOldestAge  prometheus.GaugeFunc
	SettleReserved   prometheus.Gauge
	// SettleCapacity is the settle queue's capacity (queued plus reserved): the alert
	// TollgateSettleCapacityLow compares depth plus reserved to it, before any start is
	// refused for settle_capacity.
	SettleCapacity prometheus.Gauge
	// SettleOutsideCapacity is how many of the queued settlements (SettleQueueDepth) are
	// outside the capacity: replayed from the spool at start, sent again after a rebuild
	// of the mirror, or kept by the spool when the capacity was used up. A start never
	// waits for their slots, so TollgateSettleCapacityLow leaves them out.
	SettleOutsideCapacity prometheus.Gauge
	// SettleSpoolBytes is the size of the settlement spool on disk (package spool);
	// SettleSpoolDropped counts settlements queued without being spooled, by reason
	// (full, error): lost if the process then crashes before sending them.
	// SettleSpoolReplayed counts settlements found unacknowledged at start and sent again.
	SettleSpoolBytes    prometheus.Gauge
	SettleSpoolDropped  *prometheus.CounterVec
	SettleSpoolReplayed prometheus.Counter
	// SettleAnsweredKept is how many answered settlements are kept to be sent again
	// after a rebuild of the mirror (TOLLGATE_ENFORCER_SETTLE_RESEND_WINDOW), and
	// SettleSentAgain counts the answers to those sent again, by outcome (unanswered:
	// dropped at shutdown or after the maximum age).
	SettleAnsweredKept prometheus.Gauge
	SettleSentAgain    *prometheus.CounterVec
	// MirrorRebuilds counts the rebuilds of the mirror the enforcer saw, by what it did
	// with the settlements answered in the window (MirrorRebuildActions).
	MirrorRebuilds *prometheus.CounterVec
	// Settlements counts settlements finished, by outcome. abandoned (given up after
	// retrying for the maximum age, or left when the drain deadline passed) and overflow
	// (queue full, no reservation) are settlements lost: the alert TollgateSettlementsLost.
	// left_in_spool (still unanswered in the spool when the enforcer stopped) is lost only
	// when the spool goes with the process (the chart's emptyDir, whose alert counts it).
	// unreadable_in_spool (the spool's torn records and unreadable settlements found at
	// start, at least one settlement lost each: spool.UnreadableOutcome) is lost, and
	// TollgateSettlementsLost counts it.
	Settlements      *prometheus.CounterVec
	SettledCostBasis *prometheus.CounterVec
	// SettleRetries counts settlements put back to be sent again, one per settlement
	// each time (not per call).
	SettleRetries prometheus.Counter
	// SettlementLag observes, per settlement, the time from queueing to the control
	// plane's final answer (a histogram: its quantiles are the lag of delivered
	// settlements; SettleOldestAge is the age of the ones still waiting).
	SettlementLag    prometheus.Histogram
	InflightRequests prometheus.Gauge
	// InflightEvicted counts unreported requests settled as incomplete before their
	// abandonment timeout because the tracker was full (package inflight).
	InflightEvicted      prometheus.Counter
	ExtProcStreams       *prometheus.CounterVec
	ExtProcRequestBodies *prometheus.CounterVec
	// StreamOptionsRefusals counts the refusals of stream_options each front's memory
	// takes, StreamOptionsShareErrors the failed rounds of sharing them (package
	// streamoptions, Share).
	StreamOptionsRefusals    *prometheus.CounterVec
	StreamOptionsShareErrors *prometheus.CounterVec
	InvalidationsReceived    *prometheus.CounterVec
	// GatewayRequests counts the gateway's requests by outcome (gateway.Outcomes),
	// GatewayActive the requests it is proxying, GatewayFirstByte the seconds from
	// sending an upstream request to its response headers.
	GatewayRequests *prometheus.CounterVec
	GatewayActive   prometheus.Gauge
	// GatewayUpstreamResponses counts the answers the gateway's upstreams gave (every
	// outcome="proxied" request, and a WebSocket handshake's answer), by route (its
	// prefix: a bounded set, the routes file's) and status (GatewayUpstreamCode): a
	// provider refusing the route's credential (401, 403) or failing (5xx, 529) answers,
	// and the request is proxied all the same. By route, since one route's revoked key
	// among busier routes is a small share of the enforcer's answers. The gateway
	// creates its routes' series (gateway.New).
	GatewayUpstreamResponses *prometheus.CounterVec
	// RequestDecodes is the compressed request bodies holding a share of the decoding
	// budget now (requestbody.Decoding), both front doors.
	RequestDecodes   prometheus.Gauge
	GatewayFirstByte prometheus.Histogram
	// GatewayTLSExpiry is when the certificate the gateway serves expires (its Unix
	// time; 0 when the gateway serves no TLS), set at each load (GatewayTLSLoaded).
	GatewayTLSExpiry prometheus.Gauge
	// ControlPlaneTLSExpiry is when this enforcer's client certificate for the control
	// plane (TOLLGATE_CONTROLPLANE_TLS_CERT) expires; 0 without one
	// (ControlPlaneTLSLoaded).
	ControlPlaneTLSExpiry prometheus.Gauge
	// ControlPlaneCAExpiry is when the first CA of the bundle this enforcer verifies
	// the control plane against (TOLLGATE_CONTROLPLANE_TLS_CA) expires; 0 without one
	// (ControlPlaneCALoaded).
	ControlPlaneCAExpiry prometheus.Gauge
	// Reservations counts the in-flight guard's reservations by basis: worst_case (the
	// request's own, from its body), or why the policy's amount was used instead
	// (ReservationBases).
	Reservations *prometheus.CounterVec
	// ContainerCharges counts the responses whose code tools' containers were charged, by
	// result (ContainerChargeResults).
	ContainerCharges *prometheus.CounterVec

	// MemberCapacity is TOLLGATE_ENFORCER_MEMBER_CAPACITY, the bound of each of the
	// three caches of what the enforcer keeps per member (MemberCaches);
	// MemberCacheEntries how many each holds now (SetMemberCacheLen), and
	// MemberCacheEvictions the entries still in use each dropped to make room for
	// another: a cache at its capacity that keeps evicting costs Redis reads and control
	// plane calls, and tells the operator to raise the capacity with the memory.
	MemberCapacity       prometheus.Gauge
	MemberCacheEntries   prometheus.Collector
	MemberCacheEvictions *prometheus.CounterVec

	settleOldest atomic.Int64 // unix nanoseconds of the oldest unacknowledged settlement; 0: none
	// memberCacheLen are the caches' length functions, in MemberCaches' order.
	memberCacheLen [3]atomic.Pointer[func() int]
}

// MemberCaches are the cache labels of MemberCacheEntries and MemberCacheEvictions: a
// credential's identity (enforcer/identity), a member's last-read usage record
// (enforcer/record), a member's kept 429 (enforcer/gate).
var MemberCaches = []string{"identities", "records", "blocks"}

// GatewayOutcomes are the outcome labels of GatewayRequests (package gateway's
// Outcome constants; package gateway imports this one, so the list lives here).
var GatewayOutcomes = []string{"proxied", "refused", "no_route", "busy", "body_too_large", "bad_body", "upstream_error", "upstream_timeout", "client_gone", "no_credential", "unsupported", "decode_busy", "preflight"}

// GatewayUpstreamCodes are the code labels of GatewayUpstreamResponses: the statuses
// an operator acts on, each on its own, the others by class; a bounded set, created at
// construction.
var GatewayUpstreamCodes = []string{"101", "2xx", "400", "401", "403", "404", "408", "429", "500", "502", "503", "504", "529",
	"other_4xx", "other_5xx", "other"}

// CreateGatewayUpstreamSeries creates the GatewayUpstreamResponses series of every
// route (routes, their prefixes) and code at 0, so that a rate over them, and an alert's
// ratio, exists before a first answer. The gateway calls it with its routes
// (gateway.New): the catalogue cannot, not knowing them.
func CreateGatewayUpstreamSeries(v *prometheus.CounterVec, routes []string) {
	for _, route := range routes {
		for _, code := range GatewayUpstreamCodes {
			v.WithLabelValues(route, code)
		}
	}
}

// GatewayUpstreamCode is the code label of an upstream's status.
func GatewayUpstreamCode(status int) string {
	if status >= 200 && status <= 299 {
		return "2xx"
	}
	if code := strconv.Itoa(status); slices.Contains(GatewayUpstreamCodes, code) {
		return code
	}
	switch {
	case status >= 400 && status <= 499:
		return "other_4xx"
	case status >= 500 && status <= 599:
		return "other_5xx"
	}
	return "other"
}

// The label values known in advance, created at construction: a fresh enforcer already
// exposes them at 0, so a dashboard panel shows 0, not No data, and increase() sees the
// first event (Prometheus cannot tell the rise of a series that appears already at 1).
var (
	// decisionReasons are the reasons of each decision (enforcer/gate answers them;
	// start_queue_* are startq.Reason values). A pair missing here still counts, from
	// its first check on.
	decisionReasons = map[string][]string{
		"admitted":     {"within_limit", "over_limit", "unlimited"},
		"blocked":      {"usage_limit", "usage_reserved", "concurrency_limit"},
		"unauthorized": {"no_credential", "unknown_credential", "inactive_member", "model_not_priced", "billing_deferred"},
		"unavailable": append([]string{"capture_suspended", "epoch_changed", "start_refused"},
			failureReasons...),
		"fail_open": failureReasons,
	}
	failureReasons = []string{"controlplane", "redis", "start_queue_full", "start_queue_member_share", "start_queue_deadline",
		"start_queue_settle_capacity", "start_queue_closed", "start_queue_cancelled"}
	identityResults = []string{"hit", "miss", "negative_hit"}
	recordSources   = []string{"redis", "resolve"}
	startRejections = []string{"full", "member_share", "deadline", "cancelled", "settle_capacity", "closed", "controlplane"}
	settleOutcomes  = []string{"settled", "duplicate", "promoted", "cost_conflict", "no_snapshot", "invalid", "epoch_changed", "voided", "abandoned", "overflow", "left_in_spool", "unreadable_in_spool"}
	// MirrorRebuildActions: sent_again (the settlements answered in the window were
	// sent again), not_needed (the control plane noted Postgres unchanged through a
	// rebuild for Redis alone).
	MirrorRebuildActions = []string{"sent_again", "not_needed"}
	sentAgainOutcomes    = []string{"settled", "duplicate", "promoted", "cost_conflict", "no_snapshot", "invalid", "epoch_changed", "voided", "unanswered"}
	costBases            = []string{"upstream_cost", "reported_usage", "estimate", "none", "unknown"}
	extprocStreamResults = []string{"complete", "incomplete", "untracked"}
	requestBodyResults   = []string{"estimated", "not_json", "form", "include_usage_set", "include_usage_refused", "not_buffered", "model_not_priced", "billing_deferred", "unbilled", "decoded", "undecodable", "decode_busy", "guardrail_trace_set", "guardrail_check", "bom_dropped", "malformed"}
	spoolDropReasons     = []string{"full", "error"}
	shareOps             = []string{"write", "read"}
	invalidationKinds    = []string{"credential", "member", "api_key", "record"}
	// gatewayOutcomes are gateway.Outcomes (a gateway test checks they agree).
	gatewayOutcomes = GatewayOutcomes
)

// ReservationBases are the label values of Reservations: worst_case, no_body (the front
// door saw none: /check, ext_authz without with_request_body, a body that is no JSON
// object), and worstcase.Unknown's reasons.
var ReservationBases = []string{"worst_case", "no_body", "no_model", "not_in_catalog", "organization_priced", "no_cap", "duration_billed",
	"page_billed", "searches_uncapped", "advisor_uncapped", "server_context"}

// SpeculativeStartResults are the label values of SpeculativeStarts.
var SpeculativeStartResults = []string{"used", "voided", "unused"}

// ContainerChargeResults are the label values of ContainerCharges (package inflight's
// Container* constants; package inflight imports this one, so the list lives here).
var ContainerChargeResults = []string{"charged", "unknown_request", "ledger_unavailable"}

// latency buckets for calls that should take about a millisecond.
var fast = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}

// calls are fast's buckets up to the longest internal API call: a Settle call's
// timeout, 5 s (settleq.Config.CallTimeout), which a batch waiting for its group
// commit on a loaded database can reach.
var calls = append(slices.Clone(fast), 2.5, 5, 10)

// New registers the enforcer's metrics on reg.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{}
	*m = Metrics{
		Decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_enforcer_decisions_total",
			Help: "Checks answered, by decision (admitted, blocked, unavailable, unauthorized, fail_open) and reason.",
		}, []string{"decision", "reason"}),
		CheckDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tollgate_enforcer_check_duration_seconds",
			Help:    "Time from receiving a check to answering it, by decision.",
			Buckets: fast,
		}, []string{"decision"}),
		IdentityCache: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_enforcer_identity_cache_total",
			Help: "Credential look-ups by result: hit, negative_hit (known bad credential) or miss (asked the control plane). Hit ratio = hit / sum.",
		}, []string{"result"}),
		IdentityRefreshes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tollgate_enforcer_identity_refreshes_total",
			Help: "Cached identities asked for again in the background, by a hit past the refresh age (half the identity TTL), while the check went on with the cached one.",
		}),
		RecordReads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_enforcer_record_reads_total",
			Help: "Member records read, by source: redis (mirror hit) or resolve (read through the control plane).",
		}, []string{"source"}),
		BlockedCacheHits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tollgate_enforcer_blocked_cache_hits_total",
			Help: "Checks refused from a kept blocked decision, without reading the member's record. Share = this / tollgate_enforcer_decisions_total{decision=\"blocked\"}.",
		}),
		TrailingRequests: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tollgate_enforcer_trailing_requests_total",
			Help: "Requests opened without a check to charge what a session used after a check refused its member (a transcription that ended during a response, GPT-Live's last seconds).",
		}),
		SpeculativeStarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_enforcer_speculative_starts_total",
			Help: "Durable starts a check made beside its read of the member's record, on the last record it knew, by result: used (the fresh record decided the same), voided (it did not: the start was recorded, so it is voided, never charged), unused (it did not, and the start was not recorded, nothing to undo).",
		}, []string{"result"}),
		RedisDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tollgate_enforcer_redis_duration_seconds",
			Help:    "Duration of Redis calls, by operation.",
			Buckets: fast,
		}, []string{"op"}),
		RedisErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tollgate_enforcer_redis_errors_total",
			Help: "Redis calls that failed (connection, timeout, server error).",
		}),
		RedisGenerationLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tollgate_enforcer_redis_generation_lost_total",
			Help: "Times the mirror's generation marker was found missing (Redis lost its data); reads go through the control plane until it resyncs.",
		}),
		ControlPlaneDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tollgate_enforcer_controlplane_duration_seconds",
			Help:    "Duration of internal API calls to the control plane, by method.",
			Buckets: calls,
		}, []string{"method"}),
		ControlPlaneErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_enforcer_controlplane_errors_total",
			Help: "Internal API calls that failed, by method and gRPC code.",
		}, []string{"method", "code"}),
		StartQueueDepth: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tollgate_enforcer_start_queue_depth",
			Help: "Write-ahead starts waiting to be sent to the control plane.",
		}),
		StartQueueRejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_enforcer_start_queue_rejections_total",
			Help: "Starts refused or abandoned before being recorded, by reason (full, member_share, deadline, cancelled, settle_capacity, closed, controlplane: the Start call failed).",
		}, []string{"reason"}),
		StartWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "tollgate_enforcer_start_wait_seconds",
			Help: "Seconds from queuing a write-ahead start to the control plane's answer: the wait for a Start call plus the call " +
				"(tollgate_enforcer_controlplane_duration_seconds{method=\"Start\"} is the call alone). Starts that left the queue unsent are not observed.",
			Buckets: []float64{.00025, .0005, .00075, .001, .0015, .002, .003, .004, .005, .0075, .01, .025, .05, .1, .25, .5, 1},
		}),
		StartBatchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tollgate_enforcer_start_batch_size",
			Help:    "Starts per Start call to the control plane.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256},
		}),
		SettleQueueDepth: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tollgate_enforcer_settle_queue_depth",
			Help: "Settlements waiting to be sent (or re-sent) to the control plane.",
		}),
		SettleOldestAge: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tollgate_enforcer_settle_queue_oldest_age_seconds",
			Help: "Age of the oldest settlement the control plane has not acknowledged yet (0 when none waits): how far behind the spend members see is.",
		}, func() float64 { return m.settleOldestAge() }),
		SettleReserved: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tollgate_enforcer_settle_reserved",
			Help: "Settlement slots reserved by admitted requests that have not settled yet.",
		}),
		Settlements: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_enforcer_settlements_total",
			Help: "Settlements finished, by outcome (settled, duplicate, promoted, cost_conflict, no_snapshot, invalid, epoch_changed, voided, abandoned, overflow, left_in_spool: still unanswered in the spool when the enforcer stopped, lost if the spool goes with the pod; unreadable_in_spool: lost in the spool, found at start as a torn record, one per segment whose rest is skipped (at least one settlement each), or as a settlement that could not be read).",
		}, []string{"outcome"}),
		SettledCostBasis: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_enforcer_settled_cost_basis_total",
			Help: "Settlements the control plane charged (outcome settled or promoted), by how the cost was known: upstream_cost, reported_usage, estimate (some token counts estimated from the bytes seen), none (nothing to charge), unknown (the control plane did not say).",
		}, []string{"basis"}),
		SettleRetries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tollgate_enforcer_settle_retries_total",
			Help: "Settlements sent again after a Settle call failed or its answer missed them, one per settlement each time (a failed call of 256 settlements counts 256; tollgate_enforcer_controlplane_errors_total{method=\"Settle\"} counts the calls).",
		}),
		SettlementLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tollgate_enforcer_settlement_lag_seconds",
			Help:    "Time from queueing a settlement (the response's end) to the control plane's final answer for it.",
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
		}),
		InflightRequests: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tollgate_enforcer_inflight_requests",
			Help: "Admitted requests whose settlement has not been queued yet.",
		}),
		InflightEvicted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tollgate_enforcer_inflight_evicted_total",
			Help: "Unreported admitted requests settled as incomplete before the abandonment timeout because the table of unreported requests was full (oldest first; TOLLGATE_ENFORCER_INFLIGHT_CAPACITY).",
		}),
		SettleCapacity: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tollgate_enforcer_settle_capacity",
			Help: "Capacity of the settle queue: settlements queued plus reserved (TOLLGATE_ENFORCER_SETTLE_CAPACITY). A start that finds it used up is refused (start_queue_settle_capacity).",
		}),
		SettleOutsideCapacity: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tollgate_enforcer_settle_outside_capacity",
			Help: "Settlements of tollgate_enforcer_settle_queue_depth outside the settle capacity: replayed from the spool at start, sent again after a rebuild of the mirror, or kept by the spool when the capacity was used up (its size bounds them). They take no start's slot: the capacity used is depth minus these, plus reserved.",
		}),
		MemberCapacity: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tollgate_enforcer_member_capacity",
			Help: "Most entries each of the caches of what the enforcer keeps per member holds (TOLLGATE_ENFORCER_MEMBER_CAPACITY): credentials' identities, members' last-read usage records, members' kept 429s.",
		}),
		MemberCacheEntries: &memberCacheEntries{m: m, desc: prometheus.NewDesc("tollgate_enforcer_member_cache_entries",
			"Entries each cache of what the enforcer keeps per member holds now, by cache: identities (credentials used in the last identity TTL, unknown ones included), records (members' last-read usage records), blocks (members' kept 429s); each at most tollgate_enforcer_member_capacity.",
			[]string{"cache"}, nil)},
		MemberCacheEvictions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_enforcer_member_cache_evictions_total",
			Help: "Entries still in use dropped to make room for another in a full cache of what the enforcer keeps per member, by cache (identities, records, blocks): each is read from Redis or asked of the control plane again when needed. Steady identity evictions mean more credentials in use at once than TOLLGATE_ENFORCER_MEMBER_CAPACITY (docs/enforcer.md, \"Memory\").",
		}, []string{"cache"}),
		SettleSpoolBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tollgate_enforcer_settle_spool_bytes",
			Help: "Size on disk of the settlement spool (settlements written before they are queued, until the control plane answers them).",
		}),
		SettleSpoolDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_enforcer_settle_spool_dropped_total",
			Help: "Settlements queued without being written to the spool, by reason (full, error): a crash before they are sent loses them.",
		}, []string{"reason"}),
		SettleSpoolReplayed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tollgate_enforcer_settle_spool_replayed_total",
			Help: "Settlements found unacknowledged in the spool at start and sent again (the control plane answers duplicate for those it already had).",
		}),
		SettleAnsweredKept: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tollgate_enforcer_settle_answered_kept",
			Help: "Settlements the control plane answered in the last TOLLGATE_ENFORCER_SETTLE_RESEND_WINDOW, kept (about 300 bytes each, at most the settle capacity) to be sent again when the mirror is rebuilt under a new generation: a replaced Postgres may have lost them.",
		}),
		SettleSentAgain: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_enforcer_settle_sent_again_total",
			Help: "Answered settlements sent again after a rebuild of the mirror, by outcome: duplicate (the database still had it), settled or promoted (it had lost it: charged now), no_snapshot (its start was lost too: quarantined for review), the other refusals, unanswered (not spooled, dropped at shutdown or after the maximum age; a spooled one stays in the spool for the next start).",
		}, []string{"outcome"}),
		MirrorRebuilds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_enforcer_mirror_rebuilds_total",
			Help: "Rebuilds of the mirror under a new generation the enforcer saw, by what it did with the settlements answered in the last TOLLGATE_ENFORCER_SETTLE_RESEND_WINDOW: sent_again (Postgres may have lost them), not_needed (the rebuild was for Redis alone, and the control plane checked Postgres unchanged).",
		}, []string{"settlements"}),
		ExtProcStreams: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_enforcer_extproc_streams_total",
			Help: "ext_proc streams finished, by result (complete, incomplete, untracked).",
		}, []string{"result"}),
		ExtProcRequestBodies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_enforcer_extproc_request_bodies_total",
			Help: "Request bodies of admitted requests read through ext_proc, by result: estimated (input tokens estimated from it), not_json (nothing estimated), form (a multipart form, an upload: nothing estimated, its model and an image edit's images noted for the settlement, as the gateway notes them), include_usage_set (an OpenAI stream's body rewritten to ask for its usage), include_usage_refused (an OpenAI stream's body left as it came, not asked for its usage, because its upstream refused the field for that model within the hour: charged an estimate), not_buffered (sent in pieces: neither estimated nor rewritten), model_not_priced (refused: the organization refuses models nobody priced), billing_deferred (refused: an endpoint billed later, out of the enforcer's sight, a batch or a background response), unbilled (an endpoint the provider does not charge, a token count or a moderation: nothing estimated, nothing charged), decoded (a compressed body, gzip, deflate or br, read and sent decoded), undecodable (refused 415, 400 or 413: a compressed body of another coding, corrupt, or past 32 MiB decoded, which unread could not be charged), decode_busy (refused 503, retryable: a compressed body that did not get its share of the decoding budget within 200ms, request_decodes_active), guardrail_trace_set (an Amazon Bedrock request's guardrail asked for its trace, which reports what it billed: Converse's guardrailConfig.trace, InvokeModel's X-Amzn-Bedrock-Trace header), guardrail_check (Amazon Bedrock's ApplyGuardrail, a guardrail called on its own, or InvokeGuardrailChecks: nothing estimated, their units charged from their answer), bom_dropped (a JSON body's leading UTF-8 BOM dropped: read and sent without it), malformed (refused 400: a body that opens as a JSON object and is not one well-formed JSON object, NaN or Infinity in it, settled at 0). A rewritten body also counts as estimated.",
		}, []string{"result"}),
		StreamOptionsRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_enforcer_stream_options_refusals_total",
			Help: "Refusals of stream_options.include_usage taken into a front's memory (an upstream and a model whose OpenAI streams then go unasked, charged an estimate: an hour from the gateway, a day from ext_proc), by front (gateway, extproc) and from: upstream (this front saw its upstream refuse the field), shared (another front of this enforcer, or another enforcer, saw it: shared through Redis).",
		}, []string{"front", "from"}),
		StreamOptionsShareErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_enforcer_stream_options_share_errors_total",
			Help: "Rounds of sharing refusals of stream_options through Redis that failed, by op: write (the refusals learned here are kept for the next round), read. Each front goes on with the refusals it holds.",
		}, []string{"op"}),
		InvalidationsReceived: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_enforcer_invalidations_total",
			Help: "Invalidations received from the control plane, by kind (credential, member, api_key, record).",
		}, []string{"kind"}),
		GatewayRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_enforcer_gateway_requests_total",
			Help: "Requests of the inference gateway, by outcome: proxied (the upstream answered), refused (by the gate), no_route, busy, body_too_large, bad_body (400 or 415: a malformed JSON body, a compressed body that cannot be read), upstream_error (502), upstream_timeout (504), client_gone, no_credential (502: the route's token or signing credentials could not be had), unsupported (501: an API the gateway does not proxy, Amazon Bedrock's bidirectional streams), decode_busy (503: a compressed body that did not get its share of the decoding budget within 200ms, request_decodes_active), preflight (204: a browser's CORS preflight, answered by the gateway).",
		}, []string{"outcome"}),
		GatewayUpstreamResponses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_enforcer_gateway_upstream_responses_total",
			Help: "Answers of the inference gateway's upstreams (the requests counted outcome=\"proxied\", and WebSocket handshakes), by route (the routes file's prefix; / for TOLLGATE_GATEWAY_UPSTREAM alone) and status: 101 (a WebSocket opened), 2xx, 400, 401 and 403 (the provider rejects the route's credential, logged \"gateway: upstream rejected the route's credential\"), 404, 408, 429, 500, 502, 503, 504, 529 (overloaded), other_4xx, other_5xx, other.",
		}, []string{"route", "code"}),
		GatewayActive: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tollgate_enforcer_gateway_active_requests",
			Help: "Requests the inference gateway is proxying now (streams included).",
		}),
		RequestDecodes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tollgate_enforcer_request_decodes_active",
			Help: "Compressed request bodies being decoded, or held decoded, now, by ext_proc and the gateway: they share a budget of 64 MiB of decoded bytes (each reserves its limit, 32 MiB for ext_proc, the body cap for the gateway), and a body that waits 200ms for its share is refused 503 (extproc_request_bodies_total{result=\"decode_busy\"}, gateway_requests_total{outcome=\"decode_busy\"}).",
		}),
		Reservations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_enforcer_reservations_total",
			Help: "Starts that reserve in-flight cost, by basis: worst_case (the request's own worst case), else why the policy's amount was reserved (no_body, no_model, not_in_catalog, organization_priced, no_cap, duration_billed, page_billed, searches_uncapped, advisor_uncapped, server_context).",
		}, []string{"basis"}),
		ContainerCharges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_enforcer_container_charges_total",
			Help: "Responses whose code tools' containers were charged their minutes, by result: charged (at the request's container price, by the container ledger in Redis), unknown_request (the request's tools not known here: at its provider's dearest container price, an estimate), ledger_unavailable (Redis did not answer: each container charged as one seen for the first time, an estimate).",
		}, []string{"result"}),
		GatewayFirstByte: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "tollgate_enforcer_gateway_upstream_header_seconds",
			Help: "Time from sending a request upstream to its response headers (a streamed completion's time to first token, roughly).",
			// Up to the header timeout, TOLLGATE_GATEWAY_HEADER_TIMEOUT (10 minutes by
			// default: a completion that is not streamed answers only at its end).
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 900},
		}),
		GatewayTLSExpiry: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tollgate_enforcer_gateway_tls_certificate_expiration_timestamp_seconds",
			Help: "When the certificate the inference gateway serves (TOLLGATE_GATEWAY_TLS_CERT) expires, in Unix seconds; 0 when the gateway serves no TLS. It moves when a renewal is loaded (the files are read every 10s): one that stays near is a renewal that did not come or did not load (logged \"gateway TLS: the renewed certificate does not load\").",
		}),
		ControlPlaneTLSExpiry: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tollgate_enforcer_controlplane_tls_client_certificate_expiration_timestamp_seconds",
			Help: "When this enforcer's client certificate for the control plane (TOLLGATE_CONTROLPLANE_TLS_CERT, mTLS) expires, in Unix seconds; 0 without one. It moves when a renewal is loaded (the files are read every 10s; one that does not load is logged \"control plane TLS client certificate: the renewed certificate does not load\").",
		}),
		ControlPlaneCAExpiry: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tollgate_enforcer_controlplane_tls_ca_expiration_timestamp_seconds",
			Help: "When the first CA certificate of the bundle this enforcer verifies the control plane's certificate against (TOLLGATE_CONTROLPLANE_TLS_CA) expires, in Unix seconds; 0 without a bundle (the system's roots, or plaintext). It moves when a changed bundle is loaded (the file is read every 10s): past it, what that CA signed no longer verifies.",
		}),
	}
	reg.MustRegister(m.Decisions, m.CheckDuration, m.IdentityCache, m.IdentityRefreshes, m.RecordReads, m.BlockedCacheHits, m.TrailingRequests, m.SpeculativeStarts, m.RedisDuration, m.RedisErrors,
		m.RedisGenerationLost, m.ControlPlaneDuration, m.ControlPlaneErrors, m.StartQueueDepth, m.StartQueueRejections,
		m.StartBatchSize, m.StartWait, m.SettleQueueDepth, m.SettleOldestAge, m.SettleReserved, m.Settlements, m.SettledCostBasis, m.SettleRetries, m.SettlementLag,
		m.InflightRequests, m.InflightEvicted, m.SettleCapacity, m.SettleOutsideCapacity, m.SettleSpoolBytes, m.SettleSpoolDropped, m.SettleSpoolReplayed,
		m.SettleAnsweredKept, m.SettleSentAgain, m.MirrorRebuilds,
		m.ExtProcStreams, m.ExtProcRequestBodies, m.StreamOptionsRefusals, m.StreamOptionsShareErrors, m.InvalidationsReceived, m.GatewayRequests, m.GatewayUpstreamResponses, m.GatewayActive, m.GatewayFirstByte, m.GatewayTLSExpiry, m.ControlPlaneTLSExpiry, m.ControlPlaneCAExpiry,
		m.RequestDecodes, m.Reservations, m.ContainerCharges, m.MemberCapacity, m.MemberCacheEntries, m.MemberCacheEvictions)

	for decision, reasons := range decisionReasons {
		m.CheckDuration.WithLabelValues(decision)
		for _, r := range reasons {
			m.Decisions.WithLabelValues(decision, r)
		}
	}
	for v, values := range map[*prometheus.CounterVec][]string{
		m.IdentityCache: identityResults, m.RecordReads: recordSources, m.StartQueueRejections: startRejections,
		m.Settlements: settleOutcomes, m.SettleSentAgain: sentAgainOutcomes, m.MirrorRebuilds: MirrorRebuildActions, m.SettledCostBasis: costBases, m.ExtProcStreams: extprocStreamResults,
		m.ExtProcRequestBodies: requestBodyResults, m.SettleSpoolDropped: spoolDropReasons, m.InvalidationsReceived: invalidationKinds,
		m.GatewayRequests: gatewayOutcomes, m.Reservations: ReservationBases, m.ContainerCharges: ContainerChargeResults,
		m.SpeculativeStarts:    SpeculativeStartResults,
		m.MemberCacheEvictions: MemberCaches, m.StreamOptionsShareErrors: shareOps,
	} {
		for _, x := range values {
			v.WithLabelValues(x)
		}
	}
	for _, front := range StreamOptionsFronts {
		for _, from := range []string{"upstream", "shared"} {
			m.StreamOptionsRefusals.WithLabelValues(front, from)
		}
	}
	return m
}

// StreamOptionsFronts are the fronts whose memories of refusals of stream_options are
// shared (StreamOptionsRefusals' front label).
var StreamOptionsFronts = []string{"gateway", "extproc"}

// SetSettleOldest records when the oldest settlement not yet acknowledged by the control
// plane was queued; the zero time when none waits. SettleOldestAge reports its age at
// each scrape.
func (m *Metrics) SetSettleOldest(t time.Time) {
	if t.IsZero() {
		m.settleOldest.Store(0)
		return
	}
	m.settleOldest.Store(t.UnixNano())
}

func (m *Metrics) settleOldestAge() float64 {
	ns := m.settleOldest.Load()
	if ns == 0 {
		return 0
	}
	return max(time.Since(time.Unix(0, ns)).Seconds(), 0)
}

// SetMemberCacheLen makes MemberCacheEntries report length() for cache (one of
// MemberCaches) at each scrape.
func (m *Metrics) SetMemberCacheLen(cache string, length func() int) {
	m.memberCacheLen[slices.Index(MemberCaches, cache)].Store(&length)
}

// MemberCacheLen is what MemberCacheEntries reports for cache now (0 for a cache not set).
func (m *Metrics) MemberCacheLen(cache string) int {
	if length := m.memberCacheLen[slices.Index(MemberCaches, cache)].Load(); length != nil {
		return (*length)()
	}
	return 0
}

// memberCacheEntries is MemberCacheEntries: each cache's length read at scrape, 0 for a
// cache not set (yet).
type memberCacheEntries struct {
	m    *Metrics
	desc *prometheus.Desc
}

func (c *memberCacheEntries) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *memberCacheEntries) Collect(ch chan<- prometheus.Metric) {
	for _, cache := range MemberCaches {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(c.m.MemberCacheLen(cache)), cache)
	}
}

// Discard returns metrics registered nowhere, for tests and tools that do not serve them.
func Discard() *Metrics { return New(prometheus.NewRegistry()) }

// GatewayTLSLoaded records the expiry of the certificate the gateway serves from now on.
func (m *Metrics) GatewayTLSLoaded(leaf *x509.Certificate) {
	m.GatewayTLSExpiry.Set(float64(leaf.NotAfter.Unix()))
}

// ControlPlaneTLSLoaded records the expiry of the client certificate presented to the
// control plane from now on.
func (m *Metrics) ControlPlaneTLSLoaded(leaf *x509.Certificate) {
	m.ControlPlaneTLSExpiry.Set(float64(leaf.NotAfter.Unix()))
}

// ControlPlaneCALoaded records the expiry of the first CA of the control plane's bundle
// used from now on.
func (m *Metrics) ControlPlaneCALoaded(expiry time.Time) {
	m.ControlPlaneCAExpiry.Set(float64(expiry.Unix()))
}
