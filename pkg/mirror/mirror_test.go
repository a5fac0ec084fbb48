package mirror_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/internal/testredis"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
)

func record(member string, version int64, gen string, used int64) *mirror.Record {
	return &mirror.Record{Version: version, Generation: gen,
		Entitlement: &internalv1.Entitlement{OrganizationId: "org_x", MemberId: member, CaptureEnabled: true, TrackingVersion: 1},
		Spend:       []*internalv1.WindowSpend{{Timeframe: "day", WindowStartUnixMs: 1000, UsedMicroUsd: used}},
	}
}

// Versions come from Postgres and only go up, so a lower version is an older record
// whatever generation it is written under. A rebuild under a new generation that read
// its record before a settlement committed must not replace the settlement's record,
// written meanwhile under the old generation by a control plane that had not adopted
// the new one yet (it did: readers then trusted a record without the settlement).
func TestWriteNeverLowersTheVersion(t *testing.T) {
	rdb, l := testredis.New(t)
	ctx := context.Background()
	for _, step := range []struct {
		name    string
		rec     *mirror.Record
		written bool
		// gen and used: the record stored afterwards.
		gen  string
		used int64
	}{
		{"first write", record("om_a", 5, "g1", 100), true, "g1", 100},
		{"older version ignored", record("om_a", 4, "g1", 50), false, "g1", 100},
		{"same version ignored", record("om_a", 5, "g1", 70), false, "g1", 100},
		{"newer version wins", record("om_a", 6, "g1", 120), true, "g1", 120},
		{"older version of a new generation ignored", record("om_a", 5, "g2", 10), false, "g1", 120},
		{"same version of a new generation ignored", record("om_a", 6, "g2", 10), false, "g1", 120},
		{"newer version of a new generation wins", record("om_a", 7, "g2", 130), true, "g2", 130},
		{"newer version of the old generation wins", record("om_a", 8, "g1", 140), true, "g1", 140},
		{"older version of the old generation ignored", record("om_a", 7, "g1", 10), false, "g1", 140},
	} {
		ok, err := l.Write(ctx, rdb, step.rec, time.Hour)
		if err != nil || ok != step.written {
			t.Fatalf("%s: written=%v err=%v", step.name, ok, err)
		}
		got, err := l.Read(ctx, rdb, "om_a", step.gen)
		if err != nil {
			t.Fatalf("%s: read under %s: %v", step.name, step.gen, err)
		}
		if used, _ := mirror.SpendOf(got, "day", time.UnixMilli(1000)); used != step.used {
			t.Fatalf("%s: used %d, want %d", step.name, used, step.used)
		}
	}
	if ttl := rdb.PTTL(ctx, l.MemberKey("om_a")).Val(); ttl <= 0 || ttl > time.Hour {
		t.Fatalf("ttl %v", ttl)
	}
}

// ReadVersions answers the stored version whatever the generation (a rebuild moves
// Postgres past it), 0 for no record or a version that is not a number.
func TestReadVersionsWhateverTheGeneration(t *testing.T) {
	rdb, l := testredis.New(t)
	ctx := context.Background()
	for _, rec := range []*mirror.Record{record("om_a", 7, "g1", 1), record("om_b", 9, "g2", 1), record("om_c", 3, "", 1)} {
		if ok, err := l.Write(ctx, rdb, rec, time.Hour); err != nil || !ok {
			t.Fatalf("write: %v %v", ok, err)
		}
	}
	rdb.HSet(ctx, l.MemberKey("om_d"), "v", "garbage")
	ids := []string{"om_a", "om_b", "om_c", "om_d", "om_none"}
	versions, errs := l.ReadVersions(ctx, rdb, ids)
	for i, want := range []int64{7, 9, 3, 0, 0} {
		if errs[i] != nil || versions[i] != want {
			t.Errorf("%s: version %d (%v), want %d", ids[i], versions[i], errs[i], want)
		}
	}
	if v, errs := l.ReadVersions(ctx, rdb, nil); len(v) != 0 || len(errs) != 0 {
		t.Fatalf("no members: %v %v", v, errs)
	}
}

