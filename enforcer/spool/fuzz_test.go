package spool_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/tollgate-dev/tollgate/enforcer/metrics"
	"github.com/tollgate-dev/tollgate/enforcer/spool"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
)

// FuzzOpenCorrupted: settlements are appended and some acknowledged, then the segment
// is damaged (a byte flipped at flipAt, cut at cutAt, junk appended, or a foreign segment
// of raw bytes beside it). Open never fails on it and never replays anything that was not
// appended (no record whose checksum fails), nor a settlement twice; undamaged, it
// replays exactly those not acknowledged, in order. A second Open, after the first
// compacted what it found, replays the same again; acknowledging them empties the spool.
func FuzzOpenCorrupted(f *testing.F) {
	f.Add(uint8(4), uint64(0b1010), uint32(0), byte(0), uint32(0), []byte(nil), false)
	f.Add(uint8(3), uint64(0b001), uint32(20), byte(0x40), uint32(0), []byte(nil), false)
	f.Add(uint8(5), uint64(0), uint32(0), byte(0), uint32(150), []byte(nil), false)
	f.Add(uint8(2), uint64(1), uint32(0), byte(0), uint32(0), []byte("\x09\x00\x00\x00\x00\x00\x00\x00A"), false)
	f.Add(uint8(1), uint64(0), uint32(0), byte(0), uint32(0), []byte("\x11\x00\x00\x00junkjunkjunkjunkjunk"), true)
	f.Fuzz(func(t *testing.T, n uint8, acks uint64, flipAt uint32, flip byte, cutAt uint32, tail []byte, foreign bool) {
		n %= 12
		dir := t.TempDir()
		cfg := spool.Config{Dir: dir}
		s, _, err := spool.Open(cfg, metrics.Discard(), quiet)
		if err != nil {
			t.Fatal(err)
		}
		var all []*internalv1.SettleItem
		var want []string
		for i := range int(n) {
			it := item(fmt.Sprintf("req_%02d", i))
			it.InputTokens = int64(i) * 1000
			all = append(all, it)
			ref, ok := s.Append(it)
			if !ok {
				t.Fatalf("append %d", i)
			}
			if acks&(1<<i) != 0 {
				s.Ack(ref)
			} else {
				want = append(want, it.RequestId)
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		segs := segments(t, dir)
		damaged := false
		if len(segs) > 0 {
			path := segs[len(segs)-1]
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if flip != 0 && int(flipAt) < len(b) {
				b[flipAt] ^= flip
				damaged = true
			}
			if cutAt != 0 && int(cutAt) < len(b) {
				b = b[:cutAt]
				damaged = true
			}
			if len(tail) > 0 && !foreign {
				b = append(b, tail...)
				damaged = true
			}
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if foreign && len(tail) > 0 {
			if err := os.WriteFile(filepath.Join(dir, "settle-00000000000000ff.spool"), tail, 0o600); err != nil {
				t.Fatal(err)
			}
			damaged = true
		}

		check := func(pending []spool.Pending) []string {
			var got []string
			for _, p := range pending {
				if !slices.ContainsFunc(all, func(it *internalv1.SettleItem) bool { return proto.Equal(it, p.Item) }) {
					t.Fatalf("replayed a settlement never appended: %v", p.Item)
				}
				if slices.Contains(got, p.Item.RequestId) {
					t.Fatalf("replayed %s twice", p.Item.RequestId)
				}
				got = append(got, p.Item.RequestId)
			}
			return got
		}
		s2, pending, err := spool.Open(cfg, metrics.Discard(), quiet)
		if err != nil {
			t.Fatalf("open of a damaged spool failed: %v", err)
		}
		got := check(pending)
		if !damaged && !slices.Equal(got, want) {
			t.Fatalf("replayed %v, want %v", got, want)
		}
		s2.Close()
		s3, pending, err := spool.Open(cfg, metrics.Discard(), quiet)
		if err != nil {
			t.Fatal(err)
		}
		if again := check(pending); !slices.Equal(again, got) {
			t.Fatalf("second open replayed %v, first %v", again, got)
		}
		for _, p := range pending {
			s3.Ack(p.Ref)
		}
		s3.Close()
		s4, pending, err := spool.Open(cfg, metrics.Discard(), quiet)
		if err != nil {
			t.Fatal(err)
		}
		defer s4.Close()
		if len(pending) != 0 {
			t.Fatalf("acknowledged replays came back: %v", ids(pending))
		}
	})
}
