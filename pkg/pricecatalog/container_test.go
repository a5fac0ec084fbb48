package pricecatalog

import (
	"slices"
	"testing"

	"github.com/tollgate-dev/tollgate/pkg/money"
)

// TestContainers: the shipped container prices (OpenAI's by memory, 0.03 USD per 20
// minutes a gigabyte's worth; Anthropic's 0.05 USD an hour), their cost rounded up and
// bounded, the dearest by provider, and a file's container entry refused for each thing
// wrong with it.
func TestContainers(t *testing.T) {
	cat := Default()
	var kinds []string
	for _, c := range cat.Containers() {
		kinds = append(kinds, c.Kind)
	}
	if want := []string{"anthropic", "openai-16g", "openai-1g", "openai-4g", "openai-64g"}; !slices.Equal(kinds, want) {
		t.Fatalf("kinds %q, want %q", kinds, want)
	}
	for _, c := range []struct {
		kind          string
		minutes, want int64
	}{
		{"openai-1g", 20, 30_000}, {"openai-4g", 21, 126_000}, {"openai-64g", 20, 1_920_000},
		{"anthropic", 60, 50_000}, {"anthropic", 5, 4_167}, {"anthropic", 1, 834}, {"anthropic", 0, 0},
	} {
		p, ok := cat.Container(c.kind)
		if got, fits := p.Cost(c.minutes); !ok || !fits || got != c.want {
			t.Errorf("%d minutes of %s: %d (%v, %v), want %d", c.minutes, c.kind, got, ok, fits, c.want)
		}
	}
	if p, _ := cat.Container("openai-64g"); !func() bool { got, fits := p.Cost(1 << 62); return !fits && got == money.MaxAllowanceMicroUSD }() {
		t.Error("an overflowing cost is not the bound, reported")
	}
	for provider, want := range map[string]string{"openai": "openai-64g", "anthropic": "anthropic", "": "openai-64g"} {
		if c, ok := cat.DearestContainer(provider); !ok || c.Kind != want {
			t.Errorf("dearest of %q: %+v, want %s", provider, c, want)
		}
	}
	if _, ok := cat.DearestContainer("google"); ok {
		t.Error("a provider without containers has a dearest")
	}
	shaped := `{"asOf":"2026-11-29","unit":"` + Unit + `","sources":["https://example.com"],"models":[` +
		`{"model":"o","provider":"mistral","kind":"ocr","perPage":4000}],"containers":{`
	for name, entry := range map[string]string{
		"an unknown provider":     `"acme-1g":{"provider":"acme","perHour":1,"idleMinutes":5,"minimumMinutes":5}`,
		"another provider's kind": `"anthropic-1g":{"provider":"openai","perHour":1,"idleMinutes":5,"minimumMinutes":5}`,
		"a kind in upper case":    `"openai-1G":{"provider":"openai","perHour":1,"idleMinutes":5,"minimumMinutes":5}`,
		"no price":                `"openai-1g":{"provider":"openai","idleMinutes":5,"minimumMinutes":5}`,
		"no minimum":              `"openai-1g":{"provider":"openai","perHour":1,"idleMinutes":5}`,
		"idle below the minimum":  `"openai-1g":{"provider":"openai","perHour":1,"idleMinutes":4,"minimumMinutes":5}`,
	} {
		if _, err := Load([]byte(shaped + entry + `}}`)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := Load([]byte(shaped + `"openai-2g":{"provider":"openai","perHour":1,"idleMinutes":5,"minimumMinutes":5}}}`)); err != nil {
		t.Errorf("a container refused: %v", err)
	}
}

// TestIsContainerKind: what names a kind (the ledger and /settle read a settlement's kind
// so).
func TestIsContainerKind(t *testing.T) {
	for s, want := range map[string]bool{"openai-4g": true, "anthropic": true, "": false, "OpenAI-4g": false, "openai_4g": false,
		"kind\x00": false, string(make([]byte, MaxContainerKindBytes+1)): false} {
		if got := IsContainerKind(s); got != want {
			t.Errorf("IsContainerKind(%q) = %v, want %v", s, got, want)
		}
	}
	long := make([]byte, MaxContainerKindBytes)
	for i := range long {
		long[i] = 'a'
	}
	if !IsContainerKind(string(long)) || IsContainerKind(string(long)+"a") {
		t.Error("the bound is not MaxContainerKindBytes")
	}
}
