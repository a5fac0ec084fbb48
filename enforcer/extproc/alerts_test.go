package extproc_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/enforcer/internal/enforcertest"
	"github.com/tollgate-dev/tollgate/enforcer/requestbody"
	"github.com/tollgate-dev/tollgate/internal/alerttest"
)

// TestDecodeBusyFiresTollgateExtProcDecodeBusy: ext_proc refuses compressed bodies 503
// service_gateway_busy when they cannot have their share of the decoding budget in time,
// counted tollgate_enforcer_extproc_request_bodies_total{result="decode_busy"}; until
// 2026-12-03 no alert read it, so admitted requests were refused for want of capacity
// in silence. The enforcer's real registry's change (one body decoded, three refused)
// is repeated each minute for 90 minutes through promtool (internal/alerttest).
func TestDecodeBusyFiresTollgateExtProcDecodeBusy(t *testing.T) {
	entered := make(chan struct{}, 8)
	hold := make(chan struct{})
	e := enforcertest.New(t, enforcertest.Options{})
	plain := []byte(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"` + strings.Repeat("abcdefgh ijklmnop", 1<<14) + `"}]}`)
	body := string(gzipped(plain))
	dec := e.Enforcer.Decoding
	*dec = *requestbody.NewDecoding(int64(len(plain)+len(plain)/2), requestbody.DecodeWait, dec.Active) // one body at a time
	dec.Held = func() { entered <- struct{}{}; <-hold }
	w := e.NewMember(enforcertest.DayLimit(1*enforcertest.USD, true))
	before := alerttest.Scrape(t, e.Registry, "enforcer")
	const n = 4
	ids := make([]string, n)
	for i := range ids {
		ids[i], _ = e.Admit(t, w.Key)
	}
	answers := make(chan bool, n)
	for i := range n {
		go func() {
			answers <- answerBodyOffTheTest(e, ids[i], "/v1/chat/completions", body, "gzip").GetImmediateResponse().GetStatus().GetCode() == 503
		}()
	}
	<-entered
	busy := 0
	for range n - 1 {
		if <-answers {
			busy++
		}
	}
	close(hold)
	<-answers
	if busy != n-1 {
		t.Fatalf("%d of %d bodies refused 503, want %d", busy, n, n-1)
	}
	enforcertest.WaitFor(t, "decode_busy counted", func() bool {
		return e.Metric("tollgate_enforcer_extproc_request_bodies_total", "result", "decode_busy") == n-1
	})
	after := alerttest.Scrape(t, e.Registry, "enforcer")
	if firing := alerttest.Firing(t, before, after); !slices.Contains(firing, "TollgateExtProcDecodeBusy") {
		t.Fatalf("ext_proc refused %d of %d compressed bodies 503 every minute for 90 minutes; TollgateExtProcDecodeBusy does not fire (firing: %v)", busy, n, firing)
	}
}
