package inflight

import (
	"context"
	"hash/maphash"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate-dev/tollgate/enforcer/containersession"
	"github.com/tollgate-dev/tollgate/enforcer/estimate"
	"github.com/tollgate-dev/tollgate/enforcer/metrics"
	"github.com/tollgate-dev/tollgate/enforcer/requestbody"
	"github.com/tollgate-dev/tollgate/enforcer/responseusage"
	"github.com/tollgate-dev/tollgate/enforcer/settleq"
	"github.com/tollgate-dev/tollgate/pkg/clock"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/logging"
	"github.com/tollgate-dev/tollgate/pkg/pricecatalog"
	"github.com/tollgate-dev/tollgate/pkg/saturate"

	"github.com/tollgate-dev/tollgate/pkg/lifecycle"
)

// Request is one admitted request.
type Request struct {
	ID             string
	OrganizationID string
	MemberID       string
	// Snapshot is the admission snapshot. It travels with the settlement only when the
	// start is not durable (fail-open admission); nil when even that was unknown.
	// Admitted drops it from a durable request: the control plane stored it with the
	// start, and it is most of what an unreported request would otherwise cost (the
	// settlement reservation keeps it, interned, for after a rebuild: KeepStart).
	Snapshot *internalv1.Snapshot
	// Durable: the control plane recorded the start.
	Durable bool
	// Guarded: the start is under the in-flight guard (gate.Answer.Guarded), which
	// counts the request in flight until its settlement commits: a front door settles
	// it before its client sees the response end (Guarded, Usage.Now).
	Guarded bool
	// WithoutRecord marks a fail-open admission made without any record of the member:
	// Snapshot then holds only the admission windows (gate.NoRecordSnapshot) and the
	// settlement says admitted_without_record.
	WithoutRecord bool
	// Reservation is the settlement slot (nil when none could be reserved).
	Reservation *settleq.Reservation
	AdmittedAt  time.Time
	// RefuseUnpriced: the organization refuses models nobody priced (neither its own
	// prices, whose keys are PricedModelKeys, nor the shipped catalog) where the request
	// names its model (RefuseUnpricedModel).
	RefuseUnpriced  bool
	PricedModelKeys []string

	following atomic.Bool
	// What the request said (RecordRequest), guarded by the shard's lock while the
	// request is in the table; nil when it was not recorded. A pointer: most of the
	// table's requests nobody reports are forward-auth ones whose body nobody reads, and
	// held by value it made every request 136 bytes larger (403 bytes where
	// docs/enforcer.md then said 275: BenchmarkUnreportedRequestBytes).
	read *reading
	// older and newer link the shard's requests that no response stream follows, in
	// admission order (the oldest is evicted first); listed says it is in that list.
	older, newer *Request
	listed       bool
}

// Usage is what the end of a response told about its cost.
type Usage struct {
	Model                     string
	InputTokens, OutputTokens int64
	// CachedTokens and CacheCreationTokens are the parts of InputTokens read from and
	// written to a prompt cache; CacheCreation1hTokens the part of the writes made for
	// an hour (Anthropic's one-hour cache).
	CachedTokens, CacheCreationTokens, CacheCreation1hTokens int64
	// AudioInputMillis is input audio the upstream billed by duration, in milliseconds
	// (responseusage.Usage.AudioInputMillis).
	AudioInputMillis int64
	// WebSearchRequests counts the web searches billed apiece
	// (responseusage.Usage.WebSearchRequests).
	WebSearchRequests int64
	// FileSearchCalls counts the file search calls billed apiece
	// (responseusage.Usage.FileSearchCalls).
	FileSearchCalls int64
	// ImageGenerationCalls counts the calls of an image generation tool
	// (responseusage.Usage.ImageGenerationCalls), each an image billed as ImageModel's
	// output: ImageOutputTokens in all. A front door knows the calls alone: Finish
	// takes the model and each call's tokens from the request (RecordRequest);
	// POST /settle's reporter says all three.
	ImageGenerationCalls int64
	ImageModel           string
	ImageOutputTokens    int64
	// ImageToolInputTokens is the image model's input for those calls, its cache reads
	// included, ImageToolCachedInputTokens the cached part, as the answer reported them
	// (responseusage.Usage.ImageToolInputTokens), billed at ImageModel's input prices.
	ImageToolInputTokens, ImageToolCachedInputTokens int64
	// The advisor's counts (responseusage.Usage.AdvisorInputTokens...), apart from the
	// others, billed at AdvisorModel's prices. A front door knows the counts alone:
	// Finish takes the model from the request (RecordRequest), and adds the counts to
	// the others when it does not know it; POST /settle's reporter says the model.
	AdvisorModel                                              string
	AdvisorInputTokens, AdvisorOutputTokens                   int64
	AdvisorCachedInputTokens, AdvisorCacheCreationInputTokens int64
	AdvisorCacheCreation1hInputTokens                         int64
	// MapsGroundedPrompts is 1 when the answer was grounded with Google Maps, billed
	// per grounded prompt (responseusage.Usage.MapsGroundedPrompts).
	MapsGroundedPrompts int64
	// OCRPages is the pages an OCR model read, billed apiece
	// (responseusage.Usage.OCRPages).
	OCRPages int64
	// ContainerKind and ContainerMinutes are the container minutes a reporter (POST
	// /settle) says the request is charged, and their price's kind
	// (pricecatalog.Container). A response stream names its containers instead
	// (Seen.ContainerIDs), whose minutes Finish charges.
	ContainerKind    string
	ContainerMinutes int64
	// Guardrail is what the request's Amazon Bedrock guardrails assessed, billed apart
	// from the tokens (responseusage.Usage.Guardrail; POST /settle's "guardrailUnits").
	Guardrail pricecatalog.GuardrailUnits
	// AudioInputTokens and AudioOutputTokens are the audio parts of InputTokens and
	// OutputTokens where the upstream reported them, nil where not: settlement charges a
	// model that prices audio apart at the dearer price when the split is unknown
	// (responseusage.Usage.AudioInputTokens).
	AudioInputTokens, AudioOutputTokens *int64
	// CachedAudioInputTokens is the audio part of CachedTokens where the upstream
	// reported it, nil where not (responseusage.Usage.CachedAudioInputTokens): settlement
	// charges a model that prices cached audio apart at the dearer price when unknown.
	CachedAudioInputTokens *int64
	// ImageInputTokens and CachedImageInputTokens are the image parts of InputTokens and
	// CachedTokens where the upstream reported them (the Realtime API's image_tokens,
	// realtimeusage.Usage), nil where not: settlement charges a model that prices image
	// input apart (gpt-realtime) at the dearest price of the class when unknown.
	ImageInputTokens, CachedImageInputTokens *int64
	// UpstreamCostMicroUSD, when not nil, wins over the catalog price.
	UpstreamCostMicroUSD *int64
	// Complete is false when the response broke off or carried no usage.
	Complete       bool
	UpstreamStatus int32
	// Seen is what a response stream saw, when the counts above are only what it found
	// reported (ext_proc): Finish then estimates the counts that were not reported (see
	// Finish). Nil when the reporter's counts are final (POST /settle).
	Seen *Seen
	// Estimated marks counts that are themselves estimates (POST /settle's "estimated").
	Estimated bool
	// Tier is the speed tier the upstream ran the request at, dearer than the catalog's
	// standard prices, or Flex below them (responseusage.Usage.Tier).
	Tier pricecatalog.Tier
	// Regional: the request went to a cloud's regional endpoint (POST /settle's
	// "regionalEndpoint"; the front doors' requests say it in RecordRequest), or its
	// answer says it ran in one geography (responseusage.Usage.Regional).
	Regional bool
	// Host is the upstream's host (POST /settle's "upstreamHost"; the front doors'
	// requests say it in RecordRequest, which wins).
	Host string
	// Refused: the front door answered the request itself and, as far as it knows, never
	// sent it upstream (Refused). The settlement says so (SettleItem.refused), so that a
	// later settlement of the request's answer promotes it: a proxy may not apply the
	// refusal (Envoy's request-body filter, failure_mode_allow, when the answer comes
	// after its message_timeout).
	Refused bool
	// Now sends the settlement without the settle queue's linger (EnqueueNow): a front
	// door waits for it before its client sees the response end (a request under the
	// in-flight guard, gate.Answer.Guarded).
	Now bool
}

