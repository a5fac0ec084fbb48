// Package fakecp is an in-memory control plane for the enforcer's tests: a real gRPC
// server on 127.0.0.1:0 implementing the internal Accounting API (token check,
// Authenticate, Resolve, Start, Settle with the rules of ACCOUNTING.md that the
// enforcer can observe), which writes the Redis mirror the way the real control plane
// does (monotonic versions under a generation) and publishes invalidations.
//
// It lets tests inject failures (a method answering Unavailable, or slow) and count
// calls. It is deliberately simple: one mutex, prices per token, no Postgres.
package fakecp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tollgate-dev/tollgate/enforcer/cpclient"
	"github.com/tollgate-dev/tollgate/pkg/clock"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/internaltoken"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// Token is the internal token the fake expects unless Options say otherwise.
const Token = "test-internal-token"

// Limit is a member's winning policy of one timeframe.
type Limit struct {
	Timeframe         window.Timeframe
	PolicyID          string
	BaseMicroUSD      int64
	ExtensionMicroUSD int64
	Hard              bool
	AllowRequestReset bool
	Revision          int64
	// MaxInFlight is the policy's in-flight cap (0: none); the fake does not enforce it.
	MaxInFlight int32
	// ReservationMicroUSD, when positive, makes the policy reserve in-flight cost
	// (inFlight.reserve): a request reserves its worst case, else this amount; the fake
	// records it on the start (StartItem) and enforces nothing.
	ReservationMicroUSD int64
}

type member struct {
	org             string
	active          bool
	limits          map[window.Timeframe]Limit
	trackingVersion int64
	captureEnabled  bool
	// spend by bucket: timeframe + window start (ms).
	spend   map[bucketKey]int64
	version int64
	pending int64
	// refuseUnpriced and pricedKeys: the organization's unpriced-model rule, as the
	// record carries it.
	refuseUnpriced bool
	pricedKeys     []string
}

type bucketKey struct {
	tf    window.Timeframe
	start int64
}

type identity struct {
	org, member, keyID string
}

// Receipt is what the fake recorded for a settled request.
type Receipt struct {
	Item       *internalv1.SettleItem
	Cost       int64
	CostSource string
	// CostBasis and PriceSource as SettleResult reports them.
	CostBasis, PriceSource string
	Snapshot               *internalv1.Snapshot
}

// Server is the fake control plane.
type Server struct {
	internalv1.UnimplementedAccountingServer
	Addr   string
	rdb    redis.UniversalClient
	layout mirror.Layout
	clk    clock.Clock

	// fail: method name ("Authenticate", "Resolve", "Start", "Settle") -> true while
	// it answers Unavailable (Fail).
	fail sync.Map
	// StartDelay (nanoseconds) makes every Start call wait this long first.
	StartDelay atomic.Int64
	// StartHold, while set, makes every Start call wait until the channel is closed
	// first (a test answers a start when something else has happened, not after a time).
	StartHold atomic.Pointer[chan struct{}]
	// SettleDelay (nanoseconds) makes every Settle call wait this long first, as a
	// control plane committing each batch to Postgres does.
	SettleDelay atomic.Int64
	// Forgetful, for load benchmarks: a request settled against its durable start is
	// forgotten (its start dropped, no receipt kept), so a run of many requests does not
	// grow the heap of the process it shares with the enforcer being measured (the real
	// control plane keeps them in Postgres). A repeated settlement is then charged again.
	Forgetful atomic.Bool

	Calls       sync.Map // method -> *atomic.Int64
	StartItems  atomic.Int64
	SettleItems atomic.Int64

	mu          sync.Mutex
	generation  string
	credentials map[[32]byte]identity
	members     map[string]*member
	starts      map[string]*internalv1.StartItem
	receipts    map[string]*Receipt
	// prices: model -> micro-USD per input token, per output token (SetPrice).
	prices map[string][2]int64
}

// New starts the fake on 127.0.0.1:0, with a fresh mirror generation in Redis.
func New(t testing.TB, rdb redis.UniversalClient, layout mirror.Layout, clk clock.Clock) *Server {
	t.Helper()
	s := &Server{rdb: rdb, layout: layout, clk: clk, credentials: map[[32]byte]identity{}, members: map[string]*member{},
		starts: map[string]*internalv1.StartItem{}, receipts: map[string]*Receipt{}, prices: map[string][2]int64{}}
	if err := s.Resync(context.Background()); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.Addr = ln.Addr().String()
	srv := grpc.NewServer(grpc.UnaryInterceptor(s.auth))
	internalv1.RegisterAccountingServer(srv, s)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	return s
}

