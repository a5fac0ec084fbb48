package internalapi

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/tollgate-dev/tollgate/controlplane/accounting"
	"github.com/tollgate-dev/tollgate/controlplane/ledger"
	"github.com/tollgate-dev/tollgate/controlplane/metrics"
	"github.com/tollgate-dev/tollgate/controlplane/mirrorsync"
	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/pkg/clock"
	"github.com/tollgate-dev/tollgate/pkg/grpcflow"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/internaltoken"
	"github.com/tollgate-dev/tollgate/pkg/logging"
)

// MaxBatchItems bounds the items of one Start or Settle call.
const MaxBatchItems = 1000

// Deps are what the server needs.
type Deps struct {
	Store   *store.Store
	Ledger  *ledger.Ledger
	Mirror  *mirrorsync.Writer
	Clock   clock.Clock
	Log     *slog.Logger
	Metrics *metrics.Metrics
	// Token is the shared secret callers present (pkg/internaltoken).
	// Empty means no token is accepted: callers must then present a verified client
	// certificate (RequireClientCert).
	Token string
	// PreviousToken is accepted as well as Token while the token rotates
	// (TOLLGATE_INTERNAL_TOKEN_PREVIOUS); empty: Token alone. Only with a Token.
	PreviousToken string
	// RequireClientCert accepts callers whose TLS client certificate the server verified
	// (mTLS); with a Token as well, both are required.
	RequireClientCert bool
}

// Server implements the Accounting service.
type Server struct {
	internalv1.UnimplementedAccountingServer
	d        Deps
	refusals refusalLog
	// previous names, once a minute per peer, the callers still presenting
	// PreviousToken: the rotation's last step would refuse them.
	previous refusalLog
	// failures throttles the "internal API call failed" line: with Postgres down every
	// call fails, and tollgate_controlplane_store_errors_total counts each.
	failures logging.Throttle
	// keys batches concurrent API-key look-ups (keys.go).
	keys *keyLookups
}

// New builds the server.
func New(d Deps) *Server {
	if d.Metrics == nil {
		d.Metrics = metrics.Discard()
	}
	if d.Clock == nil {
		d.Clock = clock.System{}
	}
	return &Server{d: d, refusals: refusalLog{log: d.Log, clock: d.Clock},
		previous: refusalLog{log: d.Log, clock: d.Clock, msg: "internal call authenticated with the previous token (TOLLGATE_INTERNAL_TOKEN_PREVIOUS): this caller has not moved to the new one, and dropping the previous token would refuse it"}, failures: logging.Throttle{Clock: d.Clock},
		keys: newKeyLookups(d.Store, d.Clock)}
}

// Register adds the service and its authentication to a gRPC server built with
// ServerOptions.
func (s *Server) Register(g *grpc.Server) { internalv1.RegisterAccountingServer(g, s) }

// ServerOptions are the interceptors that authenticate every call of the service (the
// health service on the same server stays open: load balancers probe it without a
// token), and a pool of stream workers: without it every call starts a goroutine whose
// stack then grows while the call decodes and waits for its batch, which was a
// measurable share of the CPU of one-item calls; and fixed flow-control windows, so that
// no window-estimation PINGs go back and forth (pkg/grpcflow).
func (s *Server) ServerOptions() []grpc.ServerOption {
	return append(grpcflow.ServerOptions(), grpc.ChainUnaryInterceptor(s.authUnary), grpc.ChainStreamInterceptor(s.authStream),
		grpc.NumStreamWorkers(uint32(64*runtime.GOMAXPROCS(0))))
}

const servicePrefix = "/" + "tollgate.internal.v1.Accounting/"

func (s *Server) authUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if !strings.HasPrefix(info.FullMethod, servicePrefix) {
		return handler(ctx, req)
	}
	method := strings.TrimPrefix(info.FullMethod, servicePrefix)
	if why := s.refusal(ctx); why != "" {
		s.d.Metrics.RPCs.WithLabelValues(method, codes.Unauthenticated.String()).Inc()
		s.refusals.note(ctx, method, why)
		return nil, errUnauthenticated
	}
	if s.usedPrevious(ctx) {
		s.previous.note(ctx, method, "")
	}
	resp, err := handler(ctx, req)
	s.d.Metrics.RPCs.WithLabelValues(method, status.Code(err).String()).Inc()
	return resp, err
}

func (s *Server) authStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if strings.HasPrefix(info.FullMethod, servicePrefix) {
		if why := s.refusal(ss.Context()); why != "" {
			s.refusals.note(ss.Context(), strings.TrimPrefix(info.FullMethod, servicePrefix), why)
			return errUnauthenticated
		}
		if s.usedPrevious(ss.Context()) {
			s.previous.note(ss.Context(), strings.TrimPrefix(info.FullMethod, servicePrefix), "")
		}
	}
	return handler(srv, ss)
}

// usedPrevious tells whether an accepted call presented PreviousToken rather than
// Token. Asked after the constant-time check accepted it: the caller holds a valid
// token, and which one is no secret from it.
func (s *Server) usedPrevious(ctx context.Context) bool {
	if s.d.PreviousToken == "" || s.d.Token == "" {
		return false
	}
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get(internaltoken.MetadataKey)
	if len(vals) != 1 {
		return false
	}
	presented, ok := internaltoken.Parse(vals[0])
	return ok && !internaltoken.Matches(presented, s.d.Token)
}

var errUnauthenticated = status.Error(codes.Unauthenticated, "unauthenticated")

