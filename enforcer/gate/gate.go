package gate

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate-dev/tollgate/enforcer/decision"
	"github.com/tollgate-dev/tollgate/enforcer/estimate"
	"github.com/tollgate-dev/tollgate/enforcer/identity"
	"github.com/tollgate-dev/tollgate/enforcer/inflight"
	"github.com/tollgate-dev/tollgate/enforcer/metrics"
	"github.com/tollgate-dev/tollgate/enforcer/record"
	"github.com/tollgate-dev/tollgate/enforcer/requestbody"
	"github.com/tollgate-dev/tollgate/enforcer/settleq"
	"github.com/tollgate-dev/tollgate/enforcer/startq"
	"github.com/tollgate-dev/tollgate/enforcer/worstcase"
	"github.com/tollgate-dev/tollgate/pkg/clock"
	"github.com/tollgate-dev/tollgate/pkg/credential"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/logging"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
	"github.com/tollgate-dev/tollgate/pkg/pricecatalog"
	"github.com/tollgate-dev/tollgate/pkg/typeid"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// RequestPrefix is the TypeID prefix of request ids.
const RequestPrefix typeid.Prefix = "req"

// Identities tell who a credential stands for (identity.Cache).
type Identities interface {
	Lookup(ctx context.Context, kind internalv1.CredentialKind, secret string) (identity.Identity, error)
}

// Records read members' records (record.Reader): from the mirror (Read), from the
// control plane (Resolve), the last one this process read (LastKnown, for open mode),
// and the mirror generation Read decides under (Generation, for kept blocks).
type Records interface {
	Read(ctx context.Context, orgID, memberID string) (record.Record, error)
	Resolve(ctx context.Context, orgID, memberID string) (record.Record, error)
	LastKnown(memberID string) *mirror.Record
	Generation() (string, bool)
}

// Starts make an admission's start durable, reserving its settlement slot
// (startq.Queue). An error is the queue's refusal or the control plane's failure
// (startq.Reason classifies it). SubmitWithdrawable is for a speculative start: one
// withdrawn while queued when ctx ends, and otherwise answered whatever becomes of ctx.
type Starts interface {
	Submit(ctx context.Context, item *internalv1.StartItem) (startq.Result, *settleq.Reservation, error)
	SubmitWithdrawable(ctx context.Context, item *internalv1.StartItem) (startq.Result, *settleq.Reservation, error)
}

// Settlements reserve settlement slots (settleq.Queue).
type Settlements interface {
	Reserve() (*settleq.Reservation, bool)
}

// InFlight keeps admitted requests until their settlement is queued, and voids the
// durable starts of requests a check refused after all (inflight.Tracker).
type InFlight interface {
	Admitted(r *inflight.Request)
	Void(item *internalv1.StartItem, res *settleq.Reservation, done func(settleq.Result))
}

// The parts the enforcer is made of implement the interfaces.
var (
	_ Identities  = (*identity.Cache)(nil)
	_ Records     = (*record.Reader)(nil)
	_ Starts      = (*startq.Queue)(nil)
	_ Settlements = (*settleq.Queue)(nil)
	_ InFlight    = (*inflight.Tracker)(nil)
)

// Deps are the parts a gate is made of. The parts that do I/O are interfaces declared
// here, by what the gate asks of them, so that the gate is tested without Redis or a
// control plane (gate_table_test.go).
type Deps struct {
	Identity Identities
	Records  Records
	Starts   Starts
	// Settle is asked for a settlement slot on fail-open admissions (normal admissions
	// reserve theirs through the start queue).
	Settle   Settlements
	Inflight InFlight
	Clock    clock.Clock
	Metrics  *metrics.Metrics
	Log      *slog.Logger
	// FailOpen admits on infrastructure failures instead of answering 503.
	FailOpen bool
	// BlockedCapacity bounds the members whose last 429 is kept (BlockedMembers); 0:
	// DefaultBlockedCapacity.
	BlockedCapacity int
	// BlockedTTL is the longest a blocked decision is kept and answered from memory
	// (see BlockedMembers); 0 keeps none.
	BlockedTTL time.Duration
	// Speculate sends a check's durable start beside its record read, on the member's
	// last-known record (speculate.go).
	Speculate bool
	// MemberAPIURL is the control plane's REST API as members reach it (say
	// https://tollgate.example.com): the usage-limit 429 names the URL a member asks
	// for more on under it; empty: the route's path alone.
	MemberAPIURL string
	// CheckTimeout bounds a check's waits on Redis and the control plane altogether when
	// its caller set no deadline (HTTP /check, the gateway); 0: DefaultCheckTimeout. A
	// caller's deadline (Envoy's grpc-timeout) bounds them otherwise (callsContext).
	CheckTimeout time.Duration
}

// DefaultCheckTimeout is CheckTimeout's default: clearly under the 1s check timeout of
// the proxies in deploy/ (Envoy's ext_authz, the chart's SecurityPolicy), so that a check
// is answered by the enforcer (admitted in open mode, 503 with its error code in closed
// mode), not given up on by the proxy, whose own 503 ignores the failure mode.
const DefaultCheckTimeout = 800 * time.Millisecond

