//go:build race

package responseusage

// raceEnabled: this test binary was built with -race, under which sync.Pool drops a
// quarter of what is put back on purpose (to expose code that relies on reuse), so
// allocation counts of pooled code say nothing.
const raceEnabled = true
