package httpapi

import (
	"net/http"
	"time"

	"github.com/tollgate-dev/tollgate/controlplane/fault"
	"github.com/tollgate-dev/tollgate/controlplane/store"
)

// The organization's lists (members, teams, API keys) answer the whole list, as API.md
// specifies, unless the call asks for a page with limit or cursor: a large
// organization's list is then read, built and sent a page at a time, in (createdAt, id)
// order, with the cursors of the other lists (readPage, cutPage).
const (
	orgListPageDefault = 100
	orgListPageMax     = 1000
)

// orgListPage reads an organization list's paging parameters: nil when the call asks
// for the whole list (neither limit nor cursor), else the page (a 400 for a bad limit or
// a cursor of another list, organization or view).
func orgListPage(c *Call, want resetCursor) (*store.ListPage, error) {
	q := c.R.URL.Query()
	if !q.Has("limit") && !q.Has("cursor") {
		return nil, nil
	}
	var p fault.Problems
	limit, after := readPageWithin(q, &p, want, orgListPageDefault, orgListPageMax)
	if err := p.Err(); err != nil {
		return nil, err
	}
	return &store.ListPage{Limit: limit, After: after}, nil
}

// answerPage answers one page of an organization list: the rows, read one past the
// limit, under their list's key, with limit, hasMore and nextCursor.
func answerPage[T, V any](c *Call, key string, rows []T, page *store.ListPage, want resetCursor,
	position func(T) (time.Time, string), view func(T) V) error {
	rows, hasMore, next := cutPage(rows, page.Limit, want, position)
	views := make([]V, len(rows))
	for i, r := range rows {
		views[i] = view(r)
	}
	return c.JSON(http.StatusOK, map[string]any{key: views, "limit": page.Limit, "hasMore": hasMore, "nextCursor": next})
}
