package gate

import (
	"strconv"

	"github.com/tollgate-dev/tollgate/enforcer/decision"
)

// Codex's rate-limit headers. OpenAI's Codex reads them on every response, from any
// provider (a provider of its own with an API key too: seen with Codex 0.171), and
// announces where its user's limits stand in the account/rateLimits/updated
// notification its app server sends its clients, the IDE extensions among them (the
// share used, the window's minutes, its reset), a 429's too. (Its terminal UI, with an
// API key, showed none of it: docs/enforcer.md.) An admitted answer and a usage-limit 429
// send the member's own windows in them (Limits), so a Codex user sees the Tollgate
// limit before meeting it, and sees it spent when refused for it.
const (
	HeaderCodexPrimaryUsedPercent     = "X-Codex-Primary-Used-Percent"
	HeaderCodexPrimaryWindowMinutes   = "X-Codex-Primary-Window-Minutes"
	HeaderCodexPrimaryResetAt         = "X-Codex-Primary-Reset-At"
	HeaderCodexSecondaryUsedPercent   = "X-Codex-Secondary-Used-Percent"
	HeaderCodexSecondaryWindowMinutes = "X-Codex-Secondary-Window-Minutes"
	HeaderCodexSecondaryResetAt       = "X-Codex-Secondary-Reset-At"
	// HeaderCodexLimitName names whose limits they are: Codex announces it as the
	// snapshot's limitName (seen with Codex 0.171), where a client may label the windows;
	// without it they read as the provider's plan's. Admissions only (AppendNamedHeaders).
	HeaderCodexLimitName = "X-Codex-Limit-Name"
)

// LimitName is the name the limits are announced under (HeaderCodexLimitName).
const LimitName = "Tollgate"

// LimitWindow is one limited window of a member's as a check found it: what was used
// (before the request) and allowed in it, in micro-USD, and when it began and resets
// (Unix seconds).
type LimitWindow struct {
	Used, Allowance int64
	Start, End      int64
}

// Limits are the windows an admitted answer or a usage-limit 429 reports
// (AppendHeaders, AppendCodexEvent): the primary, the member's shortest limited window,
// and the secondary, the longer limited window nearest its limit (the first of those,
// on a tie), where a spent hard limit (one a 429 is for) comes before any soft limit
// passed further. Codex shows two windows, each labelled by its length; a member
// limited by the day, the week and the month so sees the day and whichever longer
// window binds first, and a refused member the window that refused (with the day). An
// absent window has End 0.
type Limits struct{ Primary, Secondary LimitWindow }

// limitsOf are the limits of a decision's limited buckets (day, week, month: shortest
// first).
func limitsOf(d *decision.Decision) Limits {
	var l Limits
	secondarySpent := false
	for i := range d.Buckets {
		b := &d.Buckets[i]
		if !b.Limited {
			continue
		}
		w := LimitWindow{Used: b.Used, Allowance: b.Allowance, Start: b.Window.Start.Unix(), End: b.Window.End.Unix()}
		spent := b.Exhausted && b.HardLimit
		switch {
		case l.Primary.End == 0:
			l.Primary = w
		case l.Secondary.End == 0, spent && !secondarySpent,
			spent == secondarySpent && w.usedPerMille() > l.Secondary.usedPerMille():
			l.Secondary, secondarySpent = w, spent
		}
	}
	return l
}

// usedPerMille is the share of the allowance used, in thousandths (a zero allowance is
// all used; over 1000 when a soft limit was passed).
func (w LimitWindow) usedPerMille() int64 {
	if w.Allowance <= 0 {
		return 1000
	}
	return max(w.Used, 0) * 1000 / w.Allowance
}

// minutes is the window's length in minutes.
func (w LimitWindow) minutes() int64 { return (w.End - w.Start) / 60 }

// appendUsedPercent appends the share used in percent, one decimal (usedPerMille).
func (w LimitWindow) appendUsedPercent(b []byte) []byte {
	p := w.usedPerMille()
	b = strconv.AppendInt(b, p/10, 10)
	return append(b, '.', byte('0'+p%10))
}

