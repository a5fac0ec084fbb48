package store_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"reflect"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/controlplane/plugin"
	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/internal/storetest"
)

var pluginTables = []string{"plugins", "marketplaces", "marketplace_grants", "marketplace_plugins"}

// TestPluginsMigrationUpDownUp applies 0002 on top of 0001, reverts it, and applies it
// again: the down file must undo exactly what the up file did.
func TestPluginsMigrationUpDownUp(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, storetest.URLFor(storetest.NewDatabase(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	exists := func(table string) bool {
		var ok bool
		if err := st.Pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, table).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	steps := []struct {
		target int
		want   bool
	}{{1, false}, {2, true}, {1, false}, {2, true}}
	for _, s := range steps {
		if _, err := st.MigrateTo(ctx, log, s.target); err != nil {
			t.Fatalf("migrate to %d: %v", s.target, err)
		}
		for _, table := range pluginTables {
			if exists(table) != s.want {
				t.Fatalf("at version %d, table %s exists = %v", s.target, table, !s.want)
			}
		}
	}
}

// TestAcceptedManifestsAreStorable feeds Postgres the awkward documents the manifest
// validator accepts: each must be storable as jsonb and come back with the same value.
func TestAcceptedManifestsAreStorable(t *testing.T) {
	st := storetest.New(t)
	base := `{"schemaVersion":1,"id":"a","name":"b","description":"c","source":{"format":"manual","trusted":false},"resources":[]`
	cases := map[string]string{
		"surrogate pair":        base + `,"x":"\ud83d\ude00 \u00e9 \"q\" \\u0000"}`,
		"large numbers":         base + `,"x":[1e300,-1e-300,12345678901234567890123,0.1,-0,1E+2]}`,
		"deepest nesting":       base + `,"x":` + strings.Repeat("[", plugin.MaxDepth-1) + strings.Repeat("]", plugin.MaxDepth-1) + `}`,
		"schemaVersion 1.0":     strings.Replace(base, `:1,`, `:1.0,`, 1) + `}`,
		"unicode keys":          base + `,"ключ":{"キー":null}}`,
		"longest number":        base + `,"x":` + strings.Repeat("9", plugin.MaxNumberLen) + `}`,
		"control characters":    base + `,"x":"\u0001\t\n\u001f"}`,
		"empty key and objects": base + `,"":{},"y":[{}]}`,
	}
	for name, doc := range cases {
		t.Run(name, func(t *testing.T) {
			if _, problems := plugin.Validate([]byte(doc)); problems != nil {
				t.Fatalf("the validator refuses it: %v", problems)
			}
			var back []byte
			if err := st.Pool.QueryRow(context.Background(), `SELECT $1::jsonb`, doc).Scan(&back); err != nil {
				t.Fatalf("Postgres refuses it: %v", err)
			}
			if !sameJSON(t, []byte(doc), back) {
				t.Fatalf("stored value differs:\nsent %s\nback %s", doc, back)
			}
		})
	}
}

func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	parse := func(doc []byte) any {
		dec := json.NewDecoder(strings.NewReader(string(doc)))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
		return normalizeNumbers(v)
	}
	return reflect.DeepEqual(parse(a), parse(b))
}

// normalizeNumbers compares numbers by value: Postgres writes 1E+2 as 100 and -0 as 0.
func normalizeNumbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		f, err := x.Float64()
		if err != nil {
			return string(x)
		}
		if f == 0 {
			f = 0 // -0 and 0 are one value
		}
		return f
	case map[string]any:
		for k, el := range x {
			x[k] = normalizeNumbers(el)
		}
	case []any:
		for i, el := range x {
			x[i] = normalizeNumbers(el)
		}
	}
	return v
}