// answerMargin is the most a check keeps of its caller's deadline for answering: its
// waits end that much (or a tenth of the time left, when less) before the deadline.
const answerMargin = 100 * time.Millisecond

// callsContext is the context of a check's calls (identity, record, start): it ends
// before the caller's deadline by the answer's margin, or after CheckTimeout when the
// caller set none. Its end is a failure like the control plane's or Redis's, answered
// by the failure mode; the caller's own end (ctx) still means nobody waits for an answer.
func (g *Gate) callsContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl)
		return context.WithDeadline(ctx, dl.Add(-min(left/10, answerMargin)))
	}
	timeout := g.CheckTimeout
	if timeout <= 0 {
		timeout = DefaultCheckTimeout
	}
	return context.WithTimeout(ctx, timeout)
}

// lazyCalls is a check's callsContext, made when a call first uses it: a check answered
// from the caches (a known key, a kept refusal) waits on nothing, and its deadline's
// timer would double the cost of such a check (four allocations). Every method makes
// it, so a context derived from it (gRPC's) is tied to the deadline's, not the caller's.
type lazyCalls struct {
	g      *Gate
	parent context.Context
	once   sync.Once
	ctx    context.Context
	stop   context.CancelFunc
}

func (c *lazyCalls) made() context.Context {
	c.once.Do(func() { c.ctx, c.stop = c.g.callsContext(c.parent) })
	return c.ctx
}

func (c *lazyCalls) Deadline() (time.Time, bool) { return c.made().Deadline() }
func (c *lazyCalls) Done() <-chan struct{}       { return c.made().Done() }
func (c *lazyCalls) Err() error                  { return c.made().Err() }
func (c *lazyCalls) Value(key any) any           { return c.made().Value(key) }

// cancel releases the deadline's timer, if it was made; if not, one used after the
// check (by a call that outlived it) is already over.
func (c *lazyCalls) cancel() {
	c.once.Do(func() { c.ctx = endedCalls })
	if c.stop != nil {
		c.stop()
	}
}

// endedCalls is the calls context of a check that ended before making its own.
var endedCalls = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// Gate answers checks.
type Gate struct {
	Deps
	// Blocks keeps blocked members' refusals; it follows the invalidation channel
	// (package invalidation).
	Blocks *BlockedMembers
	// The failures that repeat per check while their cause lasts (the control plane or
	// Redis unreachable) are logged once per interval with a count of those left out;
	// tollgate_enforcer_decisions_total and the start queue's rejections count each one.
	// So are answers of the control plane no check can use while they last: a record
	// it resolved that cannot be decided on (this clock too far behind its own), a
	// start it refused (two versions that disagree).
	authFailed, recordFailed, startFailed, openUnidentified logging.Throttle
	undecidable, startRefused                               logging.Throttle
	// recordFailedAt is when a record read last failed (Unix nanoseconds, the clock's):
	// checks do not speculate for a while after.
	recordFailedAt atomic.Int64
}

// New returns a gate.
func New(d Deps) *Gate {
	blocked := d.BlockedCapacity
	if blocked <= 0 {
		blocked = DefaultBlockedCapacity
	}
	g := &Gate{Deps: d, Blocks: newBlockedMembers(blocked, d.BlockedTTL, d.Metrics)}
	g.Blocks.askURL = ResetRequestURL(d.MemberAPIURL)
	for _, t := range []*logging.Throttle{&g.authFailed, &g.recordFailed, &g.startFailed, &g.openUnidentified, &g.undecidable, &g.startRefused} {
		t.Clock = d.Clock
	}
	return g
}

// Credentials are the raw header values a client presented ("" when absent).
type Credentials struct {
	APIKey        string // x-api-key
	Authorization string // authorization
	// GoogAPIKey is x-goog-api-key, where Google's Gen AI SDK (and Gemini CLI) send
	// their key: read as x-api-key is, and refused when x-api-key holds another.
	GoogAPIKey string
	// AzureAPIKey is api-key, where Azure OpenAI clients send their key (the openai
	// SDKs' AzureOpenAI): read as x-api-key is, and refused when another raw key header
	// holds another.
	AzureAPIKey string
}

// CredentialsFrom reads the credential headers of an HTTP request (the gateway's, /check's;
// ext_authz reads Envoy's header maps: authz.Credentials).
func CredentialsFrom(h http.Header) Credentials {
	var c Credentials
	for _, name := range [...]string{"X-Api-Key", "Authorization", "X-Goog-Api-Key", "Api-Key"} {
		for _, v := range h[name] {
			c.Add(name, v)
		}
	}
	return c
}

// Add reads one line of a request's header named name (in any case), when it is a
// credential header. A credential header sent on several lines with different values
// reads as the values joined with ", ", as Envoy joins a header's lines: no credential
// parses so, and the request is refused 401 as one with a bad credential. Taking
// either line would charge one key of two, where every Tollgate credential a request
// presents must be the one charged (a bad one is a 401 even beside a good one). The
// same value on two lines is that value.
func (c *Credentials) Add(name, value string) {
	var field *string
	switch strings.ToLower(name) {
	case "x-api-key":
		field = &c.APIKey
	case "authorization":
		field = &c.Authorization
	case "x-goog-api-key":
		field = &c.GoogAPIKey
	case "api-key":
		field = &c.AzureAPIKey
	default:
		return
	}
	*field = JoinLine(*field, value)
}

