//go:build race

package mirror_test

// raceEnabled: this test binary was built with -race, which makes the client's encoding
// of a pipeline several times slower, so a test of what fits within the control plane's
// deadlines says nothing.
const raceEnabled = true
