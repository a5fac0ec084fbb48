package spool_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tollgate-dev/tollgate/enforcer/metrics"
	"github.com/tollgate-dev/tollgate/enforcer/spool"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func open(t testing.TB, cfg spool.Config) (*spool.Spool, []spool.Pending, *metrics.Metrics) {
	t.Helper()
	m := metrics.Discard()
	s, pending, err := spool.Open(cfg, m, quiet)
	if err != nil {
		t.Fatal(err)
	}
	return s, pending, m
}

func item(id string) *internalv1.SettleItem {
	return &internalv1.SettleItem{RequestId: id, OrganizationId: "org_01", MemberId: "om_01", Model: "gpt-test",
		InputTokens: 120, OutputTokens: 40, Complete: true, FinishedAtUnixMs: 1_790_000_000_000, UpstreamStatus: 200}
}

func ids(p []spool.Pending) []string {
	var out []string
	for _, x := range p {
		out = append(out, x.Item.GetRequestId())
	}
	return out
}

func segments(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "settle-*.spool"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// What was appended and not acknowledged comes back at the next Open, in order, with
// every field; what was acknowledged does not. The process never closed the spool: a
// crash leaves exactly that.
func TestOpenReturnsWhatWasNotAcknowledged(t *testing.T) {
	dir := t.TempDir()
	s, pending, _ := open(t, spool.Config{Dir: dir})
	if len(pending) != 0 {
		t.Fatalf("fresh spool: %v", ids(pending))
	}
	refs := appendAll(t, s, "req_a", "req_b", "req_c", "req_d")
	s.Ack(refs[1])
	s.Ack(refs[3])
	// A crash: no Close, no sync. Only the lock must go (the kernel drops it with the
	// process); a second Open in this process would otherwise find it held.
	if _, _, err := spool.Open(spool.Config{Dir: dir}, metrics.Discard(), quiet); err == nil {
		t.Fatal("a second Open of a locked directory succeeded")
	}
	s.Close()

	s2, pending, m := open(t, spool.Config{Dir: dir})
	defer s2.Close()
	if got := ids(pending); !slices.Equal(got, []string{"req_a", "req_c"}) {
		t.Fatalf("pending %v, want [req_a req_c]", got)
	}
	if got := pending[1].Item; got.GetInputTokens() != 120 || got.GetMemberId() != "om_01" || !got.GetComplete() {
		t.Fatalf("item not kept whole: %v", got)
	}
	if got := testutil.ToFloat64(m.SettleSpoolReplayed); got != 2 {
		t.Fatalf("replayed metric %v", got)
	}
	// Compacted: one segment holding the two live settlements.
	if segs := segments(t, dir); len(segs) != 1 {
		t.Fatalf("segments after compaction: %v", segs)
	}
	// Acknowledging the replayed ones empties it for good.
	for _, p := range pending {
		s2.Ack(p.Ref)
	}
	s2.Close()
	s3, pending, _ := open(t, spool.Config{Dir: dir})
	defer s3.Close()
	if len(pending) != 0 {
		t.Fatalf("acknowledged replays came back: %v", ids(pending))
	}
}

// An acknowledgement stays with the settlement it acknowledges: a settlement of a closed
// segment acknowledged while that segment still holds a live one is not sent again at
// the next Open, even after every later segment (where its acknowledgement was written
// before) was deleted, its own settlements all acknowledged.
func TestAcknowledgedSettlementOfAnOlderSegmentStaysAcknowledged(t *testing.T) {
	dir := t.TempDir()
	cfg := spool.Config{Dir: dir, MaxBytes: 1 << 20, SegmentBytes: 100} // two settlements a segment
	s, _, _ := open(t, cfg)
	a, _ := s.Append(item("req_a"))
	if _, ok := s.Append(item("req_b")); !ok { // the first segment is full: a second begins
		t.Fatal("append req_b")
	}
	s.Ack(a) // the first segment still holds req_b
	c, _ := s.Append(item("req_c"))
	d, _ := s.Append(item("req_d")) // the second segment is full: a third begins
	s.Ack(c)
	s.Ack(d) // nothing live in the second segment: deleted
	if n := len(segments(t, dir)); n != 2 {
		t.Fatalf("segments %d, want 2 (the first, with req_b live, and the current one)", n)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, pending, _ := open(t, cfg)
	defer s2.Close()
	if got := ids(pending); !slices.Equal(got, []string{"req_b"}) {
		t.Fatalf("pending after reopen %v, want [req_b] (req_a was acknowledged)", got)
	}
}

// A record cut short (the machine lost what was not synced, or the process died in the
// middle of a write) ends its segment; what came before it is kept.
func TestTornTailIsSkipped(t *testing.T) {
	dir := t.TempDir()
	s, _, _ := open(t, spool.Config{Dir: dir})
	s.Append(item("req_a"))
	s.Append(item("req_b"))
	s.Close()
	segs := segments(t, dir)
	f, err := os.OpenFile(segs[len(segs)-1], os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := f.Stat()
	if err := f.Truncate(st.Size() - 5); err != nil {
		t.Fatal(err)
	}
	f.Close()
	s2, pending, _ := open(t, spool.Config{Dir: dir})
	defer s2.Close()
	if got := ids(pending); !slices.Equal(got, []string{"req_a"}) {
		t.Fatalf("pending %v, want [req_a]", got)
	}
}

// The spool never grows past MaxBytes: a settlement that does not fit is refused and
// counted, and acknowledged segments are deleted, which makes room again.
func TestBoundedAndSegmentsDeleted(t *testing.T) {
	dir := t.TempDir()
	cfg := spool.Config{Dir: dir, MaxBytes: 4 << 10, SegmentBytes: 1 << 10}
	s, _, m := open(t, cfg)
	defer s.Close()
	var refs []spool.Ref
	refused := 0
	for i := range 100 {
		ref, ok := s.Append(item("req_" + string(rune('a'+i%26)) + string(rune('a'+i/26))))
		if !ok {
			refused++
			continue
		}
		refs = append(refs, ref)
		if s.Bytes() > cfg.MaxBytes {
			t.Fatalf("spool grew to %d bytes", s.Bytes())
		}
	}
	if refused == 0 || len(refs) == 0 {
		t.Fatalf("refused %d, kept %d: the bound did nothing", refused, len(refs))
	}
	if got := testutil.ToFloat64(m.SettleSpoolDropped.WithLabelValues("full")); got != float64(refused) {
		t.Fatalf("dropped metric %v, want %d", got, refused)
	}
	if got := testutil.ToFloat64(m.SettleSpoolBytes); got != float64(s.Bytes()) {
		t.Fatalf("bytes metric %v, spool %d", got, s.Bytes())
	}
	before := len(segments(t, dir))
	for _, r := range refs {
		s.Ack(r)
	}
	if after := len(segments(t, dir)); after >= before || after > 2 {
		t.Fatalf("segments before %d, after acknowledging all %d", before, after)
	}
	if _, ok := s.Append(item("req_again")); !ok {
		t.Fatal("no room after everything was acknowledged")
	}
}

// BenchmarkAppendAck is what the spool adds to one settlement: its record written
// before it is queued, its acknowledgement once answered (segments rotate and are
// deleted as they would in production):
//
//	go test -run '^$' -bench AppendAck -benchmem ./enforcer/spool
func BenchmarkAppendAck(b *testing.B) {
	s, _, _ := open(b, spool.Config{Dir: b.TempDir()})
	defer s.Close()
	it := item("req_01k7x0e5a2fq1s7b8c9d0e1f2g")
	b.ReportAllocs()
	for b.Loop() {
		ref, ok := s.Append(it)
		if !ok {
			b.Fatal("append failed")
		}
		s.Ack(ref)
	}
}

// snapshot keeps the segment files' bytes as they are; restore writes them back, as a
// process killed before it removed them would have left them.
func snapshot(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	saved := map[string][]byte{}
	for _, p := range segments(t, dir) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		saved[p] = b
	}
	return saved
}

func restore(t *testing.T, saved map[string][]byte) {
	t.Helper()
	for p, b := range saved {
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// The spool holds each settlement twice, the second copy under a new sequence number (a
// compaction killed after its segment was in place, before the old segments were
// removed; older versions also left such spools behind): each is replayed once, and one
// whose copy was acknowledged is not replayed at all. Two distinct settlements of one
// request id (a refusal, then the answer) are both kept.
func TestCopiesOfASettlementAreReplayedOnce(t *testing.T) {
	dir := t.TempDir()
	cfg := spool.Config{Dir: dir, MaxBytes: 1 << 20}
	s, _, _ := open(t, cfg)
	for _, id := range []string{"req_a", "req_b", "req_c"} {
		s.Append(item(id))
	}
	refusal := item("req_c")
	refusal.Refused, refusal.OutputTokens = true, 0
	s.Append(refusal)
	s.Close()
	saved := snapshot(t, dir)
	s2, pending, _ := open(t, cfg) // compacted into a new segment
	if got := ids(pending); !slices.Equal(got, []string{"req_a", "req_b", "req_c", "req_c"}) {
		t.Fatalf("pending %v", got)
	}
	s2.Ack(pending[1].Ref) // req_b answered, in the new segment only
	s2.Close()
	restore(t, saved) // the old segments are back beside the new one

	s3, pending, _ := open(t, cfg)
	defer s3.Close()
	if got := ids(pending); !slices.Equal(got, []string{"req_a", "req_c", "req_c"}) {
		t.Fatalf("pending %v, want [req_a req_c req_c] (each once, req_b acknowledged, req_c's answer and refusal)", got)
	}
	if pending[1].Item.GetRefused() || !pending[2].Item.GetRefused() {
		t.Fatalf("req_c's settlements out of order: %v, %v", pending[1].Item, pending[2].Item)
	}
}

// A settlement written again after its first copy was acknowledged (package settleq
// sends the settlements answered in the last window again after a mirror rebuild, in
// case the replaced database lost them) is replayed by the next start until it is
// acknowledged itself, once, and in the same segment as its first copy or another.
// Before, the first copy's acknowledgement covered it, and a restart before its second
// answer lost it.
func TestSettlementWrittenAgainAfterItsAcknowledgementIsReplayed(t *testing.T) {
	dir := t.TempDir()
	cfg := spool.Config{Dir: dir, MaxBytes: 1 << 20, SegmentBytes: 250}
	s, _, _ := open(t, cfg)
	a, _ := s.Append(item("req_a"))
	b, _ := s.Append(item("req_b"))
	s.Append(item("req_c"))
	s.Append(item("req_d")) // the first segment is closed: the copies go to the second
	s.Ack(a)
	s.Ack(b)
	againA, _ := s.Append(item("req_a"))
	s.Append(item("req_b"))
	s.Ack(againA) // answered again
	s.Close()
	if n := len(segments(t, dir)); n != 2 {
		t.Fatalf("%d segments, want the copies in a second one", n)
	}
	s2, pending, _ := open(t, cfg)
	if got := ids(pending); !slices.Equal(got, []string{"req_c", "req_d", "req_b"}) {
		t.Fatalf("pending %v, want [req_c req_d req_b]", got)
	}
	for _, p := range pending {
		s2.Ack(p.Ref)
	}
	s2.Close()
	s3, pending, _ := open(t, cfg)
	defer s3.Close()
	if len(pending) != 0 {
		t.Fatalf("acknowledged settlements replayed: %v", ids(pending))
	}
}

// TOLLGATE_ENFORCER_SETTLE_SPOOL_MAX_BYTES lowered below the backlog the spool holds (the
// control plane was down): the enforcer starts and replays all of it, the size shows
// above the bound (metric, warning), and new settlements are refused until
// acknowledgements bring it back under.
func TestOpenReplaysABacklogOverTheBound(t *testing.T) {
	dir := t.TempDir()
	s, _, _ := open(t, spool.Config{Dir: dir, MaxBytes: 1 << 20})
	for i := range 2000 {
		if _, ok := s.Append(item(fmt.Sprintf("req_%04d", i))); !ok {
			t.Fatal("append")
		}
	}
	s.Close() // about 200 KB

	var logged bytes.Buffer
	m := metrics.Discard()
	cfg := spool.Config{Dir: dir, MaxBytes: 128 << 10}
	s2, pending, err := spool.Open(cfg, m, slog.New(slog.NewTextHandler(&logged, nil)))
	if err != nil {
		t.Fatalf("Open with a backlog over the bound: %v", err)
	}
	defer s2.Close()
	if len(pending) != 2000 {
		t.Fatalf("replayed %d of 2000", len(pending))
	}
	if s2.Bytes() <= cfg.MaxBytes || testutil.ToFloat64(m.SettleSpoolBytes) != float64(s2.Bytes()) {
		t.Fatalf("size %d, metric %v, bound %d", s2.Bytes(), testutil.ToFloat64(m.SettleSpoolBytes), cfg.MaxBytes)
	}
	if !strings.Contains(logged.String(), "level=WARN") || !strings.Contains(logged.String(), "exceed the bound") {
		t.Fatalf("no warning: %q", logged.String())
	}
	if n := len(segments(t, dir)); n != 1 {
		t.Fatalf("%d segment files after the compaction, want 1", n)
	}
	if _, ok := s2.Append(item("req_new")); ok {
		t.Fatal("a new settlement was spooled past the bound")
	}
	for _, p := range pending {
		s2.Ack(p.Ref)
	}
	if _, ok := s2.Append(item("req_new")); !ok {
		t.Fatal("no room once the backlog was acknowledged")
	}
}

// Killed during Open's compaction after its segment was in place, before the old
// segments were removed, with a backlog of 60% of the bound: the next start comes up
// and replays the backlog once.
func TestKilledAfterTheCompactionsRenameStartsAgain(t *testing.T) {
	dir := t.TempDir()
	cfg := spool.Config{Dir: dir, MaxBytes: 512 << 10}
	s, _, _ := open(t, cfg)
	n := 0
	for s.Bytes() < cfg.MaxBytes*6/10 {
		if _, ok := s.Append(item(fmt.Sprintf("req_%05d", n))); !ok {
			t.Fatal("append")
		}
		n++
	}
	s.Close()
	saved := snapshot(t, dir)
	s2, pending, _ := open(t, cfg)
	if len(pending) != n {
		t.Fatalf("replayed %d of %d", len(pending), n)
	}
	s2.Close()
	restore(t, saved)

	for start := range 2 {
		s3, pending, err := spool.Open(cfg, metrics.Discard(), quiet)
		if err != nil {
			t.Fatalf("start %d after the kill fails: %v", start, err)
		}
		if len(pending) != n {
			t.Fatalf("start %d replayed %d settlements for %d requests", start, len(pending), n)
		}
		if segs := segments(t, dir); len(segs) != 1 {
			t.Fatalf("start %d left %d segment files", start, len(segs))
		}
		s3.Close()
	}
}

// Killed during Open's compaction before its file was complete: the old segments are
// whole and the compaction's temporary file is removed at the next start, its contents
// not replayed.
func TestKilledBeforeTheCompactionsRenameLeavesTheOldSegments(t *testing.T) {
	dir := t.TempDir()
	cfg := spool.Config{Dir: dir}
	s, _, _ := open(t, cfg)
	s.Append(item("req_a"))
	s.Append(item("req_b"))
	s.Close()
	segs := segments(t, dir)
	b, err := os.ReadFile(segs[0])
	if err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, "settle-0000000000000002.spool.tmp") // the next segment's, half written
	if err := os.WriteFile(tmp, b[:len(b)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	s2, pending, _ := open(t, cfg)
	defer s2.Close()
	if got := ids(pending); !slices.Equal(got, []string{"req_a", "req_b"}) {
		t.Fatalf("pending %v, want [req_a req_b]", got)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*.tmp")); len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}

// Open's compaction fails for want of room (a full disk or a quota: ENOSPC, EDQUOT) while
// there is a backlog to replay: the enforcer still starts, replays the backlog from the
// old segments where they are, and says so. An answered settlement is acknowledged in
// its old segment (not sent again by the next start), an unanswered one stays for the
// next start, and an old segment whose settlements are all answered is deleted. Before,
// Open failed, and the enforcer refused to start, again and again, with the backlog
// stuck on its disk.
func TestOpenReplaysInPlaceWhenTheCompactionHasNoRoom(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.ENOSPC, syscall.EDQUOT} {
		t.Run(errno.Error(), func(t *testing.T) {
			dir := t.TempDir()
			cfg := spool.Config{Dir: dir, MaxBytes: 1 << 20, SegmentBytes: 250} // three settlements a segment
			s, _, _ := open(t, cfg)
			refs := appendAll(t, s, "req_a", "req_b", "req_c", "req_d", "req_e")
			s.Ack(refs[1]) // req_b answered
			s.Close()
			old := segments(t, dir)
			if len(old) != 2 {
				t.Fatalf("segments before the start: %v", old)
			}

			restoreWrite := spool.SetCompactionWrite(func(*os.File, []byte) (int, error) { return 0, errno })
			var logs bytes.Buffer
			m := metrics.Discard()
			s2, pending, err := spool.Open(cfg, m, slog.New(slog.NewTextHandler(&logs, nil)))
			restoreWrite()
			if err != nil {
				t.Fatalf("Open with no room for the compaction: %v", err)
			}
			if got := ids(pending); !slices.Equal(got, []string{"req_a", "req_c", "req_d", "req_e"}) {
				t.Fatalf("pending %v, want [req_a req_c req_d req_e]", got)
			}
			if got := testutil.ToFloat64(m.SettleSpoolReplayed); got != 4 {
				t.Fatalf("replayed metric %v", got)
			}
			if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "replayed from the old segments in place") {
				t.Fatalf("not logged: %q", logs.String())
			}
			if left, _ := filepath.Glob(filepath.Join(dir, "*.tmp")); len(left) != 0 {
				t.Fatalf("temporary files left: %v", left)
			}
			for _, p := range old {
				if _, err := os.Stat(p); err != nil {
					t.Fatalf("old segment gone: %v", err)
				}
			}
			// New settlements are spooled as usual.
			if _, ok := s2.Append(item("req_f")); !ok {
				t.Fatal("a new settlement is not spooled")
			}
			// Answers: req_a and req_c (the first old segment is then all answered), req_d.
			s2.Ack(pending[0].Ref)
			s2.Ack(pending[1].Ref)
			s2.Ack(pending[2].Ref)
			if _, err := os.Stat(old[0]); !os.IsNotExist(err) {
				t.Fatalf("an old segment whose settlements are all answered is kept (%v)", err)
			}
			if float64(s2.Bytes()) != testutil.ToFloat64(m.SettleSpoolBytes) {
				t.Fatalf("size %d, metric %v", s2.Bytes(), testutil.ToFloat64(m.SettleSpoolBytes))
			}
			// A crash; the next start has room.
			s2.Close()
			s3, pending, _ := open(t, cfg)
			defer s3.Close()
			if got := ids(pending); !slices.Equal(got, []string{"req_e", "req_f"}) {
				t.Fatalf("next start's pending %v, want [req_e req_f] (none answered, none lost)", got)
			}
			if segs := segments(t, dir); len(segs) != 1 {
				t.Fatalf("segments after the next start's compaction: %v", segs)
			}
		})
	}
}

// A rotation that cannot begin the next segment (here a directory is in its way; in
// production a process out of file descriptors, a full disk) leaves the spool without
// a segment only until a later Append can begin one: the settlements after that are
// spooled again and survive a crash, and what the failed rotation's segment holds is
// acknowledged and replayed as usual. Before, the spool stayed without a segment for
// the rest of the process, every later settlement unspooled.
func TestSpoolBeginsASegmentAgainAfterAFailedRotation(t *testing.T) {
	dir := t.TempDir()
	cfg := spool.Config{Dir: dir, MaxBytes: 1 << 20, SegmentBytes: 1 << 10}
	s, _, m := open(t, cfg)
	first := segments(t, dir)
	if len(first) != 1 {
		t.Fatalf("segments at start: %v", first)
	}
	var n uint64
	if _, err := fmt.Sscanf(filepath.Base(first[0]), "settle-%016x.spool", &n); err != nil {
		t.Fatal(err)
	}
	obstacle := filepath.Join(dir, fmt.Sprintf("settle-%016x.spool", n+1))
	if err := os.Mkdir(obstacle, 0o700); err != nil {
		t.Fatal(err)
	}
	// Fill the first segment until its rotation fails.
	var kept []spool.Ref
	for i := 0; ; i++ {
		if i > 100 {
			t.Fatal("the segment never rotated")
		}
		ref, ok := s.Append(item(fmt.Sprintf("req_%03d", i)))
		if !ok {
			break // no segment to write to: the rotation failed
		}
		kept = append(kept, ref)
	}
	if got := testutil.ToFloat64(m.SettleSpoolDropped.WithLabelValues("error")); got != 1 {
		t.Fatalf("dropped (error) %v after the failed rotation, want 1", got)
	}
	// The cause passes.
	if err := os.Remove(obstacle); err != nil {
		t.Fatal(err)
	}
	s.ReopenNow()
	if _, ok := s.Append(item("req_later")); !ok {
		t.Fatal("a settlement after the failed rotation's cause passed is not spooled")
	}
	// The first segment's settlements are all answered but one: it stays, with its
	// acknowledgements; the later one is unanswered. The process crashes (Close only
	// syncs, and lets the lock go as the kernel would).
	for _, r := range kept[1:] {
		s.Ack(r)
	}
	s.Close()
	s2, pending, _ := open(t, cfg)
	defer s2.Close()
	if got, want := ids(pending), []string{"req_000", "req_later"}; !slices.Equal(got, want) {
		t.Fatalf("pending %v, want %v", got, want)
	}
}

// A full disk fails every write while it lasts: each settlement and each
// acknowledgement is counted, and the line saying so is written once per interval (with
// how many were left out), not once per settlement: the spool's emptyDir shares the
// node's disk with the containers' logs, which thousands of lines a second would fill
// all the faster. The disk is made full for this process with its file size limit
// (RLIMIT_FSIZE: writes past it fail with EFBIG; Go ignores SIGXFSZ).
func TestFullDiskIsLoggedOncePerInterval(t *testing.T) {
	var logs bytes.Buffer
	m := metrics.Discard()
	s, _, err := spool.Open(spool.Config{Dir: t.TempDir()}, m, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var refs []spool.Ref
	for i := range 5 {
		ref, ok := s.Append(item(fmt.Sprintf("req_%d", i)))
		if !ok {
			t.Fatal("append before the disk is full failed")
		}
		refs = append(refs, ref)
	}
	var limit syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &limit); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &syscall.Rlimit{Cur: 0, Max: limit.Max}); err != nil {
		t.Skipf("cannot lower the file size limit: %v", err)
	}
	const n = 100
	spooled := 0
	for i := range n {
		if _, ok := s.Append(item(fmt.Sprintf("req_full_%d", i))); ok {
			spooled++
		}
	}
	for _, r := range refs {
		s.Ack(r)
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &limit); err != nil {
		t.Fatal(err)
	}
	if spooled != 0 {
		t.Fatalf("%d settlements spooled on a full disk", spooled)
	}
	if got := testutil.ToFloat64(m.SettleSpoolDropped.WithLabelValues("error")); got != n {
		t.Fatalf("dropped (error) %v, want %d", got, n)
	}
	out := logs.String()
	if got := strings.Count(out, "spool: write failed"); got != 1 {
		t.Fatalf("%d write failure lines for %d settlements, want 1:\n%s", got, n, out)
	}
	if got := strings.Count(out, "could not record an acknowledgement"); got != 1 {
		t.Fatalf("%d acknowledgement failure lines for %d acknowledgements, want 1:\n%s", got, len(refs), out)
	}
	// Room again: settlements are spooled again.
	if _, ok := s.Append(item("req_after")); !ok {
		t.Fatal("no settlement spooled once the disk had room again")
	}
}

// The second's fsync does not hold the spool: settlements are written and acknowledged
// while it runs. An fsync waits for the disk (hundreds of milliseconds on a busy or
// degraded volume), and every settlement is written on its response's path (ext_proc
// answers the end of a guarded response after it, the gateway's handler returns after
// it, a check's void waits for it): until 2026-12-07 each of them waited for the fsync.
func TestAppendDoesNotWaitForTheSecondsFsync(t *testing.T) {
	s, _, err := spool.Open(spool.Config{Dir: t.TempDir()}, metrics.Discard(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, ok := s.Append(&internalv1.SettleItem{RequestId: "req_a"}); !ok {
		t.Fatal("not spooled")
	}
	entered, release := make(chan struct{}), make(chan struct{})
	defer spool.SetFsync(func(f *os.File) error {
		close(entered)
		<-release
		return f.Sync()
	})()
	synced := make(chan error)
	go func() { synced <- s.Sync() }()
	<-entered
	free := s.Free()
	close(release)
	if err := <-synced; err != nil {
		t.Fatal(err)
	}
	if !free {
		t.Fatal("the spool's lock is held during the fsync: every settlement written meanwhile waits for the disk")
	}
}

// What a start cannot read back of the spool is a settlement lost, and says so: a torn
// record (a machine crash cut or zeroed what was not synced, or the bytes are corrupt)
// skips the rest of its segment, counted once in
// tollgate_enforcer_settlements_total{outcome="unreadable_in_spool"} (at least one
// settlement lost: the skipped bytes may hold several), and a settlement whose record is
// whole but does not read is counted once; each is logged at ERROR with its segment,
// offset and the bytes skipped, for TollgateSettlementsLost. An acknowledgement cut short
// at a segment's end loses nothing (its settlement is sent again, a duplicate): a
// warning, not counted. Until 2026-12-07 each was a warning only, with no metric.
func TestUnreadableSpoolIsCountedAndLoggedAsLost(t *testing.T) {
	// record builds a record of the spool's format (spool.go, "Record kinds").
	record := func(kind byte, seq uint64, payload []byte) []byte {
		rec := make([]byte, 17+len(payload))
		binary.LittleEndian.PutUint32(rec, uint32(9+len(payload)))
		rec[8] = kind
		binary.LittleEndian.PutUint64(rec[9:], seq)
		copy(rec[17:], payload)
		binary.LittleEndian.PutUint32(rec[4:], crc32.Checksum(rec[8:], crc32.MakeTable(crc32.Castagnoli)))
		return rec
	}
	for _, tc := range []struct {
		name string
		// tamper changes the only segment, of the settlements req_a, req_b, req_c (req_b
		// acknowledged, the acknowledgement last), each record size bytes long.
		tamper      func(t *testing.T, seg []byte, size int) []byte
		want        []string
		lost        float64
		skipped     int // bytes_skipped of the ERROR line (0: none)
		unreadables int // ERROR lines of a settlement that does not read
	}{
		{"cut mid-record", func(_ *testing.T, seg []byte, size int) []byte {
			return seg[:2*size+40] // req_c's record cut in its middle (it is longer), no acknowledgement
		}, []string{"req_a", "req_b"}, 1, 40, 0},
		{"zeroed tail", func(_ *testing.T, seg []byte, size int) []byte {
			clear(seg[size:]) // what was not synced reads as zeros: req_b, req_c and the acknowledgement
			return seg
		}, []string{"req_a"}, 1, 0, 0},
		{"corrupt byte", func(_ *testing.T, seg []byte, size int) []byte {
			seg[size+30] ^= 0xff // in req_b's record: its checksum fails, the rest is skipped
			return seg
		}, []string{"req_a"}, 1, 0, 0},
		{"fragment shorter than a header", func(_ *testing.T, seg []byte, size int) []byte {
			return append(seg, record('S', 99, []byte("x"))[:8]...) // the first bytes of another settlement
		}, []string{"req_a", "req_c"}, 1, 8, 0},
		{"settlement that does not read", func(_ *testing.T, seg []byte, size int) []byte {
			return append(seg, record('S', 99, []byte{0xff, 0xff})...) // whole, its checksum right, no message
		}, []string{"req_a", "req_c"}, 1, 0, 1},
		{"acknowledgement cut short", func(_ *testing.T, seg []byte, _ int) []byte {
			return seg[:len(seg)-5] // req_b's acknowledgement: req_b is sent again, nothing lost
		}, []string{"req_a", "req_b", "req_c"}, 0, 0, 0},
		{"acknowledgement cut before its kind", func(_ *testing.T, seg []byte, _ int) []byte {
			return seg[:len(seg)-17+6] // its length and part of its checksum: an acknowledgement's length (9)
		}, []string{"req_a", "req_b", "req_c"}, 0, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s, _, _ := open(t, spool.Config{Dir: dir})
			refs := appendAll(t, s, "req_a", "req_b", "req_c")
			s.Ack(refs[1])
			s.Close()
			segs := segments(t, dir)
			if len(segs) != 1 {
				t.Fatalf("%d segments, want 1", len(segs))
			}
			b, err := os.ReadFile(segs[0])
			if err != nil {
				t.Fatal(err)
			}
			size := (len(b) - 17) / 3
			if err := os.WriteFile(segs[0], tc.tamper(t, b, size), 0o600); err != nil {
				t.Fatal(err)
			}

			var logs bytes.Buffer
			m := metrics.Discard()
			s2, pending, err := spool.Open(spool.Config{Dir: dir}, m, slog.New(slog.NewJSONHandler(&logs, nil)))
			if err != nil {
				t.Fatal(err)
			}
			defer s2.Close()
			if got := ids(pending); !slices.Equal(got, tc.want) {
				t.Fatalf("pending %v, want %v", got, tc.want)
			}
			if got := testutil.ToFloat64(m.Settlements.WithLabelValues(spool.UnreadableOutcome)); got != tc.lost {
				t.Fatalf("settlements_total{outcome=%q} = %v, want %v", spool.UnreadableOutcome, got, tc.lost)
			}
			var errorLines, unreadables int
			for line := range strings.Lines(logs.String()) {
				var l map[string]any
				if err := json.Unmarshal([]byte(line), &l); err != nil {
					t.Fatal(err)
				}
				msg, _ := l["msg"].(string)
				if !strings.Contains(msg, "SETTLEMENT LOST") {
					if strings.Contains(msg, "torn") || strings.Contains(msg, "could not be read") {
						t.Errorf("a loss not logged as SETTLEMENT LOST: %s", line)
					}
					continue
				}
				if l["level"] != "ERROR" {
					t.Errorf("level %v, want ERROR: %s", l["level"], line)
				}
				errorLines++
				if l["file"] != segs[0] || l["segment"] != float64(1) || l["offset"] == nil {
					t.Errorf("the line does not name the segment and offset: %s", line)
				}
				if strings.Contains(msg, "could not be read") {
					unreadables++
					continue
				}
				if tc.skipped != 0 && l["bytes_skipped"] != float64(tc.skipped) {
					t.Errorf("bytes_skipped %v, want %d: %s", l["bytes_skipped"], tc.skipped, line)
				}
			}
			if errorLines != int(tc.lost) || unreadables != tc.unreadables {
				t.Fatalf("%d SETTLEMENT LOST lines (%d unreadable settlements), want %v (%d):\n%s", errorLines, unreadables, tc.lost, tc.unreadables, logs.String())
			}
		})
	}
}

// A settlement whose record the disk took only part of (full: here the file size limit,
// RLIMIT_FSIZE, a few bytes past the segment's end) is queued all the same, counted
// dropped: its partial record is cut off again, so that the next start does not read it
// as a torn record and count a settlement lost that was not.
func TestPartlyWrittenRecordIsCutOff(t *testing.T) {
	dir := t.TempDir()
	s, _, m := open(t, spool.Config{Dir: dir})
	if _, ok := s.Append(item("req_a")); !ok {
		t.Fatal("append failed")
	}
	seg := segments(t, dir)[0]
	st, err := os.Stat(seg)
	if err != nil {
		t.Fatal(err)
	}
	var limit syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &limit); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &syscall.Rlimit{Cur: uint64(st.Size()) + 20, Max: limit.Max}); err != nil {
		t.Skipf("cannot lower the file size limit: %v", err)
	}
	_, ok := s.Append(item("req_b"))
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &limit); err != nil {
		t.Fatal(err)
	}
	if ok || testutil.ToFloat64(m.SettleSpoolDropped.WithLabelValues("error")) != 1 {
		t.Fatal("a settlement written in part was not counted dropped")
	}
	if _, ok := s.Append(item("req_c")); !ok {
		t.Fatal("append after the limit was lifted failed")
	}
	s.Close()
	s2, pending, m2 := open(t, spool.Config{Dir: dir})
	defer s2.Close()
	if got := ids(pending); !slices.Equal(got, []string{"req_a", "req_c"}) {
		t.Fatalf("pending %v, want [req_a req_c]", got)
	}
	if got := testutil.ToFloat64(m2.Settlements.WithLabelValues(spool.UnreadableOutcome)); got != 0 {
		t.Fatalf("%v settlements counted lost for a record cut off while the process ran", got)
	}
}

// A torn segment kept in place (the compaction had no room) is cut back to its last
// whole record, so that the acknowledgements written to it afterwards stay readable:
// appended after the torn bytes, they were skipped at every later start, which replayed
// settlements already answered and counted the same loss again (SETTLEMENT LOST,
// unreadable_in_spool) at each restart while the backlog lasted.
func TestTornSegmentKeptInPlaceReadsItsLaterAcknowledgements(t *testing.T) {
	dir := t.TempDir()
	cfg := spool.Config{Dir: dir, MaxBytes: 1 << 20, SegmentBytes: 250} // four settlements a segment
	s, _, _ := open(t, cfg)
	refs := appendAll(t, s, "req_a", "req_b", "req_c", "req_d", "req_e", "req_f", "req_g")
	s.Ack(refs[1]) // req_b answered
	s.Close()
	segs := segments(t, dir)
	if len(segs) < 2 {
		t.Fatalf("segments %v", segs)
	}
	// The machine lost the tail of the second segment (req_e, req_f, req_g): req_g's
	// record is cut short.
	torn := segs[1]
	st, err := os.Stat(torn)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(torn, st.Size()-5); err != nil {
		t.Fatal(err)
	}

	noRoom := func(*os.File, []byte) (int, error) { return 0, syscall.ENOSPC }
	restoreWrite := spool.SetCompactionWrite(noRoom)
	s2, pending, m2 := open(t, cfg)
	restoreWrite()
	if got := ids(pending); !slices.Equal(got, []string{"req_a", "req_c", "req_d", "req_e", "req_f"}) {
		t.Fatalf("pending %v, want [req_a req_c req_d req_e req_f]", got)
	}
	if got := testutil.ToFloat64(m2.Settlements.WithLabelValues(spool.UnreadableOutcome)); got != 1 {
		t.Fatalf("the torn tail counted %v times, want 1", got)
	}
	if len(segments(t, dir)) < 3 || segments(t, dir)[1] != torn {
		t.Fatalf("segments %v, the torn one %s", segments(t, dir), torn)
	}
	// req_e is answered (acknowledged in its torn segment); req_f is not before the
	// process stops (a control plane answering 503).
	for _, p := range pending {
		if p.Item.GetRequestId() == "req_e" {
			s2.Ack(p.Ref)
		}
	}
	s2.Close()

	for _, compaction := range []string{"no room", "room"} {
		if compaction == "no room" {
			restoreWrite = spool.SetCompactionWrite(noRoom)
		}
		s3, pending, m3 := open(t, cfg)
		restoreWrite()
		if got := ids(pending); !slices.Equal(got, []string{"req_a", "req_c", "req_d", "req_f"}) {
			t.Fatalf("%s: pending %v, want [req_a req_c req_d req_f] (req_e was answered)", compaction, got)
		}
		if got := testutil.ToFloat64(m3.Settlements.WithLabelValues(spool.UnreadableOutcome)); got != 0 {
			t.Fatalf("%s: the loss counted again at the next start (%v)", compaction, got)
		}
		s3.Close()
		restoreWrite = func() {}
	}
}

// A segment begun by a rotation has its name made durable by the next second's fsync,
// as its records are: fsync(2) of a file does not sync its entry in the directory, and a
// machine crash could lose the whole segment, records synced or not, where the package
// promises at most the last second. Until 2026-12-07 the directory was synced only by
// Open's compaction.
func TestNewSegmentsNameIsSyncedWithItsRecords(t *testing.T) {
	dir := t.TempDir()
	var dirSyncs []string
	defer spool.SetDirSync(func(d string) error {
		dirSyncs = append(dirSyncs, d)
		return nil
	})()
	s, _, _ := open(t, spool.Config{Dir: dir, MaxBytes: 1 << 20, SegmentBytes: 250})
	defer s.Close()
	before := len(segments(t, dir))
	for i := 0; len(segments(t, dir)) == before; i++ {
		if _, ok := s.Append(item(fmt.Sprintf("req_%d", i))); !ok {
			t.Fatal("not spooled")
		}
	}
	if _, ok := s.Append(item("req_in_the_new_segment")); !ok {
		t.Fatal("not spooled")
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(dirSyncs, []string{dir}) {
		t.Fatalf("directory syncs after a rotation and a Sync: %v, want [%s]", dirSyncs, dir)
	}
	// Nothing new in the directory: the next Sync does not sync it again.
	if _, ok := s.Append(item("req_next")); !ok {
		t.Fatal("not spooled")
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	if len(dirSyncs) != 1 {
		t.Fatalf("directory synced again with nothing new in it: %v", dirSyncs)
	}
}

// appendAll appends a settlement of each id to s, each of which must be spooled, and
// answers their references in order.
func appendAll(t *testing.T, s *spool.Spool, ids ...string) []spool.Ref {
	t.Helper()
	refs := make([]spool.Ref, 0, len(ids))
	for _, id := range ids {
		ref, ok := s.Append(item(id))
		if !ok || !ref.Spooled() {
			t.Fatalf("append %s failed", id)
		}
		refs = append(refs, ref)
	}
	return refs
}
