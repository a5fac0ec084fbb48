package spool

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/tollgate-dev/tollgate/enforcer/metrics"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/logging"

	"github.com/tollgate-dev/tollgate/pkg/lifecycle"
)

// Config bounds the spool. Zero fields take the defaults of DefaultConfig.
type Config struct {
	// Dir holds the segment files and the lock; created when missing.
	Dir string
	// MaxBytes bounds the files' total size for new settlements; what Open finds is
	// replayed whatever its size (the package comment).
	MaxBytes int64
	// SegmentBytes is the size past which the current segment is closed and a new one
	// begun; only closed segments can be deleted. Default: MaxBytes/16, at least 64 KiB.
	SegmentBytes int64
	// SyncEvery is how often written records are fsync'd (see the package comment).
	SyncEvery time.Duration
}

// DefaultConfig: 96 MiB holds about 124,000 settlements of 806 bytes, a durable start's
// with its start's admission snapshot (package settleq spools them so) or a fail-open
// admission's with its own, each naming a model as long as a request may
// (settleq.SpoolBytesPerSettlement): more than the settle queue's default capacity
// (100,000), which bounds what waits unanswered (settleq's
// TestDefaultSpoolHoldsTheDefaultCapacityWithStarts). 64 MiB, the default until
// 2026-12-04, held that many only for model names of a usual length (575 bytes).
var DefaultConfig = Config{MaxBytes: 96 << 20, SyncEvery: time.Second}

func (c Config) withDefaults() Config {
	if c.MaxBytes <= 0 {
		c.MaxBytes = DefaultConfig.MaxBytes
	}
	if c.SegmentBytes <= 0 {
		c.SegmentBytes = max(c.MaxBytes/16, 64<<10)
	}
	if c.SyncEvery <= 0 {
		c.SyncEvery = DefaultConfig.SyncEvery
	}
	return c
}

// Ref names one spooled settlement; the zero Ref is "not spooled" (Ack ignores it).
type Ref struct{ seg, seq uint64 }

// Spooled reports whether the settlement was written.
func (r Ref) Spooled() bool { return r.seq != 0 }

// Pending is a settlement found unacknowledged at Open, already rewritten into the
// current segment under Ref.
type Pending struct {
	Ref  Ref
	Item *internalv1.SettleItem
}

