#!/usr/bin/env bash
# Runs every test: the release tree, then the sanitizer tree.
set -euo pipefail

REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE_DIR="${GCAGENT_CACHE:-$HOME/.cache/gcagent}"
# The bench venv (plots) is not needed here.
GCAGENT_VENVS="${GCAGENT_VENVS:-dev torch tensorflow mxnet}" "$REPO_DIR/scripts/setup.sh"

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
  # Multi-process agents and trainers, on loopback and in network namespaces; the deployment
  # files and the operator guide checked against this tree's gcagent.
  GCAGENT_BUILD_DIR="$REPO_DIR/build/$flavor" \
    "$CACHE_DIR/venv-dev/bin/python" -m pytest -q -p no:cacheprovider "$REPO_DIR/tests/integration" \
    "$REPO_DIR/tests/docker" "$REPO_DIR/tests/docs"
done
# The framework shims (clients/python) against the release agents, each framework in its own
# venv (their numpy pins conflict); the package tests need only numpy and run with torch's.
shims="$REPO_DIR/tests/clients/python"
for run in "torch:test_package.py test_torch.py test_device.py" "tensorflow:test_tensorflow.py" "mxnet:test_mxnet.py"; do
  venv="${run%%:*}"
  files=()
  for f in ${run#*:}; do files+=("$shims/$f"); done
  echo "== $venv shim tests" >&2
  GCAGENT_BUILD_DIR="$REPO_DIR/build/release" TF_CPP_MIN_LOG_LEVEL=2 \
    "$CACHE_DIR/venv-$venv/bin/python" -m pytest -q -p no:cacheprovider "${files[@]}"
done
echo "== fuzz targets (briefly)" >&2
FUZZ_SECONDS="${FUZZ_SECONDS:-10}" "$REPO_DIR/scripts/fuzz.sh"
echo "== all tests passed" >&2
