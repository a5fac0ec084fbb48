package pricecatalog

import (
	"math"
	"testing"
)

func TestTierNames(t *testing.T) {
	for name, want := range map[string]Tier{"priority": Fast, "fast": Fast, "ultrafast": Ultrafast, "default": Standard, "flex": Standard,
		"auto": Standard, "": Standard, "Priority": Standard, "standard_only": Standard} {
		if got := TierNamed(TierNames[:], name); got != want {
			t.Errorf("the tier named %q: %v, want %v", name, got, want)
		}
	}
	// Bedrock's latency: "optimized" alone costs more.
	for name, want := range map[string]Tier{"optimized": LatencyOptimized, "standard": Standard, "Optimized": Standard, "": Standard} {
		if got := TierNamed(LatencyNames[:], name); got != want {
			t.Errorf("the latency named %q: %v, want %v", name, got, want)
		}
	}
	// The wire names read back; an unknown one is refused.
	for _, tier := range []Tier{Standard, Flex, LatencyOptimized, Fast, Ultrafast} {
		if got, ok := ParseTier(tier.String()); !ok || got != tier {
			t.Errorf("ParseTier(%q) = %v %v", tier.String(), got, ok)
		}
	}
	if _, ok := ParseTier("priority"); ok {
		t.Error(`ParseTier("priority") accepted: the wire name is "fast"`)
	}
	// The tiers are ordered cheapest first (max picks the dearer of two reports).
	if !(Flex < Standard && Standard < LatencyOptimized && LatencyOptimized < Fast && Fast < Ultrafast) {
		t.Error("tiers out of order")
	}
}

// TestFlexTier: the tier below standard (OpenAI's flex, Google's Flex PayGo and flex
// inference) costs half the standard price, rounded up, so a charge above 0 stays above
// 0; its wire name reads back, and only answers' names say it (Bedrock's is not there).
func TestFlexTier(t *testing.T) {
	if got, ok := ParseTier("flex"); !ok || got != Flex || Flex.String() != "flex" {
		t.Errorf(`ParseTier("flex") = %v %v`, got, ok)
	}
	for name, want := range map[string]Tier{"flex": Flex, "ON_DEMAND_FLEX": Flex, "default": Standard, "Flex": Standard, "ON_DEMAND": Standard, "": Standard} {
		if got := TierNamed(FlexNames[:], name); got != want {
			t.Errorf("the flex name %q: %v, want %v", name, got, want)
		}
	}
	if max(Flex, Standard) != Standard || max(Flex, Fast) != Fast || max(Flex, Flex) != Flex {
		t.Error("Flex is not below every other tier")
	}
	for cost, want := range map[int64]int64{1: 1, 2: 1, 3: 2, 1_000_001: 500_001, 7_000_000: 3_500_000} {
		if got, ok := AtPercent(cost, Entry{}.TierPercent(Flex)); !ok || got != want {
			t.Errorf("%d micro-USD at flex: %d %v, want %d", cost, got, ok, want)
		}
	}
	e, ok := Default().Lookup("gpt-5")
	if !ok || e.TierPercent(Flex) != 50 {
		t.Errorf("gpt-5 at flex: %v %d, want 50", ok, e.TierPercent(Flex))
	}
}

func TestTierPercent(t *testing.T) {
	plain, own := Entry{}, Entry{TierPercents: TierPercents{FastPercent: 250, UltrafastPercent: 900}}
	for _, tc := range []struct {
		e    Entry
		tier Tier
		want int64
	}{{plain, Flex, 50}, {own, Flex, 50}, {plain, Standard, 100}, {plain, LatencyOptimized, 125}, {plain, Fast, 200}, {plain, Ultrafast, 600},
		{own, Standard, 100}, {own, LatencyOptimized, 125}, {own, Fast, 250}, {own, Ultrafast, 900}} {
		if got := tc.e.TierPercent(tc.tier); got != tc.want {
			t.Errorf("%+v at %v: %d, want %d", tc.e, tc.tier, got, tc.want)
		}
	}
	// The shipped catalog's own percents: gpt-5.5's fast tier is 2.5 times, Opus 4.6's
	// fast mode 6 times, gpt-4o-mini's 1.67 times; gpt-6-astra's ultrafast the default.
	for model, want := range map[string][2]int64{"gpt-5.5": {250, 600}, "claude-opus-4-6": {600, 600}, "gpt-4o-mini": {167, 600}, "gpt-6-astra": {200, 600}} {
		e, ok := Default().Lookup(model)
		if !ok || e.TierPercent(Fast) != want[0] || e.TierPercent(Ultrafast) != want[1] {
			t.Errorf("%s: %v %d %d, want %v", model, ok, e.TierPercent(Fast), e.TierPercent(Ultrafast), want)
		}
	}
}

func TestAtPercent(t *testing.T) {
	for _, tc := range []struct {
		cost, percent, want int64
		ok                  bool
	}{
		{100, 100, 100, true}, {3, 175, 6, true}, {100, 50, 50, true}, {3, 50, 2, true}, {1, 50, 1, true}, {0, 50, 0, true}, {4, 175, 7, true}, {1, 167, 2, true}, {0, 600, 0, true},
		{math.MaxInt64 / 2, 200, math.MaxInt64 - 1, true}, {math.MaxInt64/2 + 1, 200, 0, false}, {math.MaxInt64, 600, 0, false},
	} {
		if got, ok := AtPercent(tc.cost, tc.percent); got != tc.want || ok != tc.ok {
			t.Errorf("AtPercent(%d, %d) = %d %v, want %d %v", tc.cost, tc.percent, got, ok, tc.want, tc.ok)
		}
	}
}
