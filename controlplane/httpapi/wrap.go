package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/tollgate-dev/tollgate/controlplane/fault"
	"github.com/tollgate-dev/tollgate/controlplane/jsonx"
	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/pkg/redact"
	"github.com/tollgate-dev/tollgate/pkg/typeid"
)

func contextWithRequestID(r *http.Request, id string) context.Context {
	return context.WithValue(r.Context(), requestIDKey{}, id)
}

func newID(prefix typeid.Prefix) string { return typeid.New(prefix) }

// wrap runs the checks of a route's table entry, in a fixed order, before its handler:
// authenticate, then session-only and platform-admin gates, then the organization, then
// the role, then the text of path parameters and query values (checkRequestText; on a
// textAfterBody route the handler runs it after its body). Handlers validate bodies only
// after all of these, so a member sending a bad body to an admin route learns nothing
// but 403.
func (s *Server) wrap(rt route) http.Handler {
	wildcards := patternWildcards(rt.pattern)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Every route's work ends by the deadline: pgx gives up acquiring a connection
		// or cancels the statement then, and the error is answered 503 (writeError).
		// Without it a request blocked on Postgres waited as long as its client did,
		// holding its connection (and with 16 of them the whole pool, accounting's too).
		ctx, cancel := context.WithTimeout(r.Context(), s.deps.RequestTimeout)
		defer cancel()
		r = r.WithContext(ctx)
		c := &Call{W: w, R: r, Ctx: ctx, s: s, now: s.clock.Now()}
		defer func() {
			if p := recover(); p != nil {
				// A bug, so the line says where (the stack), and both are bounded: a
				// panic's value may quote a body or path of the client's choosing, and
				// the top frames are the ones that find the bug.
				s.log.ErrorContext(r.Context(), "handler panic", "request_id", requestID(r), "route", r.Pattern,
					"panic", redact.Excerpt(fmt.Sprint(p), 1024), "stack", redact.Clip(string(debug.Stack()), 4096))
				if !c.wrote {
					jsonx.Write(w, http.StatusInternalServerError, errorBody{Error: "internal_error", Message: "Unexpected error."})
				}
			}
		}()
		// Answers that are the caller's (every authenticated route's, its refusals
		// included) or carry a secret (a session token, an API key, an invitation
		// token) are for nobody else: no cache on the way may keep them. Shared caches
		// skip answers to requests with Authorization on their own, but not those to
		// x-api-key, and a browser's disk cache skips neither.
		if rt.noStore || rt.access != public {
			w.Header().Set("Cache-Control", "private, no-store")
		}
		if err := s.admit(c, &rt); err != nil {
			s.writeError(w, r, &rt, err)
			return
		}
		// After admission, like every input check; before the handler, so that no
		// handler ever passes Postgres text it cannot store (bodies: jsonx). A
		// textAfterBody handler runs it itself (c.checkText) after its body.
		if rt.textAfterBody {
			c.uncheckedText = wildcards
			c.textUnchecked = true
		} else if err := c.checkRequestText(wildcards); err != nil {
			s.writeError(w, r, &rt, err)
			return
		}
		if err := rt.handle(c); err != nil {
			if c.wrote {
				s.log.ErrorContext(r.Context(), "error after answer was written", "request_id", requestID(r), "err", err)
				return
			}
			s.writeError(w, r, &rt, err)
		}
	})
}

func (s *Server) admit(c *Call, rt *route) error {
	if rt.access == public {
		return nil
	}
	p, err := c.authenticate()
	if err != nil {
		return err
	}
	c.Principal = p
	switch rt.access {
	case sessionOnly:
		if p.IsAPIKey() {
			return fault.Forbiddenf("This action needs a signed-in session; API keys cannot perform it.")
		}
	case platformAdmin:
		ok, err := store.IsPlatformAdmin(c.Ctx, c.DB(), p.User.EmailNormalized)
		if err != nil {
			return err
		}
		if !ok {
			return &fault.Error{Kind: fault.Forbidden, Code: "forbidden"}
		}
	}
	if !rt.org {
		return nil
	}
	m, err := c.resolveMember(rt.orgPath)
	if err != nil {
		return err
	}
	c.Member = m
	if len(rt.roles) > 0 && !slices.Contains(rt.roles, m.Role) {
		return fault.Forbiddenf("Your role in this organization does not allow this action.")
	}
	return nil
}

// unmatched answers JSON for paths no route serves: 405 with Allow when the path exists
// under other methods, else 404.
func (s *Server) unmatched(w http.ResponseWriter, r *http.Request) {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := s.mux.Handler(probe); pattern != "" && pattern != "/" {
			allow = append(allow, m)
		}
	}
	if len(allow) > 0 {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		jsonx.Write(w, http.StatusMethodNotAllowed, errorBody{Error: "method_not_allowed",
			Message: fmt.Sprintf("%s is not allowed on %s.", r.Method, r.URL.Path)})
		return
	}
	jsonx.Write(w, http.StatusNotFound, errorBody{Error: "not_found", Message: fmt.Sprintf("No route for %s %s.", r.Method, r.URL.Path)})
}

// goneRoute is a feature that was removed: old clients get 410 and a pointer onward.
type goneRoute struct {
	method, pattern, message string
}

func (s *Server) gone(g goneRoute) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		jsonx.Write(w, http.StatusGone, errorBody{Error: "gone", Message: g.message})
	})
}
