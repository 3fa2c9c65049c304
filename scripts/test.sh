#!/usr/bin/env bash
# Runs every test: the release tree, then the sanitizer tree.
set -euo pipefail

REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE_DIR="${GCAGENT_CACHE:-$HOME/.cache/gcagent}"
"$REPO_DIR/scripts/setup.sh"

jobs=$(nproc)
# halt_on_error: a sanitizer report fails the test (and the agents it starts) instead of
# scrolling past.
export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
for flavor in release asan; do
  echo "== $flavor build" >&2
  "$REPO_DIR/scripts/build.sh" "$flavor"
  echo "== $flavor tests" >&2
  ctest --test-dir "$REPO_DIR/build/$flavor" --output-on-failure -j "$jobs"
  echo "== $flavor integration tests" >&2
  # Multi-process agents and trainers, on loopback and in network namespaces.
  GCAGENT_BUILD_DIR="$REPO_DIR/build/$flavor" \
    "$CACHE_DIR/venv-dev/bin/python" -m pytest -q -p no:cacheprovider "$REPO_DIR/tests/integration"
done
echo "== fuzz targets (briefly)" >&2
FUZZ_SECONDS="${FUZZ_SECONDS:-10}" "$REPO_DIR/scripts/fuzz.sh"
echo "== all tests passed" >&2
