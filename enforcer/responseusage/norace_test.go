//go:build !race

package responseusage

// raceEnabled: see race_test.go.
const raceEnabled = false
