package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/controlplane/ledger"
	"github.com/tollgate-dev/tollgate/internal/apitest"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
)

// recover without --before follows every page of the pending list while the control
// plane's clock moves between its calls, as a real one does: the default cutoff ("an
// hour ago") is the first page's, not a new one per page. It was recomputed per page, so
// the second page's cursor was refused as "not a cursor of this list" and recover closed
// nothing once more than 100 starts were pending.
func TestRecoverFollowsPagesWhileTheClockMoves(t *testing.T) {
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	alice := e.AddMember(t, owner, "alice", "member")
	key := e.APIKey(t, owner)
	lctx, lcancel := context.WithCancel(context.Background())
	defer lcancel()
	l := ledger.New(ledger.Deps{Store: e.Store, Clock: e.Clock, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	go l.Run(lctx)
	old := e.Clock.Now().Add(-2 * time.Hour)
	var items []*internalv1.StartItem
	for i := range 150 {
		items = append(items, startItem(fmt.Sprintf("req_%03d", i), owner.OrgID, alice.MemberID, old.Add(time.Duration(i)*time.Millisecond)))
	}
	if _, err := l.Start(lctx, items); err != nil {
		t.Fatal(err)
	}
	target, _ := url.Parse(e.URL)
	proxy := httputil.NewSingleHostReverseProxy(target)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proxy.ServeHTTP(w, r)
		e.Clock.Advance(time.Second) // time passes between two calls
	}))
	defer front.Close()

	env := map[string]string{"TOLLGATE_API_URL": front.URL, "TOLLGATE_API_KEY": key}
	stdout, _, line, code := runCLI(context.Background(), env, "", "recover", "--reference", "INC-9", "--apply")
	if code != 0 {
		t.Fatalf("recover: exit %d, %s\n%s", code, line, stdout)
	}
	var pending struct{ Pending []any }
	e.Do(t, "GET", "/v1/gateway/usage-recovery/pending?limit=100", nil, apitest.Key(key)).Expect(t, 200).Decode(t, &pending)
	if len(pending.Pending) != 0 {
		t.Fatalf("%d starts still pending after recover --apply, want 0\n%s", len(pending.Pending), stdout)
	}
}