func (s *Server) auth(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if internaltoken.Check(ctx, Token) != "" {
		return nil, status.Error(codes.Unauthenticated, "missing or wrong internal token")
	}
	name := info.FullMethod[len("/tollgate.internal.v1.Accounting/"):]
	// The enforcer's readiness probes are not its traffic: tests count what checks cause.
	if a, ok := req.(*internalv1.AuthenticateRequest); !ok || !cpclient.IsProbe(a) {
		c, _ := s.Calls.LoadOrStore(name, &atomic.Int64{})
		c.(*atomic.Int64).Add(1)
	}
	if f, ok := s.fail.Load(name); ok && f.(bool) {
		return nil, status.Error(codes.Unavailable, "injected failure")
	}
	return handler(ctx, req)
}

// Fail makes method answer Unavailable (on=true) or work again (on=false).
func (s *Server) Fail(method string, on bool) { s.fail.Store(method, on) }

// CallCount is how many calls method received.
func (s *Server) CallCount(method string) int64 {
	if c, ok := s.Calls.Load(method); ok {
		return c.(*atomic.Int64).Load()
	}
	return 0
}

// Resync installs a new generation and rewrites every record, as `controlplane resync`.
func (s *Server) Resync(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b [8]byte
	now := time.Now().UnixNano()
	for i := range b {
		b[i] = byte(now >> (8 * i))
	}
	s.generation = hex.EncodeToString(b[:])
	if err := s.layout.SetGeneration(ctx, s.rdb, s.generation); err != nil {
		return err
	}
	for id := range s.members {
		if err := s.writeLocked(ctx, id); err != nil {
			return err
		}
	}
	return nil
}

// AddMember creates (or replaces) a member with the given limits (timeframes missing
// from limits are unlimited), capture on, tracking version 1, and mirrors it; a
// replacement is an entitlement change, announced as the real one is.
func (s *Server) AddMember(org, memberID string, limits ...Limit) {
	s.mu.Lock()
	m := &member{org: org, active: true, limits: map[window.Timeframe]Limit{}, trackingVersion: 1, captureEnabled: true,
		spend: map[bucketKey]int64{}}
	old := s.members[memberID]
	if old != nil {
		m.version, m.spend = old.version, old.spend
	}
	for _, l := range limits {
		m.limits[l.Timeframe] = l
	}
	s.members[memberID] = m
	_ = s.writeLocked(context.Background(), memberID)
	s.mu.Unlock()
	if old != nil {
		s.publish(mirror.KindRecord, memberID)
	}
}

// publish announces an invalidation, after the change it names is in Redis.
func (s *Server) publish(kind, id string) {
	_ = s.layout.Publish(context.Background(), s.rdb, mirror.Invalidation{Kind: kind, ID: id})
}

// AddKey registers a credential (an API key or session token) for a member.
func (s *Server) AddKey(secret, org, memberID, keyID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.credentials[sha256.Sum256([]byte(secret))] = identity{org: org, member: memberID, keyID: keyID}
}

// RevokeKey forgets a credential and publishes the invalidation, as the real one does.
func (s *Server) RevokeKey(secret string) {
	h := sha256.Sum256([]byte(secret))
	s.mu.Lock()
	delete(s.credentials, h)
	s.mu.Unlock()
	s.publish(mirror.KindCredential, hex.EncodeToString(h[:]))
}

// SetSpend sets a member's settled spend in the current window of tf. Like a
// settlement, it announces nothing: tests must only raise spend within a window, or
// wait for what they decided on to lapse.
func (s *Server) SetSpend(memberID string, tf window.Timeframe, used int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := window.Of(tf, s.clk.Now())
	s.members[memberID].spend[bucketKey{tf, w.Start.UnixMilli()}] = used
	_ = s.writeLocked(context.Background(), memberID)
}

// Spend reads a member's settled spend in the current window of tf.
func (s *Server) Spend(memberID string, tf window.Timeframe) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := window.Of(tf, s.clk.Now())
	return s.members[memberID].spend[bucketKey{tf, w.Start.UnixMilli()}]
}

// Pending is the member's count of durable, unsettled starts.
func (s *Server) Pending(memberID string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.members[memberID].pending
}

// SetExtension grants an extension on the current window of tf, mirrors it and
// announces the rewritten record.
func (s *Server) SetExtension(memberID string, tf window.Timeframe, ext int64) {
	s.mu.Lock()
	m := s.members[memberID]
	l := m.limits[tf]
	l.ExtensionMicroUSD = ext
	m.limits[tf] = l
	_ = s.writeLocked(context.Background(), memberID)
	s.mu.Unlock()
	s.publish(mirror.KindRecord, memberID)
}

