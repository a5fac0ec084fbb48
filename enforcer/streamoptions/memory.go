package streamoptions

import (
	"sync"
	"sync/atomic"
	"time"
)

// maxRemembered bounds the refusals remembered at once (upstreams and models come from
// configuration and from clients' bodies): past it a refusal is not remembered, and each
// stream there meets it again, which the gateway answers by sending the body again.
const maxRemembered = 4096

// maxNameBytes bounds the upstream and the model name of a remembered refusal; a longer
// one (no host or model name is this long) is not remembered.
const maxNameBytes = 256

// Refusal is one remembered refusal: Upstream refused stream_options for Model, and its
// streams of that model go unasked until Until.
type Refusal struct {
	Upstream, Model string
	Until           time.Time
}

// Memory remembers refusals per upstream and model. The zero value is not usable: see
// NewMemory. Safe for concurrent use.
type Memory struct {
	now func() time.Time
	// remember is how long a refusal this memory learns is remembered: the upstream's
	// streams of that model go unasked for this long, then it is asked again.
	remember time.Duration
	// learned, when set (OnLearn), is told each refusal Learn remembers.
	learned func(Refusal)
	// remembered counts the refusals in until, so that asking a memory with none, as
	// every stream asks it, takes no lock.
	remembered atomic.Int32
	mu         sync.Mutex
	// until holds each remembered refusal's end.
	until map[key]time.Time
}

type key struct{ upstream, model string }

// NewMemory returns an empty memory that remembers each refusal it learns for remember,
// reading the time from now.
func NewMemory(now func() time.Time, remember time.Duration) *Memory {
	return &Memory{now: now, remember: remember, until: map[key]time.Time{}}
}

// OnLearn has f told each refusal Learn remembers (not those given to Remember), after
// the memory holds it: a Share spreads them. Call it before the memory is used.
func (m *Memory) OnLearn(f func(Refusal)) { m.learned = f }

// Refuses tells whether upstream refused stream_options for model within the time a
// refusal is remembered. A nil Memory remembers nothing.
func (m *Memory) Refuses(upstream, model string) bool {
	if m == nil || m.remembered.Load() == 0 {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	k := key{upstream, model}
	until, ok := m.until[k]
	if ok && !m.now().Before(until) {
		delete(m.until, k) // ended: asked again from now on
		m.remembered.Store(int32(len(m.until)))
		return false
	}
	return ok
}

// Learn remembers that upstream refused stream_options for model, from now on for the
// time a refusal is remembered, and tells OnLearn's function. It returns false when the
// refusal could not be remembered (the memory full of refusals still current, or an
// upstream or model name over maxNameBytes).
func (m *Memory) Learn(upstream, model string) bool {
	if m == nil {
		return false
	}
	r := Refusal{Upstream: upstream, Model: model, Until: m.now().Add(m.remember)}
	if _, ok := m.put(r); !ok {
		return false
	}
	if m.learned != nil {
		m.learned(r)
	}
	return true
}

// Remember takes a refusal learned elsewhere (another front of this enforcer, another
// enforcer: Share), until its own end, or until the end this memory already had for it
// when that is later. It returns true when the memory did not remember that refusal
// before; an ended refusal, or one the memory cannot take (as Learn), is not taken.
func (m *Memory) Remember(r Refusal) bool {
	if m == nil || !m.now().Before(r.Until) {
		return false
	}
	isNew, _ := m.put(r)
	return isNew
}

// put remembers r until r.Until, or until the later end already held. isNew: no
// current refusal was held for its upstream and model; ok: r is held.
func (m *Memory) put(r Refusal) (isNew, ok bool) {
	if len(r.Upstream) > maxNameBytes || len(r.Model) > maxNameBytes {
		return false, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	k := key{r.Upstream, r.Model}
	held, had := m.until[k]
	isNew = !had || !now.Before(held)
	if !had && len(m.until) >= maxRemembered {
		for old, until := range m.until {
			if !now.Before(until) {
				delete(m.until, old)
			}
		}
		if len(m.until) >= maxRemembered {
			return false, false
		}
	}
	if !had || held.Before(r.Until) || !now.Before(held) {
		m.until[k] = r.Until
	}
	m.remembered.Store(int32(len(m.until)))
	return isNew, true
}
