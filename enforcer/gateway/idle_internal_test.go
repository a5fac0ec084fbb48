package gateway

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/enforcer/responseusage"
)

// The idle timer's callback (idleExpired) may already be running when the handler stops
// the timer in done (Stop cannot stop a callback begun): the relay's write to the client
// had failed (the client reset its stream) just as the timer fired, leaving the state
// writeBusy. Once the handler returned, that callback must not touch the response
// writer: over HTTP/2 (h2c, which the gateway's server speaks) net/http has released the
// stream's state, and SetWriteDeadline dereferenced nil in the timer's goroutine, a
// panic no handler recovers, which ended the enforcer. Forced here: the callback runs
// after done, with the write marked under way.
func TestIdleTimerAfterTheHandlerReturnedLeavesTheWriterAlone(t *testing.T) {
	rt, err := NewRoute("/", "http://127.0.0.1:1", "", "")
	if err != nil {
		t.Fatal(err)
	}
	m := Metrics{Requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "r"}, []string{"outcome"}),
		Active: prometheus.NewGauge(prometheus.GaugeOpts{Name: "a"}), FirstByte: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "f"})}
	gw, err := New(Config{Routes: []Route{rt}}, nil, nil, responseusage.Limits{}, m, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	left := make(chan *proxied, 1)
	front := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := gw.take(w, r)
		p.cancel = func() {}
		p.rc = http.NewResponseController(w)
		p.idle = time.AfterFunc(time.Hour, p.idleExpired)
		_, _ = io.WriteString(w, "chunk")
		p.writing.Store(writeBusy) // a write under way when it failed
		p.done()
		left <- p
	}))
	front.Config.Protocols = new(http.Protocols)
	front.Config.Protocols.SetUnencryptedHTTP2(true)
	front.Start()
	defer front.Close()
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	defer tr.CloseIdleConnections()
	res, err := (&http.Client{Transport: tr}).Get(front.URL)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	p := <-left
	// The handler has returned once its response ended; net/http let go of the stream.
	time.Sleep(50 * time.Millisecond)
	defer func() {
		if v := recover(); v != nil {
			t.Fatalf("the idle timer's callback, run after the handler returned, panicked: %v", v)
		}
	}()
	p.idleExpired()
}
