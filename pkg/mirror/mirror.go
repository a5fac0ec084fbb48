package mirror

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
)

// Layout names the keys. Prefix isolates installations (and tests) sharing one Redis.
type Layout struct {
	Prefix string
}

// DefaultLayout is what both programs use unless configured otherwise.
var DefaultLayout = Layout{Prefix: "tg:"}

// MemberKey is the key of a member's record. The member id inside braces is the Redis
// Cluster hash tag, so everything about one member lives in one slot.
func (l Layout) MemberKey(memberID string) string {
	return l.Prefix + "{" + memberID + "}:rec"
}

// ContainerKey is the key of a container's charged time (package
// enforcer/containersession): until when, in Unix milliseconds, its minutes are charged.
// The enforcer's own, not the control plane's. The container id inside braces is the
// Redis Cluster hash tag: ContainerRequestKey lives in its slot.
func (l Layout) ContainerKey(containerID string) string {
	return l.Prefix + "container:{" + containerID + "}"
}

// ContainerRequestKey is the key of what one request was charged of a container's
// minutes, so that its settlement, computed again, charges the same.
func (l Layout) ContainerRequestKey(containerID, requestID string) string {
	return l.Prefix + "container:{" + containerID + "}:request:" + requestID
}

// StreamOptionsRefusalsKey is the key of the upstreams and models that refused the
// stream_options the enforcers add to streams (package enforcer/streamoptions, Share),
// shared by every enforcer. The enforcer's own, not the control plane's.
func (l Layout) StreamOptionsRefusalsKey() string { return l.Prefix + "stream_options:refusals" }

// GenerationKey holds the current generation id. Its absence means Redis lost its data.
func (l Layout) GenerationKey() string { return l.Prefix + "generation" }

// InvalidationChannel carries invalidations (see Invalidation).
func (l Layout) InvalidationChannel() string { return l.Prefix + "invalidate" }

// Record is a member's mirrored accounting state.
type Record = internalv1.MirrorRecord

//go:embed write.lua
var writeSource string

var writeScript = redis.NewScript(writeSource)

// Write stores rec under its member's key unless a record with an equal or higher
// version is already there, whatever generation it was written under (write.lua says
// why). It reports whether it wrote.
func (l Layout) Write(ctx context.Context, rdb redis.Scripter, rec *Record, ttl time.Duration) (bool, error) {
	if rec.GetEntitlement().GetMemberId() == "" {
		return false, errors.New("mirror: record without member id")
	}
	blob, err := proto.Marshal(rec)
	if err != nil {
		return false, err
	}
	n, err := writeScript.Run(ctx, rdb, []string{l.MemberKey(rec.GetEntitlement().GetMemberId())},
		rec.GetVersion(), rec.GetGeneration(), blob, ttl.Milliseconds()).Int()
	return n == 1, err
}

// ErrUnknown says the record cannot be trusted: missing, unreadable, or written under
// another generation. Callers resolve through the control plane.
var ErrUnknown = errors.New("mirror: record unknown")

// Read returns a member's record if it was written under generation. One round trip.
func (l Layout) Read(ctx context.Context, rdb redis.Cmdable, memberID, generation string) (*Record, error) {
	f, err := l.ReadFields(ctx, rdb, l.MemberKey(memberID))
	if err != nil {
		return nil, err
	}
	return f.Decode(generation)
}

// ReadMany reads several members' records in one pipelined round trip (on Redis Cluster,
// one per node involved), with the same rules as Read for each. records[i] and errs[i]
// answer memberIDs[i]; err is set when the round trip itself failed.
func (l Layout) ReadMany(ctx context.Context, rdb redis.Cmdable, memberIDs []string, generation string) (records []*Record, errs []error, err error) {
	keys := make([]string, len(memberIDs))
	for i, id := range memberIDs {
		keys[i] = l.MemberKey(id)
	}
	fields, errs := make([]Fields, len(keys)), make([]error, len(keys))
	if err := l.ReadManyFields(ctx, rdb, keys, fields, errs); err != nil {
		return nil, nil, err
	}
	records = make([]*Record, len(keys))
	for i := range fields {
		if errs[i] == nil {
			records[i], errs[i] = fields[i].Decode(generation)
		}
	}
	return records, errs, nil
}

// Fields are a member key's fields as stored: the generation it was written under and
// the encoded record. Readers that keep decoded records compare them to skip decoding
// an unchanged record (equal fields decode to equal records).
type Fields struct {
	Generation, Blob string
}

// ReadFields reads the fields of a member key (MemberKey). One round trip.
func (l Layout) ReadFields(ctx context.Context, rdb redis.Cmdable, key string) (Fields, error) {
	vals, err := rdb.HMGet(ctx, key, "g", "r").Result()
	if err != nil {
		return Fields{}, err
	}
	return fieldsOf(vals), nil
}

