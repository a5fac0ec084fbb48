package gateway

import "time"

// The tests give a session whose client left 1 s of grace (realtimeLeftGrace) rather
// than 5, so that a session cut mid-response ends in a second. It is set before any test
// runs: no session reads it while it changes.
func init() { realtimeLeftGrace = time.Second }

// RealtimeLeftGrace is the grace the tests run with (realtimeLeftGrace).
func RealtimeLeftGrace() time.Duration { return realtimeLeftGrace }

// IsGeminiLivePath is isGeminiLivePath, for its table test.
var IsGeminiLivePath = isGeminiLivePath

// ObserveIdleWaits has f told the deadline of each of gw's waits for its requests to end
// (waitIdle), as it begins. Call it before DrainSessions.
func ObserveIdleWaits(gw *Gateway, f func(deadline time.Time)) { gw.idleWaits = f }

// RealtimeSettleWait is realtimeSettleWait.
const RealtimeSettleWait = realtimeSettleWait
