package mirrorsync_test

import (
	"context"
	"errors"
	"testing"
	"time"

	at "github.com/tollgate-dev/tollgate/controlplane/internal/accountingtest"
	"github.com/tollgate-dev/tollgate/controlplane/mirrorsync"
	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/internal/storetest"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
)

// An entitlement change (a lowered limit, an approved extension, a suspended capture,
// a removed member) is committed, and the bump of its members' mirror versions that
// follows fails (Postgres restarted or failed over just after the COMMIT). The record
// cannot be rewritten: the older one, built on the entitlement from before the change,
// must not stay trusted, and the enforcers must still drop what they decided on it (a
// member blocked before an approved extension). They did not: the member was only
// remembered in this process's memory, the record stayed, and no invalidation was
// published, so enforcers kept the old entitlement and their cached blocks until the
// next maintenance round, or, when the process ended first, until the record's TTL.
// Now the record is deleted, as when a refresh cannot read Postgres, and the
// invalidation is published all the same: the enforcers resolve the member.
func TestEntitlementChangeWhoseBumpFailsForgetsTheOlderRecord(t *testing.T) {
	e := at.New(t, at.Options{})
	org, ms := e.Org(t, 1)
	m := ms[0]
	settleOne(t, e, org, m, 100)
	if spend, _, err := monthSpend(t, e, m); err != nil || spend != 100 {
		t.Fatalf("record after the settlement: %d %v, want 100", spend, err)
	}

	broken, err := store.Open(e.Ctx, storetest.URLFor(storetest.Database(e.Store)))
	if err != nil {
		t.Fatal(err)
	}
	broken.Close()
	w := mirrorsync.New(mirrorsync.Deps{Store: broken, Redis: e.Redis, Layout: e.Layout, Clock: e.Clock, Log: e.Log})

	ctx, cancel := context.WithTimeout(e.Ctx, 10*time.Second)
	defer cancel()
	sub := e.Redis.Subscribe(ctx, e.Layout.InvalidationChannel())
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}

	w.EntitlementChanged(ctx, org, []string{m})

	if n, _ := w.Remembered(); n != 1 {
		t.Fatalf("%d members remembered for repair, want 1", n)
	}
	if spend, _, err := monthSpend(t, e, m); !errors.Is(err, mirror.ErrUnknown) {
		t.Fatalf("Redis still has the record from before the entitlement change (spend %d, err %v); want none", spend, err)
	}
	msg, err := sub.ReceiveMessage(ctx)
	if err != nil || msg.Payload != mirror.KindRecord+":"+m {
		t.Fatalf("invalidation %v %v, want %s:%s", msg, err, mirror.KindRecord, m)
	}
}