// Record kinds. A record is: length (4 bytes, of what follows the checksum), CRC-32C of
// that part (4), kind (1), sequence number (8), payload (a marshalled SettleItem for
// kindSettle, nothing for kindAck). Little-endian.
const (
	kindSettle byte = 'S'
	kindAck    byte = 'A'
	headerLen       = 4 + 4 + 1 + 8
	// maxRecord bounds one record when reading: anything larger is a torn or foreign file.
	maxRecord = 16 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Spool is the open spool. Its methods are safe for concurrent use.
type Spool struct {
	cfg  Config
	m    *metrics.Metrics
	log  *slog.Logger
	lock *os.File

	mu sync.Mutex
	// f is the current segment: nil after Close (closed), or after a rotation that could
	// not begin the next segment, until Append begins one (reopen).
	f      *os.File
	closed bool
	// reopenAt is when Append may next try to begin a segment after a failed rotation,
	// and tried the last number it tried (reopen).
	reopenAt time.Time
	tried    uint64
	// whole is, for each segment Open found torn, the end of its last whole record (read).
	whole map[uint64]int64
	cur   uint64 // the current segment's number (the closed one after a failed rotation)
	segs  map[uint64]*segment
	total int64  // bytes of every segment file
	seq   uint64 // last sequence number used
	dirty bool   // written since the last fsync
	// dirDirty: a segment was created since the directory was last fsync'd (openSegment).
	dirDirty bool
	// writeFailed and ackFailed throttle the lines of failures that repeat for every
	// settlement and every acknowledgement while their cause lasts (a full disk: the
	// emptyDir shares the node's disk with the containers' logs, which a line per
	// settlement would fill all the faster); the metrics count each one.
	writeFailed, ackFailed logging.Throttle
}

type segment struct {
	bytes int64
	live  int // settlements not yet acknowledged
}

// Open locks and reads the spool in cfg.Dir, compacts what was never acknowledged into a
// fresh segment and returns it, oldest first and each settlement once, for the caller to
// send again. It fails only when the directory is locked, cannot be read or its lock
// cannot be taken, never because of MaxBytes, nor because the compaction fails (a full
// disk, a quota): then the settlements are returned where they are, in the old segments
// (inPlace).
func Open(cfg Config, m *metrics.Metrics, log *slog.Logger) (*Spool, []Pending, error) {
	cfg = cfg.withDefaults()
	if cfg.Dir == "" {
		return nil, nil, errors.New("spool: no directory")
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("spool: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(cfg.Dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("spool: %w", err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return nil, nil, fmt.Errorf("spool: %s is used by another process (%w)", cfg.Dir, err)
	}
	s := &Spool{cfg: cfg, m: m, log: log, lock: lock, segs: map[uint64]*segment{}}
	old, sizes, found, err := s.read()
	if err != nil {
		lock.Close()
		return nil, nil, err
	}
	next := uint64(1)
	if len(old) > 0 {
		next = old[len(old)-1] + 1
	}
	items := make([]*internalv1.SettleItem, len(found))
	for i, p := range found {
		items[i] = p.Item
	}
	pending, err := s.compact(next, items)
	if err != nil {
		pending = s.inPlace(old, sizes, found, next, err)
	} else {
		// The live settlements are safe in the new segment: the old ones can go. A crash
		// before they are all gone leaves copies, which the next Open replays once (live).
		for _, n := range old {
			if err := os.Remove(s.path(n)); err != nil {
				log.Warn("spool: could not remove a compacted segment", "file", s.path(n), "error", err)
			}
		}
	}
	s.setBytes()
	if s.total > cfg.MaxBytes {
		log.Warn("spool: the settlements found at start exceed the bound; all are replayed, new ones are spooled once they are acknowledged below it",
			"bytes", s.total, "max_bytes", cfg.MaxBytes, "settlements", len(pending))
	}
	m.SettleSpoolReplayed.Add(float64(len(pending)))
	return s, pending, nil
}

func (s *Spool) path(n uint64) string {
	return filepath.Join(s.cfg.Dir, fmt.Sprintf("settle-%016x.spool", n))
}

// read returns the existing segments' numbers in order, their sizes, and the settlements
// they hold that no record acknowledges, in sequence order, each under its first copy's
// segment and sequence number (live); it removes a compaction's leftover temporary file. It also sets s.seq past every
// sequence number seen. A torn record (the process died while writing it, or the
// machine lost unsynced data) ends its segment's reading, logged and counted (tornTail).
func (s *Spool) read() ([]uint64, map[uint64]int64, []Pending, error) {
	entries, err := os.ReadDir(s.cfg.Dir)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("spool: %w", err)
	}
	var segs []uint64
	for _, e := range entries {
		var n uint64
		name := e.Name()
		if strings.HasPrefix(name, "settle-") && strings.HasSuffix(name, ".spool"+tmpSuffix) {
			// A compaction that never completed: its settlements are all in the old segments.
			if err := os.Remove(filepath.Join(s.cfg.Dir, name)); err != nil {
				return nil, nil, nil, fmt.Errorf("spool: %w", err)
			}
			continue
		}
		if strings.HasPrefix(name, "settle-") && strings.HasSuffix(name, ".spool") {
			if _, err := fmt.Sscanf(name, "settle-%016x.spool", &n); err == nil && n > 0 {
				segs = append(segs, n)
			}
		}
	}
	slices.Sort(segs)
	settled := map[uint64]*internalv1.SettleItem{}
	segOf := map[uint64]uint64{}
	acked := map[uint64]bool{}
	sizes := map[uint64]int64{}
	whole := map[uint64]int64{}
	for _, n := range segs {
		b, err := os.ReadFile(s.path(n))
		if err != nil {
			return nil, nil, nil, fmt.Errorf("spool: %w", err)
		}
		sizes[n] = int64(len(b))
		off := 0
		for off+headerLen <= len(b) {
			size := int(binary.LittleEndian.Uint32(b[off:]))
			sum := binary.LittleEndian.Uint32(b[off+4:])
			if size < 9 || size > maxRecord || off+8+size > len(b) || crc32.Checksum(b[off+8:off+8+size], castagnoli) != sum {
				break
			}
			body := b[off+8 : off+8+size]
			seq := binary.LittleEndian.Uint64(body[1:9])
			s.seq = max(s.seq, seq)
			switch body[0] {
			case kindSettle:
				it := &internalv1.SettleItem{}
				if err := proto.Unmarshal(body[9:], it); err != nil {
					s.m.Settlements.WithLabelValues(UnreadableOutcome).Inc()
					s.log.Error("SETTLEMENT LOST: a settlement in the spool could not be read at start and is skipped; its request is not known",
						"file", s.path(n), "segment", n, "offset", off, "bytes", 8+size, "sequence", seq, "error", err)
				} else {
					settled[seq], segOf[seq] = it, n
				}
			case kindAck:
				acked[seq] = true
			}
			off += 8 + size
		}
		if off < len(b) {
			s.tornTail(n, off, b[off:])
			whole[n] = int64(off)
		}
	}
	var found []Pending
	for _, seq := range live(settled, acked) {
		found = append(found, Pending{Ref: Ref{seg: segOf[seq], seq: seq}, Item: settled[seq]})
	}
	s.whole = whole
	return segs, sizes, found, nil
}

// UnreadableOutcome is the outcome of tollgate_enforcer_settlements_total that counts
// the settlements Open could not read back: one per settlement record that does not
// unmarshal, and one per segment whose tail is torn (tornTail), which may have held more
// (at least one is lost). The alert TollgateSettlementsLost counts it.
const UnreadableOutcome = "unreadable_in_spool"

// tornTail reports the bytes of segment n from off on, which do not read as a whole
// record: a record cut short (the process died in the middle of its write, or the
// machine lost what was not synced: its tail zeroed or cut), or corrupt bytes. The rest
// of the segment is skipped, and whatever settlements it held are lost; they cannot be
// told apart, so it counts one (UnreadableOutcome), at least one lost. The one exception
// is an acknowledgement cut short at the very end of the segment, recognised by its
// length, and its kind when that was written (an acknowledgement's record is headerLen
// bytes, and none follows it; a settlement's is longer, its payload never empty: until
// 2026-12-07 one cut before its kind byte was counted as a settlement lost):
// losing it costs a duplicate at most (the package comment), logged as a warning and not
// counted. Until 2026-12-07 any torn tail was a warning, with no metric: a machine crash
// lost settlements with nothing to alert on, and bytes after the last whole record
// shorter than a header were skipped without a word.
func (s *Spool) tornTail(n uint64, off int, rest []byte) {
	if len(rest) >= 4 && len(rest) < headerLen && binary.LittleEndian.Uint32(rest) == 9 && (len(rest) <= 8 || rest[8] == kindAck) {
		s.log.Warn("spool: an acknowledgement cut short ends a segment; its settlement may be sent again (answered duplicate)",
			"file", s.path(n), "segment", n, "offset", off, "bytes_skipped", len(rest))
		return
	}
	s.m.Settlements.WithLabelValues(UnreadableOutcome).Inc()
	s.log.Error("SETTLEMENT LOST: torn record in the spool at start; the rest of the segment is skipped, and the settlements it held (at least one, requests not known) are lost",
		"file", s.path(n), "segment", n, "offset", off, "bytes_skipped", len(rest))
}

// live returns the sequence numbers of the settlements no record acknowledges, in
// order, each once: copies of one settlement (the same request id, equal in every
// field) are one, kept at its newest copy, and done when that copy is acknowledged (the
// control plane answered it after the copy was written). A copy written after an older
// one was acknowledged is a settlement written again to be sent again (settleq's after
// a mirror rebuild, the database may have lost the first answer's work): it is live
// until acknowledged itself. Copies written while the older is live come from a
// compaction cut short after its segment was in place, and from spools that older
// versions duplicated: an acknowledgement of the newest covers them all (compaction and
// inPlace send the newest). Distinct settlements of one request id (a refusal, then the
// answer) are each kept. Until 2026-12-07 an acknowledgement of any copy covered every
// other, so a settlement written again was never replayed.
func live(settled map[uint64]*internalv1.SettleItem, acked map[uint64]bool) []uint64 {
	type one struct {
		item *internalv1.SettleItem
		seq  uint64 // the newest copy's
	}
	seqs := slices.Sorted(maps.Keys(settled))
	byID := map[string][]*one{}
	var all []*one
	for _, seq := range seqs {
		it := settled[seq]
		id := it.GetRequestId()
		var o *one
		for _, c := range byID[id] {
			if proto.Equal(c.item, it) {
				o = c
				break
			}
		}
		if o == nil {
			o = &one{item: it}
			byID[id] = append(byID[id], o)
			all = append(all, o)
		}
		o.seq = seq
	}
	var out []uint64
	for _, o := range all {
		if !acked[o.seq] {
			out = append(out, o.seq)
		}
	}
	slices.Sort(out)
	return out
}

// compact writes items into segment n, which becomes the current one, whatever their
// size (MaxBytes bounds new settlements, never what is already spooled: a start must not
// fail on it). They are written to a temporary file, fsync'd, and renamed into place
// (the directory fsync'd too): a crash before the rename leaves only the old segments
// and the temporary file, which the next Open removes. When it fails, it removes what it
// wrote (the temporary file, or the segment renamed into place), so that the old
// segments alone hold the settlements (inPlace).
func (s *Spool) compact(n uint64, items []*internalv1.SettleItem) (_ []Pending, err error) {
	tmp := s.path(n) + tmpSuffix
	renamed := false
	defer func() {
		if err == nil {
			return
		}
		name := tmp
		if renamed {
			name = s.path(n)
		}
		if rmErr := os.Remove(name); rmErr != nil && !errors.Is(rmErr, os.ErrNotExist) {
			// Left behind: a temporary file is removed by the next Open; a segment's
			// copies are replayed once with the old segments' (live).
			s.log.Warn("spool: could not remove what the failed compaction wrote", "file", name, "error", rmErr)
		}
	}()
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	w := bufio.NewWriterSize(writerFunc(func(b []byte) (int, error) { return compactionWrite(f, b) }), 1<<20)
	pending := make([]Pending, 0, len(items))
	var size int64
	for _, it := range items {
		payload, err := proto.Marshal(it)
		if err == nil {
			s.seq++
			_, err = w.Write(record(kindSettle, s.seq, payload))
			size += int64(headerLen + len(payload))
		}
		if err != nil {
			f.Close()
			return nil, err
		}
		pending = append(pending, Pending{Ref: Ref{seg: n, seq: s.seq}, Item: it})
	}
	if err := errors.Join(w.Flush(), f.Sync(), f.Close()); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp, s.path(n)); err != nil {
		return nil, err
	}
	renamed = true
	if err := syncDir(s.cfg.Dir); err != nil {
		return nil, err
	}
	if s.f, err = os.OpenFile(s.path(n), os.O_WRONLY|os.O_APPEND, 0); err != nil {
		return nil, err
	}
	s.cur = n
	s.segs[n] = &segment{bytes: size, live: len(pending)}
	s.total = size
	return pending, nil
}