// AddQuery reads the keys in a request's query (rawQuery, as it came), each
// parameter's name decoded as the providers decode it (requestbody.QueryParams):
// Google's key or $key (its SDKs open a Gemini Live session with ?key=, and its REST
// API takes it) as x-goog-api-key, Azure OpenAI's api-key as api-key. Every one counts,
// so two different keys (or one beside another credential in a header) are a 401, as
// two headers are: each Tollgate credential present must be the one charged. With a
// credential in a header, a key parameter that is not a Tollgate credential is not the
// member's (it may be the provider's own, left to pass); with none, it is read, and
// refused as no Tollgate credential. A front door that reads them strips every Tollgate
// credential from the query it sends upstream.
func (c *Credentials) AddQuery(rawQuery string) {
	if rawQuery == "" {
		return
	}
	inHeaders := *c != (Credentials{})
	for p := range requestbody.QueryParams(rawQuery) {
		var header string
		switch p.Name {
		case "key", "$key":
			header = "x-goog-api-key"
		case "api-key":
			header = "api-key"
		default:
			continue
		}
		if inHeaders && !credential.IsTollgateToken(p.Value) {
			continue
		}
		c.Add(header, p.Value)
	}
}

// insecureAPIKeySubprotocol prefixes the WebSocket subprotocol in which a browser's
// Realtime client sends its key ("openai-insecure-api-key.<key>"; the openai SDK's
// OpenAIRealtimeWebSocket with dangerouslyAllowBrowser, the Agents SDK's RealtimeSession
// with useInsecureApiKey): a page cannot set a WebSocket handshake's headers.
const insecureAPIKeySubprotocol = "openai-insecure-api-key."

// AddSubprotocols reads the key a WebSocket upgrade offers in a subprotocol
// (insecureAPIKeySubprotocol; values are the request's Sec-WebSocket-Protocol lines) as
// x-api-key, by AddQuery's rule: every one counts, so two keys are a 401; beside a
// credential in a header, one that is not a Tollgate credential is not read. Read it
// only from an upgrade, whose Sec-WebSocket-* headers never go upstream; the front door
// leaves every key-carrying subprotocol out of the upstream handshake.
func (c *Credentials) AddSubprotocols(values []string) {
	inHeaders := *c != (Credentials{})
	for _, v := range values {
		for _, sp := range strings.Split(v, ",") {
			key, ok := strings.CutPrefix(strings.TrimSpace(sp), insecureAPIKeySubprotocol)
			if !ok || inHeaders && !credential.IsTollgateToken(key) {
				continue
			}
			c.Add("x-api-key", key)
		}
	}
}

// JoinLine is a header's value read so far (old, "" when none) with one more line's
// value, by Add's rule: a different value joined with ", ", as Envoy joins a header's
// lines, the same value kept once. Front doors that read other headers line by line
// (ext_authz's header_map) join them so too, so that a header reads the same from
// Envoy's headers map and from its lines.
func JoinLine(old, line string) string {
	switch {
	case old == "":
		return line
	case old != line:
		return old + ", " + line
	}
	return old
}

// TollgateAuthorization reports whether the Authorization header carries a Tollgate
// credential (a bearer API key or session, the scheme in any case): the front doors
// remove it from the upstream request, since it must never reach the provider. Any other
// Authorization is left to the proxy's configuration (it may be the provider's own key).
func (c Credentials) TollgateAuthorization() bool {
	tok, ok := credential.BearerFromHeader(c.Authorization)
	return ok && credential.IsTollgateToken(tok)
}

// Hint is what a front door read of the request before its check: the body, when it
// saw one, as the estimator read it (nil otherwise). With it, a request that reserves
// under the in-flight guard reserves its own worst case (package worstcase) when that
// is known, instead of the policy's amount.
type Hint struct {
	Body *estimate.Request
	// Malformed says the body opens as a JSON object and is not one (BodyHint): Body
	// then holds no estimate of it (at most the model its path names).
	Malformed bool
}

