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
	for _, tier := range []Tier{Standard, LatencyOptimized, Fast, Ultrafast} {
		if got, ok := ParseTier(tier.String()); !ok || got != tier {
			t.Errorf("ParseTier(%q) = %v %v", tier.String(), got, ok)
		}
	}
	if _, ok := ParseTier("priority"); ok {
		t.Error(`ParseTier("priority") accepted: the wire name is "fast"`)
	}
	// The tiers are ordered cheapest first (max picks the dearer of two reports).
	if !(Standard < LatencyOptimized && LatencyOptimized < Fast && Fast < Ultrafast) {
		t.Error("tiers out of order")
	}
}

func TestTierPercent(t *testing.T) {
	plain, own := Entry{}, Entry{TierPercents: TierPercents{FastPercent: 250, UltrafastPercent: 900}}
	for _, tc := range []struct {
		e    Entry
		tier Tier
		want int64
	}{{plain, Standard, 100}, {plain, LatencyOptimized, 125}, {plain, Fast, 200}, {plain, Ultrafast, 600},
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
		{100, 100, 100, true}, {3, 175, 6, true}, {4, 175, 7, true}, {1, 167, 2, true}, {0, 600, 0, true},
		{math.MaxInt64 / 2, 200, math.MaxInt64 - 1, true}, {math.MaxInt64/2 + 1, 200, 0, false}, {math.MaxInt64, 600, 0, false},
	} {
		if got, ok := AtPercent(tc.cost, tc.percent); got != tc.want || ok != tc.ok {
			t.Errorf("AtPercent(%d, %d) = %d %v, want %d %v", tc.cost, tc.percent, got, ok, tc.want, tc.ok)
		}
	}
}
