//go:build !race

package mirror_test

// raceEnabled: see race_test.go.
const raceEnabled = false
