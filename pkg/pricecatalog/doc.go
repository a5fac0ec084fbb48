// Package pricecatalog owns the default price catalog that ships inside the binaries
// (catalog.json, embedded): the published list prices of the current text models of
// OpenAI, Anthropic and Google, in integer micro-USD per million tokens, with the date
// they were checked and their sources. It also owns how a model name, as an upstream
// answers it, is matched to a price table (Steps, Key, StripSnapshot), so that the
// control plane matches an organization's own prices the same way.
//
// It must not read the clock, the network or the database, and it never changes at run
// time: updating prices is a change of catalog.json (docs/prices.md). Model names are
// untrusted (they come from upstream responses): matching never panics and reads at most
// MaxNameLen bytes of a name.
package pricecatalog
