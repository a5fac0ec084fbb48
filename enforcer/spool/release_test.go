package spool_test

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/tollgate-dev/tollgate/enforcer/spool"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
)

// releaseSegment is a segment the last release's enforcer (commit 4b766a0) wrote: eight
// settlements of gpt-4o-mini (100 input, 20 output tokens, each with its admission
// snapshot), the first four acknowledged by the control plane, the last four not (the
// control plane was killed, then the enforcer). A rolling upgrade, or a rollback, hands
// such a spool to the other version (an emptyDir survives a container's restart).
const releaseSegment = "testdata/release-4b766a0/settle-0000000000000001.spool"

// The four settlements the release's enforcer had not delivered.
var releasePending = []string{"req_01m8yahxhqe6r93wa3zzts6n7h", "req_01m8yahy11eh1trhhsx18djbds",
	"req_01m8yahygke6zt69hcj3t5tmzg", "req_01m8yahz06f1rtttn8f5jx3ycx"}

// TestSpoolOfTheLastReleaseIsReplayed: an upgraded enforcer replays what the release's
// enforcer left in its spool, every field read as that one wrote it, and nothing it had
// delivered (the manual run of 2026-12-03 replayed 1,294 and 1,701 such settlements,
// each charged once).
func TestSpoolOfTheLastReleaseIsReplayed(t *testing.T) {
	dir := t.TempDir()
	b, err := os.ReadFile(releaseSegment)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, filepath.Base(releaseSegment)), b, 0o600); err != nil {
		t.Fatal(err)
	}
	s, pending, _ := open(t, spool.Config{Dir: dir})
	defer s.Close()
	if got := ids(pending); !slices.Equal(got, releasePending) {
		t.Fatalf("replayed %q, want %q", got, releasePending)
	}
	for _, p := range pending {
		it := p.Item
		if it.GetOrganizationId() != "org_01m8y9ay47edttb7ssywtc757n" || it.GetMemberId() != "om_01m8y9ay47f3es4h0n55vazwaw" ||
			it.GetModel() != "gpt-4o-mini" || it.GetInputTokens() != 100 || it.GetOutputTokens() != 20 || !it.GetComplete() ||
			it.GetUpstreamStatus() != 200 || it.GetFinishedAtUnixMs() == 0 {
			t.Errorf("%s read as %v", it.GetRequestId(), it)
		}
		snap := it.GetSnapshot()
		if snap.GetVersion() != 2 || snap.GetAdmittedAtUnixMs() == 0 || snap.GetTrackingVersion() != 1 || len(snap.GetBuckets()) != 3 ||
			snap.GetBuckets()[0].GetTimeframe() != "day" || snap.GetBuckets()[0].GetBucketId() == "" {
			t.Errorf("%s: snapshot read as %v", it.GetRequestId(), snap)
		}
	}
}

// TestSpoolIsWrittenAsTheLastReleaseWroteIt: a rollback hands the release's enforcer a
// spool this build wrote. Played again (the same settlements appended and acknowledged
// in the same order), this build writes the release's records: the same framing (length,
// checksum, kind, sequence) and payloads the release reads as the same settlements.
func TestSpoolIsWrittenAsTheLastReleaseWroteIt(t *testing.T) {
	want, err := os.ReadFile(releaseSegment)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	s, pending, _ := open(t, spool.Config{Dir: dir})
	if len(pending) != 0 {
		t.Fatal(pending)
	}
	refs := map[uint64]spool.Ref{}
	for _, r := range records(t, want) {
		switch r.kind {
		case 'S':
			var it internalv1.SettleItem
			if err := proto.Unmarshal(r.payload, &it); err != nil {
				t.Fatal(err)
			}
			ref, ok := s.Append(&it)
			if !ok {
				t.Fatal("not spooled")
			}
			refs[r.seq] = ref
		case 'A':
			s.Ack(refs[r.seq])
		}
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	segs := segments(t, dir)
	if len(segs) != 1 || filepath.Base(segs[0]) != filepath.Base(releaseSegment) {
		t.Fatalf("segments %q", segs)
	}
	got, err := os.ReadFile(segs[0])
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	g, w := records(t, got), records(t, want)
	if len(g) != len(w) {
		t.Fatalf("%d records, the release wrote %d", len(g), len(w))
	}
	for i := range w {
		switch {
		case g[i].kind != w[i].kind || g[i].seq != w[i].seq:
			t.Errorf("record %d: kind %c seq %d, the release wrote kind %c seq %d", i, g[i].kind, g[i].seq, w[i].kind, w[i].seq)
		case w[i].kind == 'A' && !bytes.Equal(g[i].whole, w[i].whole):
			t.Errorf("record %d: acknowledgement %x, the release wrote %x", i, g[i].whole, w[i].whole)
		case w[i].kind == 'S' && !proto.Equal(g[i].item(t), w[i].item(t)):
			t.Errorf("record %d: %v, the release wrote %v", i, g[i].item(t), w[i].item(t))
		}
	}
}

type rawRecord struct {
	whole   []byte
	kind    byte
	seq     uint64
	payload []byte
}

func (r rawRecord) item(t *testing.T) *internalv1.SettleItem {
	var it internalv1.SettleItem
	if err := proto.Unmarshal(r.payload, &it); err != nil {
		t.Fatal(err)
	}
	return &it
}

// records splits a segment into its records by the format spool.go documents (length of
// what follows the checksum, CRC-32C, kind, sequence number, payload; little-endian),
// independently of the package's reader, each record's checksum checked.
func records(t *testing.T, b []byte) []rawRecord {
	t.Helper()
	var out []rawRecord
	for len(b) > 0 {
		if len(b) < 17 {
			t.Fatalf("%d bytes left over", len(b))
		}
		n := int(binary.LittleEndian.Uint32(b))
		if n < 9 || 8+n > len(b) {
			t.Fatalf("record length %d, %d bytes left", n, len(b))
		}
		if sum := crc32.Checksum(b[8:8+n], crc32.MakeTable(crc32.Castagnoli)); sum != binary.LittleEndian.Uint32(b[4:]) {
			t.Fatalf("record %d: checksum %08x, the header says %08x", len(out), sum, binary.LittleEndian.Uint32(b[4:]))
		}
		out = append(out, rawRecord{whole: b[:8+n], kind: b[8], seq: binary.LittleEndian.Uint64(b[9:]), payload: b[17 : 8+n]})
		b = b[8+n:]
	}
	return out
}
