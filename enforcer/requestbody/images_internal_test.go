package requestbody

import (
	"testing"

	"github.com/tollgate-dev/tollgate/pkg/pricecatalog"
)

// TestGPTImage2Tokens: gpt-image-2's token count gives OpenAI's per-image prices at 30 USD
// per million (0.006, 0.053 and 0.211 USD a square image at low, medium and high quality;
// 0.005, 0.041 and 0.165 a 1536x1024 one, each within half a thousandth of a dollar) and
// the counts real answers reported; its dearest images are the ones gptImage2Dearest
// holds, found by trying every size it takes.
func TestGPTImage2Tokens(t *testing.T) {
	for _, c := range []struct {
		w, h    int64
		quality string
		want    int64
	}{
		{1024, 1024, "low", 196}, {1024, 1024, "medium", 1_756}, {1024, 1024, "high", 7_024},
		{1536, 1024, "low", 158}, {1024, 1536, "medium", 1_372}, {1536, 1024, "high", 5_488},
		{3840, 2160, "high", 13_342}, {3584, 2048, "high", 12_329}, {1792, 1024, "high", 5_063}, {2560, 1440, "low", 205},
	} {
		if got, ok := gptImage2Tokens(c.w, c.h, c.quality); !ok || got != c.want {
			t.Errorf("%dx%d %s: %d tokens (%v), want %d", c.w, c.h, c.quality, got, ok, c.want)
		}
	}
	for quality, want := range gptImage2Dearest {
		var most int64
		for w := int64(16); w <= 3_840; w += 16 {
			for h := int64(16); h <= 3_840; h += 16 {
				if n, ok := gptImage2Tokens(w, h, quality); ok {
					most = max(most, n)
				}
			}
		}
		if most != want {
			t.Errorf("%s: the dearest image counts %d tokens, want %d", quality, most, want)
		}
	}
	if got := gptImage2Dearest["high"]; got != pricecatalog.DearestImageTokens {
		t.Errorf("DearestImageTokens %d, gpt-image-2's dearest %d", pricecatalog.DearestImageTokens, got)
	}
	for _, bad := range [][2]int64{{1000, 1000}, {3856, 2160}, {3840, 1024}, {512, 512}, {2880, 2896}} {
		if _, ok := gptImage2Tokens(bad[0], bad[1], "high"); ok {
			t.Errorf("%dx%d: counted, though gpt-image-2 refuses it", bad[0], bad[1])
		}
	}
}
