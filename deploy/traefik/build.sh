#!/usr/bin/env bash
# Builds Traefik from its Go module: Debian does not package it, and the e2e test
# TestReverseProxiesInFrontOfTheGateway runs this directory's example with a real
# Traefik in front of the gateway (.ci/run calls this script when `traefik` is not on
# PATH). Takes a few minutes: Traefik is a large program.
#
#   bash deploy/traefik/build.sh [output path]   # default: $(go env GOPATH)/bin/traefik
#
# The version is pinned (TRAEFIK_VERSION to change it): v3.7's dependencies include
# module versions the Go module proxy refuses to serve (github.com/yandex-cloud/go-sdk
# through lego v5, a github.com/containous/go-http-auth pseudo-version), so v3.6 it is.
# Traefik's go.mod has replace directives, which `go install module@version` refuses:
# the module is downloaded and built as the main module instead. It is built without
# the compiler's optimizations (-N -l), which cuts a quarter of the build (5.7 instead
# of about 8 minutes on 2 cores): a Traefik for tests and trials. In production, run
# Traefik's own release binaries or images.
set -euo pipefail

version=${TRAEFIK_VERSION:-v3.6.12}
out=${1:-$(go env GOPATH)/bin/traefik}
mkdir -p "$(dirname "$out")"
out=$(cd "$(dirname "$out")" && pwd)/$(basename "$out")

echo "traefik: downloading github.com/traefik/traefik/v3@$version" >&2
dir=$(go mod download -json "github.com/traefik/traefik/v3@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
if [[ -z $dir || ! -d $dir ]]; then
	echo "traefik: could not download github.com/traefik/traefik/v3@$version" >&2
	exit 1
fi
echo "traefik: building $out (a few minutes)" >&2
cd "$dir"
GOFLAGS=-mod=mod go build -trimpath -gcflags='all=-N -l' -ldflags='-s -w' -o "$out" ./cmd/traefik
"$out" version >&2