// AppendHeaders appends Codex's rate-limit headers of the windows there are. Their
// values are cut from one string: one allocation for all of them, on every admission.
func (l *Limits) AppendHeaders(h []Header) []Header {
	if l.Primary.End == 0 {
		return h
	}
	var buf [96]byte
	b, ends := buf[:0], [6]int{}
	for i, w := range [2]LimitWindow{l.Primary, l.Secondary} {
		if w.End == 0 {
			break
		}
		b = w.appendUsedPercent(b)
		ends[3*i] = len(b)
		b = strconv.AppendInt(b, w.minutes(), 10)
		ends[3*i+1] = len(b)
		b = strconv.AppendInt(b, w.End, 10)
		ends[3*i+2] = len(b)
	}
	values, start := string(b), 0
	for i, name := range [6]string{HeaderCodexPrimaryUsedPercent, HeaderCodexPrimaryWindowMinutes, HeaderCodexPrimaryResetAt,
		HeaderCodexSecondaryUsedPercent, HeaderCodexSecondaryWindowMinutes, HeaderCodexSecondaryResetAt} {
		if ends[i] == 0 {
			break
		}
		h = append(h, Header{name, values[start:ends[i]]})
		start = ends[i]
	}
	return h
}

// AppendNamedHeaders appends AppendHeaders' headers and, when there are any, the
// limits' name (HeaderCodexLimitName): an admission's. A usage-limit 429's go without
// it: named, Codex words its error as that limit's ("You've hit your usage limit for
// Tollgate. Switch to another model now, or try again at ...") and leaves out the way
// to ask for more (HeaderCodexPromoMessage; seen with Codex 0.171).
func (l *Limits) AppendNamedHeaders(h []Header) []Header {
	n := len(h)
	if h = l.AppendHeaders(h); len(h) == n {
		return h
	}
	return append(h, Header{HeaderCodexLimitName, LimitName})
}

// AppendCodexEvent appends the limits as the event Codex reads of a Responses API
// WebSocket session, where no response has headers: {"type":"codex.rate_limits",
// "rate_limits":{"allowed":true,"limit_reached":false,"primary":{"used_percent":...,
// "window_minutes":...,"reset_at":...},"secondary":{...}}}, the numbers those of the
// headers. Nothing is appended without a limited window. Only admissions send it: a
// session's refusal closes it (the 429 of Codex's next handshake carries the headers).
// It names no limit (HeaderCodexLimitName): Codex 0.171 reads none from the event
// (limit_name in rate_limits is ignored; limit_name or metered_limit_name beside it
// becomes the limit's id, so the windows would read as another limit than Codex's own).
func (l *Limits) AppendCodexEvent(b []byte) []byte {
	if l.Primary.End == 0 {
		return b
	}
	b = append(b, `{"type":"codex.rate_limits","rate_limits":{"allowed":true,"limit_reached":false`...)
	for _, w := range [2]struct {
		name string
		w    LimitWindow
	}{{"primary", l.Primary}, {"secondary", l.Secondary}} {
		if w.w.End == 0 {
			break
		}
		b = append(b, `,"`...)
		b = append(b, w.name...)
		b = append(b, `":{"used_percent":`...)
		b = w.w.appendUsedPercent(b)
		b = append(b, `,"window_minutes":`...)
		b = strconv.AppendInt(b, w.w.minutes(), 10)
		b = append(b, `,"reset_at":`...)
		b = strconv.AppendInt(b, w.w.End, 10)
		b = append(b, '}')
	}
	return append(b, "}}"...)
}

// AdmittedHeaders are the headers an admitted request's response gets: its usage state
// (X-Service-Usage-State) and its limits' (Limits).
func (a *Answer) AdmittedHeaders() []Header {
	var h []Header
	if a.UsageState != "" {
		h = append(make([]Header, 0, 8), Header{HeaderUsageState, a.UsageState})
	}
	return a.Limits.AppendNamedHeaders(h)
}