// FromResponse is the Usage of a response a front door relayed (the gateway, ext_proc):
// what the extractor read (got), whether the body ended normally, the upstream's status,
// and whether the provider charges the request at all (requestbody.Unbilled). A billed
// response's unreported counts are estimated by Finish from what it saw (Seen). An
// unbilled one (a token count, a moderation) has nothing to estimate: it is settled at
// its known cost (requestbody.UnbilledCost), complete when its body ended. The text of a
// plain-text error answer (a proxy's error page, status 400 or more) is no output: only a
// successful plain-text answer (a transcript in a text format) is estimated from its text.
// An answer that says nothing was generated is unbilled too, whatever its path: OpenAI's
// conversation object (responseusage.FormatOpenAIConversation, whole), the answer of a
// conversation created or updated, at paths where Mistral's generate.
func FromResponse(got responseusage.Usage, ended bool, status int32, unbilled bool) Usage {
	if unbilled || got.Format == responseusage.FormatOpenAIConversation && got.Complete {
		return Usage{Model: got.Model, UpstreamCostMicroUSD: requestbody.UnbilledCost(got.CostMicroUSD), Complete: ended,
			UpstreamStatus: status}
	}
	return Usage{Model: got.Model, InputTokens: got.InputTokens, OutputTokens: got.OutputTokens,
		CachedTokens: got.CachedInputTokens, CacheCreationTokens: got.CacheCreationInputTokens, CacheCreation1hTokens: got.CacheCreation1hInputTokens,
		AudioInputMillis: got.AudioInputMillis, WebSearchRequests: got.WebSearchRequests, FileSearchCalls: got.FileSearchCalls,
		ImageGenerationCalls: got.ImageGenerationCalls, ImageToolInputTokens: got.ImageToolInputTokens,
		ImageToolCachedInputTokens: got.ImageToolCachedInputTokens, AdvisorInputTokens: got.AdvisorInputTokens, AdvisorOutputTokens: got.AdvisorOutputTokens,
		AdvisorCachedInputTokens: got.AdvisorCachedInputTokens, AdvisorCacheCreationInputTokens: got.AdvisorCacheCreationInputTokens, AdvisorCacheCreation1hInputTokens: got.AdvisorCacheCreation1hInputTokens,
		MapsGroundedPrompts: got.MapsGroundedPrompts, OCRPages: got.OCRPages, Guardrail: got.Guardrail, UpstreamCostMicroUSD: got.CostMicroUSD, Complete: got.Complete, UpstreamStatus: status, Tier: got.Tier, Regional: got.Regional,
		AudioInputTokens: reported(got.AudioInputTokens, got.AudioInputReported), AudioOutputTokens: reported(got.AudioOutputTokens, got.AudioOutputReported),
		CachedAudioInputTokens: reported(got.CachedAudioInputTokens, got.CachedAudioInputReported),
		Seen: &Seen{InputReported: got.InputReported, OutputReported: got.OutputReported, TextBytes: outputText(got, status),
			AudioOutputMillis: got.AudioOutputMillis, AdvisorResults: got.AdvisorResults,
			ContainerIDs: got.ContainerIDs, ContainerProvider: got.ContainerProvider(), GuardrailReported: got.GuardrailReported}}
}

// FromGuardrailCheck is the Usage of an answer of Amazon Bedrock's ApplyGuardrail
// (requestbody.GuardrailCheck): a guardrail called on its own, billed its units and no
// token. Its answer's usage says them (got.Guardrail). A successful answer that said none
// (cut before its usage) is charged an estimate: the text units of the request's body
// (bodyBytes, more than its text) at the four billed text policies
// (pricecatalog.EstimatedGuardrailUnits); an error answer nothing.
func FromGuardrailCheck(got responseusage.Usage, ended bool, status int32, bodyBytes int64) Usage {
	u := Usage{Guardrail: got.Guardrail, UpstreamCostMicroUSD: got.CostMicroUSD, UpstreamStatus: status, Complete: ended}
	if !got.GuardrailReported && status < 400 && got.CostMicroUSD == nil {
		u.Guardrail, u.Estimated, u.Complete = pricecatalog.EstimatedGuardrailUnits(bodyBytes), true, false
	}
	return u
}