// SetExtensionUnmirrored grants an extension as SetExtension does, but neither mirrors nor
// announces it: Redis keeps the old record until the next Resync rewrites it.
func (s *Server) SetExtensionUnmirrored(memberID string, tf window.Timeframe, ext int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.members[memberID]
	l := m.limits[tf]
	l.ExtensionMicroUSD = ext
	m.limits[tf] = l
}

// SetCapture suspends or resumes a member's capture; both bump the tracking version.
// The rewritten record is announced.
func (s *Server) SetCapture(memberID string, enabled bool) {
	s.mu.Lock()
	m := s.members[memberID]
	m.captureEnabled = enabled
	m.trackingVersion++
	_ = s.writeLocked(context.Background(), memberID)
	s.mu.Unlock()
	s.publish(mirror.KindRecord, memberID)
}

// BumpTrackingVersion moves the fence without rewriting the mirror, as if the mirror
// write after the change were still on its way.
func (s *Server) BumpTrackingVersion(memberID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.members[memberID].trackingVersion++
}

// Deactivate marks a member removed and publishes the invalidations, as the real one
// does: the rewritten record's (the removal's entitlement fence), then the member's.
func (s *Server) Deactivate(memberID string) {
	s.mu.Lock()
	s.members[memberID].active = false
	_ = s.writeLocked(context.Background(), memberID)
	s.mu.Unlock()
	s.publish(mirror.KindRecord, memberID)
	s.publish(mirror.KindMember, memberID)
}

// RefuseUnpriced sets the member's organization rule for unpriced models (refuse, with
// the organization's own price keys) in its record, and announces the rewrite.
func (s *Server) RefuseUnpriced(memberID string, refuse bool, keys ...string) {
	s.mu.Lock()
	m := s.members[memberID]
	m.refuseUnpriced, m.pricedKeys = refuse, keys
	_ = s.writeLocked(context.Background(), memberID)
	s.mu.Unlock()
	s.publish(mirror.KindRecord, memberID)
}

// SetPrice prices a model per input and output token, in micro-USD.
func (s *Server) SetPrice(model string, in, out int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.prices[model] = [2]int64{in, out}
}

// Receipt returns the receipt of a request, or nil.
func (s *Server) Receipt(requestID string) *Receipt {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.receipts[requestID]
}

// StartItem is the durable start recorded for the request, nil when none.
func (s *Server) StartItem(requestID string) *internalv1.StartItem {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.starts[requestID]
}

// Started reports whether a durable start exists for the request.
func (s *Server) Started(requestID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.starts[requestID] != nil
}

// Generation is the current mirror generation.
func (s *Server) Generation() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.generation
}

// recordLocked builds a member's record as of now.
func (s *Server) recordLocked(memberID string) *mirror.Record {
	m := s.members[memberID]
	now := s.clk.Now()
	ent := &internalv1.Entitlement{OrganizationId: m.org, MemberId: memberID, MemberActive: m.active,
		TrackingVersion: m.trackingVersion, CaptureEnabled: m.captureEnabled, RefuseUnpricedModels: m.refuseUnpriced,
		PricedModelKeys: m.pricedKeys}
	var spend []*internalv1.WindowSpend
	for _, w := range window.Current(now) {
		l, ok := m.limits[w.Timeframe]
		lim := &internalv1.Limit{Timeframe: string(w.Timeframe), Unlimited: !ok}
		if ok {
			lim.PolicyId, lim.PolicyName, lim.PolicyRevision = l.PolicyID, "policy "+l.PolicyID, max(l.Revision, 1)
			lim.BaseMicroUsd, lim.ExtensionMicroUsd, lim.HardLimit, lim.AllowRequestReset = l.BaseMicroUSD, l.ExtensionMicroUSD, l.Hard, l.AllowRequestReset
			lim.MaxInFlight = l.MaxInFlight
			lim.ReserveInFlight, lim.ReservationMicroUsd = l.ReservationMicroUSD > 0, l.ReservationMicroUSD
		}
		ent.Limits = append(ent.Limits, lim)
		spend = append(spend, &internalv1.WindowSpend{Timeframe: string(w.Timeframe), WindowStartUnixMs: w.Start.UnixMilli(),
			UsedMicroUsd: m.spend[bucketKey{w.Timeframe, w.Start.UnixMilli()}]})
	}
	return &mirror.Record{Version: m.version, Generation: s.generation, Entitlement: ent, Spend: spend, AsOfUnixMs: now.UnixMilli()}
}

