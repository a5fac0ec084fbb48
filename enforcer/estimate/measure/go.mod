// Measures the enforcer's token estimator against a real tokenizer (see measure_test.go).
// A module of its own: the enforcer never depends on a tokenizer.
module github.com/tollgate-dev/tollgate/enforcer/estimate/measure

go 1.26.8

replace github.com/tollgate-dev/tollgate => ../../..

require (
	github.com/pkoukk/tiktoken-go v0.1.8
	github.com/pkoukk/tiktoken-go-loader v0.0.2
	github.com/tollgate-dev/tollgate v0.0.0-00010101000000-000000000000
)

require (
	github.com/dlclark/regexp2 v1.10.0 // indirect
	github.com/google/uuid v1.3.0 // indirect
)