// BodyHint is the hint of a request whose body and path the front door has, going to
// host (the upstream's, or the request's authority where the front door does not know
// the upstream): the body's estimate, with the model its path names in place of the
// body's (Gemini, Amazon Bedrock and Vertex AI run the path's: requestbody.RequestModel),
// an Amazon Bedrock InvokeModel's output cap in its model's own name
// (estimate.InvokeCap), whether the path or the host is a regional endpoint, the
// output an image generation is billed, what each call of an image generation tool is
// billed, the model of an advisor tool and the container its code tools run in. A body that is no JSON object
// (Google takes binary protobuf too) is not read: its hint is the model its path names
// and no input estimate (its bytes are no text: an inline image's would count as
// thousands of tokens, estimate.Request.Unread), so that model is still checked against
// the unpriced-model rule and noted for the settlement, while the policy's amount is
// reserved (its input is unknown: Gate.reservation); where the path names none, there
// is no hint. A body that opens as a JSON object ('{' after white space; in UTF-16 or
// UTF-32 too, which Python's upstreams read: requestbody.ReadAsObject) and is not one
// well-formed JSON object in UTF-8 is Malformed: the gateway and ext_proc refuse a billed
// request's (requestbody.MalformedRefusal). A leading UTF-8 BOM is the front door's to
// drop first (requestbody.TrimBOM), so that the body it sends is the one read. The hint
// names no upstream host (estimate.Request.Host): a front door that knows it from its
// own configuration sets it (WithUpstreamHost), never from a request's authority, which
// the client chooses.
func BodyHint(body []byte, path, host string) Hint {
	est, err := estimate.Input(body)
	malformed := err != nil && requestbody.ReadAsObject(body)
	if err != nil {
		if requestbody.ModelFromPath(path) == "" {
			return Hint{Malformed: malformed}
		}
		est = estimate.Request{Unread: true}
	}
	est.Model = requestbody.RequestModel(est.Model, path)
	if !est.Unread && requestbody.BedrockInvoke(path) {
		// Bedrock's InvokeModel: the model's own name of its cap (Llama's max_gen_len,
		// Titan's maxTokenCount, Nova's max_new_tokens), read on its paths alone.
		est.OutputCap = max(est.OutputCap, estimate.InvokeCap(body))
	}
	if keys := requestbody.OutputCapKeys(path); keys != 0 && est.CapKeys&keys == 0 {
		// Capped only by names its API does not read: an upstream that ignores them
		// generates up to the model's limit.
		est.OutputCap = 0
	}
	est.Regional = requestbody.RegionalEndpoint(path) || requestbody.RegionalHost(host)
	est.ImageOutputTokens = requestbody.ImageOutputTokens(path, body, est.Model)
	if est.ImageGeneration {
		est.ImageCall = requestbody.ImageToolCall(body)
	}
	if est.Advisor {
		a := requestbody.AdvisorTool(body)
		est.AdvisorModel, est.AdvisorMaxUses, est.AdvisorMaxTokens = a.Model, a.MaxUses, a.MaxTokens
	}
	if est.Fallbacks {
		chain := requestbody.Fallbacks(body)
		est.FallbackChain = &chain
	}
	if est.Container {
		c := requestbody.ContainerTool(body)
		est.ContainerKind, est.ExplicitContainer = c.Kind, c.Explicit
	}
	return Hint{Body: &est, Malformed: malformed}
}

// WithUpstreamHost is h naming host, the upstream the front door's configuration sends the
// request to (its gateway route, its Envoy route's metadata), whose own catalog prices
// of a model, where it has them, price it (estimate.Request.Host). A hint without a body
// estimate is returned as it is.
func (h Hint) WithUpstreamHost(host string) Hint {
	if h.Body != nil {
		h.Body.Host = pricecatalog.HostName(host)
	}
	return h
}

// WithModel is h running model, the model the front door's own configuration says the
// request's path runs whatever its body names (a gateway route's Azure OpenAI
// deployment, requestbody.AzureDeployment: Azure runs the deployment's model): it, not
// the body's, is checked against the unpriced-model rule, its worst case reserved (an
// image generation's images priced at it) and noted for the settlement. A body the hint
// did not read (an upload, a body that is no JSON object) gets an unread estimate naming
// it, as a path's model does (BodyHint). "" returns h as it is.
func (h Hint) WithModel(model string, body []byte, path string) Hint {
	if model == "" {
		return h
	}
	if h.Body == nil {
		h.Body = &estimate.Request{Unread: true}
	}
	h.Body.Model = model
	if !h.Body.Unread {
		h.Body.ImageOutputTokens = requestbody.ImageOutputTokens(path, body, model)
	}
	return h
}

// WithTierHeaders is h with the dearer tiers a request asks for by its headers, which
// its body cannot say: an Amazon Bedrock InvokeModel request's serviceTier and latency
// (requestbody.HeaderBedrockServiceTier, HeaderBedrockLatency: its body is the model's
// own), and Vertex AI's Priority PayGo, vertexRequestType "priority" in any case
// (requestbody.HeaderVertexSharedRequestType: the fast tier, which its answer's
// trafficType ON_DEMAND_PRIORITY is charged). A hint without a body estimate is returned
// as it is.
func (h Hint) WithTierHeaders(serviceTier, latency, vertexRequestType string) Hint {
	if h.Body != nil {
		h.Body.ServiceTier = max(h.Body.ServiceTier, pricecatalog.TierNamed(pricecatalog.TierNames[:], serviceTier))
		h.Body.Latency = max(h.Body.Latency, pricecatalog.TierNamed(pricecatalog.LatencyNames[:], latency))
		if strings.EqualFold(vertexRequestType, requestbody.VertexPriorityRequestType) {
			h.Body.ServiceTier = max(h.Body.ServiceTier, pricecatalog.Fast)
		}
	}
	return h
}

// Check answers one request whose body the front door has not seen (CheckRequest
// without a hint). The error is non-nil only when ctx ended first (the proxy gave up on
// the check): then no answer matters and nothing was admitted.
func (g *Gate) Check(ctx context.Context, cred Credentials) (Answer, error) {
	return g.CheckRequest(ctx, cred, Hint{})
}

