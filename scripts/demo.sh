#!/usr/bin/env bash
# The demo: 2 nodes on this machine (2 gcagent-run launchers, each with its agent and 2 trainer
# processes) train an MLP on scikit-learn's digits (scripts/demo_digits.py, numpy), once per
# codec: uncompressed, 2bit, dgc. Prints each epoch's test accuracy, time per step and bytes on
# the wire against raw, then one comparison line per codec.
#   DEMO_EPOCHS=20 DEMO_CODECS="none 2bit" make demo
#   DEMO_MODEL=resnet50|vgg16|bert_base make demo   # the synthetic throughput run instead
#   GCAGENT_BUILD_DIR=build/other make demo         # an already built tree; nothing is built
set -euo pipefail

REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE_DIR="${GCAGENT_CACHE:-$HOME/.cache/gcagent}"
MODEL="${DEMO_MODEL:-digits}"
[ "$MODEL" = digits ] && venvs=demo || venvs=dev
GCAGENT_VENVS="${GCAGENT_VENVS:-$venvs}" "$REPO_DIR/scripts/setup.sh"
if [ -n "${GCAGENT_BUILD_DIR:-}" ]; then
  BIN="$(cd "$GCAGENT_BUILD_DIR" && pwd)"
else
  "$REPO_DIR/scripts/build.sh" release
  BIN="$REPO_DIR/build/release"
fi
[ "$MODEL" = digits ] || BIN="$BIN" exec "$REPO_DIR/scripts/demo_synthetic.sh"

PY="$CACHE_DIR/venv-demo/bin/python"
EPOCHS="${DEMO_EPOCHS:-15}"
CODECS="${DEMO_CODECS:-none 2bit dgc}"
export PYTHONPATH="$REPO_DIR/clients/python" GCAGENT_CLIENT_LIB="$BIN/clients/libgcagent_client.so.1" \
  GCAGENT_BINARY="$BIN/agent/gcagent"
WORK="$(mktemp -d)"
node1=""
cleanup() {
  [ -n "$node1" ] && kill -TERM "$node1" 2>/dev/null && wait "$node1" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

# Thresholds for this MLP's gradients (|g| ~ 1e-3 .. 1e-1): 2bit at 0.5 would leave it at chance.
# dgc without momentum: the optimizer is plain SGD, and DGC's momentum correction on top diverges.
params_of() {
  case "$1" in
    2bit) echo "threshold=0.05" ;;
    dgc) echo "ratio=0.01,momentum=0" ;;
    *) echo "" ;;
  esac
}

# One codec: node 1 in the background, node 0 in front (its rank 0 trainer prints the epochs).
run_codec() {
  local codec="$1" port status0 status1
  port=$("$PY" -c 'from gcagent.run import free_port; print(free_port("127.0.0.1"))')
  local launch=("$PY" -m gcagent.run --nnodes 2 --master-addr 127.0.0.1 --master-port "$port" --nproc-per-node 2
                --agent-option compress.min_elements=0 --agent-option agent.summary_interval=0)
  local trainer=("$REPO_DIR/scripts/demo_digits.py" --epochs "$EPOCHS")
  export GCAGENT_CODEC="$codec" GCAGENT_CODEC_PARAMS="$(params_of "$codec")"
  echo "== $codec ${GCAGENT_CODEC_PARAMS}"
  "${launch[@]}" --node-rank 1 "${trainer[@]}" >"$WORK/$codec.node1" 2>&1 &
  node1=$!
  set +e
  "${launch[@]}" --node-rank 0 "${trainer[@]}" 2>"$WORK/$codec.node0.err" | tee "$WORK/$codec.node0"
  status0=${PIPESTATUS[0]}
  wait "$node1"
  status1=$?
  set -e
  node1=""
  if [ "$status0" -ne 0 ] || [ "$status1" -ne 0 ]; then
    echo "demo: $codec failed (node 0: $status0, node 1: $status1); launchers' output:" >&2
    tail -n 30 "$WORK/$codec.node0.err" "$WORK/$codec.node1" >&2
    exit 1
  fi
}

# "none   final accuracy ...": the rank 0 trainer's result line and both agents' done: lines.
compare() {
  local codec="$1" acc step ratio
  acc=$(sed -n 's/^result: .*"accuracy": \([0-9.]*\).*/\1/p' "$WORK/$codec.node0" | tail -1)
  step=$(sed -n 's/^result: .*"step_ms": \([0-9.]*\).*/\1/p' "$WORK/$codec.node0" | tail -1)
  ratio=$(grep -h 'agent done:' "$WORK/$codec.node0.err" "$WORK/$codec.node1" |
    sed 's/.*sent \([0-9]*\) raw bytes as \([0-9]*\) wire bytes.*/\1 \2/' |
    awk '{ raw += $1; wire += $2 } END { if (raw > 0) printf "%.3f (%.1f of %.1f MB)", wire / raw, wire / 1e6, raw / 1e6 }')
  printf '%-5s final accuracy %5.1f%%   time per step %6.2f ms   wire/raw %s\n' "$codec" "$acc" "$step" "$ratio"
}

echo "demo: 2 nodes x 2 trainers (gcagent-run), MLP on digits, $EPOCHS epochs, codecs: $CODECS"
for codec in $CODECS; do run_codec "$codec"; done
echo
echo "== comparison (both agents' bytes sent)"
for codec in $CODECS; do compare "$codec"; done
