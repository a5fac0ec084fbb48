package gateway_test

import (
	"bytes"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/enforcer/estimate"
	"github.com/tollgate-dev/tollgate/enforcer/gateway"
)

// azureRoute is a routes file's Azure OpenAI route to upstream, declaring its
// deployments.
func azureRoute(t *testing.T, upstream string) gateway.Route {
	t.Helper()
	rs, err := gateway.ParseRoutes([]byte(`routes:
  - prefix: /openai/
    upstream: `+upstream+`
    header: api-key
    credentialEnv: AZURE_KEY
    deployments: {"my-gpt4o": "gpt-4o", "img": "gpt-image-1"}
`), func(string) string { return "azure-provider-key" })
	if err != nil {
		t.Fatal(err)
	}
	return rs[0]
}

// Azure OpenAI runs a deployment's model whatever the body's "model" says: a request to
// a deployment the route declares is checked (the unpriced-model rule), reserved and
// noted at the deployment's model, not at a cheaper one the body names. A deployment the
// route does not declare is read as before, at the body's.
func TestAzureDeploymentModelWinsOverTheBodys(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"c","object":"chat.completion","model":"gpt-4o-2024-11-20","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}}`)
	}))
	defer up.Close()
	e := newEnv(t, up.URL, gateway.Config{Routes: []gateway.Route{azureRoute(t, up.URL)}})
	body := `{"model":"gpt-4o-mini","max_tokens":1000,"messages":[{"role":"user","content":"hi"}]}`
	for _, tc := range []struct{ deployment, want string }{{"my-gpt4o", "gpt-4o"}, {"my-gpt4o-mini", "gpt-4o-mini"}} {
		res := post(t, e.front.URL+"/openai/deployments/"+tc.deployment+"/chat/completions?api-version=2024-10-21", "", body, "Api-Key", "tgk_good")
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != 200 {
			t.Fatalf("%s: %d", tc.deployment, res.StatusCode)
		}
		e.tracker.settledOnce(t)
		e.gate.mu.Lock()
		hint := e.gate.hints[len(e.gate.hints)-1].Body
		e.gate.mu.Unlock()
		e.tracker.mu.Lock()
		recorded := e.tracker.recorded[len(e.tracker.recorded)-1]
		e.tracker.mu.Unlock()
		if hint == nil || hint.Model != tc.want || hint.OutputCap != 1000 || recorded != tc.want {
			t.Fatalf("%s: reserved on %+v, noted %q: want %s", tc.deployment, hint, recorded, tc.want)
		}
	}

	// The unpriced-model rule judges the deployment's model.
	e.tracker.refuse = "gpt-4o"
	res := post(t, e.front.URL+"/openai/deployments/my-gpt4o/chat/completions?api-version=2024-10-21", "", body, "Api-Key", "tgk_good")
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusForbidden {
		t.Fatalf("an unpriced deployment's model: %d, want 403", res.StatusCode)
	}
}

// An image edit through a declared deployment (Azure's form names no model, nor does its
// answer) whose answer is lost is noted at the deployment's model with the images it
// asked for, which the tracker charges, not the prompt alone at the fallback price.
func TestAzureDeploymentImageEditLostAnswerIsChargedItsImages(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		c, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			c.Close() // received, never answered
		}
	}))
	defer up.Close()
	e := newEnv(t, up.URL, gateway.Config{Routes: []gateway.Route{azureRoute(t, up.URL)}})
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	fw, _ := mw.CreateFormFile("image", "gate.png")
	fw.Write(bytes.Repeat([]byte{7}, 50_000))
	mw.WriteField("prompt", "a toll gate")
	mw.WriteField("size", "1024x1024")
	mw.WriteField("quality", "high")
	mw.WriteField("n", "2")
	mw.Close()
	res := send(t, "POST", e.front.URL+"/openai/deployments/img/images/edits?api-version=2025-04-01-preview", "", bytes.NewReader(b.Bytes()),
		"Content-Type", mw.FormDataContentType(), "Api-Key", "tgk_good")
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusBadGateway {
		t.Fatalf("%d, want 502", res.StatusCode)
	}
	u := e.tracker.settled(t)
	if u.Model != "gpt-image-1" {
		t.Fatalf("settled at %q, want the deployment's gpt-image-1", u.Model)
	}
	e.tracker.mu.Lock()
	defer e.tracker.mu.Unlock()
	i := slices.IndexFunc(e.tracker.requests, func(r estimate.Request) bool { return r.ImageOutputTokens > 0 })
	if i < 0 || e.tracker.requests[i].Model != "gpt-image-1" || e.tracker.requests[len(e.tracker.requests)-1].ImageOutputTokens == 0 {
		t.Fatalf("recorded %+v: want gpt-image-1's two images", e.tracker.requests)
	}
}

// A routes file's deployments are refused with a clear error when an entry has no name
// or no model, or a name or model that cannot be one.
func TestRoutesFileRefusesBadDeployments(t *testing.T) {
	getenv := func(string) string { return "k" }
	for _, tc := range []struct{ entries, want string }{
		{`{"": "gpt-4o"}`, "a deployment with no name"},
		{`{"prod": ""}`, `deployment "prod": no model`},
		{`{"prod": }`, `deployment "prod": no model`},
		{`{"a/b": "gpt-4o"}`, `deployment "a/b": not a deployment name`},
		{`{" prod": "gpt-4o"}`, `deployment " prod": not a deployment name`},
		{`{"prod": "gpt\u0001"}`, `deployment "prod": model "gpt\x01" is not a model name`},
		{`["prod"]`, "routes file"},
	} {
		_, err := gateway.ParseRoutes([]byte("routes:\n  - prefix: /openai/\n    upstream: https://r.openai.azure.com\n    credentialEnv: K\n    deployments: "+tc.entries+"\n"), getenv)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.entries, err, tc.want)
		}
	}
	rs, err := gateway.ParseRoutes([]byte("routes:\n  - prefix: /openai/\n    upstream: https://r.openai.azure.com\n    credentialEnv: K\n    deployments:\n      prod: \" gpt-4o \"\n"), getenv)
	if err != nil || rs[0].Deployments["prod"] != "gpt-4o" {
		t.Fatalf("%v, %+v", err, rs)
	}
}
