package httpapi_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/apitest"
)

// orgList is one of the organization's lists, with the writes that add and remove its rows.
type orgList struct {
	name, path, key string
	// add creates a row and returns its id; remove deletes one.
	add    func(t *testing.T) string
	remove func(t *testing.T, id string)
}

// orgLists builds an organization whose owner o manages the three lists.
func orgLists(t *testing.T, e *apitest.Env, o apitest.Member) []orgList {
	n := 0
	return []orgList{
		{name: "members", path: "/v1/members", key: "members",
			add: func(t *testing.T) string { return e.AddMember(t, o, "m", "member").MemberID },
			remove: func(t *testing.T, id string) {
				e.Do(t, "DELETE", "/v1/members/"+id, nil, o.As()...).Expect(t, http.StatusNoContent)
			}},
		{name: "teams", path: "/v1/teams", key: "teams",
			add: func(t *testing.T) string {
				n++
				var team struct{ ID string }
				e.Do(t, "POST", "/v1/teams", map[string]string{"name": fmt.Sprintf("team %03d", n)}, o.As()...).
					Expect(t, http.StatusCreated).Decode(t, &team)
				return team.ID
			},
			remove: func(t *testing.T, id string) {
				e.Do(t, "DELETE", "/v1/teams/"+id, nil, o.As()...).Expect(t, http.StatusNoContent)
			}},
		{name: "api keys", path: "/v1/api-keys", key: "apiKeys",
			add: func(t *testing.T) string {
				var out struct{ APIKey struct{ ID string } }
				e.Do(t, "POST", "/v1/api-keys", map[string]string{"name": "k"}, o.As()...).
					Expect(t, http.StatusCreated).Decode(t, &out)
				return out.APIKey.ID
			},
			remove: func(t *testing.T, id string) {
				e.Do(t, "DELETE", "/v1/api-keys/"+id, nil, o.As()...).Expect(t, http.StatusNoContent)
			}},
	}
}

// listPage is a page of an organization list, its rows reduced to their ids.
type listPage struct {
	IDs        []string
	Keys       []string // the answer's top-level keys
	Limit      int
	HasMore    bool
	NextCursor *string
}

func getList(t *testing.T, e *apitest.Env, by apitest.Member, l orgList, q url.Values) listPage {
	t.Helper()
	path := l.path
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var raw map[string]json.RawMessage
	e.Do(t, "GET", path, nil, by.As()...).Expect(t, http.StatusOK).Decode(t, &raw)
	var p listPage
	for k := range raw {
		p.Keys = append(p.Keys, k)
	}
	slices.Sort(p.Keys)
	var rows []struct{ ID string }
	if err := json.Unmarshal(raw[l.key], &rows); err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		p.IDs = append(p.IDs, r.ID)
	}
	for k, v := range map[string]any{"limit": &p.Limit, "hasMore": &p.HasMore, "nextCursor": &p.NextCursor} {
		if raw[k] != nil {
			if err := json.Unmarshal(raw[k], v); err != nil {
				t.Fatal(err)
			}
		}
	}
	return p
}

