package requestbody_test

import (
	"testing"

	"github.com/tollgate-dev/tollgate/enforcer/requestbody"
)

// The readers of a request's members read a key only when it is the member's name
// exactly, as the upstreams do (Python's json and pydantic, JavaScript, serde, nlohmann):
// encoding/json also took a key that differs in case, or by a Unicode fold ("N" for "n",
// "Max_Uses" for "max_uses", "ſize" for "size"), and of the two the last won, so a member
// could have the front door read a count the provider never used and reserve, or be
// charged, a tenth of the images it made or one advice of fifty. Before, each case below
// read the folded key's value.
func TestReadersReadExactKeys(t *testing.T) {
	if got := requestbody.ImageOutputTokens("/v1/images/generations",
		[]byte(`{"n":10,"quality":"high","size":"1024x1024","N":1,"Quality":"low","ſize":"1024x1536"}`), "gpt-image-1"); got != 10*4_160 {
		t.Errorf("ImageOutputTokens = %d, want ten high-quality square images, %d", got, 10*4_160)
	}
	if a := requestbody.AdvisorTool([]byte(`{"tools":[{"type":"advisor_20260301","model":"claude-opus-4-7","max_uses":50,"Max_Uses":1,"MAX_TOKENS":1}]}`)); a.MaxUses != 50 || a.MaxTokens != 0 {
		t.Errorf("AdvisorTool = %+v, want 50 uses and no max_tokens", a)
	}
	if f := requestbody.Fallbacks([]byte(`{"fallbacks":[{"model":"claude-opus-4-8","max_tokens":64000,"Max_Tokens":1,"Model":"claude-haiku-4-5"}]}`)); len(f.Entries) != 1 ||
		f.Entries[0].Model != "claude-opus-4-8" || f.Entries[0].MaxTokens != 64_000 {
		t.Errorf("Fallbacks = %+v, want claude-opus-4-8 writing up to 64,000 tokens", f)
	}
	if c := requestbody.ContainerTool([]byte(`{"tools":[{"type":"code_interpreter","container":"cntr_1"}],"Tools":[]}`)); !c.Explicit {
		t.Errorf("ContainerTool = %+v, want the container named by its id", c)
	}
	if c := requestbody.ImageToolCall([]byte(`{"tools":[{"type":"image_generation","model":"gpt-image-1","quality":"high","size":"1024x1024","Quality":"low"}]}`)); c.Tokens != 4_160 {
		t.Errorf("ImageToolCall = %+v, want a high-quality square image", c)
	}
	// What read before still reads: the last of a key given twice exactly, numbers of
	// any form, a body that is no JSON object.
	if got := requestbody.ImageOutputTokens("/v1/images/generations", []byte(`{"n":1,"n":3e0,"size":"1024x1024","quality":"low","x":1e400}`), "gpt-image-1"); got != 3*272 {
		t.Errorf("ImageOutputTokens = %d, want %d", got, 3*272)
	}
	if a := requestbody.AdvisorTool([]byte(`{"tools":[{"type":"advisor_20260301","model":"claude-opus-4-7","max_uses":2}]} {}`)); a.Model != "" {
		t.Errorf("AdvisorTool of data after the object = %+v, want none", a)
	}
}