// CheckRequest answers one request, with what the front door read of it (Hint).
func (g *Gate) CheckRequest(ctx context.Context, cred Credentials, h Hint) (Answer, error) {
	start := time.Now()
	var recordWait time.Duration
	a, err := g.check(ctx, cred, h, &recordWait)
	if err != nil {
		return Answer{}, err
	}
	a.RecordWait = recordWait
	g.CountDecision(a)
	a.Took = time.Since(start)
	g.Metrics.CheckDuration.WithLabelValues(a.Decision).Observe(a.Took.Seconds())
	return a, nil
}

// parseCredential picks the credential: x-api-key, x-goog-api-key or api-key (a raw API
// key; all of them sent must carry the same key) when present, else an
// Authorization bearer (the scheme in any case, RFC 9110), whose kind its prefix tells.
// Anything malformed is refused without a network call, and so is a request whose two
// headers carry two different Tollgate credentials: every Tollgate credential present
// must be the one that is charged, so a bad one is a 401 even beside a good one (an
// Authorization of another kind beside x-api-key is the client's own, say a provider
// key, and is not ours to judge).
func parseCredential(cred Credentials) (internalv1.CredentialKind, string, bool) {
	for _, raw := range [...]string{cred.GoogAPIKey, cred.AzureAPIKey} {
		if raw == "" {
			continue
		}
		if cred.APIKey != "" && cred.APIKey != raw {
			return 0, "", false // two keys: the one charged must be the only one
		}
		cred.APIKey = raw
	}
	if cred.APIKey != "" {
		key, ok := credential.APIKeyFromHeader(cred.APIKey)
		if !ok || !strings.HasPrefix(key, credential.APIKeyPrefix) {
			return 0, "", false
		}
		if tok, ok := credential.BearerFromHeader(cred.Authorization); ok && credential.IsTollgateToken(tok) && tok != key {
			return 0, "", false
		}
		if joinedLines(key) {
			return 0, "", false
		}
		return internalv1.CredentialKind_CREDENTIAL_KIND_API_KEY, key, true
	}
	tok, ok := credential.BearerFromHeader(cred.Authorization)
	switch {
	case !ok || joinedLines(tok):
		return 0, "", false
	case strings.HasPrefix(tok, credential.APIKeyPrefix):
		return internalv1.CredentialKind_CREDENTIAL_KIND_API_KEY, tok, true
	case strings.HasPrefix(tok, credential.SessionPrefix):
		return internalv1.CredentialKind_CREDENTIAL_KIND_SESSION, tok, true
	}
	return 0, "", false
}

// joinedLines tells whether a secret is a header's lines joined (Credentials.Add, and
// Envoy's header map, join them with a comma): two credentials, never one, refused
// without a network call. No Tollgate secret holds a comma (credential.New).
func joinedLines(secret string) bool { return strings.Contains(secret, ",") }

// check decides; it adds the time spent reading the member's record to recordWait.
func (g *Gate) check(ctx context.Context, cred Credentials, h Hint, recordWait *time.Duration) (a Answer, err error) {
	// Every wait below ends with calls; ctx.Err() still tells whether the caller left.
	calls := &lazyCalls{g: g, parent: ctx}
	defer calls.cancel()
	s, a, answered, err := g.screen(calls, cred)
	if err != nil {
		if ctx.Err() != nil {
			return Answer{}, ctx.Err()
		}
		g.authFailed.Log(g.Log, slog.LevelWarn, "authenticate failed", "error", err)
		// A credential whose identity the cache held until its TTL ran out is still
		// its member's: open mode decides on the member's last-known record and
		// charges the member, as when Redis is down, rather than admitting it
		// unidentified (recorded nowhere, a blocked member let through).
		var lk *identity.LastKnownError
		if errors.As(err, &lk) {
			id := lk.Last
			a := g.failure(ReasonControlPlane, &id, g.Records.LastKnown(id.MemberID))
			a.MemberID, a.OrganizationID = id.MemberID, id.OrganizationID
			return a, nil
		}
		return g.failure(ReasonControlPlane, nil, nil), nil
	}
	if answered {
		return a, nil
	}
	id, gen, genOK, keep := s.id, s.gen, s.genOK, s.keep
	// Every answer from here on is about this member.
	defer func() { a.MemberID, a.OrganizationID = id.MemberID, id.OrganizationID }()

	spec := g.speculate(ctx, &id, h, g.Clock.Now(), gen, genOK)
	// Past the check's deadline (calls), nothing more is waited for: not even the void.
	defer func() { g.drop(spec, calls.Err() == nil) }()
	rec, err := g.readRecord(calls, &id, recordWait)
	if err != nil {
		if ctx.Err() != nil {
			return Answer{}, ctx.Err()
		}
		g.recordFailedAt.Store(g.Clock.Now().UnixNano())
		reason := ReasonControlPlane
		if errors.Is(err, record.ErrRedis) {
			reason = ReasonRedis
		}
		g.recordFailed.Log(g.Log, slog.LevelWarn, "record read failed", "reason", reason, "error", err)
		return g.failure(reason, &id, g.Records.LastKnown(id.MemberID)), nil
	}
	for attempt := 0; ; attempt++ {
		now := g.Clock.Now()
		d := decision.Decide(rec.Record, now, rec.Authoritative)
		if d.Result == decision.Unknown && !rec.Authoritative {
			// The mirror does not know a current window (written before it began).
			if rec, err = g.resolveRecord(calls, &id, recordWait); err != nil {
				if ctx.Err() != nil {
					return Answer{}, ctx.Err()
				}
				return g.failure(ReasonControlPlane, &id, g.Records.LastKnown(id.MemberID)), nil
			}
			continue
		}
		switch d.Result {
		case decision.Inactive:
			return Refusal(ReasonInactiveMember), nil
		case decision.Blocked:
			return g.blocked(&d, id.OrganizationID, id.MemberID, now, keep), nil
		case decision.Suspended:
			return Refusal(ReasonCaptureSuspended), nil
		case decision.Unknown:
			g.undecidable.Log(g.Log, slog.LevelError, "control plane resolved a record that cannot be decided on", "member_id", id.MemberID)
			return g.failure(ReasonControlPlane, &id, nil), nil
		}

		a, retry, err := g.admit(ctx, calls, &id, &d, now, h, spec)
		if err != nil || !retry {
			return a, err
		}
		if attempt > 0 {
			// The fence moved twice during one check: a capture cutover is under
			// way. Refuse rather than chase it.
			return Refusal(ReasonEpochChanged), nil
		}
		// The start was refused for an old tracking version: the mirror is behind the
		// capture fence. Decide again on the control plane's current record.
		if rec, err = g.resolveRecord(calls, &id, recordWait); err != nil {
			if ctx.Err() != nil {
				return Answer{}, ctx.Err()
			}
			return g.failure(ReasonControlPlane, &id, nil), nil
		}
	}
}

