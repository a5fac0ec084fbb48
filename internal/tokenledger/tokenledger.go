// Package tokenledger is the record a fake token endpoint keeps (internal/googlefake,
// internal/oauthfake): how many token requests came, which tokens it issued for which
// scopes, and whether it is failing. Safe for concurrent use.
package tokenledger

import (
	"fmt"
	"sync"
)

// Ledger is one endpoint's record; its zero value is empty and not failing.
type Ledger struct {
	mu      sync.Mutex
	asked   int
	failing bool
	issued  []string
	scopes  []string
}

// Count records that a token request came, refused ones included.
func (l *Ledger) Count() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.asked++
}

// Issue records a new token for scope and returns it: prefix and its number, from 1
// ("ya29.fake-1" for prefix "ya29.fake-").
func (l *Ledger) Issue(prefix, scope string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	tok := fmt.Sprintf("%s%d", prefix, len(l.issued)+1)
	l.issued = append(l.issued, tok)
	l.scopes = append(l.scopes, scope)
	return tok
}

// Asked is how many token requests came, refused ones included.
func (l *Ledger) Asked() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.asked
}

// Issued returns the tokens issued so far, in order.
func (l *Ledger) Issued() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.issued...)
}

// Scopes returns the scope each issued token was asked for, as the request gave it.
func (l *Ledger) Scopes() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.scopes...)
}

// SetFailing makes the endpoint fail every later request (500), or succeed again.
func (l *Ledger) SetFailing(on bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failing = on
}

// Failing says whether the endpoint fails now.
func (l *Ledger) Failing() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.failing
}
