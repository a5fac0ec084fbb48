package pricecatalog

import (
	"math"
	"testing"

	"github.com/tollgate-dev/tollgate/pkg/money"
)

// Amazon Bedrock's guardrails: the shipped prices, a cost rounded up once for all the
// text units with images apiece, the bound where it overflows (an image never free), the
// estimate of a silent guardrail, and the file's refused prices.
func TestGuardrails(t *testing.T) {
	p := Default().Guardrails()
	if want := (GuardrailPrices{ContentText: 150_000, DeniedTopics: 150_000, SensitiveInformation: 100_000,
		ContextualGrounding: 100_000, AutomatedReasoning: 170_000, ContentImage: 750,
		ChecksContentFilter: 70_000, ChecksPromptAttack: 80_000, ChecksSensitiveInformation: 100_000}); p != want || !p.Valid() {
		t.Fatalf("shipped %+v, want %+v", p, want)
	}
	for _, c := range []struct {
		u    GuardrailUnits
		want int64
	}{
		{GuardrailUnits{ContentText: 3, DeniedTopics: 3, SensitiveInformation: 2, ContentImages: 1}, 1_850},
		{GuardrailUnits{ContentText: 1, DeniedTopics: 1, SensitiveInformation: 1, ContextualGrounding: 1, AutomatedReasoning: 1, ContentImages: 1}, 670 + 750},
		{GuardrailUnits{ContentText: 1, SensitiveInformation: 1}, 250}, // 0.25 micro-USD... per unit: 150 + 100
		{GuardrailUnits{AutomatedReasoning: 3}, 510},                   // 3 × 170
		// The detect-only checks: 2 × 70 + 2 × 80 + 1 × 100.
		{GuardrailUnits{ChecksContentFilter: 2, ChecksPromptAttack: 2, ChecksSensitiveInformation: 1}, 400},
		{GuardrailUnits{DeniedTopics: -5, ContentImages: -1}, 0}, // a negative count is none
		{GuardrailUnits{}, 0},
	} {
		if got, ok := p.Cost(c.u); !ok || got != c.want {
			t.Errorf("%+v: %d (%v), want %d", c.u, got, ok, c.want)
		}
	}
	// Rounded up once for the whole: one unit at 0.001 micro-USD each is 1, three are 1.
	cheap := GuardrailPrices{ContentText: 1, DeniedTopics: 1, SensitiveInformation: 1}
	if got, _ := cheap.Cost(GuardrailUnits{ContentText: 1, DeniedTopics: 1, SensitiveInformation: 1}); got != 1 {
		t.Errorf("rounded up per policy: %d", got)
	}
	for name, c := range map[string]struct {
		p GuardrailPrices
		u GuardrailUnits
	}{
		"text units past int64":          {p, GuardrailUnits{ContentText: math.MaxInt64, DeniedTopics: math.MaxInt64}},
		"text past the bound":            {p, GuardrailUnits{ContentText: money.MaxAllowanceMicroUSD}},
		"an image at a price near int64": {GuardrailPrices{ContentImage: math.MaxInt64 / 2}, GuardrailUnits{ContentImages: 3}},
		"images past the bound":          {p, GuardrailUnits{ContentText: 1, ContentImages: money.MaxAllowanceMicroUSD/750 + 1}},
	} {
		if got, ok := c.p.Cost(c.u); ok || got != money.MaxAllowanceMicroUSD {
			t.Errorf("%s: %d (%v), want the bound, reported", name, got, ok)
		}
	}
	if (GuardrailPrices{DeniedTopics: -1}).Valid() {
		t.Error("a negative price is valid")
	}
	// A silent guardrail: the characters' text units (up to 1,000 each) at the four text policies.
	for chars, n := range map[int64]int64{1: 1, 1000: 1, 1001: 2, 5600: 6} {
		if got := EstimatedGuardrailUnits(chars); got != (GuardrailUnits{ContentText: n, DeniedTopics: n, SensitiveInformation: n, ContextualGrounding: n}) {
			t.Errorf("%d characters: %+v, want %d units", chars, got, n)
		}
	}
	if !EstimatedGuardrailUnits(0).IsZero() || !EstimatedGuardrailUnits(-4).IsZero() {
		t.Error("no text, some units")
	}
	if sum := (GuardrailUnits{ContentText: math.MaxInt64}).Add(GuardrailUnits{ContentText: 5, ContentImages: 2}); sum.ContentText != math.MaxInt64 || sum.ContentImages != 2 {
		t.Errorf("a saturating sum: %+v", sum)
	}
	shaped := `{"asOf":"2026-11-29","unit":"` + Unit + `","sources":["https://example.com"],"models":[` +
		`{"model":"o","provider":"mistral","kind":"ocr","perPage":4000}],"guardrails":`
	for name, g := range map[string]string{
		"a negative price":                 `{"contentText":-1}`,
		"a price past the bound per 1,000": `{"deniedTopics":9000000000000000}`,
		"an unknown policy":                `{"wordFilters":1}`,
	} {
		if _, err := Load([]byte(shaped + g + `}`)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if c, err := Load([]byte(shaped + `{"contentText":7}}`)); err != nil || c.Guardrails().ContentText != 7 {
		t.Errorf("a good file: %v", err)
	}
}