// TestOrgListsPageUnderChanges: members, teams and API keys read in pages (limit,
// cursor) give every row present throughout exactly once, while rows are removed
// (already read and not yet read) and added (before and after the cursor) between
// pages; rows share a createdAt (the clock stands still), so pages cut across ties. A
// call without paging parameters still answers the whole list, alone under its key.
func TestOrgListsPageUnderChanges(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	o := e.NewOrg(t, "Acme")
	for _, l := range orgLists(t, e, o) {
		t.Run(l.name, func(t *testing.T) {
			e.Clock.Set(apitest.Start)
			for range 10 {
				l.add(t)
			}
			whole := getList(t, e, o, l, nil)
			if !slices.Equal(whole.Keys, []string{l.key}) {
				t.Fatalf("the whole list answers %v, not only %q", whole.Keys, l.key)
			}
			if len(whole.IDs) < 10 {
				t.Fatalf("the whole list has %d rows", len(whole.IDs))
			}
			const limit = 3
			seen := map[string]int{}
			removedUnread := map[string]bool{}
			throughout := map[string]bool{}
			for _, id := range whole.IDs {
				throughout[id] = true
			}
			cursor := ""
			for page := 0; ; page++ {
				if page > 20 {
					t.Fatal("the list never ended")
				}
				q := url.Values{"limit": {strconv.Itoa(limit)}}
				if cursor != "" {
					q.Set("cursor", cursor)
				}
				p := getList(t, e, o, l, q)
				keys := []string{l.key, "hasMore", "limit", "nextCursor"}
				slices.Sort(keys)
				if !slices.Equal(p.Keys, keys) || p.Limit != limit || len(p.IDs) > limit {
					t.Fatalf("page %d: %+v", page, p)
				}
				for _, id := range p.IDs {
					seen[id]++
				}
				if !p.HasMore {
					if p.NextCursor != nil {
						t.Fatal("nextCursor on the last page")
					}
					break
				}
				if p.NextCursor == nil || len(p.IDs) != limit {
					t.Fatalf("page %d: %+v", page, p)
				}
				cursor = *p.NextCursor
				// Between pages: remove a row already read and one not yet read (never
				// the owner, who removes), add one before every row and one after.
				var read, unread string
				for _, id := range whole.IDs {
					if !throughout[id] || id == o.MemberID {
						continue
					}
					if seen[id] > 0 && read == "" {
						read = id
					} else if seen[id] == 0 && !removedUnread[id] && unread == "" {
						unread = id
					}
				}
				for _, id := range []string{read, unread} {
					if id != "" {
						l.remove(t, id)
						delete(throughout, id)
					}
				}
				if unread != "" {
					removedUnread[unread] = true
				}
				e.Clock.Set(apitest.Start.Add(-time.Duration(page+1) * time.Hour))
				l.add(t)
				e.Clock.Set(apitest.Start)
				l.add(t)
			}
			for id, n := range seen {
				if n > 1 {
					t.Errorf("%s was listed %d times", id, n)
				}
				if removedUnread[id] {
					t.Errorf("%s was listed after its removal", id)
				}
			}
			for id := range throughout {
				if seen[id] != 1 {
					t.Errorf("%s, present throughout, was listed %d times", id, seen[id])
				}
			}
		})
	}
}