// writeLocked bumps the member's version and writes its record (monotonic).
func (s *Server) writeLocked(ctx context.Context, memberID string) error {
	s.members[memberID].version++
	_, err := s.layout.Write(ctx, s.rdb, s.recordLocked(memberID), 0)
	return err
}

// Authenticate implements the internal API.
func (s *Server) Authenticate(_ context.Context, req *internalv1.AuthenticateRequest) (*internalv1.AuthenticateResponse, error) {
	var h [32]byte
	if len(req.GetCredentialHash()) != len(h) {
		return nil, status.Error(codes.InvalidArgument, "credential_hash must be 32 bytes")
	}
	copy(h[:], req.GetCredentialHash())
	s.mu.Lock()
	defer s.mu.Unlock()
	id, ok := s.credentials[h]
	if !ok {
		return &internalv1.AuthenticateResponse{}, nil
	}
	m := s.members[id.member]
	return &internalv1.AuthenticateResponse{Found: true, OrganizationId: id.org, MemberId: id.member, UserId: "usr_" + id.member,
		ApiKeyId: id.keyID, Active: m != nil && m.active}, nil
}

// Resolve implements the internal API, refreshing the mirror as the real one does.
func (s *Server) Resolve(ctx context.Context, req *internalv1.ResolveRequest) (*internalv1.ResolveResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.members[req.GetMemberId()] == nil {
		return nil, status.Error(codes.NotFound, "no such member")
	}
	_ = s.writeLocked(ctx, req.GetMemberId())
	rec := s.recordLocked(req.GetMemberId())
	return &internalv1.ResolveResponse{Entitlement: rec.Entitlement, Spend: rec.Spend, AsOfUnixMs: rec.AsOfUnixMs, RecordVersion: rec.Version}, nil
}