// reported is n when the upstream reported it, else nil.
func reported(n int64, ok bool) *int64 {
	if !ok {
		return nil
	}
	return &n
}

func outputText(got responseusage.Usage, status int32) int64 {
	if got.PlainText && status >= 400 {
		return 0
	}
	return got.TextBytes
}

// Refused is the Usage of an admitted request the front door refused itself with status
// (403 billing deferred, 415 a body it cannot read...) and never sent upstream:
// complete, at a known cost of 0, marked Refused: should the request reach the upstream
// all the same (a proxy that ignored the refusal), the settlement of its answer promotes
// this one (docs/accounting.md, "Refusals a proxy did not apply").
func Refused(status int) Usage {
	return Usage{Complete: true, UpstreamStatus: int32(status), UpstreamCostMicroUSD: requestbody.UnbilledCost(nil), Refused: true}
}

// Seen is what a response stream saw besides the usage it reported.
type Seen struct {
	// ContainerIDs are the containers the answer says the request's code tools ran in
	// (responseusage.Usage.ContainerIDs), of ContainerProvider's: Finish charges their
	// minutes no earlier request was charged (UseContainerSessions), at the container
	// price the request's tools asked for (RecordRequest), else at the provider's dearest.
	ContainerIDs      []string
	ContainerProvider string
	// InputReported and OutputReported: the upstream reported that count.
	InputReported, OutputReported bool
	// TextBytes is the bytes of output text the response carried.
	TextBytes int64
	// AudioOutputMillis is the duration of the audio an answer in audio carried.
	AudioOutputMillis int64
	// AdvisorResults counts the consultations of Anthropic's advisor tool a stream
	// showed (responseusage.Usage.AdvisorResults), estimated when it reported no
	// advisor counts (cut before its last message_delta).
	AdvisorResults int64
	// GuardrailReported: the answer reported its guardrail's usage, its billed counts 0
	// too (responseusage.Usage.GuardrailReported): nothing to estimate.
	GuardrailReported bool
}

// Queue is where settlements go (settleq.Queue): Enqueue lets them gather into batches,
// EnqueueNow sends one someone waits for at once.
type Queue interface {
	Enqueue(item *internalv1.SettleItem, res *settleq.Reservation, done func(settleq.Result)) error
	EnqueueNow(item *internalv1.SettleItem, res *settleq.Reservation, done func(settleq.Result)) error
}

// Tracker is the table of admitted, unsettled requests.
type Tracker struct {
	q Queue
	// containers charges container minutes (UseContainerSessions); nil: FirstSeen.
	// containerFailed throttles the warning of a ledger that did not answer.
	containers      ContainerSessions
	containerFailed logging.Throttle
	clk             clock.Clock
	m               *metrics.Metrics
	log             *slog.Logger
	seed            maphash.Seed
	count           atomic.Int64
	// capacity bounds the requests kept, over all shards (SetCapacity); 0: unbounded.
	capacity int64
	// lastEvictLog rate-limits the eviction warning (unix nanoseconds).
	lastEvictLog atomic.Int64
	// shards spread the lock: every admitted check writes here.
	shards [32]shard
}

type shard struct {
	mu sync.Mutex
	m  map[string]*Request
	// oldest and newest end the list of requests no response stream follows.
	oldest, newest *Request
}

func (s *shard) link(r *Request) {
	r.older, r.newer, r.listed = s.newest, nil, true
	if s.newest != nil {
		s.newest.newer = r
	} else {
		s.oldest = r
	}
	s.newest = r
}

func (s *shard) unlink(r *Request) {
	if !r.listed {
		return
	}
	if r.older != nil {
		r.older.newer = r.newer
	} else {
		s.oldest = r.newer
	}
	if r.newer != nil {
		r.newer.older = r.older
	} else {
		s.newest = r.older
	}
	r.older, r.newer, r.listed = nil, nil, false
}

// New returns an empty tracker that settles into q.
func New(q Queue, clk clock.Clock, m *metrics.Metrics, log *slog.Logger) *Tracker {
	t := &Tracker{q: q, clk: clk, m: m, log: log, seed: maphash.MakeSeed()}
	for i := range t.shards {
		t.shards[i].m = map[string]*Request{}
	}
	return t
}

func (t *Tracker) shard(id string) *shard { return &t.shards[t.shardIndex(id)] }

func (t *Tracker) shardIndex(id string) int {
	return int(maphash.String(t.seed, id) % uint64(len(t.shards)))
}

// SetCapacity bounds the requests kept (n over the whole table): past it, Admitted
// settles the oldest one that no response stream follows, of the new request's shard
// (of the next shards when it has none), as incomplete at once, as the reaper would
// after the abandonment timeout. Call it before use; 0 (the default) is unbounded. The
// bound is the table's, not a share per shard: the shards' shares rounded up held up to
// 31 more (32 for a capacity of 10), and every kept request holds a settlement
// reservation that the configuration counted on the starts having.
//
// Why settle and not refuse: every kept request holds a settlement reservation, and a
// table that only grows (requests nobody reports, such as every forward-auth request
// whose gateway never calls /settle) would end up refusing every admission for
// settle_capacity. Why settle and not forget: the control plane closes a forgotten
// durable start only when an operator runs abandonment recovery; until then it stays
// pending. A report arriving after the eviction is settled by request id and promotes
// the known cost once.
func (t *Tracker) SetCapacity(n int) {
	t.capacity = int64(max(n, 0))
}

