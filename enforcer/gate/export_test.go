package gate

// SameStart is sameStart, for the test that changes every field in turn.
var SameStart = sameStart
