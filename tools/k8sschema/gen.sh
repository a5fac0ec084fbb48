#!/usr/bin/env bash
# Regenerates the offline Kubernetes JSON schemas of the chart tests
# (charts/charttest/testdata/schemas) from the Go API types pinned in this
# module's go.mod (k8s.io/api vX.Y.Z = Kubernetes 1.Y) and from the
# prometheus-operator ServiceMonitor, PodMonitor and PrometheusRule CRDs,
# generated with controller-gen from the operator's Go types, and from the CRDs
# of Envoy Gateway's policies and the Gateway API's ReferenceGrant and
# HTTPRoute. Needs only the Go module proxy; run it after bumping k8s.io/api or
# the operator's apis module, or after adding a kind to main.go. The tests
# never download anything.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
out=${1:-../../charts/charttest/testdata/schemas}
work=$(mktemp -d)
trap 'rm -rf "$work" internal/openapi' EXIT

: >"$work/boilerplate.txt"
# The API packages whose types the rendered kinds reach (PodSpec reaches a few
# alpha groups; openapi-gen needs every package a field refers to).
go tool openapi-gen \
	--go-header-file "$work/boilerplate.txt" \
	--output-dir internal/openapi \
	--output-pkg github.com/tollgate-dev/tollgate/tools/k8sschema/internal/openapi \
	--output-file zz_generated.openapi.go \
	--report-filename /dev/null \
	k8s.io/api/core/v1 k8s.io/api/apps/v1 k8s.io/api/batch/v1 k8s.io/api/policy/v1 \
	k8s.io/api/autoscaling/v2 k8s.io/api/networking/v1 k8s.io/api/scheduling/v1alpha3 \
	k8s.io/apimachinery/pkg/apis/meta/v1 k8s.io/apimachinery/pkg/api/resource \
	k8s.io/apimachinery/pkg/util/intstr k8s.io/apimachinery/pkg/runtime \
	k8s.io/apimachinery/pkg/version

# ServiceMonitor, PodMonitor and PrometheusRule: the CRDs as prometheus-operator builds it from its Go types.
go tool controller-gen crd:crdVersions=v1,allowDangerousTypes=true \
	paths=github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1 \
	output:crd:dir="$work/crds"

# Envoy Gateway's policies and the Gateway API's ReferenceGrant (the chart's
# envoyGateway values) and HTTPRoute (its httpRoute values): the CRDs as those
# projects ship them, from the modules tools/egctl pins (Envoy Gateway's are
# Helm templates: their {{ }} lines go).
eg=$(cd ../egctl && GOWORK=off go mod download -json github.com/envoyproxy/gateway | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
gwapi=$(cd ../egctl && GOWORK=off go mod download -json sigs.k8s.io/gateway-api | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
for kind in securitypolicies envoyextensionpolicies clienttrafficpolicies; do
	sed '/^{{/d' "$eg/charts/gateway-crds-helm/templates/generated/gateway.envoyproxy.io_$kind.yaml" >"$work/crds/gateway.envoyproxy.io_$kind.yaml"
done

rm -rf "$out"
mkdir -p "$out"
go run . -out "$out" -crd "$work/crds/monitoring.coreos.com_servicemonitors.yaml" \
	-crd "$work/crds/monitoring.coreos.com_prometheusrules.yaml" \
	-crd "$work/crds/monitoring.coreos.com_podmonitors.yaml" \
	-crd "$work/crds/gateway.envoyproxy.io_securitypolicies.yaml" \
	-crd "$work/crds/gateway.envoyproxy.io_envoyextensionpolicies.yaml" \
	-crd "$work/crds/gateway.envoyproxy.io_clienttrafficpolicies.yaml" \
	-crd "$gwapi/config/crd/standard/gateway.networking.k8s.io_referencegrants.yaml" \
	-crd "$gwapi/config/crd/standard/gateway.networking.k8s.io_httproutes.yaml"
echo "wrote $(find "$out" -name '*.json' | wc -l) schemas to $out"
