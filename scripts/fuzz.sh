#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) in build/fuzz and runs each for
# FUZZ_SECONDS (default 10) from its committed corpus in tests/fuzz/<target>/. New inputs
# go to a scratch folder, not into the committed corpus. Skips (exit 0) without clang.
# Usage: scripts/fuzz.sh [target ...]
set -euo pipefail

REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export CCACHE_DIR="${CCACHE_DIR:-${GCAGENT_CACHE:-$HOME/.cache/gcagent}/ccache}"
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$REPO_DIR}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
BUILD_DIR="${GCAGENT_FUZZ_BUILD_DIR:-$REPO_DIR/build/fuzz}"
SECONDS_EACH="${FUZZ_SECONDS:-10}"
TARGETS=("$@")
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=(control_protocol peer_frame codec_decode config_loader handshake)

CLANGXX="$(command -v clang++ || true)"
if [ -z "$CLANGXX" ]; then
  echo "fuzz: skipped: clang++ is not installed (scripts/setup.sh installs it)" >&2
  exit 0
fi

if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -S "$REPO_DIR" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_COMPILER="$CLANGXX" -DGCAGENT_FUZZ=ON -DGCAGENT_WITH_CUDA=OFF >/dev/null
fi
ninja -C "$BUILD_DIR" "${TARGETS[@]/%/_fuzz}"

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}:halt_on_error=1"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}:halt_on_error=1"
failed=()
for t in "${TARGETS[@]}"; do
  scratch="$(mktemp -d)"
  echo "fuzz: $t for ${SECONDS_EACH}s" >&2
  extra=()
  # Configuration files nest 20,000 levels deep in the corpus: let the fuzzer grow inputs that long.
  [ "$t" = config_loader ] && extra=(-max_len=262144)
  if ! (cd "$scratch" && "$BUILD_DIR/tests/fuzz/${t}_fuzz" -max_total_time="$SECONDS_EACH" -print_final_stats=1 \
          -rss_limit_mb=2048 "${extra[@]}" "$scratch" "$REPO_DIR/tests/fuzz/$t" 2>"$scratch/log"); then
    tail -50 "$scratch/log" >&2
    echo "fuzz: $t FAILED; the crashing input is in $scratch" >&2
    failed+=("$t")
    continue  # the other targets still run
  fi
  grep -E "stat::number_of_executed_units|stat::new_units_added" "$scratch/log" | sed "s/^/fuzz: $t: /" >&2
  rm -rf "$scratch"
done
echo "fuzz: $((${#TARGETS[@]} - ${#failed[@]})) of ${#TARGETS[@]} targets ran without a crash${failed:+; failed: ${failed[*]}}" >&2
[ ${#failed[@]} -eq 0 ]