// Admitted records an admitted request.
func (t *Tracker) Admitted(r *Request) {
	if r.Durable {
		// Kept with the reservation, shared and small, for a settlement sent after
		// Postgres was replaced (settleq.Reservation.KeepStart).
		r.Reservation.KeepStart(r.Snapshot)
		r.Snapshot = nil
	}
	i := t.shardIndex(r.ID)
	s := &t.shards[i]
	s.mu.Lock()
	s.m[r.ID] = r
	s.link(r)
	s.mu.Unlock()
	n := t.count.Add(1)
	var evicted *Request
	if t.capacity > 0 && n > t.capacity {
		evicted = t.evictOldest(i, r)
	}
	if evicted == nil {
		t.m.InflightRequests.Set(float64(n))
		return
	}
	t.m.InflightRequests.Set(float64(t.count.Add(-1)))
	t.m.InflightEvicted.Inc()
	t.settleIncomplete(evicted)
	now := time.Now().UnixNano()
	if last := t.lastEvictLog.Load(); now-last > int64(time.Minute) && t.lastEvictLog.CompareAndSwap(last, now) {
		t.log.Warn("the table of unreported requests is full: settling the oldest as incomplete before the abandonment timeout (tollgate_enforcer_inflight_evicted_total counts them)",
			"capacity", t.capacity, "request_id", evicted.ID)
	}
}

// evictOldest removes the oldest request no response stream follows, other than the
// one just admitted (keep), from shard i or, when it has none, from the next shards in
// turn; nil when no shard has one (every kept request is followed).
func (t *Tracker) evictOldest(i int, keep *Request) *Request {
	for j := range len(t.shards) {
		s := &t.shards[(i+j)%len(t.shards)]
		s.mu.Lock()
		r := s.oldest
		if r == keep {
			r = nil // the shard's only one (admissions racing it go elsewhere too)
		}
		if r != nil {
			s.unlink(r)
			delete(s.m, r.ID)
		}
		s.mu.Unlock()
		if r != nil {
			return r
		}
	}
	return nil
}

// Follow marks a request as followed by a response stream (it will be reported by
// Finish, however long it takes) and reports whether this process knows it.
func (t *Tracker) Follow(id string) bool {
	s := t.shard(id)
	s.mu.Lock()
	r := s.m[id]
	if r != nil {
		r.following.Store(true)
		s.unlink(r) // never evicted
	}
	s.mu.Unlock()
	return r != nil
}

// reading is what a request's body said that its settlement needs (estimate.Request,
// as the front door read it): the input estimate, the model it named, whether it went to
// a regional endpoint, the upstream's host, the output an image generation is billed
// whatever its answer reports, what each call of an image generation tool is billed,
// its advisor tool's model and max_tokens, and the container price its code tools asked
// for.
type reading struct {
	inputEstimate    int64
	model            string
	regional         bool
	host             string
	imageOutput      int64
	imageCall        estimate.ImageCall
	advisorModel     string
	advisorMaxTokens int64
	containerKind    string
	guardrail        bool
	// usageAskedOf: the body was rewritten to ask the stream for its usage, and the
	// upstream its refusal is remembered under (NoteUsageAsked); "" when not asked.
	usageAskedOf string
	// guardrailCheckBytes is the body's length of a guardrail called on its own
	// (RecordGuardrailCheck), 0 for any other request.
	guardrailCheckBytes int64
}

// reading is what the request's body said (RecordRequest), nil when it was not recorded.
func (r *Request) reading() *reading { return r.read }

// readingOf is the reading of what a front door read of a request's body.
func readingOf(req *estimate.Request) reading {
	return reading{inputEstimate: req.InputTokens, model: req.Model, regional: req.Regional, host: req.Host,
		imageOutput: req.ImageOutputTokens, imageCall: req.ImageCall, advisorModel: req.AdvisorModel,
		advisorMaxTokens: req.AdvisorMaxTokens, containerKind: req.ContainerKind, guardrail: req.Guardrail}
}

// RecordRequest notes what the request of a tracked request said (the front door's
// gate.BodyHint): its estimated input tokens and the model it named (package estimate),
// whether it goes to a cloud's regional endpoint (requestbody.RegionalEndpoint), which
// its settlement carries whatever ends it, the output an image generation is billed
// (requestbody.ImageOutputTokens), and what each call of an image generation tool is
// billed (requestbody.ImageToolCall), and the model of its advisor tool
// (requestbody.AdvisorTool). It reports whether this process knows the request.
func (t *Tracker) RecordRequest(id string, req estimate.Request) bool {
	return t.record(id, readingOf(&req))
}

