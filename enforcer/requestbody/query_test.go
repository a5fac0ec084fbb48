package requestbody_test

import (
	"slices"
	"testing"

	"github.com/tollgate-dev/tollgate/enforcer/requestbody"
)

// Each parameter is judged by its name and value decoded, as the providers read them;
// one that does not decode is read as it came.
func TestQueryParams(t *testing.T) {
	var got []requestbody.QueryParam
	for p := range requestbody.QueryParams("k%65y=tgk_a&&%24fields=x&alt&v=a+b%2Fc&bad%zz=%zz") {
		got = append(got, p)
	}
	want := []requestbody.QueryParam{
		{Raw: "k%65y=tgk_a", Name: "key", Value: "tgk_a"},
		{Raw: "%24fields=x", Name: "$fields", Value: "x"},
		{Raw: "alt", Name: "alt"},
		{Raw: "v=a+b%2Fc", Name: "v", Value: "a b/c"},
		{Raw: "bad%zz=%zz", Name: "bad%zz", Value: "%zz"},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q\nwant %q", got, want)
	}
	for range requestbody.QueryParams("") {
		t.Fatal("a parameter in an empty query")
	}
}

func TestUnreadableAnswer(t *testing.T) {
	for _, tc := range []struct {
		method, query, want string
	}{
		{"POST", "", ""},
		{"POST", "alt=sse", ""},
		{"POST", "%24alt=json&prettyPrint=false", ""},
		{"POST", "alt=proto", "alt"},
		{"POST", "%24alt=proto", "$alt"},
		{"POST", "alt=sse&a%6Ct=proto", "alt"},
		{"POST", "alt=", "alt"},
		{"POST", "alt=media", "alt"}, // a generation's answer as media: not read
		{"GET", "alt=media", ""},     // a file's download, not charged
		{"GET", "alt=proto", "alt"},
		{"POST", "callback=f", "callback"},
		{"GET", "%24callback=f", "$callback"},
		{"POST", "$ct=application/x-protobuf", "$ct"},
		{"POST", "ct=x&calllback=f&fields=a", ""}, // not Google's names
	} {
		if got := requestbody.UnreadableAnswer(tc.method, "/v1beta/models/gemini-2.5-pro:generateContent", tc.query); got != tc.want {
			t.Errorf("%s ?%s: %q, want %q", tc.method, tc.query, got, tc.want)
		}
	}
}
