// Package charttest tests the Helm chart in charts/tollgate; it has no code
// of its own outside its tests.
//
// The tests run `helm lint` and `helm template` on every value file in
// charts/tollgate/ci, compare each render with its golden file in
// testdata/golden (go test ./charts/charttest -update rewrites them), check
// the renders against Kubernetes JSON schemas with kubeconform, strictly and
// offline (the schemas are committed in testdata/schemas; tools/k8sschema
// regenerates them), check that bad values fail at install through
// values.schema.json and the templates' own checks, run the programs' own
// configuration checks on rendered environments (what the chart renders, the
// programs accept; what it refuses, they refuse), and check the security and
// wiring invariants every
// render must keep (non-root, read-only root file system, probes on the admin
// ports, credentials only through Secret references). Each value file is also
// rendered over the last release's values.yaml (testdata/released, replaced when
// a release is cut), as `helm upgrade --reuse-values` renders it: a value added
// since must not be required by a template.
//
// helm and kubeconform are built once per test run from the versions pinned
// in tools/go.mod. Without them the tests skip, except under CI=true, where
// they fail.
package charttest