// TestOrgListsRefuseBadPages: a bad limit and a cursor that is not one of the list's
// (another list, another organization, another view of the API keys, altered, not a
// cursor) answer 400 invalid_request naming the parameter, and change nothing; limit
// 1000 and a cursor alone (limit 100) are pages.
func TestOrgListsRefuseBadPages(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	o := e.NewOrg(t, "Acme")
	other := e.NewOrg(t, "Other")
	lists := orgLists(t, e, o)
	otherLists := orgLists(t, e, other)
	cursors := map[string]string{}
	// firstCursor is the nextCursor of a one-row first page.
	firstCursor := func(by apitest.Member, l orgList) string {
		p := getList(t, e, by, l, url.Values{"limit": {"1"}})
		if p.NextCursor == nil {
			t.Errorf("%s: a first page of one row has no nextCursor: %+v", l.name, p)
			return "e30" // {}
		}
		return *p.NextCursor
	}
	for i, l := range lists {
		l.add(t)
		l.add(t)
		otherLists[i].add(t)
		otherLists[i].add(t)
		cursors[l.name] = firstCursor(o, l)
		cursors["other "+l.name] = firstCursor(other, otherLists[i])
	}
	member := e.AddMember(t, o, "plain", "member")
	e.APIKey(t, member)
	e.APIKey(t, member)
	memberKeys := lists[2]
	cursors["own api keys"] = firstCursor(member, memberKeys)

	auditEvents := func() int {
		var n int
		if err := e.Store.Pool.QueryRow(t.Context(), `SELECT count(*) FROM audit_events`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := map[string][]string{}
	for _, l := range lists {
		before[l.name] = getList(t, e, o, l, nil).IDs
	}
	events := auditEvents()

	tamper := func(c string, edit func(map[string]any)) string {
		raw, err := base64.RawURLEncoding.DecodeString(c)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		edit(m)
		b, _ := json.Marshal(m)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	for i, l := range lists {
		own := cursors[l.name]
		bad := map[string]url.Values{}
		for _, v := range []string{"0", "1001", "-1", "+5", "1.5", "", "ten", "01x", "99999999999999999999"} {
			bad["limit "+v] = url.Values{"limit": {v}}
		}
		bad["limit twice"] = url.Values{"limit": {"5", "5"}}
		bad["cursor twice"] = url.Values{"cursor": {own, own}}
		bad["not a cursor"] = url.Values{"cursor": {"garbage!"}}
		bad["empty cursor"] = url.Values{"cursor": {""}}
		bad["another organization's cursor"] = url.Values{"cursor": {cursors["other "+l.name]}}
		bad["another list's cursor"] = url.Values{"cursor": {cursors[lists[(i+1)%3].name]}}
		bad["altered organization"] = url.Values{"cursor": {tamper(own, func(m map[string]any) { m["o"] = other.OrgID })}}
		bad["altered list"] = url.Values{"cursor": {tamper(own, func(m map[string]any) { m["l"] = "audit" })}}
		bad["altered time"] = url.Values{"cursor": {tamper(own, func(m map[string]any) { m["t"] = "yesterday" })}}
		bad["id with a NUL"] = url.Values{"cursor": {tamper(own, func(m map[string]any) { m["i"] = "x\x00" })}}
		bad["unknown field"] = url.Values{"cursor": {tamper(own, func(m map[string]any) { m["x"] = 1 })}}
		bad["truncated"] = url.Values{"cursor": {own[:len(own)-3]}}
		bad["too long"] = url.Values{"cursor": {strings.Repeat("A", 2000)}}
		if l.name == "api keys" {
			bad["a member's own keys' cursor"] = url.Values{"cursor": {cursors["own api keys"]}}
		}
		for name, q := range bad {
			t.Run(l.name+"/"+name, func(t *testing.T) {
				body := e.Do(t, "GET", l.path+"?"+q.Encode(), nil, o.As()...).ExpectError(t, http.StatusBadRequest, "invalid_request")
				param := "cursor"
				if strings.HasPrefix(name, "limit") {
					param = "limit"
				}
				if d, _ := body["details"].([]any); len(d) != 1 || fmt.Sprint(d[0].(map[string]any)["path"]) != "["+param+"]" {
					t.Fatalf("details: %v", body["details"])
				}
			})
		}
		if l.name == "api keys" {
			// The organization's cursor is not one of a plain member's own keys.
			e.Do(t, "GET", l.path+"?cursor="+url.QueryEscape(own), nil, member.As()...).ExpectError(t, http.StatusBadRequest, "invalid_request")
		}
		if p := getList(t, e, o, l, url.Values{"limit": {"1000"}}); p.HasMore || p.Limit != 1000 || !slices.Equal(p.IDs, before[l.name]) && l.name != "teams" {
			t.Errorf("%s: limit 1000: %+v", l.name, p)
		}
		if p := getList(t, e, o, l, url.Values{"cursor": {own}}); p.Limit != 100 || p.HasMore || len(p.IDs) != len(before[l.name])-1 {
			t.Errorf("%s: a cursor alone: %+v", l.name, p)
		}
	}
	for _, l := range lists {
		if after := getList(t, e, o, l, nil).IDs; !slices.Equal(after, before[l.name]) {
			t.Errorf("%s changed: %v, then %v", l.name, before[l.name], after)
		}
	}
	if n := auditEvents(); n != events {
		t.Errorf("%d audit events, then %d", events, n)
	}
}
