package e2e_test

import (
	"bytes"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/e2e/fakellm"
	"github.com/tollgate-dev/tollgate/pkg/pricecatalog"
)

// TestUploadsAreChargedAlikeThroughEnvoyAndTheGateway: the same multipart uploads, sent
// once through the gateway and once through deploy/envoy/envoy.yaml's filter chain, are
// charged the same, at the model their form names: a gpt-4o-transcribe transcription
// (its answer reports token usage and names no model) at the catalog's price of
// gpt-4o-transcribe, and a gpt-image-1 image edit whose answer reports no usage the two
// low-quality square images it asked for, at gpt-image-1's price. Before, ext_proc read
// JSON bodies alone: through Envoy the transcription was priced at the fallback price
// (the catalog's highest, 30 times as much) and the image edit's images went uncharged.
func TestUploadsAreChargedAlikeThroughEnvoyAndTheGateway(t *testing.T) {
	t.Parallel()
	awayFromDayBoundary(t, 3*time.Minute)
	fake := &fakellm.Server{Usage: func(fakellm.Call) fakellm.Usage {
		return fakellm.Usage{InputTokens: 10_000, OutputTokens: 1_000}
	}}
	var mu sync.Mutex
	var ids []string // X-Service-Request-Id of each request the provider got
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		ids = append(ids, r.Header.Get("X-Service-Request-Id"))
		mu.Unlock()
		if r.URL.Path == "/v1/images/edits" {
			// An answer without its usage (as one relayed by an older proxy): the images
			// asked for are what is charged.
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"created":1789560000,"data":[{"b64_json":"aGVsbG8="},{"b64_json":"aGVsbG8="}]}`)
			return
		}
		fake.ServeHTTP(w, r)
	}))
	t.Cleanup(up.Close)
	s := startStack(t, gatewayEnv(up.URL))
	o := s.setUpOrg(t)
	_, front := s.deployedEnvoy(t, up.URL)

	form := func(fields ...string) (string, []byte) {
		var b bytes.Buffer
		w := multipart.NewWriter(&b)
		for i := 0; i+1 < len(fields); i += 2 {
			if fields[i] == "file" || fields[i] == "image" {
				fw, _ := w.CreateFormFile(fields[i], "a.png")
				fw.Write(bytes.Repeat([]byte{1}, 2000))
				continue
			}
			w.WriteField(fields[i], fields[i+1])
		}
		w.Close()
		return w.FormDataContentType(), b.Bytes()
	}
	send := func(base, path, contentType string, body []byte) receipt {
		t.Helper()
		mu.Lock()
		before := len(ids)
		mu.Unlock()
		req, _ := http.NewRequest("POST", base+path, bytes.NewReader(body))
		req.Header.Set("Content-Type", contentType)
		req.Header.Set("Authorization", "Bearer "+o.key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		mu.Lock()
		got := ids[before:]
		mu.Unlock()
		if res.StatusCode != 200 || len(got) != 1 {
			t.Fatalf("%s%s: %d, the provider got %d requests", base, path, res.StatusCode, len(got))
		}
		return waitReceipt(t, s, got[0])
	}

	transcribe, _ := pricecatalog.Lookup("gpt-4o-transcribe")
	image, _ := pricecatalog.Lookup("gpt-image-1")
	for _, c := range []struct {
		name, path string
		fields     []string
		model      string
		out        float64
		cost       int64
	}{
		{"transcription", "/v1/audio/transcriptions", []string{"file", "", "model", "gpt-4o-transcribe"}, "gpt-4o-transcribe", 1_000,
			ceilDiv(10_000*transcribe.AudioInputPerMillion+1_000*transcribe.OutputPerMillion, 1_000_000)},
		{"image edit", "/v1/images/edits", []string{"model", "gpt-image-1", "image", "", "prompt", "a gate", "size", "1024x1024", "quality", "low", "n", "2"},
			"gpt-image-1", 2 * 272, ceilDiv(2*272*image.OutputPerMillion, 1_000_000)},
	} {
		t.Run(c.name, func(t *testing.T) {
			ct, body := form(c.fields...)
			g := send(s.gateway, c.path, ct, body)
			e := send(front, c.path, ct, body)
			if g["model"] != c.model || g["output_tokens"] != c.out || g.cost() != c.cost || g["price_source"] != "catalog" {
				t.Fatalf("through the gateway: %s, want %s's %d micro-USD", g, c.model, c.cost)
			}
			for _, k := range []string{"model", "input_tokens", "output_tokens", "complete", "cost_basis", "price_source", "cost_micro_usd"} {
				if g[k] != e[k] {
					t.Errorf("%s: gateway %v, Envoy %v", k, g[k], e[k])
				}
			}
		})
	}
}
