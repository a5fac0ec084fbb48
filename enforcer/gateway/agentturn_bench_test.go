package gateway_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/tollgate-dev/tollgate/enforcer/gateway"
	"github.com/tollgate-dev/tollgate/enforcer/internal/agentbody"
)

// BenchmarkAgentTurn is one turn of a coding agent: an OpenAI chat completions stream
// of about 200 KiB (agentbody.OpenAIChat), one at a time, straight to a loopback
// upstream (path=direct) and through the gateway (path=gateway), which reads the body's
// estimate, asks the stream for its usage and relays the short answer. The difference is
// what the gateway adds to such a turn: its time, and its CPU (cpu-us/op is the whole
// process's: client, gateway and upstream).
//
//	go test -run '^$' -bench AgentTurn -count 6 ./enforcer/gateway > turn.txt
//	benchstat -col /path turn.txt
func BenchmarkAgentTurn(b *testing.B) {
	body := agentbody.OpenAIChat(200 << 10)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, err := io.ReadAll(r.Body)
		if err != nil || len(got) < len(body) {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"model\":\"gpt-5\",\"choices\":[{\"delta\":{\"content\":\"Done.\"}}]}\n\n"+
			"data: {\"model\":\"gpt-5\",\"choices\":[],\"usage\":{\"prompt_tokens\":51000,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n")
	}))
	b.Cleanup(up.Close)
	e := newEnv(b, up.URL, gateway.Config{})
	for _, c := range []struct {
		path, url string
		settled   bool
	}{{"path=direct", up.URL, false}, {"path=gateway", e.front.URL, true}} {
		b.Run(c.path, func(b *testing.B) {
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
			cpu0 := processCPU(b)
			for b.Loop() {
				req, _ := http.NewRequest("POST", c.url+"/v1/chat/completions", bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer tgk_good")
				req.Header.Set("Content-Type", "application/json")
				res, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				answer, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if res.StatusCode != 200 || !bytes.Contains(answer, []byte("[DONE]")) {
					b.Fatalf("status %d: %s", res.StatusCode, answer)
				}
				if c.settled {
					<-e.tracker.done
					e.tracker.reset()
				}
			}
			b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N), "cpu-us/op")
		})
	}
}
