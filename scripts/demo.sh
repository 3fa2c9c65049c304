#!/usr/bin/env bash
# The demo: until the agent lands, the codec benchmark with its table of ratios to the
# memory-bandwidth baseline. Extra arguments go to the benchmark binary.
set -euo pipefail

REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$REPO_DIR/scripts/setup.sh"
"$REPO_DIR/scripts/build.sh" release
exec "$REPO_DIR/build/release/bench/gcagent_codec_bench" "$@"