// screened is what a check knows of its caller before it reads the member's record.
type screened struct {
	id    identity.Identity
	gen   string // the mirror's generation, when genOK
	genOK bool
	keep  keep
}

// screen runs a check's first steps, the same for every check: the credential parsed,
// its identity looked up, and a kept 429 of a blocked member answered (the identity
// first: a revoked key is a 401, never a kept 429). answered is true with the answer
// when one of them refused; err is the identity look-up's failure.
func (g *Gate) screen(calls context.Context, cred Credentials) (s screened, a Answer, answered bool, err error) {
	kind, secret, ok := parseCredential(cred)
	if !ok {
		return s, Refusal(ReasonNoCredential), true, nil
	}
	if s.id, err = g.Identity.Lookup(calls, kind, secret); err != nil {
		return s, Answer{}, false, err
	}
	if !s.id.Found {
		return s, Refusal(ReasonUnknownCredential), true, nil
	}
	defer func() {
		if answered {
			a.MemberID, a.OrganizationID = s.id.MemberID, s.id.OrganizationID
		}
	}()
	if !s.id.Active {
		return s, Refusal(ReasonInactiveMember), true, nil
	}
	if s.gen, s.genOK = g.Records.Generation(); s.genOK {
		if a, ok := g.Blocks.refusal(s.id.MemberID, g.Clock.Now(), s.gen); ok {
			return s, a, true, nil
		}
	}
	s.keep = g.Blocks.before(s.gen, s.genOK)
	return s, Answer{}, false, nil
}

// readRecord reads the member's record from the mirror, adding the time it took to
// wait (Answer.RecordWait).
func (g *Gate) readRecord(ctx context.Context, id *identity.Identity, wait *time.Duration) (record.Record, error) {
	start := time.Now()
	rec, err := g.Records.Read(ctx, id.OrganizationID, id.MemberID)
	*wait += time.Since(start)
	return rec, err
}

// resolveRecord reads the member's record through the control plane, adding the time
// it took to wait (Answer.RecordWait).
func (g *Gate) resolveRecord(ctx context.Context, id *identity.Identity, wait *time.Duration) (record.Record, error) {
	start := time.Now()
	rec, err := g.Records.Resolve(ctx, id.OrganizationID, id.MemberID)
	*wait += time.Since(start)
	return rec, err
}

// startItem is the durable start of a request admitted on d, at the instant d was made at
// (d.At: the check's, or a later record's, decision.Decide), without its request id
// (given when it is sent: a start built only to be compared needs none), and the basis
// of its reservation (a label of tollgate_enforcer_reservations_total, counted by the
// caller once the start is sent as the request's).
func (g *Gate) startItem(id *identity.Identity, d *decision.Decision, h Hint) (*internalv1.StartItem, string) {
	reservation, basis := g.reservation(d, h, d.At)
	return &internalv1.StartItem{OrganizationId: id.OrganizationID, MemberId: id.MemberID,
		Snapshot: d.Snapshot(id.OrganizationID, id.MemberID), ReservationMicroUsd: reservation, MaxInFlight: d.MaxInFlight}, basis
}

