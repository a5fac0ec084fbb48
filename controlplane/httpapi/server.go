package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/controlplane/metrics"
	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/controlplane/throttle"
	"github.com/tollgate-dev/tollgate/pkg/clock"
)

// Deps are what the API needs from the program.
type Deps struct {
	Store *store.Store
	// DB is the REST API's share of Store's pool (store.Share): every statement and
	// transaction of a request takes one of its connections, so that requests never
	// hold more than its size, and the rest of the pool stays accounting's. Nil: a
	// share of the default size (store.DefaultShare).
	DB       *store.Share
	Clock    clock.Clock
	Log      *slog.Logger
	Registry prometheus.Registerer
	// Metrics is the control plane's catalogue (controlplane/metrics), where the REST
	// middleware counts; nil: a new one registered on Registry (a fresh registry when
	// that is nil too). Either way New creates the series of every route.
	Metrics *metrics.Metrics
	// SessionTTL is how long a session token lives.
	SessionTTL time.Duration
	// Events receives notifications of changes enforcers must learn about; nil discards.
	Events Events
	// TrustForwardedFor makes sign-in and sign-up throttling key on X-Forwarded-For's
	// right-most address (what the trusted proxy saw), for deployments behind a proxy
	// that sets or appends it.
	TrustForwardedFor bool
	// RequestTimeout bounds each request (DefaultRequestTimeout when 0): a request still
	// waiting for Postgres then (a lock another session holds, a pool whose connections
	// are all taken, a server that stopped answering) is answered 503 and its statement
	// cancelled, so that it neither waits forever nor keeps its connection from others.
	RequestTimeout time.Duration
}

// DefaultRequestTimeout is the bound of a request unless Deps says otherwise. Most
// routes take milliseconds on a healthy database, but an organization-wide change in a
// very large organization holds its request through its transaction and the Redis
// writes after it (16 s of writes at 80,000 members, docs/redis.md), and a bound it could not meet would refuse that change forever. So it is well
// above that, and below the REST server's write timeout (60 s), so that the 503 still
// reaches the client.
const DefaultRequestTimeout = 50 * time.Second

// Events is how the API tells the rest of the system that something an enforcer caches
// changed. The accounting layer implements it; until then it may be a no-op.
type Events interface {
	// CredentialsRevoked: these API key hashes or members must no longer authenticate.
	CredentialsRevoked(ctx context.Context, memberIDs []string, keyIDs []string)
	// EntitlementChanged: the usage-limit entitlement (winners, extensions) of these
	// members changed; enforcers must drop what they compiled for them. Called after the
	// change committed.
	EntitlementChanged(ctx context.Context, orgID string, memberIDs []string)
	// SessionsRevoked: these sessions (SHA-256 of their tokens) ended and must no
	// longer authenticate. Called after the change committed.
	SessionsRevoked(ctx context.Context, tokenHashes [][]byte)
	// UserSessionsChanged: the user's active organization changed, so their live
	// sessions act as another member (or none); enforcers must forget what they cached
	// of them. Called after the change committed.
	UserSessionsChanged(ctx context.Context, userID string)
}

type noEvents struct{}

func (noEvents) CredentialsRevoked(context.Context, []string, []string) {}
func (noEvents) EntitlementChanged(context.Context, string, []string)   {}
func (noEvents) SessionsRevoked(context.Context, [][]byte)              {}
func (noEvents) UserSessionsChanged(context.Context, string)            {}

// Server serves the REST API.
type Server struct {
	db      *store.Share
	clock   clock.Clock
	log     *slog.Logger
	metrics *metrics.Metrics
	signIns *throttle.Limiter
	// signUps slows down sign-ups from one client address that keep finding emails
	// taken (or reserved): each such answer tells whether an email has an account.
	signUps *throttle.Limiter
	events  Events
	deps    Deps
	mux     *http.ServeMux
	routes  []route
	handler http.Handler
}

// New builds the server and registers every route of the table.
func New(d Deps) *Server {
	if d.SessionTTL == 0 {
		d.SessionTTL = 7 * 24 * time.Hour
	}
	if d.RequestTimeout <= 0 {
		d.RequestTimeout = DefaultRequestTimeout
	}
	if d.Events == nil {
		d.Events = noEvents{}
	}
	if d.DB == nil && d.Store != nil {
		db, err := d.Store.Share(0)
		if err != nil {
			panic(err) // the default share fits every pool
		}
		d.DB = db
	}
	if d.Metrics == nil && d.Registry == nil {
		d.Metrics = metrics.Discard()
	} else if d.Metrics == nil {
		d.Metrics = metrics.New(d.Registry)
	}
	s := &Server{
		db:      d.DB,
		clock:   d.Clock,
		log:     d.Log,
		metrics: d.Metrics,
		// five free failures, then 1s doubling to 5 minutes, per email and per address
		signIns: throttle.New(d.Clock, 5, time.Second, 5*time.Minute),
		signUps: throttle.New(d.Clock, 5, time.Second, 5*time.Minute),
		events:  d.Events,
		deps:    d,
		mux:     http.NewServeMux(),
	}
	s.routes = s.routeTable()
	for _, rt := range s.routes {
		s.mux.Handle(rt.method+" "+rt.pattern, s.wrap(rt))
	}
	for _, g := range goneRoutes {
		s.mux.Handle(g.method+" "+g.pattern, s.gone(g))
	}
	s.metrics.Routes(s.Routes()...)
	s.mux.HandleFunc("/", s.unmatched)
	s.handler = s.instrument(s.mux)
	return s
}

// ServeHTTP serves one request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// Routes lists "METHOD /pattern" of every route, removed ones included, for documentation checks.
func (s *Server) Routes() []string {
	out := make([]string, 0, len(s.routes))
	for _, rt := range s.routes {
		out = append(out, rt.method+" "+rt.pattern)
	}
	for _, g := range goneRoutes {
		out = append(out, g.method+" "+g.pattern)
	}
	return out
}