// compactionWrite is how compact writes its temporary file (a test replaces it).
var compactionWrite = (*os.File).Write

type writerFunc func([]byte) (int, error)

func (w writerFunc) Write(b []byte) (int, error) { return w(b) }

// inPlace is Open's way when the compaction failed (cause): the settlements found stay
// in the old segments, under their own sequence numbers, and are replayed from there.
// Each is acknowledged in its own segment (ackClosed), and an old segment is deleted once
// its settlements are all acknowledged (dropIfDone); one holding none is deleted at once.
// New settlements go to a new segment, begun here or, when even that fails, by a later
// Append (reopen). Until 2026-12-07 Open failed instead: a full disk or a quota (ENOSPC,
// EDQUOT), which the rewrite of a backlog meets first, since it needs as much room again,
// kept the enforcer from starting, over and over, the backlog stuck on its disk.
func (s *Spool) inPlace(old []uint64, sizes map[uint64]int64, found []Pending, next uint64, cause error) []Pending {
	s.log.Error("spool: the settlements found at start could not be rewritten into a new segment; they are replayed from the old segments in place, each deleted once its settlements are answered",
		"error", cause, "no_room", errors.Is(cause, syscall.ENOSPC) || errors.Is(cause, syscall.EDQUOT),
		"segments", len(old), "settlements", len(found))
	s.f = nil
	s.segs = map[uint64]*segment{}
	s.total = 0
	for _, n := range old {
		size := sizes[n]
		if end, torn := s.whole[n]; torn {
			// Cut back to its last whole record: an acknowledgement appended after the
			// torn bytes (ackClosed) would be skipped at the next start, which would
			// replay its settlement and count this loss again. Until 2026-12-07 they
			// were. Truncating frees room, so it works on a full disk too.
			if err := os.Truncate(s.path(n), end); err != nil {
				s.log.Warn("spool: could not cut a torn segment back to its last whole record; its later acknowledgements will not be read",
					"file", s.path(n), "error", err)
			} else {
				size = end
			}
		}
		s.segs[n] = &segment{bytes: size}
		s.total += size
	}
	for _, p := range found {
		s.segs[p.Ref.seg].live++
	}
	s.cur = next - 1
	if err := s.openSegment(next); err != nil {
		s.log.Warn("spool: could not begin a segment; new settlements are spooled once one can be begun", "error", err)
	}
	for _, n := range old {
		s.dropIfDone(n)
	}
	s.whole = nil
	return found
}

