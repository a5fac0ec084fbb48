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

// The rebuild note says Postgres was kept only for the generation it was written
// under: an older note, a note of doubt, garbage or none all mean "send again".
func TestRebuildNoteNamesItsGeneration(t *testing.T) {
	rdb, layout := testredis.New(t)
	ctx := t.Context()
	kept := func(gen string) bool {
		t.Helper()
		ok, err := layout.PostgresKeptThrough(ctx, rdb, gen)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if kept("gen-1") {
		t.Fatal("kept without a note")
	}
	if err := layout.NoteRebuild(ctx, rdb, "gen-1", true); err != nil {
		t.Fatal(err)
	}
	if !kept("gen-1") || kept("gen-2") || kept("") {
		t.Fatalf("a note of gen-1 kept: gen-1 %v, gen-2 %v, none %v; want only gen-1", kept("gen-1"), kept("gen-2"), kept(""))
	}
	if err := layout.NoteRebuild(ctx, rdb, "gen-2", false); err != nil {
		t.Fatal(err)
	}
	if kept("gen-2") || kept("gen-1") {
		t.Fatal("a note of doubt read as kept")
	}
	if err := rdb.Set(ctx, layout.RebuildKey(), "gen-3 postgres-kept trailing", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if kept("gen-3") {
		t.Fatal("garbage read as kept")
	}
}

func TestPostgresIdentityWhole(t *testing.T) {
	whole := mirror.PostgresIdentity{System: "7715003587517331606", Timeline: "00000003", Database: "16384", Table: "16500", LSN: 0}
	if !whole.Whole() {
		t.Fatalf("%+v is not whole", whole)
	}
	for _, part := range []func(*mirror.PostgresIdentity){
		func(i *mirror.PostgresIdentity) { i.System = "" }, func(i *mirror.PostgresIdentity) { i.Timeline = "" },
		func(i *mirror.PostgresIdentity) { i.Database = "" }, func(i *mirror.PostgresIdentity) { i.Table = "" },
		func(i *mirror.PostgresIdentity) { i.LSN = -1 },
	} {
		i := whole
		part(&i)
		if i.Whole() {
			t.Errorf("%+v is whole", i)
		}
	}
}
