package accounting

import (
	"errors"
	"math"
	"math/bits"

	"github.com/tollgate-dev/tollgate/pkg/money"
)

// Cost sources, as receipts store them.
const (
	SourceUpstream        = "upstream"
	SourceCatalogEstimate = "catalog_estimate"
	SourceUnknown         = "unknown"
)

// Price is an organization's catalog price of one model, in micro-USD per million
// tokens.
type Price struct {
	InputPerMillion       int64
	OutputPerMillion      int64
	CachedInputPerMillion int64
}

// Usage is what a response reported.
type Usage struct {
	InputTokens       int64
	OutputTokens      int64
	CachedInputTokens int64
	// UpstreamCost is the cost the upstream reported, when it did.
	UpstreamCost *int64
}

// ErrCostOverflow: the cost does not fit in int64 micro-USD.
var ErrCostOverflow = errors.New("accounting: cost overflows int64 micro-USD")

// ErrBadUsage: a token count or an upstream cost is negative or beyond the bounds.
var ErrBadUsage = errors.New("accounting: token counts and costs must be non-negative, and a cost at most 4503599627370495")

// CostOf prices a request: an upstream-reported cost wins; else the catalog price (nil
// when the organization has no price for the model) times the tokens; else the cost is
// unknown (0, SourceUnknown).
func CostOf(u Usage, p *Price) (int64, string, error) {
	if u.InputTokens < 0 || u.OutputTokens < 0 || u.CachedInputTokens < 0 {
		return 0, "", ErrBadUsage
	}
	if u.UpstreamCost != nil {
		if *u.UpstreamCost < 0 || *u.UpstreamCost > money.MaxAllowanceMicroUSD {
			return 0, "", ErrBadUsage
		}
		return *u.UpstreamCost, SourceUpstream, nil
	}
	if p == nil {
		return 0, SourceUnknown, nil
	}
	c, err := CatalogCost(u, *p)
	if err != nil {
		return 0, "", err
	}
	return c, SourceCatalogEstimate, nil
}

// CatalogCost is ceil(((input - cached) * inputPrice + cached * cachedPrice + output *
// outputPrice) / 1e6). Input tokens include cached ones (OpenAI's convention, and the
// enforcer normalises Anthropic's to it); a cached count above the input count is read
// as "everything was cached" rather than as a negative number of tokens. The sum is
// computed in 128 bits, so no intermediate product overflows; only a result beyond
// int64 is an error. Rounding up means a fraction of a micro-USD is never given away.
func CatalogCost(u Usage, p Price) (int64, error) {
	if p.InputPerMillion < 0 || p.OutputPerMillion < 0 || p.CachedInputPerMillion < 0 {
		return 0, ErrBadUsage
	}
	uncached := u.InputTokens - u.CachedInputTokens
	cached := u.CachedInputTokens
	if uncached < 0 {
		uncached, cached = 0, u.InputTokens
	}
	var hi, lo uint64
	add := func(tokens, price int64) {
		h, l := bits.Mul64(uint64(tokens), uint64(price))
		var carry uint64
		lo, carry = bits.Add64(lo, l, 0)
		hi, _ = bits.Add64(hi, h, carry)
	}
	add(uncached, p.InputPerMillion)
	add(cached, p.CachedInputPerMillion)
	add(u.OutputTokens, p.OutputPerMillion)
	// Three products of values below 2^63 stay below 2^128, so hi never wrapped.
	const million = 1_000_000
	if hi >= million {
		return 0, ErrCostOverflow
	}
	q, r := bits.Div64(hi, lo, million)
	if r != 0 {
		if q == math.MaxUint64 {
			return 0, ErrCostOverflow
		}
		q++
	}
	if q > math.MaxInt64 {
		return 0, ErrCostOverflow
	}
	return int64(q), nil
}