// admit makes the start durable and answers 200: spec's start when it is the one d makes
// (speculate.go), else its own, waiting for it no longer than calls (ctx is the caller's).
// retry asks the caller to decide again on a fresher record (the start was refused for
// an old tracking version).
func (g *Gate) admit(ctx, calls context.Context, id *identity.Identity, d *decision.Decision, now time.Time, h Hint, spec *speculation) (a Answer, retry bool, err error) {
	item, basis := g.startItem(id, d, h)
	out, used := g.take(calls, spec, item)
	if used {
		item, basis, now = spec.item, spec.basis, spec.at
	} else {
		g.drop(spec, true) // gone before this start is made: it must not count against it
		item.RequestId = typeid.New(RequestPrefix)
		out = submit(calls, item, g.Starts.Submit)
	}
	if basis != "" {
		g.Metrics.Reservations.WithLabelValues(basis).Inc()
	}
	reqID, snap := item.GetRequestId(), item.GetSnapshot()
	res, reservation, err := out.res, out.reservation, out.err
	defer func() { a.StartWait = out.waited }()
	if err != nil {
		if ctx.Err() != nil {
			return Answer{}, false, ctx.Err()
		}
		reason := startFailure(startq.Reason(err))
		if calls.Err() != nil {
			reason = ReasonStartQueueDeadline // the check's own deadline, not its caller's
		}
		g.startFailed.Log(g.Log, slog.LevelWarn, "write-ahead start failed", "reason", reason, "error", err)
		a := g.failOpenAdmit(reason, id, d, snap, reqID)
		if a.Decision != FailOpen {
			// Refused: this request is never forwarded, and nobody will settle its start
			// if the failed call recorded it all the same.
			g.voidFailed(item, err, nil)
		}
		return a, false, nil
	}
	switch res.Outcome {
	case internalv1.StartOutcome_START_OUTCOME_RECORDED, internalv1.StartOutcome_START_OUTCOME_DUPLICATE:
		guarded := item.GetReservationMicroUsd() > 0 || item.GetMaxInFlight() > 0
		g.Inflight.Admitted(&inflight.Request{ID: reqID, OrganizationID: id.OrganizationID, MemberID: id.MemberID,
			Snapshot: snap, Durable: true, Guarded: guarded, Reservation: reservation, AdmittedAt: now,
			RefuseUnpriced: d.RefuseUnpriced, PricedModelKeys: d.PricedModelKeys})
		return Answer{Status: 200, Decision: Admitted, Reason: admissionReason(d.State), RequestID: reqID, UsageState: string(d.State),
			Limits: limitsOf(d), Guarded: guarded}, false, nil
	case internalv1.StartOutcome_START_OUTCOME_CAPTURE_SUSPENDED:
		return Refusal(ReasonCaptureSuspended), false, nil
	case internalv1.StartOutcome_START_OUTCOME_EPOCH_CHANGED:
		return Answer{}, true, nil
	case internalv1.StartOutcome_START_OUTCOME_LIMIT_RESERVED:
		if spent := res.Guard; spent != nil && spent.GetUsedMicroUsd() >= spent.GetAllowanceMicroUsd() {
			return spentRefusal(res, d, id.OrganizationID, id.MemberID, now, g.Blocks.askURL), false, nil
		}
		return guardRefusal(res, d.State), false, nil
	case internalv1.StartOutcome_START_OUTCOME_CONCURRENCY_LIMITED:
		return guardRefusal(res, d.State), false, nil
	}
	g.startRefused.Log(g.Log, slog.LevelError, "control plane refused a write-ahead start", "request_id", reqID, "outcome", res.Outcome.String(), "message", res.Message)
	return Refusal(ReasonStartRefused), false, nil
}

// reservation is what the request reserves while in flight: nothing when no winning
// window reserves; else its own worst case when the body tells it (docs/usage-limits.md:
// the worst case replaces the policy's amount, smaller or larger, since it bounds what
// this request can cost), else the policy's amount. The organization's own price keys
// come from the decision's record: a model it prices itself has no catalog worst case.
// The catalog's prices are those in effect at now (pricecatalog.At).
// The basis is the label of tollgate_enforcer_reservations_total ("" when nothing is
// reserved).
func (g *Gate) reservation(d *decision.Decision, h Hint, now time.Time) (int64, string) {
	if d.Reservation <= 0 {
		return 0, ""
	}
	if h.Body == nil || h.Body.Unread {
		// An unread body's input is unknown, and it may be large (a body Envoy cut at
		// max_request_bytes is that long at least): the model's output alone would
		// understate it, so the policy's amount is reserved, as for no body.
		return d.Reservation, "no_body"
	}
	wc := worstcase.Of(pricecatalog.At(now), *h.Body, d.PricedModelKeys)
	if !wc.Known() {
		return d.Reservation, string(wc.Unknown)
	}
	return wc.MicroUSD, "worst_case"
}

// failure answers an infrastructure failure before a decision could be made: 503 in
// closed mode; in open mode an admission on the best-known record (last), which may
// also still block.
func (g *Gate) failure(reason Reason, id *identity.Identity, last *mirror.Record) Answer {
	if !g.FailOpen || !reason.Failure() {
		return Refusal(reason)
	}
	if id == nil {
		// Nobody to charge: admitted, counted, and logged (once per interval, with the
		// count of those left out), because this request's spend is lost to accounting.
		// No request id either, so nothing downstream tries to settle a request the
		// control plane cannot attribute.
		g.openUnidentified.Log(g.Log, slog.LevelWarn, "fail-open admission of an unidentified request: its spend cannot be recorded", "reason", reason)
		return Answer{Status: 200, Decision: FailOpen, Reason: reason, UsageState: string(decision.StateUnknown)}
	}
	now := g.Clock.Now()
	if last != nil {
		// Nothing fresher can be read: what the windows it knows show still refuses,
		// even when it does not know one (decision.DecideLastKnown).
		d := decision.DecideLastKnown(last, now)
		switch d.Result {
		case decision.Blocked:
			// A last-known record: answered, never kept.
			return g.blocked(&d, id.OrganizationID, id.MemberID, now, keep{})
		case decision.Suspended:
			return Refusal(ReasonCaptureSuspended)
		case decision.Inactive:
			return Refusal(ReasonInactiveMember)
		case decision.Admit:
			return g.failOpenAdmit(reason, id, &d, d.Snapshot(id.OrganizationID, id.MemberID), typeid.New(RequestPrefix))
		}
	}
	return g.failOpenAdmit(reason, id, nil, nil, typeid.New(RequestPrefix))
}

