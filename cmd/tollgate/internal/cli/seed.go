package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
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
}

// client calls the REST API of a running control plane.
type client struct {
	ctx  context.Context
	base string
	// apiKey, when set, authenticates every call (x-api-key) instead of a session token.
	apiKey string
}

func (c client) call(method, path, token, org string, body any, want int, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(c.ctx, method, c.base+path, rd)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if c.apiKey != "" {
		req.Header.Set("x-api-key", c.apiKey)
	}
	if org != "" {
		req.Header.Set("X-Service-Org-Id", org)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	if want != 0 && res.StatusCode != want {
		return res.StatusCode, fmt.Errorf("%s %s: %d %s", method, path, res.StatusCode, bytes.TrimSpace(raw))
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return res.StatusCode, fmt.Errorf("%s %s: %w", method, path, err)
		}
	}
	return res.StatusCode, nil
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

// seed creates (or finds) the demo organization, its owner and a member, and mints a
// fresh API key for each.
func seed(ctx context.Context, base string) (demoOrg, error) {
	c := client{ctx: ctx, base: base}
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
		return out.Key, err
	}
	if d.OwnerKey, err = mint(d.Owner, "demo owner key"); err != nil {
		return d, err
	}
	d.MemberKey, err = mint(d.Member, "demo member key")
	return d, err
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
