package window

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"time"
)

// Timeframe is the length of a usage-limit window.
type Timeframe string

// The three timeframes, in the order Current returns them.
const (
	Day   Timeframe = "day"
	Week  Timeframe = "week"
	Month Timeframe = "month"
)

// Timeframes lists every timeframe, shortest first. Do not modify it.
var Timeframes = []Timeframe{Day, Week, Month}

// ResetOffset is how far after midnight UTC every window starts.
const ResetOffset = 5 * time.Hour

// ErrUnknownTimeframe is returned by ParseTimeframe.
var ErrUnknownTimeframe = errors.New(`timeframe must be one of "day", "week", "month"`)

// ParseTimeframe accepts exactly "day", "week" or "month". It is case
// sensitive, because the value is stored and hashed into bucket ids as is.
func ParseTimeframe(s string) (Timeframe, error) {
	switch tf := Timeframe(s); tf {
	case Day, Week, Month:
		return tf, nil
	}
	return "", ErrUnknownTimeframe
}

// Valid reports whether tf is one of the three timeframes.
func (tf Timeframe) Valid() bool {
	_, err := ParseTimeframe(string(tf))
	return err == nil
}

// Window is one half-open interval [Start, End) of a timeframe. Start and End
// are always in UTC, so windows can be compared with ==.
type Window struct {
	Timeframe
	Start, End time.Time
}

// Of returns the window of timeframe tf that contains t. The location of t
// does not matter, only the instant. It panics on an unknown timeframe:
// timeframes come from constants or from ParseTimeframe, so anything else is
// a programming error.
func Of(tf Timeframe, t time.Time) Window {
	// Shifting back by the reset offset turns "05:00 UTC to 05:00 UTC" into
	// an ordinary UTC calendar day, whose date names the window.
	y, m, d := t.UTC().Add(-ResetOffset).Date()
	switch tf {
	case Day:
		return Window{tf, at(y, m, d), at(y, m, d+1)}
	case Week:
		// Go's weekdays start on Sunday (0); count days back to Monday.
		back := (int(time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Weekday()) + 6) % 7
		return Window{tf, at(y, m, d-back), at(y, m, d-back+7)}
	case Month:
		return Window{tf, at(y, m, 1), at(y, m+1, 1)}
	}
	panic("window.Of: unknown timeframe " + string(tf))
}

// at is the reset instant of a date. time.Date normalises overflowing days
// and months (Jan 32 -> Feb 1, month 13 -> January of the next year), which
// gives calendar-correct ends for free, leap years included.
func at(y int, m time.Month, d int) time.Time {
	return time.Date(y, m, d, int(ResetOffset/time.Hour), 0, 0, 0, time.UTC)
}

// Contains reports whether t lies in [w.Start, w.End).
func (w Window) Contains(t time.Time) bool {
	return !t.Before(w.Start) && t.Before(w.End)
}

// Next returns the window of the same timeframe that starts when w ends.
func (w Window) Next() Window {
	return Of(w.Timeframe, w.End)
}

// Current returns the day, week and month windows that contain t, in the
// order of Timeframes.
func Current(t time.Time) [3]Window {
	return [3]Window{Of(Day, t), Of(Week, t), Of(Month, t)}
}

// bucketTimeLayout is RFC 3339 with exactly three fractional digits and a
// literal Z. It is fixed, not time.RFC3339Nano, because the bucket id must be
// the same string on every implementation and trailing zeros must not vary.
const bucketTimeLayout = "2006-01-02T15:04:05.000Z"

// BucketID is the deterministic id of one member's counter for one window:
// lowercase hex SHA-256 of "<orgID>/<memberID>/<timeframe>/<start>". Being a
// pure function of its inputs, the id is known before the row exists, so
// concurrent first writers agree on it.
//
// The hashed text is assembled in a buffer on the stack and the id is the only
// allocation: the enforcer computes three ids for every request it admits, and
// the gateway's garbage fragments the heap its streams' buffers sit in.
func BucketID(orgID, memberID string, tf Timeframe, start time.Time) string {
	var buf [160]byte
	in := append(buf[:0], orgID...)
	in = append(append(in, '/'), memberID...)
	in = append(append(in, '/'), tf...)
	in = start.UTC().AppendFormat(append(in, '/'), bucketTimeLayout)
	sum := sha256.Sum256(in)
	var id [2 * sha256.Size]byte
	hex.Encode(id[:], sum[:])
	return string(id[:])
}
