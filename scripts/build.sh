#!/usr/bin/env bash
# Configures and builds one tree: scripts/build.sh release|asan
#   release: RelWithDebInfo, CUDA sources compiled when nvcc is present
#   asan:    AddressSanitizer + UndefinedBehaviorSanitizer, CPU only
set -euo pipefail

REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE_DIR="${GCAGENT_CACHE:-$HOME/.cache/gcagent}"
export CCACHE_DIR="${CCACHE_DIR:-$CACHE_DIR/ccache}"
# Paths relative to the checkout, so a fresh clone anywhere hits the cache of the last one.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$REPO_DIR}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"

flavor="${1:-release}"
case "$flavor" in
  release) args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo) ;;
  asan) args=(-DCMAKE_BUILD_TYPE=Debug -DGCAGENT_SANITIZE=ON -DGCAGENT_WITH_CUDA=OFF) ;;
  *) echo "build.sh: unknown flavor '$flavor' (release or asan)" >&2; exit 2 ;;
esac

# UCX: the libucx wheel in the environment scripts/setup.sh made.
args+=(-DGCAGENT_UCX_PYTHON="$CACHE_DIR/venv-ucx/bin/python")

build_dir="$REPO_DIR/build/$flavor"
cmake -S "$REPO_DIR" -B "$build_dir" -G Ninja "${args[@]}" >/dev/null
ninja -C "$build_dir" ${GCAGENT_BUILD_JOBS:+-j "$GCAGENT_BUILD_JOBS"}
