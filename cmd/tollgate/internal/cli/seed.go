package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/tollgate-dev/tollgate/pkg/credential"
)

// The demo organization's fixed identities. The passwords are public by design: this is
// a local demo, never a deployment.
const (
	demoOwnerEmail  = "owner@demo.tollgate.local"
	demoMemberEmail = "member@demo.tollgate.local"
	demoAdminEmail  = "admin@demo.tollgate.local"
	demoPassword    = "tollgate-demo-password"
	demoOrgName     = "Demo Inc"
	demoOrgSlug     = "demo-inc"
	// The member's hard daily limit: five fake completions at the catalog's price.
	demoDailyLimitUSD = "0.05"
	demoPolicyName    = "Demo daily cap"
)

type demoUser struct {
	Email string
	Token string
}

type demoOrg struct {
	OrgID, OrgName      string
	Owner, Member       demoUser
	OwnerKey, MemberKey string
	// Admin is the demo's platform administrator, signed in; no token when the demo did
	// not provision it (seed-only, or an allowlist of the operator's own).
	Admin demoUser
}

// client calls the REST API of a running control plane.
type client struct {
	ctx  context.Context
	base string
	// apiKey, when set, authenticates every call instead of a session token: an API key
	// (tgk_...) as x-api-key, a session token (tgs_...) as a bearer token.
	apiKey string
	// role is the credential the calls need ("an owner's or admin's API key"): what a
	// 403 says to use.
	role string
	// setting names where base comes from, for the hint of an unreachable control
	// plane; "--api or TOLLGATE_API_URL" when empty.
	setting string
}

func (c client) where() string {
	if c.setting == "" {
		return "--api or TOLLGATE_API_URL"
	}
	return c.setting
}