// failOpenAdmit admits without a durable start (open mode), or answers 503 (closed).
// The settlement carries snap, so the control plane creates the event then. Without a
// snapshot (no record at all) it carries the admission instant's three windows instead
// (NoRecordSnapshot) and is marked admitted_without_record: the control plane charges
// it on those windows.
func (g *Gate) failOpenAdmit(reason Reason, id *identity.Identity, d *decision.Decision, snap *internalv1.Snapshot, reqID string) Answer {
	if !g.FailOpen || !reason.Failure() {
		return Refusal(reason)
	}
	state := string(decision.StateUnknown)
	if d != nil {
		state = string(d.State)
	}
	g.trackUndurable(reqID, id.OrganizationID, id.MemberID, snap, g.Clock.Now())
	return Answer{Status: 200, Decision: FailOpen, Reason: reason, RequestID: reqID, UsageState: state}
}

// trackUndurable has the tracker follow a request admitted without a durable start (an
// open-mode admission, a trailing request): its settlement carries snap, so the control
// plane records the request then; without a snapshot (no record at all), the admission
// instant's three windows (NoRecordSnapshot), marked admitted_without_record.
func (g *Gate) trackUndurable(reqID, orgID, memberID string, snap *internalv1.Snapshot, now time.Time) {
	withoutRecord := snap == nil
	if withoutRecord {
		snap = NoRecordSnapshot(orgID, memberID, now)
	}
	// Try to hold a settlement slot; if even that fails, the settlement may overflow
	// later, loudly. Admission does not wait on it: that is what open mode means.
	res, _ := g.Settle.Reserve()
	g.Inflight.Admitted(&inflight.Request{ID: reqID, OrganizationID: orgID, MemberID: memberID,
		Snapshot: snap, Durable: false, WithoutRecord: withoutRecord, Reservation: res, AdmittedAt: now})
}

// Trailing opens a request, without a check, for what an admitted session used that no
// admitted request is left to carry once a check refused its member: a transcription
// that ended during a response (a Realtime session is not closed mid-response), the time
// a session billed by its connection's time (OpenAI's GPT-Live) ran between its last
// charged step and the close the refusal causes. The provider bills it whatever the
// member's limit says. It is no admission (the
// member's decisions are not counted; tollgate_enforcer_trailing_requests_total is) and
// has no durable start: like an open-mode admission's, its settlement carries the
// snapshot of the member's last-known record at now (without one, or when that record
// shows the member removed, NoRecordSnapshot, admitted_without_record), and the control
// plane charges it on those windows, beyond the limits if need be. Its id is for the tracker's Finish; "" when nobody is named.
func (g *Gate) Trailing(orgID, memberID string) string {
	if orgID == "" || memberID == "" {
		return ""
	}
	now := g.Clock.Now()
	var snap *internalv1.Snapshot
	if last := g.Records.LastKnown(memberID); last != nil {
		// An Unknown or Inactive decision stops before it reads the windows: its snapshot
		// would name none, and the control plane would refuse the settlement as invalid
		// (the usage lost). Those take the no-record snapshot, which names them.
		if d := decision.Decide(last, now, false); d.Result != decision.Unknown && d.Result != decision.Inactive {
			snap = d.Snapshot(orgID, memberID)
		}
	}
	reqID := typeid.New(RequestPrefix)
	g.trackUndurable(reqID, orgID, memberID, snap, now)
	g.Metrics.TrailingRequests.Inc()
	return reqID
}

// UnknownPolicyID is the policy id of every bucket of a NoRecordSnapshot.
const UnknownPolicyID = "unknown"

// NoRecordSnapshot is the version-2 snapshot of an admission made without any record of
// the member: the three windows of the admission instant (pkg/window bucket ids), policy
// "unknown" with revision 0 and base 0, tracking version 0. It names where the spend
// belongs, not what the limits were.
func NoRecordSnapshot(orgID, memberID string, now time.Time) *internalv1.Snapshot {
	ws := window.Current(now)
	s := &internalv1.Snapshot{Version: 2, AdmittedAtUnixMs: now.UnixMilli(), Buckets: make([]*internalv1.SnapshotBucket, len(ws))}
	for i, w := range ws {
		s.Buckets[i] = &internalv1.SnapshotBucket{Timeframe: string(w.Timeframe), WindowStartUnixMs: w.Start.UnixMilli(),
			WindowEndUnixMs: w.End.UnixMilli(), BucketId: window.BucketID(orgID, memberID, w.Timeframe, w.Start), PolicyId: UnknownPolicyID}
	}
	return s
}
