#!/usr/bin/env bash
# Runs every fuzz target of the module for a while each: scripts/fuzz.sh [DURATION]
# Go runs one fuzz target per invocation, so this lists them and runs them in turn.
set -euo pipefail
cd "$(dirname "$0")/.."
dur=${1:-20s}
for pkg in $(go list ./...); do
	for target in $(go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
		echo "== $pkg $target ($dur)"
		go test -run '^$' -fuzz "^${target}\$" -fuzztime "$dur" "$pkg"
	done
done