// Start implements the internal API.
func (s *Server) Start(ctx context.Context, req *internalv1.StartRequest) (*internalv1.StartResponse, error) {
	if d := time.Duration(s.StartDelay.Load()); d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	if hold := s.StartHold.Load(); hold != nil {
		select {
		case <-*hold:
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	s.StartItems.Add(int64(len(req.GetItems())))
	s.mu.Lock()
	defer s.mu.Unlock()
	resp := &internalv1.StartResponse{}
	for _, it := range req.GetItems() {
		r := &internalv1.StartResult{RequestId: it.GetRequestId()}
		m := s.members[it.GetMemberId()]
		switch {
		case m == nil || it.GetSnapshot().GetVersion() != 2 || len(it.GetSnapshot().GetBuckets()) != 3:
			r.Outcome, r.Message = internalv1.StartOutcome_START_OUTCOME_INVALID, "bad member or snapshot"
		case s.starts[it.GetRequestId()] != nil:
			r.Outcome = internalv1.StartOutcome_START_OUTCOME_DUPLICATE
		case !m.captureEnabled:
			r.Outcome = internalv1.StartOutcome_START_OUTCOME_CAPTURE_SUSPENDED
		case it.GetSnapshot().GetTrackingVersion() < m.trackingVersion:
			r.Outcome = internalv1.StartOutcome_START_OUTCOME_EPOCH_CHANGED
		default:
			s.starts[it.GetRequestId()] = it
			m.pending++
			r.Outcome = internalv1.StartOutcome_START_OUTCOME_RECORDED
		}
		if m != nil {
			r.TrackingVersion = m.trackingVersion
		}
		resp.Results = append(resp.Results, r)
	}
	return resp, nil
}

// Settle implements the internal API: cost from the upstream, else the model's price
// when some tokens were counted (cost basis "estimate" when the enforcer estimated
// them), else unknown; a settlement without a durable start is charged on its
// snapshot's windows, admitted_without_record ones too; charged once per request (a known cost
// later promotes an unknown one) to the snapshot's windows.
func (s *Server) Settle(ctx context.Context, req *internalv1.SettleRequest) (*internalv1.SettleResponse, error) {
	if d := time.Duration(s.SettleDelay.Load()); d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	s.SettleItems.Add(int64(len(req.GetItems())))
	s.mu.Lock()
	defer s.mu.Unlock()
	resp := &internalv1.SettleResponse{}
	changed := map[string]bool{}
	for _, it := range req.GetItems() {
		r := &internalv1.SettleResult{RequestId: it.GetRequestId()}
		resp.Results = append(resp.Results, r)
		start := s.starts[it.GetRequestId()]
		if it.GetVoided() {
			// As the ledger does: a pending start goes, uncharged; anything else stays;
			// a void naming another member is refused.
			r.Outcome = internalv1.SettleOutcome_SETTLE_OUTCOME_VOIDED
			if start != nil && it.GetMemberId() != "" && it.GetMemberId() != start.GetMemberId() {
				r.Outcome = internalv1.SettleOutcome_SETTLE_OUTCOME_INVALID
				continue
			}
			if start != nil && s.receipts[it.GetRequestId()] == nil {
				delete(s.starts, it.GetRequestId())
				if m := s.members[start.GetMemberId()]; m != nil {
					m.pending--
				}
			}
			continue
		}
		snap := it.GetSnapshot()
		memberID := it.GetMemberId()
		if start != nil {
			snap, memberID = start.GetSnapshot(), start.GetMemberId()
		}
		m := s.members[memberID]
		if snap == nil || m == nil {
			r.Outcome, r.CostBasis = internalv1.SettleOutcome_SETTLE_OUTCOME_NO_SNAPSHOT, "none"
			s.receipts[it.GetRequestId()] = &Receipt{Item: it, CostSource: "unknown", CostBasis: "none"}
			continue
		}
		cost, source, basis, priceSource := int64(0), "unknown", "none", ""
		if it.UpstreamCostMicroUsd != nil {
			cost, source, basis = it.GetUpstreamCostMicroUsd(), "upstream", "upstream_cost"
		} else if p, ok := s.prices[it.GetModel()]; ok && (it.GetInputTokens() > 0 || it.GetOutputTokens() > 0) {
			cost, source, basis, priceSource = p[0]*it.GetInputTokens()+p[1]*it.GetOutputTokens(), "catalog_estimate", "reported_usage", "organization"
			if it.GetUsageEstimated() {
				basis = "estimate"
			}
		}
		prev := s.receipts[it.GetRequestId()]
		delta := cost
		switch {
		case prev == nil:
			r.Outcome = internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED
			if start != nil {
				m.pending--
			}
		case it.GetRefused() && prev.CostSource != "unknown":
			// As the ledger does (accounting.Decide): a refusal after another
			// settlement says nothing new.
			r.Outcome = internalv1.SettleOutcome_SETTLE_OUTCOME_DUPLICATE
			r.CostMicroUsd, r.CostSource, r.CostBasis, r.PriceSource = prev.Cost, prev.CostSource, prev.CostBasis, prev.PriceSource
			continue
		case prev.CostSource == "unknown" && source != "unknown",
			prev.Item.GetRefused() && source != "unknown" && cost >= prev.Cost:
			// An unknown cost, or a refusal a proxy did not apply, promoted once (the
			// promoting item, no refusal, replaces the receipt's).
			r.Outcome = internalv1.SettleOutcome_SETTLE_OUTCOME_PROMOTED
			delta = cost - prev.Cost
		case cost < prev.Cost:
			r.Outcome, r.Message = internalv1.SettleOutcome_SETTLE_OUTCOME_COST_CONFLICT, "lower than already charged"
			r.CostMicroUsd, r.CostSource, r.CostBasis, r.PriceSource = prev.Cost, prev.CostSource, prev.CostBasis, prev.PriceSource
			continue
		default:
			r.Outcome = internalv1.SettleOutcome_SETTLE_OUTCOME_DUPLICATE
			r.CostMicroUsd, r.CostSource, r.CostBasis, r.PriceSource = prev.Cost, prev.CostSource, prev.CostBasis, prev.PriceSource
			continue
		}
		for _, b := range snap.GetBuckets() {
			m.spend[bucketKey{window.Timeframe(b.GetTimeframe()), b.GetWindowStartUnixMs()}] += delta
		}
		if start != nil && s.Forgetful.Load() {
			delete(s.starts, it.GetRequestId())
		} else {
			s.receipts[it.GetRequestId()] = &Receipt{Item: it, Cost: cost, CostSource: source, CostBasis: basis, PriceSource: priceSource, Snapshot: snap}
		}
		r.CostMicroUsd, r.CostSource, r.CostBasis, r.PriceSource = cost, source, basis, priceSource
		changed[memberID] = true
	}
	if err := s.writeManyLocked(ctx, changed); err != nil {
		return nil, err
	}
	return resp, nil
}

// writeManyLocked bumps the versions of members and writes their records in one
// pipeline, as the real control plane refreshes the members of a committed batch once.
func (s *Server) writeManyLocked(ctx context.Context, members map[string]bool) error {
	recs := make([]*mirror.Record, 0, len(members))
	for id := range members {
		s.members[id].version++
		recs = append(recs, s.recordLocked(id))
	}
	_, errs := s.layout.WriteMany(ctx, s.rdb, recs, 0)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("mirror write failed: %w", err)
	}
	return nil
}