// refusal checks the configured credentials: the token (constant-time,
// pkg/internaltoken), the verified client certificate, or both. It returns why the
// caller is refused, for the log only ("" when accepted).
func (s *Server) refusal(ctx context.Context) string {
	if s.d.Token == "" && !s.d.RequireClientCert {
		return "no internal token or client CA configured" // nothing configured accepts anyone
	}
	if s.d.RequireClientCert && !verifiedClientCert(ctx) {
		return "no verified client certificate"
	}
	if s.d.Token == "" {
		return ""
	}
	return string(internaltoken.Check(ctx, s.d.Token, s.d.PreviousToken))
}

func verifiedClientCert(ctx context.Context) bool {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return false
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	return ok && len(info.State.VerifiedChains) > 0
}

// Authenticate resolves a credential hash to its identity.
func (s *Server) Authenticate(ctx context.Context, req *internalv1.AuthenticateRequest) (*internalv1.AuthenticateResponse, error) {
	if len(req.GetCredentialHash()) != 32 {
		return nil, status.Error(codes.InvalidArgument, "credential_hash must be the 32-byte SHA-256 of the credential")
	}
	var id store.CredentialIdentity
	var err error
	switch req.GetKind() {
	case internalv1.CredentialKind_CREDENTIAL_KIND_API_KEY:
		id, err = s.keys.lookup(ctx, req.GetCredentialHash())
	case internalv1.CredentialKind_CREDENTIAL_KIND_SESSION:
		id, err = store.IdentityBySessionHash(ctx, s.d.Store.Pool, req.GetCredentialHash(), s.d.Clock.Now())
	default:
		// Unspecified: an API key first, as the REST API tries it first.
		id, err = s.keys.lookup(ctx, req.GetCredentialHash())
		if errors.Is(err, store.ErrNotFound) {
			id, err = store.IdentityBySessionHash(ctx, s.d.Store.Pool, req.GetCredentialHash(), s.d.Clock.Now())
		}
	}
	if errors.Is(err, store.ErrNotFound) {
		return &internalv1.AuthenticateResponse{}, nil
	}
	if err != nil {
		return nil, s.callError("authenticate", err)
	}
	res := &internalv1.AuthenticateResponse{Found: true, OrganizationId: id.OrganizationID, MemberId: id.MemberID, UserId: id.UserID,
		ApiKeyId: id.APIKeyID, Active: id.Active}
	if id.ExpiresAt != nil {
		// The enforcer caches the answer no longer than this (an expired credential is
		// refused at its expiry, not up to the cache's TTL after it).
		res.ExpiresAtUnixMs = max(id.ExpiresAt.UnixMilli(), 1)
	}
	return res, nil
}

// Resolve compiles a member's entitlement and current spend from Postgres and refreshes
// the member's Redis record.
func (s *Server) Resolve(ctx context.Context, req *internalv1.ResolveRequest) (*internalv1.ResolveResponse, error) {
	if !accounting.ValidEntityID(req.GetOrganizationId()) || !accounting.ValidEntityID(req.GetMemberId()) {
		return nil, status.Error(codes.InvalidArgument, "organization_id and member_id are required (at most 64 characters)")
	}
	rec, err := s.d.Mirror.Resolve(ctx, req.GetOrganizationId(), req.GetMemberId())
	if errors.Is(err, mirrorsync.ErrMemberNotFound) {
		return nil, status.Error(codes.NotFound, "no such member in the organization")
	}
	if err != nil {
		return nil, s.callError("resolve", err)
	}
	return &internalv1.ResolveResponse{Entitlement: rec.GetEntitlement(), Spend: rec.GetSpend(), AsOfUnixMs: rec.GetAsOfUnixMs(),
		RecordVersion: rec.GetVersion()}, nil
}

// Start records a batch of write-ahead starts.
func (s *Server) Start(ctx context.Context, req *internalv1.StartRequest) (*internalv1.StartResponse, error) {
	if len(req.GetItems()) > MaxBatchItems {
		return nil, status.Errorf(codes.InvalidArgument, "at most %d items per call", MaxBatchItems)
	}
	res, err := s.d.Ledger.Start(ctx, req.GetItems())
	if err != nil {
		return nil, s.callError("start", err)
	}
	return &internalv1.StartResponse{Results: res}, nil
}

// Settle prices and charges a batch of settlements.
func (s *Server) Settle(ctx context.Context, req *internalv1.SettleRequest) (*internalv1.SettleResponse, error) {
	if len(req.GetItems()) > MaxBatchItems {
		return nil, status.Errorf(codes.InvalidArgument, "at most %d items per call", MaxBatchItems)
	}
	res, err := s.d.Ledger.Settle(ctx, req.GetItems())
	if err != nil {
		return nil, s.callError("settle", err)
	}
	return &internalv1.SettleResponse{Results: res}, nil
}

// callError answers a failed call: the caller's own deadline or cancellation (its
// context's code: the caller gave up, which says nothing about the storage; when an
// enforcer restarts under traffic, thousands of its first checks' Authenticate calls
// may wait past their short deadlines for a pooled connection), else Unavailable.
func (s *Server) callError(op string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return status.FromContextError(err).Err()
	}
	return s.unavailable(op, err)
}

// unavailable logs an infrastructure failure and answers Unavailable without internals:
// the caller retries (every call is idempotent).
func (s *Server) unavailable(op string, err error) error {
	s.failures.Log(s.d.Log, slog.LevelError, "internal API call failed", "op", op, "err", err)
	return status.Error(codes.Unavailable, "accounting storage unavailable; retry")
}
