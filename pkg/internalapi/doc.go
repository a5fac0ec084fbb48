// Package internalapi holds the protobuf contract between enforcers and the control plane
// (v1/accounting.proto) and its generated Go code, committed. Regenerate with
// `make generate` (needs protoc, protoc-gen-go and protoc-gen-go-grpc). It contains no
// logic: the control plane implements the service, the enforcer calls it.
package internalapi

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative v1/accounting.proto