// ReadManyFields reads several member keys in one pipelined round trip (as ReadMany),
// into fields[i] and errs[i] (both len(keys)). The error is set only when no key could
// be read (the round trip itself failed): on Redis Cluster the pipeline goes to several
// masters, and one that is down (failing over) fails only the keys it holds, not those
// of the healthy shards read in the same round trip.
func (l Layout) ReadManyFields(ctx context.Context, rdb redis.Cmdable, keys []string, fields []Fields, errs []error) error {
	cmds := make([]*redis.SliceCmd, len(keys))
	pipe := rdb.Pipeline()
	for i, key := range keys {
		cmds[i] = pipe.HMGet(ctx, key, "g", "r")
	}
	_, first := pipe.Exec(ctx)
	failed := 0
	for i, c := range cmds {
		vals, err := c.Result()
		fields[i], errs[i] = Fields{}, err
		if err == nil {
			fields[i] = fieldsOf(vals)
		} else {
			failed++
		}
	}
	if failed == len(cmds) && first != nil && !errors.Is(first, redis.Nil) {
		return first
	}
	return nil
}

func fieldsOf(vals []any) Fields {
	var f Fields
	if len(vals) == 2 {
		f.Generation, _ = vals[0].(string)
		f.Blob, _ = vals[1].(string)
	}
	return f
}

// Usable reports whether the fields hold a record written under generation; a record
// that is not usable is unknown (ErrUnknown).
func (f Fields) Usable(generation string) bool {
	return f.Blob != "" && generation != "" && f.Generation == generation
}

// Decode turns the fields into a record written under generation, or ErrUnknown.
func (f Fields) Decode(generation string) (*Record, error) {
	if !f.Usable(generation) {
		return nil, ErrUnknown
	}
	rec := &Record{}
	if err := proto.Unmarshal([]byte(f.Blob), rec); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnknown, err)
	}
	return rec, nil
}

// Generation reads the current generation; "" when Redis has none (lost its data, or
// was never synced).
func (l Layout) Generation(ctx context.Context, rdb redis.Cmdable) (string, error) {
	g, err := rdb.Get(ctx, l.GenerationKey()).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return g, err
}

// SetGeneration installs a new generation id. Records of older generations become
// unknown at once.
func (l Layout) SetGeneration(ctx context.Context, rdb redis.Cmdable, generation string) error {
	return rdb.Set(ctx, l.GenerationKey(), generation, 0).Err()
}

// The kinds of invalidation.
const (
	// KindCredential: forget one credential's identity (ID is the hex SHA-256 of it).
	// The control plane publishes it for sessions: signed out, revoked by a password
	// reset, or of a user whose active organization changed.
	KindCredential = "credential"
	// KindMember: the member was removed; forget every identity of theirs (ID is the
	// member id) and anything decided about them.
	KindMember = "member"
	// KindAPIKey: the API key was revoked (ID is the key id).
	KindAPIKey = "api_key"
	// KindRecord: the member's record was rewritten after an entitlement change
	// (winner, policy revision, extension, capture fence, removal) that can lift a
	// block; forget decisions made on the old record (ID is the member id). Spend
	// changes are not announced: within a window spend only grows, so they can only
	// keep a block.
	KindRecord = "record"
)

// Invalidation tells enforcers to forget what they cached about a credential or a
// member.
type Invalidation struct {
	// Kind is one of the Kind constants.
	Kind string
	ID   string
}

// Encode renders an invalidation message.
func (i Invalidation) Encode() string { return i.Kind + ":" + i.ID }

// ParseInvalidation reads a message of the invalidation channel.
func ParseInvalidation(s string) (Invalidation, error) {
	kind, id, ok := strings.Cut(s, ":")
	switch {
	case !ok || id == "":
		return Invalidation{}, fmt.Errorf("mirror: malformed invalidation %q", s)
	case kind != KindCredential && kind != KindMember && kind != KindAPIKey && kind != KindRecord:
		return Invalidation{}, fmt.Errorf("mirror: unknown invalidation kind %q", kind)
	}
	return Invalidation{Kind: kind, ID: id}, nil
}

// Publish sends an invalidation to every enforcer.
func (l Layout) Publish(ctx context.Context, rdb redis.Cmdable, inv Invalidation) error {
	return rdb.Publish(ctx, l.InvalidationChannel(), inv.Encode()).Err()
}

// publishChunk bounds the messages of one PublishMany round trip.
const publishChunk = 512

// PublishMany sends invalidations in pipelined round trips (an organization-wide policy
// change announces every member it touched). It returns the first error.
func (l Layout) PublishMany(ctx context.Context, rdb redis.Cmdable, invs []Invalidation) error {
	var first error
	for len(invs) > 0 {
		n := min(len(invs), publishChunk)
		pipe := rdb.Pipeline()
		for _, inv := range invs[:n] {
			pipe.Publish(ctx, l.InvalidationChannel(), inv.Encode())
		}
		if _, err := pipe.Exec(ctx); err != nil && first == nil {
			first = err
		}
		invs = invs[n:]
	}
	return first
}

// SpendOf returns the used amount of the record for a window, and whether the record
// knows that window. A record from before a window began does not know it: its spend
// for the new window is zero only if nothing was charged since, which the reader cannot
// tell, so it must resolve.
func SpendOf(rec *Record, timeframe string, windowStart time.Time) (int64, bool) {
	for _, s := range rec.GetSpend() {
		if s.GetTimeframe() == timeframe && s.GetWindowStartUnixMs() == windowStart.UnixMilli() {
			return s.GetUsedMicroUsd(), true
		}
	}
	return 0, false
}
