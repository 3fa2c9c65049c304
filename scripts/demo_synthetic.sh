#!/usr/bin/env bash
# The synthetic throughput run (make demo with DEMO_MODEL=resnet50, vgg16 or bert_base): 2
# agents on this machine, 2 C test trainers each, DEMO_ITERATIONS (50) iterations of the model's
# gradient set (ResNet-50: 25.6M floats per trainer) compressed with DEMO_CODEC (2bit). Prints
# the time per iteration and the bytes on the wire against the raw bytes, then shuts down
# cleanly. scripts/demo.sh has installed and built what it needs (BIN: the build tree).
#   DEMO_MODEL=vgg16 DEMO_CODEC=onebit DEMO_ITERATIONS=20 make demo
set -euo pipefail

REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${BIN:-$REPO_DIR/build/release}"
CODEC="${DEMO_CODEC:-2bit}"
ITERATIONS="${DEMO_ITERATIONS:-50}"
MODEL="$REPO_DIR/bench/models/${DEMO_MODEL:-resnet50}.csv"
if [ ! -f "$MODEL" ]; then
  echo "demo: no gradient set '${DEMO_MODEL}' (known: digits, $(cd "$REPO_DIR/bench/models" && ls *.csv | sed 's/.csv$//' | paste -sd, | sed 's/,/, /g'))" >&2
  exit 2
fi
WORK="$(mktemp -d)"
PORTS=($(python3 -c 'import socket
s=[socket.socket() for _ in range(2)]
[x.bind(("127.0.0.1",0)) for x in s]
print(" ".join(str(x.getsockname()[1]) for x in s))'))
PEERS="127.0.0.1:${PORTS[0]},127.0.0.1:${PORTS[1]}"

agents=()
cleanup() {
  for pid in "${agents[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

# the cluster token every node's agent holds (peers are authenticated with it)
(umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$WORK/cluster.token")

echo "demo: 2 agents x 2 trainers, $(basename "$MODEL" .csv), codec $CODEC, $ITERATIONS iterations"
for rank in 0 1; do
  "$BIN/agent/gcagent" --agent.socket "$WORK/agent$rank.sock" --agent.shm_prefix "gcagent-demo-$$" \
    --transport.peers "$PEERS" --agent.node_rank "$rank" --transport.listen 127.0.0.1:0 \
    --security.token_file "$WORK/cluster.token" --compress.min_elements 0 --agent.summary_interval 5 --metrics.listen 127.0.0.1:0 \
    >"$WORK/agent$rank.log" 2>&1 &
  agents+=($!)
done

trainers=()
for rank in 0 1; do
  for local in 0 1; do
    report=()
    [ "$rank$local" = "00" ] && report=(--report)
    "$BIN/clients/gcagent_test_trainer" --socket "$WORK/agent$rank.sock" --job demo \
      --local-rank "$local" --local-size 2 --world-rank $((rank * 2 + local)) --world-size 4 \
      --model "$MODEL" --iterations "$ITERATIONS" --codec "$CODEC" --check none --timeout-ms 120000 \
      "${report[@]}" >"$WORK/trainer$rank$local.log" 2>&1 &
    trainers+=($!)
  done
done

status=0
for pid in "${trainers[@]}"; do wait "$pid" || status=$?; done
cat "$WORK/trainer00.log"
for pid in "${agents[@]}"; do kill -TERM "$pid"; done
for pid in "${agents[@]}"; do wait "$pid" || status=$?; done
agents=()
echo
for rank in 0 1; do
  line=$(grep 'done:' "$WORK/agent$rank.log" | sed 's/.*done: //')
  echo "agent $rank: $line"
done
if [ "$status" -ne 0 ]; then
  echo "demo: a process failed (status $status); logs:" >&2
  tail -n 20 "$WORK"/*.log >&2
fi
exit "$status"
