// Package window owns the usage-limit calendar: the three timeframes (day,
// week, month), the window of each that contains an instant, and the
// deterministic id of a member's bucket in a window.
//
// Every window starts at 05:00 UTC (weeks on Monday, months on day 1) and is
// half-open, [Start, End). The rule lives here and only here so that
// admission, settlement and status reads can never disagree on which window
// an instant belongs to.
//
// It must not read the clock (callers pass the instant, so tests and
// settlement can use the admission time) and must not depend on the local
// time zone of the process or of the instant it is given. It knows nothing
// about policies, money or storage.
package window