func (c client) call(method, path, token, org string, body any, want int, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(c.ctx, method, c.base+path, rd)
	if err != nil {
		return 0, usagef("--api: %s is not a URL of the control plane's REST API, e.g. http://127.0.0.1:8080", quoteAPI(c.base))
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if strings.HasPrefix(c.apiKey, credential.SessionPrefix) {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	} else if c.apiKey != "" {
		req.Header.Set("x-api-key", c.apiKey)
	}
	if org != "" {
		req.Header.Set("X-Service-Org-Id", org)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, transportError(c.ctx, shownAPI(c.base), c.where(), err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, maxAnswer))
	if err != nil {
		return res.StatusCode, transportError(c.ctx, shownAPI(c.base), c.where(), err)
	}
	route, _, _ := strings.Cut(path, "?")
	if want != 0 && res.StatusCode != want {
		return res.StatusCode, c.apiError(method, route, res.StatusCode, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return res.StatusCode, fmt.Errorf("the answer to %s %s is not the control plane's (HTTP %d, %s): is %s its REST API? (%s)",
				method, route, res.StatusCode, oneLine(res.Header.Get("Content-Type"), 60), shownAPI(c.base), c.where())
		}
	}
	return res.StatusCode, nil
}

// maxAnswer bounds what one answer may hold (a page of 100 records is far less).
const maxAnswer = 32 << 20

// apiError reads an error answer: the API's {"error", "message", "details"}, or the start
// of a body that is not the API's (a proxy's page), and the hint of its status.
func (c client) apiError(method, route string, status int, raw []byte) error {
	e := &apiError{Method: method, Path: route, Status: status}
	var body struct {
		Error   string
		Message string
		Details []struct {
			Message string
			Path    []any
		}
	}
	if json.Unmarshal(raw, &body) == nil && body.Error != "" {
		e.Code = oneLine(body.Error, 80)
		msgs := []string{}
		if body.Message != "" {
			msgs = append(msgs, body.Message)
		}
		for _, d := range body.Details {
			p := make([]string, len(d.Path))
			for i, x := range d.Path {
				p[i] = fmt.Sprint(x)
			}
			if len(p) > 0 {
				msgs = append(msgs, strings.Join(p, ".")+": "+d.Message)
			} else {
				msgs = append(msgs, d.Message)
			}
		}
		e.Message = oneLine(strings.Join(msgs, "; "), 400)
	} else {
		// Not the API's error shape: another server (a proxy, the admin port) answered.
		e.Message = oneLine(string(raw), 200)
		e.Hint = fmt.Sprintf("is %s the control plane's REST API? (%s)", shownAPI(c.base), c.where())
	}
	switch {
	case status == http.StatusUnauthorized && route == "/v1/auth/sign-in":
		e.Hint = "check the email and the password"
	case status == http.StatusUnauthorized && c.apiKey != "":
		e.Hint = "check TOLLGATE_API_KEY (--key): the API key or session token is unknown, revoked or expired"
	case status == http.StatusUnauthorized:
		e.Hint = "the session token was refused"
	case status == http.StatusForbidden && c.role != "":
		e.Hint = "this needs " + c.role
	}
	return e
}

// user signs up, or signs in when the account already exists, so seeding is idempotent.
func (c client) user(email, name string) (demoUser, error) {
	var out struct{ Token string }
	status, err := c.call("POST", "/v1/auth/sign-up", "", "", map[string]string{"email": email, "password": demoPassword, "name": name}, 0, &out)
	if err != nil {
		return demoUser{}, err
	}
	if status == http.StatusConflict {
		_, err = c.call("POST", "/v1/auth/sign-in", "", "", map[string]string{"email": email, "password": demoPassword}, http.StatusOK, &out)
	} else if status != http.StatusCreated {
		return demoUser{}, fmt.Errorf("sign up %s: status %d", email, status)
	}
	return demoUser{Email: email, Token: out.Token}, err
}

// signIn signs in an existing demo account.
func (c client) signIn(email string) (demoUser, error) {
	var out struct{ Token string }
	_, err := c.call("POST", "/v1/auth/sign-in", "", "", map[string]string{"email": email, "password": demoPassword}, http.StatusOK, &out)
	return demoUser{Email: email, Token: out.Token}, err
}

// seed creates (or finds) the demo organization, its owner and a member, and mints a
// fresh API key for each.
func seed(ctx context.Context, base string) (demoOrg, error) {
	c := client{ctx: ctx, base: base, setting: "--http-addr or TOLLGATE_HTTP_ADDR"}
	d := demoOrg{OrgName: demoOrgName}
	var err error
	if d.Owner, err = c.user(demoOwnerEmail, "Demo Owner"); err != nil {
		return d, err
	}
	if d.Member, err = c.user(demoMemberEmail, "Demo Member"); err != nil {
		return d, err
	}
	var me struct {
		Memberships []struct {
			Organization struct{ ID, Slug string }
		}
	}
	if _, err := c.call("GET", "/v1/me", d.Owner.Token, "", nil, http.StatusOK, &me); err != nil {
		return d, err
	}
	for _, m := range me.Memberships {
		if m.Organization.Slug == demoOrgSlug {
			d.OrgID = m.Organization.ID
		}
	}
	if d.OrgID == "" {
		var created struct{ Organization struct{ ID string } }
		if _, err := c.call("POST", "/v1/organizations", d.Owner.Token, "", map[string]string{"name": demoOrgName, "slug": demoOrgSlug},
			http.StatusCreated, &created); err != nil {
			return d, err
		}
		d.OrgID = created.Organization.ID
	}
	var memberOrgs struct{ Organizations []struct{ ID string } }
	if _, err := c.call("GET", "/v1/organizations", d.Member.Token, "", nil, http.StatusOK, &memberOrgs); err != nil {
		return d, err
	}
	joined := false
	for _, o := range memberOrgs.Organizations {
		joined = joined || o.ID == d.OrgID
	}
	if !joined {
		var inv struct{ Token string }
		if _, err := c.call("POST", "/v1/invitations", d.Owner.Token, d.OrgID, map[string]string{"email": demoMemberEmail, "role": "member"},
			http.StatusCreated, &inv); err != nil {
			return d, err
		}
		if _, err := c.call("POST", "/v1/invitations/accept", d.Member.Token, "", map[string]string{"token": inv.Token}, http.StatusOK, nil); err != nil {
			return d, err
		}
	}
	if err := c.limitMember(d); err != nil {
		return d, err
	}
	mint := func(u demoUser, name string) (string, error) {
		var out struct{ Key string }
		_, err := c.call("POST", "/v1/api-keys", u.Token, d.OrgID, map[string]string{"name": name}, http.StatusCreated, &out)
		var ae *apiError
		if errors.As(err, &ae) && ae.Code == "api_key_limit" {
			// Every run mints a key and the database persists: after about a hundred runs
			// the user holds a member's most live keys. Make room by revoking the oldest
			// key an earlier run minted (keys made by hand are left alone), and mint again.
			if rerr := c.revokeOldestKey(u, d.OrgID, name); rerr != nil {
				return "", errors.Join(err, rerr)
			}
			_, err = c.call("POST", "/v1/api-keys", u.Token, d.OrgID, map[string]string{"name": name}, http.StatusCreated, &out)
		}
		return out.Key, err
	}
	if d.OwnerKey, err = mint(d.Owner, "demo owner key"); err != nil {
		return d, err
	}
	d.MemberKey, err = mint(d.Member, "demo member key")
	return d, err
}

// revokeOldestKey revokes the oldest live API key of u named name (a key an earlier run
// of seed minted). The list is the user's own keys, or for an owner the organization's:
// only u's name for it is taken.
func (c client) revokeOldestKey(u demoUser, org, name string) error {
	var me struct {
		Memberships []struct {
			Organization struct{ ID string }
			Member       struct{ ID string }
		}
	}
	if _, err := c.call("GET", "/v1/me", u.Token, "", nil, http.StatusOK, &me); err != nil {
		return err
	}
	memberID := ""
	for _, m := range me.Memberships {
		if m.Organization.ID == org {
			memberID = m.Member.ID
		}
	}
	var list struct {
		APIKeys []struct{ ID, Name, MemberID, CreatedAt string }
	}
	if _, err := c.call("GET", "/v1/api-keys", u.Token, org, nil, http.StatusOK, &list); err != nil {
		return err
	}
	oldest := -1
	for i, k := range list.APIKeys {
		if k.Name == name && k.MemberID == memberID && (oldest < 0 || k.CreatedAt < list.APIKeys[oldest].CreatedAt) {
			oldest = i
		}
	}
	if oldest < 0 {
		return fmt.Errorf("no API key named %q of %s to revoke: revoke one of theirs (DELETE /v1/api-keys/{apiKeyId}), or start over with `make run-fresh`", name, u.Email)
	}
	_, err := c.call("DELETE", "/v1/api-keys/"+list.APIKeys[oldest].ID, u.Token, org, nil, http.StatusNoContent, nil)
	return err
}

// limitMember gives the member a hard daily limit, so a short loop of calls ends in a
// 429. The demo model is priced by the shipped catalog, as every new organization's
// models are: one fake completion (demo.InputTokens + demo.OutputTokens of gpt-4o-mini)
// costs 0.01 USD. It is idempotent.
func (c client) limitMember(d demoOrg) error {
	var me struct {
		Memberships []struct {
			Organization struct{ ID string }
			Member       struct{ ID string }
		}
	}
	if _, err := c.call("GET", "/v1/me", d.Member.Token, "", nil, http.StatusOK, &me); err != nil {
		return err
	}
	memberID := ""
	for _, m := range me.Memberships {
		if m.Organization.ID == d.OrgID {
			memberID = m.Member.ID
		}
	}
	var list struct {
		Policies []struct{ ID, Name string }
	}
	if _, err := c.call("GET", "/v1/gateway/usage-limit-policies", d.Owner.Token, d.OrgID, nil, http.StatusOK, &list); err != nil {
		return err
	}
	policyID := ""
	for _, p := range list.Policies {
		if p.Name == demoPolicyName {
			policyID = p.ID
		}
	}
	if policyID == "" {
		var created struct{ ID string }
		body := map[string]any{"name": demoPolicyName, "hardLimit": true,
			"limits": []map[string]string{{"timeframe": "day", "costUsd": demoDailyLimitUSD}}}
		if _, err := c.call("POST", "/v1/gateway/usage-limit-policies", d.Owner.Token, d.OrgID, body, http.StatusOK, &created); err != nil {
			return err
		}
		policyID = created.ID
	}
	_, err := c.call("POST", "/v1/gateway/usage-limit-policies/"+policyID+"/assignments", d.Owner.Token, d.OrgID,
		map[string]string{"memberId": memberID}, http.StatusOK, nil)
	return err
}

// memberBlocked tells whether the demo member's status is blocked.
func (c client) memberBlocked(d demoOrg) (bool, error) {
	var status struct{ State string }
	_, err := c.call("GET", "/v1/gateway/usage-limits/me", d.Member.Token, d.OrgID, nil, http.StatusOK, &status)
	return status.State == "blocked", err
}
