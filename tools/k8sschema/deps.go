package main

// Packages gen.sh hands to the generators but main.go does not import; kept
// here so that `go mod tidy` keeps them (and their go.sum lines).
import (
	_ "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	_ "k8s.io/api/apps/v1"
	_ "k8s.io/api/autoscaling/v2"
	_ "k8s.io/api/batch/v1"
	_ "k8s.io/api/core/v1"
	_ "k8s.io/api/networking/v1"
	_ "k8s.io/api/policy/v1"
	_ "k8s.io/api/scheduling/v1alpha3"
	_ "k8s.io/apimachinery/pkg/version"
)
