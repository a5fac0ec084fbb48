package pricecatalog

import (
	"cmp"
	"maps"
	"math/bits"
	"slices"
	"strings"

	"github.com/tollgate-dev/tollgate/pkg/money"
)

// Container is how a provider bills the sandbox its code tools run in (OpenAI's code
// interpreter and hosted shell, Anthropic's code execution tool): by the time the
// container lives, not by the request. A container outlives the request that opened it,
// and later requests may use it again: a charge covers from the request's start to
// IdleMinutes after its end (the container is billed, or at least kept, until it has
// been idle that long), never a minute twice for one container, at least MinimumMinutes
// for a container first seen (docs/prices.md, "Containers").
type Container struct {
	// Kind names the price: "<provider>-<memory>" where the provider prices by memory
	// (openai-1g ... openai-64g), else the provider ("anthropic").
	Kind     string
	Provider string
	// PerHour is the price of an hour of the container, in integer micro-USD.
	PerHour int64
	// IdleMinutes is how long a container stays billed after its last use: OpenAI's
	// containers expire after 20 idle minutes; Anthropic's are checkpointed after about 5.
	IdleMinutes int64
	// MinimumMinutes is the least a container is billed.
	MinimumMinutes int64
}

// Cost is the price of minutes of the container, in micro-USD rounded up, and false when
// it exceeds money.MaxAllowanceMicroUSD (the caller charges the bound).
func (c Container) Cost(minutes int64) (int64, bool) {
	if minutes <= 0 {
		return 0, true
	}
	hi, lo := bits.Mul64(uint64(minutes), uint64(c.PerHour))
	lo, carry := bits.Add64(lo, 59, 0) // rounded up
	hi += carry
	if hi >= 60 {
		return money.MaxAllowanceMicroUSD, false
	}
	q, _ := bits.Div64(hi, lo, 60)
	if q > uint64(money.MaxAllowanceMicroUSD) {
		return money.MaxAllowanceMicroUSD, false
	}
	return int64(q), true
}

// MaxContainerKindBytes bounds a container kind's name.
const MaxContainerKindBytes = 64

// IsContainerKind tells whether s can name a container kind: 1 to MaxContainerKindBytes
// lower-case ASCII letters, digits and '-' (openai-4g, anthropic). The catalog's kinds are
// such names; a settlement's kind that is not one names none (Postgres and JSON refuse
// what an upstream may put in a string).
func IsContainerKind(s string) bool {
	if s == "" || len(s) > MaxContainerKindBytes {
		return false
	}
	for i := range len(s) {
		if c := s[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}

// fileContainer is a container price in the catalog file ("containers", by kind).
type fileContainer struct {
	Provider       string `json:"provider"`
	PerHour        int64  `json:"perHour"`
	IdleMinutes    int64  `json:"idleMinutes"`
	MinimumMinutes int64  `json:"minimumMinutes"`
}

// buildContainers checks the file's container prices.
func buildContainers(f map[string]fileContainer, bad func(string, ...any)) map[string]Container {
	out := map[string]Container{}
	for kind, fc := range f {
		where := "containers." + kind
		switch {
		case !slices.Contains(providers, fc.Provider):
			bad("%s: provider %q is not one of %v", where, fc.Provider, providers)
		case !IsContainerKind(kind) || kind != fc.Provider && !strings.HasPrefix(kind, fc.Provider+"-"):
			bad("%s: a kind is its provider's name, or that name, a dash and lower-case letters or digits", where)
		case fc.PerHour <= 0 || fc.PerHour > money.MaxAllowanceMicroUSD:
			bad("%s: perHour must be from 1 to %d", where, money.MaxAllowanceMicroUSD)
		case fc.MinimumMinutes <= 0 || fc.IdleMinutes < fc.MinimumMinutes || fc.IdleMinutes > 24*60:
			bad("%s: minimumMinutes must be at least 1, and idleMinutes from it to a day", where)
		default:
			out[kind] = Container{Kind: kind, Provider: fc.Provider, PerHour: fc.PerHour, IdleMinutes: fc.IdleMinutes,
				MinimumMinutes: fc.MinimumMinutes}
		}
	}
	return out
}

// Container is the catalog's price of a container kind, and whether it knows it.
func (c *Catalog) Container(kind string) (Container, bool) {
	p, ok := c.containers[kind]
	return p, ok
}

// DearestContainer is the dearest container price of provider (of any provider when
// provider is ""), and whether the catalog has one: what a container is charged whose
// memory the request did not say (the enforcer did not see it), never below its bill.
func (c *Catalog) DearestContainer(provider string) (Container, bool) {
	var best Container
	for _, p := range c.containers {
		if (provider == "" || p.Provider == provider) && (p.PerHour > best.PerHour ||
			p.PerHour == best.PerHour && p.Kind < best.Kind) {
			best = p
		}
	}
	return best, best.Kind != ""
}

// Containers lists the catalog's container prices by kind.
func (c *Catalog) Containers() []Container {
	return slices.SortedFunc(maps.Values(c.containers), func(a, b Container) int { return cmp.Compare(a.Kind, b.Kind) })
}
