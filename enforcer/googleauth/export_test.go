package googleauth

import "time"

// SetFetchTimeout shortens FetchTimeout for a test; the returned function restores it.
func SetFetchTimeout(d time.Duration) (restore func()) {
	old := fetchTimeout
	fetchTimeout = d
	return func() { fetchTimeout = old }
}
