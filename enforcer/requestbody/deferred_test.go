package requestbody

import "testing"

// A body the estimate cannot read still says whether it runs in the background.
func TestAsksBackground(t *testing.T) {
	for body, want := range map[string]bool{
		`{"background":true}`: true,
		` { "model" : "o3" , "background" : true , "n":1e400 }`: true,
		`{"tools":[{"x":{"max":1e400}}],"background":true}`:     true,
		`{"background":false,"n":1e400}`:                        false,
		`{"background":true,"background":false}`:                false, // the last repeat wins
		`{"metadata":{"background":true}}`:                      false, // not at the top level
		`{"background":"true"}`:                                 false,
		`{"background":true`:                                    false, // not JSON: the provider refuses it
		`[{"background":true}]`:                                 false,
		``:                                                      false,
	} {
		if got := AsksBackground([]byte(body)); got != want {
			t.Errorf("%s: %v, want %v", body, got, want)
		}
	}
}