func TestReadRefusesWhatItCannotTrust(t *testing.T) {
	rdb, l := testredis.New(t)
	ctx := context.Background()
	if _, err := l.Read(ctx, rdb, "om_missing", "g1"); !errors.Is(err, mirror.ErrUnknown) {
		t.Fatalf("missing record: %v", err)
	}
	if _, err := l.Write(ctx, rdb, record("om_b", 1, "g1", 5), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Read(ctx, rdb, "om_b", "g2"); !errors.Is(err, mirror.ErrUnknown) {
		t.Fatalf("record of another generation: %v", err)
	}
	if _, err := l.Read(ctx, rdb, "om_b", ""); !errors.Is(err, mirror.ErrUnknown) {
		t.Fatalf("no current generation: %v", err)
	}
	rdb.HSet(ctx, l.MemberKey("om_b"), "r", "not protobuf \xff\xff")
	if _, err := l.Read(ctx, rdb, "om_b", "g1"); !errors.Is(err, mirror.ErrUnknown) {
		t.Fatalf("corrupt record: %v", err)
	}
	if _, ok := mirror.SpendOf(record("om_c", 1, "g", 1), "day", time.UnixMilli(2000)); ok {
		t.Fatal("a record knows a window it was not written for")
	}
}

func TestGenerationAndInvalidations(t *testing.T) {
	rdb, l := testredis.New(t)
	ctx := context.Background()
	if g, err := l.Generation(ctx, rdb); err != nil || g != "" {
		t.Fatalf("fresh generation %q %v", g, err)
	}
	if err := l.SetGeneration(ctx, rdb, "g7"); err != nil {
		t.Fatal(err)
	}
	if g, _ := l.Generation(ctx, rdb); g != "g7" {
		t.Fatalf("generation %q", g)
	}
	sub := rdb.Subscribe(ctx, l.InvalidationChannel())
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Publish(ctx, rdb, mirror.Invalidation{Kind: "member", ID: "om_a"}); err != nil {
		t.Fatal(err)
	}
	msg, err := sub.ReceiveMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	inv, err := mirror.ParseInvalidation(msg.Payload)
	if err != nil || inv != (mirror.Invalidation{Kind: "member", ID: "om_a"}) {
		t.Fatalf("invalidation %+v %v", inv, err)
	}
	// Several at once, in order: what the control plane sends after an entitlement
	// change of many members.
	many := []mirror.Invalidation{{Kind: mirror.KindRecord, ID: "om_a"}, {Kind: mirror.KindRecord, ID: "om_b"}, {Kind: mirror.KindMember, ID: "om_c"}}
	if err := l.PublishMany(ctx, rdb, many); err != nil {
		t.Fatal(err)
	}
	for _, want := range many {
		msg, err := sub.ReceiveMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := mirror.ParseInvalidation(msg.Payload); err != nil || got != want {
			t.Fatalf("invalidation %+v %v, want %+v", got, err, want)
		}
	}
	for _, tc := range []struct {
		msg  string
		want mirror.Invalidation // zero: refused
	}{
		{"credential:ab12", mirror.Invalidation{Kind: mirror.KindCredential, ID: "ab12"}},
		{"member:om_a", mirror.Invalidation{Kind: mirror.KindMember, ID: "om_a"}},
		{"api_key:apk_a", mirror.Invalidation{Kind: mirror.KindAPIKey, ID: "apk_a"}},
		{"record:om_a", mirror.Invalidation{Kind: mirror.KindRecord, ID: "om_a"}},
		{"record:om:a", mirror.Invalidation{Kind: mirror.KindRecord, ID: "om:a"}},
		{"", mirror.Invalidation{}},
		{"member", mirror.Invalidation{}},
		{"member:", mirror.Invalidation{}},
		{"record:", mirror.Invalidation{}},
		{"records:om_a", mirror.Invalidation{}},
		{"Record:om_a", mirror.Invalidation{}},
		{":om_a", mirror.Invalidation{}},
		{"planet:x", mirror.Invalidation{}},
	} {
		got, err := mirror.ParseInvalidation(tc.msg)
		if tc.want == (mirror.Invalidation{}) {
			if err == nil {
				t.Errorf("%q accepted as %+v", tc.msg, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: %+v %v, want %+v", tc.msg, got, err, tc.want)
		}
		if got.Encode() != tc.msg {
			t.Errorf("%+v encodes as %q, want %q", got, got.Encode(), tc.msg)
		}
	}
	if k := l.MemberKey("om_a"); k != l.Prefix+"{om_a}:rec" {
		t.Fatalf("key %q", k)
	}
}

func TestReadManyMatchesRead(t *testing.T) {
	rdb, l := testredis.New(t)
	ctx := context.Background()
	for _, rec := range []*mirror.Record{record("om_a", 1, "g1", 10), record("om_b", 1, "g1", 20), record("om_old", 1, "g0", 30)} {
		if _, err := l.Write(ctx, rdb, rec, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	ids := []string{"om_a", "om_missing", "om_b", "om_old", "om_a"}
	recs, errs, err := l.ReadMany(ctx, rdb, ids, "g1")
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		one, oneErr := l.Read(ctx, rdb, id, "g1")
		if !errors.Is(errs[i], oneErr) && errs[i] != oneErr {
			t.Fatalf("%s: ReadMany err %v, Read err %v", id, errs[i], oneErr)
		}
		if (one == nil) != (recs[i] == nil) || (one != nil && one.GetSpend()[0].GetUsedMicroUsd() != recs[i].GetSpend()[0].GetUsedMicroUsd()) {
			t.Fatalf("%s: ReadMany %v, Read %v", id, recs[i], one)
		}
	}
}

// TestReplaceGenerationAndMasters: the generation is replaced only while it is still
// the one seen (two control planes deciding at once agree on one), and a single server
// has one master replication id, which only a replacement removes.
func TestReplaceGenerationAndMasters(t *testing.T) {
	rdb, l := testredis.New(t)
	ctx := context.Background()
	if g, ok, err := l.ReplaceGeneration(ctx, rdb, "g1", "g2"); err != nil || ok || g != "" {
		t.Fatalf("replace without a generation: %q %v %v", g, ok, err)
	}
	if err := l.SetGeneration(ctx, rdb, "g1"); err != nil {
		t.Fatal(err)
	}
	if g, ok, err := l.ReplaceGeneration(ctx, rdb, "g1", "g2"); err != nil || !ok || g != "g2" {
		t.Fatalf("first replace: %q %v %v", g, ok, err)
	}
	if g, ok, err := l.ReplaceGeneration(ctx, rdb, "g1", "g3"); err != nil || ok || g != "g2" {
		t.Fatalf("second replace of the same generation: %q %v %v", g, ok, err)
	}
	m, err := mirror.ReadMasters(ctx, rdb)
	if err != nil || len(m) != 1 {
		t.Fatalf("masters %v: %v", m, err)
	}
	if m.Replaced(m.Clone()) {
		t.Fatal("the same masters reported replaced")
	}
	grown := m.Clone()
	grown["another"] = true
	if m.Replaced(grown) || !grown.Replaced(m) {
		t.Fatal("a new master is not a replacement; a missing one is")
	}
}

// Only a Redis that will never answer INFO is "refused": an unknown command or an ACL
// that forbids it. An error reply that passes (here BUSY, from a real redis-server
// running a long script) is about now, like a node that cannot be reached.
func TestRefusedIsOnlyForGood(t *testing.T) {
	srv := testredis.StartServer(t)
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer admin.Close()
	if err := admin.Do(ctx, "ACL", "SETUSER", "noinfo", "on", "nopass", "~*", "+@all", "-info").Err(); err != nil {
		t.Fatal(err)
	}
	noInfo := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "noinfo", Password: "any"})
	defer noInfo.Close()
	if _, err := mirror.ReadMasters(ctx, noInfo); err == nil || !mirror.Refused(err) {
		t.Fatalf("INFO forbidden by an ACL: %v, want a refusal", err)
	}
	if err := noInfo.Do(ctx, "no-such-command").Err(); !mirror.Refused(err) {
		t.Fatalf("an unknown command not taken as refused: %v", err)
	}
	if mirror.Refused(errors.New("dial tcp: connection refused")) {
		t.Fatal("a network error taken for a refused INFO")
	}

	// A script that runs until killed: other clients are answered BUSY meanwhile.
	if err := admin.ConfigSet(ctx, "busy-reply-threshold", "20").Err(); err != nil {
		t.Fatal(err)
	}
	script := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	defer script.Close()
	running := make(chan error, 1)
	go func() { running <- script.Eval(ctx, "while true do end", nil).Err() }()
	var err error
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if _, err = mirror.ReadMasters(ctx, admin); err != nil {
			break
		}
	}
	if err == nil || !redis.HasErrorPrefix(err, "BUSY") {
		t.Fatalf("premise: INFO during a long script answered %v, want BUSY", err)
	}
	if mirror.Refused(err) {
		t.Errorf("%q taken for a refusal for good", err)
	}
	if err := admin.Do(ctx, "SCRIPT", "KILL").Err(); err != nil {
		t.Fatal(err)
	}
	<-running
}

// dropReplID is a go-redis hook that removes master_replid from INFO's answer, as some
// Redis-compatible servers and proxies answer (a Dragonfly replica did).
type dropReplID struct{}

func (dropReplID) DialHook(next redis.DialHook) redis.DialHook { return next }
func (dropReplID) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if c, ok := cmd.(*redis.StringCmd); ok && err == nil && cmd.Name() == "info" {
			var kept []string
			for _, line := range strings.Split(c.Val(), "\n") {
				if !strings.HasPrefix(line, "master_replid:") {
					kept = append(kept, line)
				}
			}
			c.SetVal(strings.Join(kept, "\n"))
		}
		return err
	}
}
func (dropReplID) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A server whose INFO replication never carries master_replid will never carry it: it
// cannot be watched, as one that refuses INFO. Taken for a failure of now, it made every
// enforcer doubt for good (every check resolved through the control plane) and every
// maintenance round of the control plane end before its repairs.
func TestInfoWithoutReplicationIDIsRefused(t *testing.T) {
	rdb, _ := testredis.New(t)
	rdb.AddHook(dropReplID{})
	_, err := mirror.ReadMasters(context.Background(), rdb)
	if err == nil {
		t.Fatal("premise: INFO without master_replid read as masters")
	}
	if !mirror.Refused(err) {
		t.Fatalf("INFO without master_replid: %v, not taken as refused for good", err)
	}
}