// tmpSuffix names a compaction's file until it is complete.
const tmpSuffix = ".tmp"

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}

func (s *Spool) openSegment(n uint64) error {
	f, err := os.OpenFile(s.path(n), os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	s.f, s.cur = f, n
	s.segs[n] = &segment{}
	// Its name is made durable with the next Sync's (fsync(2): syncing the file does not
	// sync the entry in its directory); until 2026-12-07 it never was, so a machine crash
	// could lose a whole segment whose records had been synced, not only the last second.
	s.dirDirty = true
	return nil
}

// Append writes a settlement before it is queued. It reports false, writing nothing,
// when the spool is full or the write failed (both counted; the caller queues the
// settlement anyway), or when s is nil (none configured).
func (s *Spool) Append(item *internalv1.SettleItem) (Ref, bool) {
	if s == nil {
		return Ref{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil && !s.closed {
		s.reopen()
	}
	if s.f == nil {
		// Closed, or no segment could be begun after a failed rotation (yet).
		s.m.SettleSpoolDropped.WithLabelValues("error").Inc()
		return Ref{}, false
	}
	ref, err := s.append(item)
	switch {
	case errors.Is(err, errFull):
		s.m.SettleSpoolDropped.WithLabelValues("full").Inc()
		return Ref{}, false
	case err != nil:
		s.m.SettleSpoolDropped.WithLabelValues("error").Inc()
		s.writeFailed.Log(s.log, slog.LevelError, "spool: write failed; the settlement is queued but would be lost on a crash",
			"request_id", item.GetRequestId(), "error", err)
		return Ref{}, false
	}
	s.setBytes()
	return ref, true
}

var errFull = errors.New("spool: full")

func (s *Spool) append(item *internalv1.SettleItem) (Ref, error) {
	payload, err := proto.Marshal(item)
	if err != nil {
		return Ref{}, err
	}
	if s.total+int64(headerLen+len(payload)) > s.cfg.MaxBytes {
		return Ref{}, errFull
	}
	s.seq++
	if err := s.write(kindSettle, s.seq, payload); err != nil {
		return Ref{}, err
	}
	ref := Ref{seg: s.cur, seq: s.seq}
	s.segs[s.cur].live++
	if err := s.maybeRotate(); err != nil {
		// The settlement is written whole: it is spooled, and acknowledged in its segment
		// (ackClosed). Refused here, it was queued unspooled with its record left live on
		// disk, never acknowledged, and its segment never deleted.
		s.writeFailed.Log(s.log, slog.LevelWarn, "spool: could not begin a new segment", "error", err)
	}
	return ref, nil
}

// write appends one record to the current segment with a single write(2).
func (s *Spool) write(kind byte, seq uint64, payload []byte) error {
	n, err := s.f.Write(record(kind, seq, payload))
	if err != nil && n > 0 && s.f.Truncate(s.segs[s.cur].bytes) == nil {
		// A partial record is cut off again (a full disk writes part of one): left, it
		// would read at start as a torn tail, counted as a settlement lost (tornTail),
		// when this one is queued all the same.
		n = 0
	}
	s.segs[s.cur].bytes += int64(n)
	s.total += int64(n)
	s.dirty = true
	if err != nil && n > 0 {
		// A partial record that could not be cut off would end this segment's reading at
		// start: whatever follows must go to a new segment.
		return errors.Join(err, s.rotate())
	}
	return err
}

// record is one record's bytes (the Record kinds above).
func record(kind byte, seq uint64, payload []byte) []byte {
	rec := make([]byte, headerLen+len(payload))
	binary.LittleEndian.PutUint32(rec, uint32(1+8+len(payload)))
	rec[8] = kind
	binary.LittleEndian.PutUint64(rec[9:], seq)
	copy(rec[headerLen:], payload)
	binary.LittleEndian.PutUint32(rec[4:], crc32.Checksum(rec[8:], castagnoli))
	return rec
}

func (s *Spool) maybeRotate() error {
	if s.segs[s.cur].bytes < s.cfg.SegmentBytes {
		return nil
	}
	return s.rotate()
}

// rotate closes the current segment (synced: no settlement is written to it again, only
// the acknowledgements of its own, ackClosed) and begins the next; a closed segment with
// nothing live is deleted at once.
func (s *Spool) rotate() error {
	old := s.cur
	err := errors.Join(s.f.Sync(), s.f.Close())
	s.dirty = false
	if err2 := s.openSegment(old + 1); err2 != nil {
		// None open: Append counts its settlements as errors, and tries again to begin
		// one, at most once per reopenEvery (reopen).
		s.f = nil
		s.reopenAt = time.Now().Add(reopenEvery)
		return errors.Join(err, err2)
	}
	s.dropIfDone(old)
	return err
}

// reopenEvery is how often Append tries to begin a segment after a rotation failed to.
const reopenEvery = time.Second

// reopen begins a new segment after a rotation failed to (its cause may pass: a
// process out of file descriptors under load, a full disk, an I/O error), when
// reopenEvery has passed since the last try. Until 2026-12-07 the spool stayed without
// a segment for the rest of the process: every later settlement was queued unspooled,
// lost on a crash, whatever became of the cause. Each try takes a number of its own (a
// file left under one that failed is read at the next Open all the same).
func (s *Spool) reopen() {
	now := time.Now()
	if now.Before(s.reopenAt) {
		return
	}
	s.reopenAt = now.Add(reopenEvery)
	old := s.cur
	s.tried = max(s.tried, s.cur+1) + 1
	if err := s.openSegment(s.tried); err != nil {
		return
	}
	s.log.Info("spool: a new segment is begun after a failed rotation; settlements are spooled again", "file", s.path(s.cur))
	s.dropIfDone(old)
}

func (s *Spool) dropIfDone(n uint64) {
	sg := s.segs[n]
	if (n == s.cur && s.f != nil) || sg == nil || sg.live > 0 {
		return
	}
	if err := os.Remove(s.path(n)); err != nil && !errors.Is(err, os.ErrNotExist) {
		s.log.Warn("spool: could not remove an acknowledged segment", "file", s.path(n), "error", err)
		return
	}
	s.total -= sg.bytes
	delete(s.segs, n)
}

// Ack marks a settlement done (the control plane answered it, or it was given up on
// purpose). Nothing happens for the zero Ref, nor on a nil Spool (none configured).
func (s *Spool) Ack(ref Ref) {
	if s == nil || !ref.Spooled() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sg := s.segs[ref.seg]
	if s.closed || sg == nil {
		return
	}
	sg.live--
	switch {
	case ref.seg == s.cur && s.f != nil:
		if err := s.write(kindAck, ref.seq, nil); err != nil {
			// Only costs a duplicate after a crash.
			s.ackFailed.Log(s.log, slog.LevelWarn, "spool: could not record an acknowledgement", "error", err)
		}
		if err := s.maybeRotate(); err != nil {
			s.ackFailed.Log(s.log, slog.LevelWarn, "spool: could not begin a new segment", "error", err)
		}
	case sg.live == 0:
		// The whole segment goes: no acknowledgement record needed.
		s.dropIfDone(ref.seg)
	default:
		// A closed segment's settlement is acknowledged in that segment, never in the
		// current one: each segment is deleted when its own settlements are all
		// acknowledged, which may be before an older one's are, and an acknowledgement
		// kept elsewhere would go with it (the settlement coming back at the next Open).
		if err := s.ackClosed(ref); err != nil {
			// Only costs a duplicate after a crash.
			s.ackFailed.Log(s.log, slog.LevelWarn, "spool: could not record an acknowledgement", "file", s.path(ref.seg), "error", err)
		}
	}
	s.setBytes()
}

// ackClosed appends the acknowledgement of ref, a settlement of a closed segment, to that
// segment, with one write(2) as every record. It is not synced (the package comment:
// losing an acknowledgement only costs a duplicate). A record only partly written is cut
// off again, so that the segment's later acknowledgements stay readable.
func (s *Spool) ackClosed(ref Ref) error {
	sg := s.segs[ref.seg]
	f, err := os.OpenFile(s.path(ref.seg), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	n, err := f.Write(record(kindAck, ref.seq, nil))
	if err != nil && n > 0 && f.Truncate(sg.bytes) == nil {
		n = 0
	}
	sg.bytes += int64(n)
	s.total += int64(n)
	return errors.Join(err, f.Close())
}

func (s *Spool) setBytes() { s.m.SettleSpoolBytes.Set(float64(s.total)) }

// fsync is how Sync fsyncs the current segment (a test replaces it).
var fsync = (*os.File).Sync

// Sync fsyncs what was written since the last sync. The fsync runs outside the lock:
// it waits for the disk, and every settlement is written on its response's path (until
// 2026-12-07 each waited for the second's fsync). A rotation or Close that closes the
// segment meanwhile has synced it itself.
func (s *Spool) Sync() error {
	s.mu.Lock()
	f := s.f
	if f == nil || !s.dirty {
		s.mu.Unlock()
		return nil
	}
	s.dirty = false
	dir := s.dirDirty
	s.dirDirty = false
	s.mu.Unlock()
	if err := fsync(f); err != nil && !errors.Is(err, os.ErrClosed) {
		s.keepDirDirty(dir)
		return err
	}
	if dir {
		if err := dirSync(s.cfg.Dir); err != nil {
			s.keepDirDirty(true)
			return err
		}
	}
	return nil
}

// keepDirDirty leaves the directory's fsync for the next Sync when this one failed.
func (s *Spool) keepDirDirty(dir bool) {
	if dir {
		s.mu.Lock()
		s.dirDirty = true
		s.mu.Unlock()
	}
}

// dirSync is how Sync and Close fsync the spool's directory (a test replaces it).
var dirSync = syncDir

// Run fsyncs every SyncEvery until ctx ends.
func (s *Spool) Run(ctx context.Context) error {
	return lifecycle.Every(ctx, s.cfg.SyncEvery, func(context.Context) {
		if err := s.Sync(); err != nil {
			s.log.Error("spool: fsync failed", "error", err)
		}
	})
}

// Close syncs and closes the spool and releases its directory. What is not
// acknowledged stays for the next Open.
func (s *Spool) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var err error
	s.closed = true
	if s.f != nil {
		err = errors.Join(s.f.Sync(), s.f.Close())
		s.f = nil
	}
	if s.dirDirty {
		s.dirDirty = false
		err = errors.Join(err, dirSync(s.cfg.Dir))
	}
	return errors.Join(err, s.lock.Close())
}

// Bytes is the spool's size on disk.
func (s *Spool) Bytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total
}

var _ io.Closer = (*Spool)(nil)
