package mirror_test

import (
	"testing"

	"github.com/tollgate-dev/tollgate/internal/testredis"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
)

func TestPostgresIdentityReplaced(t *testing.T) {
	was := mirror.PostgresIdentity{System: "7715003587517331606", Timeline: "00000001", Database: "16384", Table: "16500", LSN: 5000}
	with := func(f func(*mirror.PostgresIdentity)) mirror.PostgresIdentity {
		id := was
		f(&id)
		return id
	}
	cases := []struct {
		name     string
		now      mirror.PostgresIdentity
		replaced bool
	}{
		{"the same database, further along", with(func(i *mirror.PostgresIdentity) { i.LSN = 9000 }), false},
		{"the same position", was, false},
		{"a promoted replica: a new timeline", with(func(i *mirror.PostgresIdentity) { i.Timeline = "00000002"; i.LSN = 9000 }), true},
		{"a new cluster (pg_dump restored into a new server)", with(func(i *mirror.PostgresIdentity) { i.System = "1"; i.LSN = 9000 }), true},
		{"a database created again", with(func(i *mirror.PostgresIdentity) { i.Database = "17000" }), true},
		{"tables created again (pg_restore --clean)", with(func(i *mirror.PostgresIdentity) { i.Table = "17001" }), true},
		{"started from a snapshot of itself: an older position", with(func(i *mirror.PostgresIdentity) { i.LSN = 4999 }), true},
		{"a server that hides its system id and log position", mirror.PostgresIdentity{Database: "16384", Table: "16500", LSN: -1}, false},
		{"hidden, and another database", mirror.PostgresIdentity{Database: "17000", Table: "16500", LSN: -1}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := was.Replaced(c.now); got != c.replaced {
				t.Errorf("Replaced = %v, want %v", got, c.replaced)
			}
		})
	}
}

func TestNotePostgresRoundTrip(t *testing.T) {
	rdb, layout := testredis.New(t)
	ctx := t.Context()
	if _, _, ok, err := layout.NotedPostgres(ctx, rdb); ok || err != nil {
		t.Fatalf("a note before any: %v %v", ok, err)
	}
	for _, id := range []mirror.PostgresIdentity{
		{System: "7715003587517331606", Timeline: "00000003", Database: "16384", Table: "16500", LSN: 123456789},
		{Database: "16384", Table: "16500", LSN: -1},
	} {
		if err := layout.NotePostgres(ctx, rdb, "gen-1", id); err != nil {
			t.Fatal(err)
		}
		gen, got, ok, err := layout.NotedPostgres(ctx, rdb)
		if err != nil || !ok || gen != "gen-1" || got != id {
			t.Fatalf("noted %q %+v %v %v, want %+v", gen, got, ok, err, id)
		}
	}
	if err := rdb.Set(ctx, layout.PostgresKey(), "not a note", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, _, ok, err := layout.NotedPostgres(ctx, rdb); ok || err != nil {
		t.Fatalf("garbage read as a note: %v %v", ok, err)
	}
}
