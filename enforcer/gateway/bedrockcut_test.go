package gateway_test

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/tollgate-dev/tollgate/enforcer/gateway"
)

// Amazon Bedrock's InvokeModel of a Claude model answers an Anthropic message, its usage
// its last member, and the whole answer's counts in its x-amzn-bedrock-*-token-count
// headers. Cut before the usage (the connection broke), the request is settled at the
// headers' counts, which Bedrock bills, not at an estimate from the text that came.
func TestBedrockInvokeCutBeforeItsUsageIsChargedItsHeaders(t *testing.T) {
	const partial = `{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[{"type":"text","text":"Tolls are`
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		// Sent by hand: a length the body never reaches, so that the client sees it cut.
		fmt.Fprintf(buf, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 4096\r\n"+
			"X-Amzn-Bedrock-Input-Token-Count: 1200\r\nX-Amzn-Bedrock-Output-Token-Count: 3000\r\n"+
			"X-Amzn-Bedrock-Cache-Read-Input-Token-Count: 800\r\nX-Amzn-Bedrock-Cache-Write-Input-Token-Count: 100\r\n\r\n%s", partial)
		_ = buf.Flush()
	}))
	defer up.Close()
	e := newEnv(t, up.URL, gateway.Config{})
	res := post(t, e.front.URL+"/model/anthropic.claude-sonnet-4-5-20250929-v1:0/invoke", "tgk_good",
		`{"anthropic_version":"bedrock-2023-05-31","max_tokens":4000,"messages":[{"role":"user","content":"tolls?"}]}`)
	_, _ = io.Copy(io.Discard, bufio.NewReader(res.Body))
	res.Body.Close()
	u := e.tracker.settled(t)
	if u.InputTokens != 2100 || u.OutputTokens != 3000 || u.CachedTokens != 800 || u.CacheCreationTokens != 100 || u.Complete ||
		u.Seen == nil || !u.Seen.InputReported || !u.Seen.OutputReported {
		t.Fatalf("settled in %d out %d cached %d written %d complete %v seen %+v, want the headers' 2100, 3000, 800 and 100, incomplete",
			u.InputTokens, u.OutputTokens, u.CachedTokens, u.CacheCreationTokens, u.Complete, u.Seen)
	}
}
