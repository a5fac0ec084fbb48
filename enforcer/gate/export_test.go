package gate

import internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"

// SameStart reports whether startDiff finds no difference, for the test that changes
// every field in turn.
func SameStart(a, b *internalv1.StartItem) bool { return startDiff(a, b) == "" }
