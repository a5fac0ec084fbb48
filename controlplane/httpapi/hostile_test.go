package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/internal/apitest"
)

// hostileText is text Postgres refuses or that strains a parser: NUL characters, bytes
// that are not UTF-8, an encoded surrogate, a prefix with a NUL, and a long value.
var hostileText = []string{"\x00", "a\x00b", "\xff\xfe", "org_\x00", "\xed\xa0\x80", "tgk_\xc3\x28", strings.Repeat("a", 300)}

// TestHostileInputNeverAnswers5xx walks every operation of the served OpenAPI document
// (GET /openapi.json, so a new route is covered the day it is documented) and sends it
// hostile input, as a signed-in owner who is also a platform administrator, and without
// credentials: every path parameter, every documented query parameter, every top-level
// property of the request body and the organization and credential headers set in turn to
// NUL characters, invalid UTF-8 and over-long text, plus raw bodies that are not UTF-8 or
// hold NUL escapes. No answer may be a 5xx: bad input is a 4xx with the documented error
// shape. It found 503s where Postgres refused such text (issue 21), on sign-up among
// others.
func TestHostileInputNeverAnswers5xx(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	if _, err := store.AddPlatformAdmin(context.Background(), e.Store.Pool, strings.ToLower(owner.User.Email), "test", e.Clock.Now()); err != nil {
		t.Fatal(err)
	}
	doc := servedDocument(t, e)
	paths := doc["paths"].(map[string]any)
	placeholder := regexp.MustCompile(`\{([^}]+)\}`)

	type request struct {
		what    string
		method  string
		path    string
		query   url.Values
		body    []byte
		headers map[string]string
	}
	var requests []request
	pathNames := make([]string, 0, len(paths))
	for p := range paths {
		pathNames = append(pathNames, p)
	}
	slices.Sort(pathNames)
	for _, p := range pathNames {
		item := paths[p].(map[string]any)
		for _, method := range []string{"get", "post", "put", "patch", "delete"} {
			raw, ok := item[method].(map[string]any)
			if !ok {
				continue
			}
			op := raw
			params := placeholder.FindAllStringSubmatch(p, -1)
			fill := func(hostile string, which int) string {
				i := -1
				return placeholder.ReplaceAllStringFunc(p, func(string) string {
					i++
					if i == which {
						return url.PathEscape(hostile)
					}
					return plausibleID(params[i][1], owner.OrgID)
				})
			}
			base := fill("", -2) // every parameter plausible
			add := func(what, path string, q url.Values, body []byte, h map[string]string) {
				requests = append(requests, request{what: strings.ToUpper(method) + " " + p + ": " + what, method: strings.ToUpper(method),
					path: path, query: q, body: body, headers: h})
			}
			for _, hostile := range hostileText {
				for i := range params {
					add(fmt.Sprintf("path %s=%q", params[i][1], hostile), fill(hostile, i), nil, nil, nil)
				}
				for _, q := range queryParams(doc, item, op) {
					add(fmt.Sprintf("query %s=%q", q, hostile), base, url.Values{q: {hostile}}, nil, nil)
				}
				add(fmt.Sprintf("unknown query parameter %q", hostile), base, url.Values{hostile: {hostile}}, nil, nil)
				valid, _ := sample(doc, requestSchema(doc, op), 0).(map[string]any)
				for _, prop := range bodyProperties(doc, op) {
					// A body valid but for one property, so that the rest of the handler runs.
					withHostile := map[string]any{}
					for k, v := range valid {
						withHostile[k] = v
					}
					withHostile[prop] = hostile
					b, _ := json.Marshal(withHostile) // invalid UTF-8 becomes U+FFFD here...
					add(fmt.Sprintf("body %s=%q", prop, hostile), base, nil, b, nil)
					// ...so also the raw bytes, as a client may send them.
					add(fmt.Sprintf("raw body %s=%q", prop, hostile), base, nil, []byte(`{"`+prop+`":"`+hostile+`"}`), nil)
					add(fmt.Sprintf("body %s nested", prop), base, nil, []byte(`{"`+prop+`":{"k\u0000":["\u0000"]}}`), nil)
				}
				if !strings.ContainsRune(hostile, 0) { // net/http refuses NUL in header values
					add(fmt.Sprintf("X-Service-Org-Id %q", hostile), base, nil, nil, map[string]string{"X-Service-Org-Id": hostile})
					add(fmt.Sprintf("x-api-key %q", hostile), base, nil, nil, map[string]string{"x-api-key": hostile, "Authorization": ""})
					add(fmt.Sprintf("Authorization %q", hostile), base, nil, nil, map[string]string{"Authorization": "Bearer " + hostile})
				}
			}
			for _, body := range []string{"\xff\xfe\xfd", `{"\u0000":1}`, `"\u0000"`, `[{"a":"\u0000"}]`, `{"a":` + strings.Repeat("[", 10_000)} {
				add(fmt.Sprintf("raw body %q", body[:min(len(body), 20)]), base, nil, []byte(body), nil)
			}
		}
	}
	if len(requests) < 1000 {
		t.Fatalf("only %d requests built: did the document change shape?", len(requests))
	}

	client := &http.Client{}
	send := func(r request, signedIn bool) (int, string) {
		u := e.URL + r.path
		if len(r.query) > 0 {
			u += "?" + r.query.Encode()
		}
		req, err := http.NewRequest(r.method, u, bytes.NewReader(r.body))
		if err != nil {
			t.Fatalf("%s: %v", r.what, err)
		}
		req.Header.Set("Content-Type", "application/json")
		if signedIn {
			req.Header.Set("Authorization", "Bearer "+owner.Token)
			req.Header.Set("X-Service-Org-Id", owner.OrgID)
		}
		for k, v := range r.headers {
			if v == "" {
				req.Header.Del(k)
			} else {
				req.Header.Set(k, v)
			}
		}
		res, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", r.what, err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	var failures []string
	statuses := map[int]int{}
	for _, r := range requests {
		for _, signedIn := range []bool{true, false} {
			if signedIn && strings.HasPrefix(r.what, "POST /v1/auth/sign-out:") {
				continue // it would end the session every other request uses
			}
			code, body := send(r, signedIn)
			statuses[code]++
			if code >= 500 {
				failures = append(failures, fmt.Sprintf("%s (signed in: %v): %d %s", r.what, signedIn, code, body))
			}
		}
	}
	t.Logf("%d operations' hostile variants, answered: %v", len(requests), statuses)
	if len(failures) > 0 {
		t.Fatalf("%d answers were 5xx:\n%s", len(failures), strings.Join(failures[:min(len(failures), 40)], "\n"))
	}
}

// servedDocument fetches the OpenAPI document the server serves.
func servedDocument(t *testing.T, e *apitest.Env) map[string]any {
	t.Helper()
	res, err := http.Get(e.URL + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var doc map[string]any
	if err := json.NewDecoder(res.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

// resolve follows a local $ref ("#/components/...") of the document.
func resolve(doc map[string]any, v any) map[string]any {
	m, _ := v.(map[string]any)
	for range 10 {
		ref, ok := m["$ref"].(string)
		if !ok {
			return m
		}
		var cur any = doc
		for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
			cur = cur.(map[string]any)[part]
		}
		m, _ = cur.(map[string]any)
	}
	return m
}

// queryParams are the documented query parameters of an operation (and of its path).
func queryParams(doc, item, op map[string]any) []string {
	var names []string
	for _, src := range []any{item["parameters"], op["parameters"]} {
		list, _ := src.([]any)
		for _, p := range list {
			if pm := resolve(doc, p); pm["in"] == "query" {
				names = append(names, pm["name"].(string))
			}
		}
	}
	return names
}

// requestSchema is the schema of an operation's JSON request body, or nil.
func requestSchema(doc, op map[string]any) map[string]any {
	rb := resolve(doc, op["requestBody"])
	content, _ := rb["content"].(map[string]any)
	media, _ := content["application/json"].(map[string]any)
	return resolve(doc, media["schema"])
}

// sample is a value the schema accepts, as far as a short walk can tell: the first enum
// value or example, the minimum of a number, a string of the minimum length, every
// property of an object. Good enough to get most handlers past their required fields.
func sample(doc map[string]any, s map[string]any, depth int) any {
	if s == nil || depth > 6 {
		return nil
	}
	if enum, ok := s["enum"].([]any); ok && len(enum) > 0 {
		return enum[0]
	}
	if c, ok := s["const"]; ok {
		return c
	}
	if ex, ok := s["example"]; ok {
		return ex
	}
	for _, k := range []string{"oneOf", "anyOf", "allOf"} {
		if list, ok := s[k].([]any); ok && len(list) > 0 {
			if k == "allOf" {
				merged := map[string]any{}
				for _, sub := range list {
					if m, ok := sample(doc, resolve(doc, sub), depth+1).(map[string]any); ok {
						for key, v := range m {
							merged[key] = v
						}
					}
				}
				return merged
			}
			return sample(doc, resolve(doc, list[0]), depth+1)
		}
	}
	typ := s["type"]
	if list, ok := typ.([]any); ok && len(list) > 0 {
		typ = list[0]
	}
	switch typ {
	case "object":
		out := map[string]any{}
		props, _ := s["properties"].(map[string]any)
		for name, ps := range props {
			out[name] = sample(doc, resolve(doc, ps), depth+1)
		}
		return out
	case "array":
		if n, _ := s["minItems"].(float64); n > 0 {
			return []any{sample(doc, resolve(doc, s["items"]), depth+1)}
		}
		return []any{}
	case "integer", "number":
		if m, ok := s["minimum"].(float64); ok {
			return m
		}
		return 1
	case "boolean":
		return true
	case "string":
		n, _ := s["minLength"].(float64)
		return strings.Repeat("x", max(int(n), 1))
	}
	return nil
}

// bodyProperties are the top-level properties of an operation's JSON request body.
func bodyProperties(doc, op map[string]any) []string {
	schema := requestSchema(doc, op)
	var names []string
	var collect func(s map[string]any, depth int)
	collect = func(s map[string]any, depth int) {
		if depth > 3 || s == nil {
			return
		}
		props, _ := s["properties"].(map[string]any)
		for name := range props {
			if !slices.Contains(names, name) {
				names = append(names, name)
			}
		}
		for _, k := range []string{"allOf", "oneOf", "anyOf"} {
			list, _ := s[k].([]any)
			for _, sub := range list {
				collect(resolve(doc, sub), depth+1)
			}
		}
	}
	collect(schema, 0)
	slices.Sort(names)
	return names
}

// plausibleID is a well-formed id for a path parameter, so that the hostile part of a
// request is the one under test: the caller's organization, else a TypeID of the
// parameter's kind (which names nothing), else a plain string.
func plausibleID(param, orgID string) string {
	prefixes := map[string]string{"organizationId": "org", "memberId": "om", "teamId": "tem", "apiKeyId": "apk",
		"pluginId": "plg", "marketplaceId": "mkt", "userId": "usr"}
	switch {
	case param == "organizationId":
		return orgID
	case prefixes[param] != "":
		return prefixes[param] + "_01h2xcejqtf2nbrexx3vqjhp41"
	case param == "email":
		return "someone@example.test"
	}
	return "pol-1"
}

// TestTextPostgresCannotStoreIsBadInput: what the answers are, in the documented shapes
// (apitest checks each against the OpenAPI document): a NUL or invalid UTF-8 in a body is
// 400 with the field's path, in a path parameter or a query value 400 naming it, in the
// organization header 404 organization_not_found, like any id that names nothing.
func TestTextPostgresCannotStoreIsBadInput(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	o := e.NewOrg(t, "Acme")
	if _, err := store.AddPlatformAdmin(context.Background(), e.Store.Pool, strings.ToLower(o.User.Email), "test", e.Clock.Now()); err != nil {
		t.Fatal(err)
	}
	detail := func(t *testing.T, body map[string]any, message string, path ...any) {
		t.Helper()
		d, _ := body["details"].([]any)
		if len(d) != 1 {
			t.Fatalf("details %v, want one", body["details"])
		}
		got, _ := d[0].(map[string]any)["path"].([]any)
		if len(d) != 1 || fmt.Sprintf("%v", got) != fmt.Sprintf("%v", append([]any{}, path...)) || d[0].(map[string]any)["message"] != message {
			t.Fatalf("details %v, want %q at %v", body["details"], message, path)
		}
	}
	t.Run("sign-up with a NUL in the name", func(t *testing.T) {
		b := e.Do(t, "POST", "/v1/auth/sign-up", `{"email":"x@example.test","password":"123456789012","name":"Ann\u0000"}`).
			ExpectError(t, http.StatusBadRequest, "invalid_request")
		detail(t, b, `must not contain a NUL character (\u0000)`, "name")
	})
	t.Run("sign-in with invalid UTF-8", func(t *testing.T) {
		b := e.Do(t, "POST", "/v1/auth/sign-in", []byte("{\"email\":\"\xff@example.test\",\"password\":\"x\"}")).
			ExpectError(t, http.StatusBadRequest, "invalid_request")
		detail(t, b, "the body is not valid UTF-8")
	})
	t.Run("a NUL in a search", func(t *testing.T) {
		b := e.Do(t, "GET", "/v1/admin/organizations?search=%00", nil, o.As()...).ExpectError(t, http.StatusBadRequest, "invalid_request")
		detail(t, b, "must be UTF-8 text without NUL characters", "search")
	})
	t.Run("invalid UTF-8 in a plain-string path id", func(t *testing.T) {
		b := e.Do(t, "POST", "/v1/gateway/usage-limit-policies/%FF/archive", map[string]any{"revision": 1}, o.As()...).
			ExpectError(t, http.StatusBadRequest, "invalid_request")
		if !strings.Contains(fmt.Sprint(b["message"]), "policyId") {
			t.Fatalf("message %v does not name policyId", b["message"])
		}
	})
	t.Run("a NUL in a TypeID path id", func(t *testing.T) {
		b := e.Do(t, "DELETE", "/v1/teams/tem_%00", nil, o.As()...).ExpectError(t, http.StatusBadRequest, "invalid_request")
		detail(t, b, "must be UTF-8 text without NUL characters", "teamId")
	})
	t.Run("invalid UTF-8 in the organization header", func(t *testing.T) {
		e.Do(t, "GET", "/v1/members", nil, apitest.Session(o.Token), apitest.Org("org_\xff")).
			ExpectError(t, http.StatusNotFound, "organization_not_found")
	})
}