// record notes what request id's body said (rd), reporting whether this process knows
// the request.
func (t *Tracker) record(id string, rd reading) bool {
	s := t.shard(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.m[id]
	if r == nil {
		return false
	}
	r.read = &rd
	return true
}

// RecordGuardrailCheck notes that request id calls an Amazon Bedrock guardrail on its
// own (requestbody.GuardrailCheck) with a body of bodyBytes, billed its units and no
// token: settled without its answer (Reap, SettleAll), it is charged the text units of
// that body, an estimate, as an answer cut before its usage is (FromGuardrailCheck). It
// reports whether this process knows the request.
func (t *Tracker) RecordGuardrailCheck(id string, bodyBytes int64) bool {
	return t.record(id, reading{guardrailCheckBytes: bodyBytes})
}

// RefuseUnpricedModel settles request id at no cost, complete, with upstream status
// 403, as a refusal (SettleItem.refused: the settlement of an answer promotes it, should
// the request go upstream all the same), when its organization refuses models nobody priced and model (named by the
// request body) is one: the caller answers the refusal, and the request never goes
// upstream. It reports whether the request is refused. A request this process does not
// know, or without a model name, is never refused here (it is charged the fallback
// price like any unpriced model).
func (t *Tracker) RefuseUnpricedModel(id, model string) bool {
	if model == "" {
		return false
	}
	s := t.shard(id)
	s.mu.Lock()
	r := s.m[id]
	refuse := r != nil && r.RefuseUnpriced
	s.mu.Unlock()
	if !refuse || pricecatalog.Priced(model, r.PricedModelKeys) {
		return false
	}
	if r = t.take(id); r == nil {
		return false // settled meanwhile: too late to refuse
	}
	item := &internalv1.SettleItem{RequestId: r.ID, OrganizationId: r.OrganizationID, MemberId: r.MemberID, Model: model,
		Complete: true, UpstreamStatus: 403, FinishedAtUnixMs: t.clk.Now().UnixMilli(), Refused: true}
	if !r.Durable {
		item.Snapshot, item.AdmittedWithoutRecord = r.Snapshot, r.WithoutRecord
	}
	_ = t.q.Enqueue(item, r.Reservation, nil)
	return true
}

// Guarded tells whether the request id is followed and under the in-flight guard: its
// front door then settles it with Usage.Now and waits for the settlement before it lets
// the response end reach the client.
func (t *Tracker) Guarded(id string) bool {
	s := t.shard(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.m[id]
	return r != nil && r.Guarded
}

// NoteUsageAsked notes that the body of request id, recorded (RecordRequest), went
// upstream rewritten to ask its stream for its usage (requestbody.AskStreamUsage): an
// answer refusing that field is then the enforcer's doing (UsageAsked). upstream is the
// key the asking filter looked the refusals up under (streamoptions.Memory), so that the
// filter that reads the answer learns under that same key, whatever request attributes
// each was configured with. It reports whether this process knows the request and its
// reading.
func (t *Tracker) NoteUsageAsked(id, upstream string) bool {
	s := t.shard(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.m[id]
	if r == nil || r.read == nil {
		return false
	}
	r.read.usageAskedOf = upstream
	return true
}

// UsageAsked tells whether request id's body went upstream asking its stream for its
// usage (NoteUsageAsked), with the upstream it was noted with and the model the body
// named: ext_proc's response stream, which did not see the body, learns from it that an
// upstream refuses the field (package streamoptions).
func (t *Tracker) UsageAsked(id string) (upstream, model string, asked bool) {
	s := t.shard(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.m[id]
	if r == nil || r.read == nil || r.read.usageAskedOf == "" {
		return "", "", false
	}
	return r.read.usageAskedOf, r.read.model, true
}

// Known tells whether the request id is in the table: admitted by this process and not
// settled yet.
func (t *Tracker) Known(id string) bool {
	s := t.shard(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[id] != nil
}

func (t *Tracker) take(id string) *Request {
	s := t.shard(id)
	s.mu.Lock()
	r := s.m[id]
	if r != nil {
		delete(s.m, id)
		s.unlink(r)
	}
	s.mu.Unlock()
	if r != nil {
		t.m.InflightRequests.Set(float64(t.count.Add(-1)))
	}
	return r
}

// Len is the number of tracked requests.
func (t *Tracker) Len() int { return int(t.count.Load()) }

// Finish queues the settlement of request id. A request this process does not know
// (admitted by another replica, or already settled) is settled by id only: the control
// plane knows its durable start, and settlements are idempotent. done, if not nil, gets
// the control plane's final answer.
//
// With u.Seen (a response stream), counts the upstream did not report are estimated
// and the settlement marked usage_estimated (and never complete): input from the
// request body's estimate (RecordRequest), output from the streamed text
// (estimate.Tokens) or an image generation's images, which also replaces a smaller
// output count of a response that did not end with its final usage. The model is the
// response's, else the request's. Nothing is estimated when the upstream reported a
// cost, nor for an error answer (status 400 or more) that reported no usage and carried
// no text: that costs nothing.
func (t *Tracker) Finish(id string, u Usage, done func(settleq.Result)) error {
	item := &internalv1.SettleItem{
		RequestId:                       id,
		Model:                           u.Model,
		InputTokens:                     u.InputTokens,
		OutputTokens:                    u.OutputTokens,
		CachedInputTokens:               u.CachedTokens,
		CacheCreationInputTokens:        u.CacheCreationTokens,
		CacheCreationOneHourInputTokens: u.CacheCreation1hTokens,
		AudioInputMillis:                u.AudioInputMillis,
		WebSearchRequests:               u.WebSearchRequests,
		FileSearchCalls:                 u.FileSearchCalls,
		ImageGenerationCalls:            u.ImageGenerationCalls,
		ImageModel:                      u.ImageModel,
		ImageOutputTokens:               u.ImageOutputTokens,
		ImageToolInputTokens:            u.ImageToolInputTokens,
		ImageToolCachedInputTokens:      u.ImageToolCachedInputTokens,
		AdvisorModel:                    u.AdvisorModel,
		AdvisorInputTokens:              u.AdvisorInputTokens,
		AdvisorOutputTokens:             u.AdvisorOutputTokens,
		AdvisorCachedInputTokens:        u.AdvisorCachedInputTokens,
		AdvisorCacheCreationInputTokens: u.AdvisorCacheCreationInputTokens,
		MapsGroundedPrompts:             u.MapsGroundedPrompts,
		OcrPages:                        u.OCRPages,
		ContainerKind:                   u.ContainerKind,
		ContainerMinutes:                u.ContainerMinutes,
		AudioInputTokens:                u.AudioInputTokens,
		AudioOutputTokens:               u.AudioOutputTokens,
		CachedAudioInputTokens:          u.CachedAudioInputTokens,
		ImageInputTokens:                u.ImageInputTokens,
		CachedImageInputTokens:          u.CachedImageInputTokens,
		UpstreamCostMicroUsd:            u.UpstreamCostMicroUSD,
		Complete:                        u.Complete,
		FinishedAtUnixMs:                t.clk.Now().UnixMilli(),
		UpstreamStatus:                  u.UpstreamStatus,
		UsageEstimated:                  u.Estimated,
		RegionalEndpoint:                u.Regional,
		UpstreamHost:                    u.Host,
		GuardrailUnits:                  guardrailUnits(u.Guardrail),
		Refused:                         u.Refused,
	}
	item.AdvisorCacheCreationOneHourInputTokens = u.AdvisorCacheCreation1hInputTokens
	setTier(item, u.Tier)
	var res *settleq.Reservation
	r := t.take(id)
	start := t.clk.Now() // of a request this process did not admit: not known
	var rd *reading      // what the request's body said (RecordRequest); nil when not recorded
	if r != nil {
		item.OrganizationId, item.MemberId = r.OrganizationID, r.MemberID
		if !r.Durable {
			item.Snapshot, item.AdmittedWithoutRecord = r.Snapshot, r.WithoutRecord
		}
		res, start, rd = r.Reservation, r.AdmittedAt, r.reading()
	}
	if rd != nil {
		item.RegionalEndpoint = item.RegionalEndpoint || rd.regional
		if rd.host != "" {
			item.UpstreamHost = rd.host
		}
		imageCalls(item, rd)
	}
	if u.Seen != nil {
		charge(item, u.Seen, rd)
		guardrailEstimate(item, u.Seen, rd)
		if len(u.Seen.ContainerIDs) > 0 && item.ContainerMinutes == 0 {
			t.chargeContainers(item, u.Seen, rd, start)
		}
	}
	advisorCounts(item, rd)
	if u.Now {
		return t.q.EnqueueNow(item, res, done)
	}
	return t.q.Enqueue(item, res, done)
}

// ContainerSessions charges the minutes of the containers a request's code tools ran in,
// shared by every enforcer (containersession.Ledger).
type ContainerSessions interface {
	Charge(ctx context.Context, requestID string, c pricecatalog.Container, ids []string, start, end time.Time) (minutes int64, err error)
}

// UseContainerSessions has Finish charge the containers a response names through cs.
// Call it before use; without it, each container is charged as one seen for the first
// time (containersession.FirstSeen), an estimate.
func (t *Tracker) UseContainerSessions(cs ContainerSessions) {
	t.containers = cs
	t.containerFailed.Clock = t.clk
}

// chargeContainers charges the containers a response named (seen.ContainerIDs): at the
// container price the request's tools asked for (rd), from its start to now; where the
// request's tools are not known (rd nil: its body did not read, or nobody here saw it),
// at its provider's dearest price, an estimate, never below the bill. A request whose
// tools ask for no charged container (Anthropic's code execution beside web search, a
// container created apart) is charged none.
func (t *Tracker) chargeContainers(item *internalv1.SettleItem, seen *Seen, rd *reading, start time.Time) {
	now := t.clk.Now()
	cat := pricecatalog.At(now)
	var c pricecatalog.Container
	known := false
	if rd != nil {
		if rd.containerKind == "" {
			return
		}
		c, known = cat.Container(rd.containerKind)
	}
	result := ContainerCharged
	if !known {
		var ok bool
		if c, ok = cat.DearestContainer(seen.ContainerProvider); !ok {
			return
		}
		result = ContainerUnknownRequest
	}
	var minutes int64
	if t.containers == nil {
		minutes, result = containersession.FirstSeen(c, seen.ContainerIDs, start, now), ContainerLedgerUnavailable
	} else {
		var err error
		if minutes, err = t.containers.Charge(context.Background(), item.RequestId, c, seen.ContainerIDs, start, now); err != nil {
			result = ContainerLedgerUnavailable
			t.containerFailed.Log(t.log, slog.LevelWarn, "container minutes estimated: the container ledger did not answer",
				"request_id", item.RequestId, "error", err)
		}
	}
	item.ContainerKind, item.ContainerMinutes = c.Kind, minutes
	if result != ContainerCharged {
		item.UsageEstimated, item.Complete = true, false
	}
	t.m.ContainerCharges.WithLabelValues(result).Inc()
}

// How a response's containers were charged (metrics.ContainerChargeResults).
const (
	// ContainerCharged: at the request's own container price, by the ledger.
	ContainerCharged = "charged"
	// ContainerUnknownRequest: the request's tools were not known here: at its
	// provider's dearest container price, an estimate.
	ContainerUnknownRequest = "unknown_request"
	// ContainerLedgerUnavailable: the ledger (Redis) did not answer: each container as
	// one seen for the first time, an estimate.
	ContainerLedgerUnavailable = "ledger_unavailable"
)

// imageCalls prices the image generation calls a response made from what the request
// asked (RecordRequest), where the report did not say it: each call the request's
// image, at its image model, which also prices the image model's input the answer
// reported. Where the request is not known either, settlement charges each call the
// dearest image (docs/prices.md), and the input at gpt-image-1's prices.
func imageCalls(item *internalv1.SettleItem, rd *reading) {
	if item.ImageModel == "" && (item.ImageToolInputTokens > 0 || item.ImageToolCachedInputTokens > 0) {
		item.ImageModel = rd.imageCall.Model
	}
	if item.ImageGenerationCalls <= 0 || item.ImageOutputTokens > 0 || rd.imageCall.Tokens <= 0 {
		return
	}
	item.ImageModel = rd.imageCall.Model
	if item.ImageGenerationCalls > math.MaxInt64/rd.imageCall.Tokens {
		item.ImageOutputTokens = math.MaxInt64
		return
	}
	item.ImageOutputTokens = item.ImageGenerationCalls * rd.imageCall.Tokens
}

// advisorCounts names the model of the advisor's counts a response reported, from the
// request's advisor tool (RecordRequest), where the report did not. Where neither says
// it (rd nil: a request whose body nobody here read), the counts are added to the
// response's own, charged at its model's price: never dropped.
func advisorCounts(item *internalv1.SettleItem, rd *reading) {
	if item.AdvisorModel != "" || item.AdvisorInputTokens == 0 && item.AdvisorOutputTokens == 0 {
		return
	}
	if rd != nil && rd.advisorModel != "" {
		item.AdvisorModel = rd.advisorModel
		return
	}
	add := func(to *int64, v int64) { *to = min(*to, math.MaxInt64-v) + v }
	add(&item.InputTokens, item.AdvisorInputTokens)
	add(&item.OutputTokens, item.AdvisorOutputTokens)
	add(&item.CachedInputTokens, item.AdvisorCachedInputTokens)
	add(&item.CacheCreationInputTokens, item.AdvisorCacheCreationInputTokens)
	add(&item.CacheCreationOneHourInputTokens, item.AdvisorCacheCreationOneHourInputTokens)
	item.AdvisorInputTokens, item.AdvisorOutputTokens = 0, 0
	item.AdvisorCachedInputTokens, item.AdvisorCacheCreationInputTokens, item.AdvisorCacheCreationOneHourInputTokens = 0, 0, 0
}

// charge completes what a response stream reported with estimates (see Finish). rd is
// nil when nobody here read the request's body (no request estimate, no model).
func charge(item *internalv1.SettleItem, seen *Seen, rd *reading) {
	if rd != nil && item.Model == "" {
		item.Model = rd.model
	}
	if item.UpstreamCostMicroUsd != nil {
		return
	}
	if nothingGenerated(item, seen) {
		return
	}
	estimated := false
	// An estimated count has no known audio or image part: its split is unknown, and a
	// model that prices them apart is charged it at the dearest price.
	if !seen.InputReported && rd != nil {
		item.InputTokens, estimated = rd.inputEstimate, true
		item.AudioInputTokens, item.CachedAudioInputTokens, item.ImageInputTokens, item.CachedImageInputTokens = nil, nil, nil, nil
	}
	// Output: the estimate from the text seen when none was reported; and when the
	// response did not end with its final usage (incomplete), the larger of the two: a
	// count reported early is only a floor (Anthropic's message_start says 1 output
	// token before any text), and a stream cut after thousands of tokens must not be
	// charged for one.
	// An answer in audio reports nothing: its duration is its output (a speech
	// model's audio tokens; pricecatalog.AudioOutputTokensPerSecond). A chat answer in
	// audio bills its transcript's text tokens besides its audio's (OpenAI's
	// completion_tokens_details.text_tokens and audio_tokens): the two add up, as a cut
	// Realtime response's do (realtimeusage).
	// An image generation is billed the images it asked for, however little of them
	// came back (requestbody.ImageOutputTokens).
	est := saturate.Add(estimate.Tokens(seen.TextBytes), audioTokens(seen.AudioOutputMillis))
	if rd != nil {
		est = max(est, rd.imageOutput)
	}
	if est > 0 && (!seen.OutputReported || !item.Complete && est > item.OutputTokens) {
		item.OutputTokens, item.AudioOutputTokens, estimated = est, nil, true
	}
	if seen.AdvisorResults > 0 && item.AdvisorInputTokens == 0 && item.AdvisorOutputTokens == 0 && rd != nil {
		adviceEstimate(item, seen.AdvisorResults, rd)
		estimated = true
	}
	if estimated {
		item.UsageEstimated, item.Complete = true, false
	}
}

// nothingGenerated tells whether the upstream's answer shows it generated nothing: an
// error (4xx, 5xx) or a redirect (3xx: FastAPI's 307 to a path with its trailing slash,
// which vLLM and LiteLLM send; the client follows it with a request of its own, charged
// for itself) that reported no usage and carried no text. Such an answer is charged
// nothing, where an answer that did not come (status 0) is charged its estimate: the
// provider may have had the request.
func nothingGenerated(item *internalv1.SettleItem, seen *Seen) bool {
	return item.UpstreamStatus >= 300 && !seen.InputReported && !seen.OutputReported && seen.TextBytes == 0
}

// guardrailUnits is u as a settlement carries it, nil when nothing was assessed.
func guardrailUnits(u pricecatalog.GuardrailUnits) *internalv1.GuardrailUnits {
	if u.IsZero() {
		return nil
	}
	return &internalv1.GuardrailUnits{ContentText: u.ContentText, DeniedTopics: u.DeniedTopics,
		SensitiveInformation: u.SensitiveInformation, ContextualGrounding: u.ContextualGrounding,
		AutomatedReasoning: u.AutomatedReasoning, ContentImages: u.ContentImages, ChecksContentFilter: u.ChecksContentFilter,
		ChecksPromptAttack: u.ChecksPromptAttack, ChecksSensitiveInformation: u.ChecksSensitiveInformation}
}

// guardrailEstimate charges the guardrail of a request whose body asked for one (rd) and
// whose answer reported no usage of it (a stream cut before its metadata event, an
// answer without its trace, no answer seen at all; one that reported its billed counts
// as 0, a guardrail of free policies alone, is not estimated): the text units of its
// prompt (the body's input estimate) and of the answer's text seen, at every billed text
// policy (pricecatalog.EstimatedGuardrailUnits), an estimate. A guardrail called on its
// own (RecordGuardrailCheck) is charged the units of its body. An error answer without
// usage or text costs nothing, as for the tokens (charge): the guardrail did not run.
func guardrailEstimate(item *internalv1.SettleItem, seen *Seen, rd *reading) {
	if rd == nil || !rd.guardrail && rd.guardrailCheckBytes == 0 || item.GuardrailUnits != nil || seen.GuardrailReported {
		return
	}
	if nothingGenerated(item, seen) {
		return
	}
	// Each part at most half of int64's range, so that their sum cannot overflow.
	chars := estimate.Bytes(rd.inputEstimate) + min(seen.TextBytes, math.MaxInt64/2)
	if rd.guardrailCheckBytes > 0 {
		chars = rd.guardrailCheckBytes
	}
	if chars <= 0 {
		return
	}
	item.GuardrailUnits = guardrailUnits(pricecatalog.EstimatedGuardrailUnits(chars))
	item.UsageEstimated, item.Complete = true, false
}

// TypicalAdviceTokens is what one consultation of Anthropic's advisor tool writes, its
// thinking included, when the tool sets no max_tokens: the top of the 1,400 - 1,800
// tokens Anthropic's documentation gives as typical.
const TypicalAdviceTokens = 1_800

// adviceEstimate charges the consultations of the advisor tool a stream showed and
// reported no counts of (it was cut before its last message_delta): each read the
// transcript, at most the request's input and the executor's output so far, and wrote
// the tool's max_tokens (else TypicalAdviceTokens); advisorCounts names their model.
func adviceEstimate(item *internalv1.SettleItem, results int64, rd *reading) {
	each := rd.advisorMaxTokens
	if each <= 0 {
		each = TypicalAdviceTokens
	}
	read := min(item.InputTokens, math.MaxInt64-max(item.OutputTokens, 0)) + max(item.OutputTokens, 0)
	times := func(n, v int64) int64 {
		if v > 0 && n > math.MaxInt64/v {
			return math.MaxInt64
		}
		return n * v
	}
	item.AdvisorInputTokens, item.AdvisorOutputTokens = times(results, read), times(results, each)
}

// audioTokens counts millis of generated audio as output tokens, rounded up.
func audioTokens(millis int64) int64 {
	return (millis*pricecatalog.AudioOutputTokensPerSecond + 999) / 1000
}

// SettleOrphan settles a start that became (or may have become) durable after its check
// was abandoned: the request was never forwarded, so nothing was used. The settlement
// carries the start's snapshot: the control plane settles the stored start when there is
// one, and otherwise records the request from the snapshot at no cost, so a start whose
// call failed ambiguously never stays pending either.
func (t *Tracker) SettleOrphan(item *internalv1.StartItem, res *settleq.Reservation) {
	_ = t.q.Enqueue(&internalv1.SettleItem{RequestId: item.GetRequestId(), OrganizationId: item.GetOrganizationId(),
		MemberId: item.GetMemberId(), Snapshot: item.GetSnapshot(), FinishedAtUnixMs: t.clk.Now().UnixMilli()}, res, nil)
}

// Void undoes a durable start whose check then refused the request (a speculative start,
// package gate): it was never forwarded, so the control plane removes the start,
// uncharged (SettleItem.voided). It goes through the settlement queue at once
// (EnqueueNow), with the reservation the start took, so it is spooled and retried as
// settlements are; were it lost, the start would be closed by abandonment recovery at
// no cost. done, if not nil, is called once with the queue's final result.
func (t *Tracker) Void(item *internalv1.StartItem, res *settleq.Reservation, done func(settleq.Result)) {
	_ = t.q.EnqueueNow(&internalv1.SettleItem{RequestId: item.GetRequestId(), OrganizationId: item.GetOrganizationId(),
		MemberId: item.GetMemberId(), Voided: true}, res, done)
}

// Reap settles, as incomplete, every request admitted more than after ago that no
// response stream follows. It returns how many it settled.
func (t *Tracker) Reap(after time.Duration) int {
	cutoff := t.clk.Now().Add(-after)
	var stale []string
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		for id, r := range s.m {
			if !r.following.Load() && r.AdmittedAt.Before(cutoff) {
				stale = append(stale, id)
			}
		}
		s.mu.Unlock()
	}
	n := 0
	for _, id := range stale {
		if r := t.take(id); r != nil {
			n++
			t.settleIncomplete(r)
		}
	}
	if n > 0 {
		t.log.Warn("settled requests nobody reported as incomplete", "count", n, "after", after.String())
	}
	return n
}

// settleIncomplete queues the settlement of a taken request whose usage nobody reported;
// Reap and SettleAll share it. When its request body was seen (RecordRequest,
// RecordGuardrailCheck) the request went upstream: it is charged the input estimate, and
// its guardrail's, as a response that showed nothing is.
func (t *Tracker) settleIncomplete(r *Request) {
	item := &internalv1.SettleItem{RequestId: r.ID, OrganizationId: r.OrganizationID, MemberId: r.MemberID,
		FinishedAtUnixMs: t.clk.Now().UnixMilli()}
	if !r.Durable {
		item.Snapshot, item.AdmittedWithoutRecord = r.Snapshot, r.WithoutRecord
	}
	rd, seen := r.reading(), &Seen{}
	charge(item, seen, rd)
	guardrailEstimate(item, seen, rd)
	_ = t.q.Enqueue(item, r.Reservation, nil)
}

// Reaper is the tracker's background loop: every Every, it settles as incomplete the
// requests admitted more than After ago that nobody reported (Reap).
type Reaper struct {
	Tracker      *Tracker
	Every, After time.Duration
}

// Run reaps until ctx is done, then returns nil.
func (r Reaper) Run(ctx context.Context) error {
	return lifecycle.Every(ctx, r.Every, func(context.Context) { r.Tracker.Reap(r.After) })
}

// SettleAll settles every tracked request as incomplete (at shutdown: nobody will report
// them to this process any more; a later real settlement elsewhere promotes the cost),
// those without a durable start first (nobody else can close them), until ctx ends. It
// returns how many it settled and how many it left: those have durable starts, which
// stay pending at the control plane until its abandonment recovery closes them.
func (t *Tracker) SettleAll(ctx context.Context) (settled, left int) {
	var durable, other []string
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		for id, r := range s.m {
			if r.Durable {
				durable = append(durable, id)
			} else {
				other = append(other, id)
			}
		}
		s.mu.Unlock()
	}
	for _, id := range append(other, durable...) {
		if ctx.Err() != nil {
			left++
			continue
		}
		if r := t.take(id); r != nil {
			settled++
			t.settleIncomplete(r)
		}
	}
	return settled, left
}

// serviceTiers is each dear speed tier as the internal API says it.
var serviceTiers = map[pricecatalog.Tier]internalv1.ServiceTier{
	pricecatalog.Fast:             internalv1.ServiceTier_SERVICE_TIER_FAST,
	pricecatalog.Ultrafast:        internalv1.ServiceTier_SERVICE_TIER_ULTRAFAST,
	pricecatalog.LatencyOptimized: internalv1.ServiceTier_SERVICE_TIER_LATENCY_OPTIMIZED,
}

// setTier says tier on item: a dear one in service_tier (and priority_tier, which an
// older control plane reads alone), the one below standard in discount_tier alone. A
// control plane older than discount_tier ignores it and charges standard; service_tier
// would be read there as an unknown, the dearest tier it knows.
func setTier(item *internalv1.SettleItem, tier pricecatalog.Tier) {
	switch {
	case tier == pricecatalog.Flex:
		item.DiscountTier = internalv1.DiscountTier_DISCOUNT_TIER_FLEX
	case tier != pricecatalog.Standard:
		item.PriorityTier, item.ServiceTier = true, serviceTiers[tier]
	}
}
