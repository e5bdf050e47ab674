#!/usr/bin/env bash
# Builds the Go SDK suite's binary (the interop checks and the benchmarks' Go side) with the Go
# toolchain, from go.mod and go.sum as committed (-mod=readonly: nothing is re-resolved).
#   tests/interop/go/build.sh [OUT]     # OUT defaults to target/interop-go/go-interop
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT="${1:-$HERE/../../../target/interop-go/go-interop}"
cd "$HERE"
GOFLAGS="-buildvcs=false -mod=readonly" exec go build -o "$OUT" .
