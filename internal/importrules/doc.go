// Package importrules holds only a test: the import rules of the repository, read from
// `go list` (docs/development.md, Layout). The two programs meet only in pkg/: nothing
// under enforcer/ imports controlplane/, nothing under controlplane/ imports enforcer/,
// pkg/ and the measuring tools import neither. Only cmd/tollgate (the dev stack) and e2e
// put both together.
package importrules
