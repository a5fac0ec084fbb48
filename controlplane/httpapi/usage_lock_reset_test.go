package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/internal/apitest"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// TestUsageWriteWaitingAcrossTheResetDecidesAtItsLock: a usage-limit write that arrives
// just before 05:00 UTC and waits for the organization's usage lock (held by another
// write: an organization-wide policy change, a slow team change) until after the reset
// is decided when it holds the lock, not when it arrived. Until 2026-12-07 it was
// decided at its arrival: an approval granted the extension of a window that had ended
// before it committed and answered approved (the specification refuses an approval of
// an expired bucket as stale), and a member's request for the day that had just reset
// was stored and answered pending for a window already over.
func TestUsageWriteWaitingAcrossTheResetDecidesAtItsLock(t *testing.T) {
	t.Parallel()
	reset := time.Date(2026, 9, 15, 5, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		// arrive is when the write arrives, release when the lock it waits for is let go.
		arrive, release time.Time
		approve         bool // else the member submits
		status          int
		want            string // the request's status, or the error code
	}{
		{name: "approval arriving 1 ms before the reset, granted after it", arrive: reset.Add(-time.Millisecond), release: reset,
			approve: true, status: http.StatusOK, want: "expired"},
		{name: "approval arriving and granted before the reset", arrive: reset.Add(-2 * time.Millisecond), release: reset.Add(-time.Millisecond),
			approve: true, status: http.StatusOK, want: "approved"},
		{name: "member's request arriving 1 ms before the reset, stored after it", arrive: reset.Add(-time.Millisecond), release: reset.Add(time.Second),
			status: http.StatusNotFound, want: "bucket_not_found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := apitest.New(t)
			o := e.NewOrg(t, "Acme")
			bob := e.AddMember(t, o, "bob", "member")
			p := dayPolicy(t, e, o, "Daily", "0.00001", nil)
			assign(t, e, o, p.ID, map[string]any{"memberId": bob.MemberID})
			setUsed(t, e, bob, window.Day, 10)
			old := bucketID(e, bob, window.Day)
			var r resetRequest
			if tc.approve {
				r = decodeReset(t, submit(t, e, bob, old, "please").Expect(t, http.StatusOK))
			}

			ctx := context.Background()
			holder, err := e.Store.Pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer holder.Rollback(ctx)
			if err := store.LockUsage(ctx, holder, o.OrgID); err != nil {
				t.Fatal(err)
			}
			e.Clock.Set(tc.arrive)
			method, path, body, as := "POST", resetsPath, `{"bucketId":"`+old+`","reason":"please"}`, bob.As()
			if tc.approve {
				path, body, as = resetsPath+"/"+r.ID+"/approve", `{}`, o.As()
			}
			type answer struct {
				status int
				body   []byte
				err    error
			}
			done := make(chan answer, 1)
			go func() {
				req, err := http.NewRequest(method, e.URL+path, strings.NewReader(body))
				if err != nil {
					done <- answer{err: err}
					return
				}
				req.Header.Set("Content-Type", "application/json")
				for _, opt := range as {
					opt(req)
				}
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					done <- answer{err: err}
					return
				}
				defer res.Body.Close()
				b, err := io.ReadAll(res.Body)
				done <- answer{status: res.StatusCode, body: b, err: err}
			}()
			// The write waits for the usage lock; the clock moves on meanwhile.
			deadline := time.Now().Add(30 * time.Second)
			for {
				var waiting int
				if err := e.Store.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
					AND classid = 7311005 AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&waiting); err != nil {
					t.Fatal(err)
				}
				if waiting > 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the write never waited for the usage lock")
				}
				time.Sleep(10 * time.Millisecond)
			}
			e.Clock.Set(tc.release)
			if err := holder.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			a := <-done
			if a.err != nil {
				t.Fatal(a.err)
			}
			var got struct {
				Status string `json:"status"`
				Error  string `json:"error"`
			}
			if err := json.Unmarshal(a.body, &got); err != nil {
				t.Fatalf("%d %s: %v", a.status, a.body, err)
			}
			if a.status != tc.status || (got.Status != tc.want && got.Error != tc.want) {
				t.Fatalf("answered %d %s, want %d %s", a.status, a.body, tc.status, tc.want)
			}
			if tc.want == "expired" {
				if n := usageCount(t, e, `SELECT count(*) FROM usage_buckets WHERE extension_micro_usd <> 0`); n != 0 {
					t.Fatal("an approval decided after the reset granted the ended window's extension")
				}
			}
			if n := usageCount(t, e, `SELECT count(*) FROM usage_reset_requests WHERE status = 'pending' AND window_end <= $1`, tc.release); !tc.approve && n != 0 {
				t.Fatal("a request for a window that had ended was stored as pending")
			}
		})
	}
}
