package store

import (
	"strings"
	"testing"
)

// TestParseOldestReader: the "-- oldest-reader: N" header line of an up file, from 0
// to the migration's own version, once; without it the migration's own version.
func TestParseOldestReader(t *testing.T) {
	for _, tc := range []struct {
		name string
		up   string
		want int
		err  string // a part of the error; "" for none
	}{
		{"no header", "-- Adds a column.\nALTER TABLE t ADD COLUMN c int;\n", 33, ""},
		{"expand only", "-- oldest-reader: 0\n-- Adds a column.\nALTER TABLE t ADD COLUMN c int;\n", 0, ""},
		{"contract step", "-- oldest-reader: 31\nALTER TABLE t DROP COLUMN c;\n", 31, ""},
		{"its own version", "-- oldest-reader: 33\nALTER TABLE t DROP COLUMN c;\n", 33, ""},
		{"spaces and CRLF", "  --   oldest-reader:   7  \r\nSELECT 1;\r\n", 7, ""},
		{"below the header block", "-- Adds.\nSELECT 1;\n-- oldest-reader: 0\n", 0, ""},
		{"not a number", "-- oldest-reader: zero\n", 0, "oldest-reader: zero"},
		{"negative", "-- oldest-reader: -1\n", 0, "from 0 to 33"},
		{"above its own version", "-- oldest-reader: 34\n", 0, "from 0 to 33"},
		{"no value", "-- oldest-reader\n", 0, "want"},
		{"empty value", "-- oldest-reader:\n", 0, "want"},
		{"other spelling", "-- Oldest-Reader: 0\n", 0, "want"},
		{"space before the colon", "-- oldest-reader : 0\n", 0, "want"},
		{"twice", "-- oldest-reader: 0\n-- oldest-reader: 0\n", 0, "more than one"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseOldestReader(33, tc.up)
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("error %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("got %d, error %v; want an error with %q", got, err, tc.err)
			case tc.err == "" && got != tc.want:
				t.Fatalf("got %d, want %d", got, tc.want)
			}
		})
	}
}
