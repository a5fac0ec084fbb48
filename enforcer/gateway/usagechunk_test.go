package gateway_test

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/enforcer/gateway"
)

// A chat stream the gateway asked for its usage reaches a client that did not ask
// without the usage event, however the upstream frames it, and is charged that usage;
// a client that asked gets it as sent.
func TestTheUsageEventGoesOnlyToAClientThatAskedForIt(t *testing.T) {
	const (
		chunk = `data: {"object":"chat.completion.chunk","model":"gpt-4o-mini","choices":[{"index":0,"delta":{"content":"hi"}}],"usage":null}` + "\n\n"
		usage = `data: {"object":"chat.completion.chunk","model":"gpt-4o-mini","choices":[],"usage":{"prompt_tokens":11,"completion_tokens":22}}` + "\n\n"
		done  = "data: [DONE]\n\n"
	)
	for _, framing := range []string{"one write", "the usage event split over two flushes", "an announced length"} {
		t.Run(framing, func(t *testing.T) {
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				switch framing {
				case "one write":
					_, _ = io.WriteString(w, chunk+usage+done)
				case "the usage event split over two flushes":
					_, _ = io.WriteString(w, chunk+usage[:40])
					w.(http.Flusher).Flush()
					time.Sleep(20 * time.Millisecond)
					_, _ = io.WriteString(w, usage[40:]+done)
				case "an announced length":
					w.Header().Set("Content-Length", fmt.Sprint(len(chunk+usage+done)))
					_, _ = io.WriteString(w, chunk+usage+done)
				}
			}))
			defer up.Close()
			for _, asked := range []bool{false, true} {
				e := newEnv(t, up.URL, gateway.Config{})
				body := chatBody
				if asked {
					body = `{"model":"gpt-4o-mini","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`
				}
				res := post(t, e.front.URL+"/v1/chat/completions", "tgk_good", body)
				got, err := io.ReadAll(res.Body)
				res.Body.Close()
				want := chunk + done
				if asked {
					want = chunk + usage + done
				}
				if err != nil || string(got) != want {
					t.Fatalf("asked %v: the client got %q (%v), want %q", asked, got, err, want)
				}
				if u := e.tracker.settled(t); u.InputTokens != 11 || u.OutputTokens != 22 || !u.Complete {
					t.Fatalf("asked %v: settled %+v, want the usage event's 11 and 22, complete", asked, u)
				}
			}
		})
	}
}

// A stream the provider compressed anyway passes as it came: its events are not read
// apart on the way.
func TestACompressedStreamPassesAsItCame(t *testing.T) {
	gz := gzipped(t, `data: {"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2}}`+"\n\ndata: [DONE]\n\n")
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Content-Encoding", "gzip")
		_, _ = w.Write(gz)
	}))
	defer up.Close()
	e := newEnv(t, up.URL, gateway.Config{})
	res := send(t, "POST", e.front.URL+"/v1/chat/completions", "tgk_good", strings.NewReader(chatBody), "Accept-Encoding", "gzip")
	got, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if string(got) != string(gz) {
		t.Fatalf("the client got %d bytes, want the provider's %d as they came", len(got), len(gz))
	}
	if u := e.tracker.settled(t); u.InputTokens != 1 || u.OutputTokens != 2 {
		t.Fatalf("settled %+v", u)
	}
}

func gzipped(t *testing.T, s string) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := io.WriteString(zw, s); err != nil || zw.Close() != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}
