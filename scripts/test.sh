#!/usr/bin/env bash
# Runs every test stage: the release tree, the sanitizer tree, the framework shims and the
# fuzzers. A failing stage does not stop the others (one failure must not hide the rest); the
# end prints one line per stage and the exit status is non-zero if any stage failed.
set -uo pipefail

REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE_DIR="${GCAGENT_CACHE:-$HOME/.cache/gcagent}"
LOG_DIR="$(mktemp -d "${TMPDIR:-/tmp}/gcagent-test.XXXXXX")"
jobs=$(nproc)
# halt_on_error: a sanitizer report fails the test (and the agents it starts) instead of
# scrolling past.
export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# Every process that loads UCX 1.22 (over a thousand test processes and agents here) spends
# 0.4 s of sched_yield patching memory functions in a library constructor (bistro mode, 5 ms
# of grace per function). The hooks serve UCX's registration cache, which the TCP and
# shared-memory transports used here never fill, so test processes go without the wait:
# relocation mode (the same events, hooked without patching) for the release tree, no hooks at
# all under AddressSanitizer, where relocation mode rebinds the allocator's symbols past ASan's
# interceptors (every UCX test then dies on a bad free). A value already set wins.
# (docs/DESIGN.md, "UCX and its quirks")
ucx_hooks() {
  case "$1" in
    asan) echo "UCX_MEM_MMAP_HOOK_MODE=${UCX_MEM_MMAP_HOOK_MODE:-none}" ;;
    *) echo "UCX_MEM_MMAP_HOOK_MODE=${UCX_MEM_MMAP_HOOK_MODE:-reloc}" ;;
  esac
}

summary=()  # "stage|verdict|counts|seconds", in the order run

# The counts a stage's log reports: ctest's "N tests failed out of M", pytest's last line,
# the fuzzers' own summary.
counts_of() {
  local kind="$1" log="$2"
  case "$kind" in
    ctest)
      grep -Eo '[0-9]+ tests failed out of [0-9]+' "$log" | tail -1 |
        awk '{ printf "%d passed, %d failed of %d", $6 - $1, $1, $6 }' ;;
    pytest)
      grep -E '^(=+ )?[0-9]+ (passed|failed|skipped|error)|no tests ran' "$log" | tail -1 | sed -E 's/^=+ //; s/ =+$//; s/ in [0-9.]+s.*$//' ;;
    fuzz)
      grep -E '^fuzz: [0-9]+ of [0-9]+ targets' "$log" | tail -1 | sed 's/^fuzz: //' ;;
    *) ;;
  esac
}

# stage NAME KIND COMMAND...: runs the command, keeps its output in LOG_DIR, records a line.
stage() {
  local name="$1" kind="$2"
  shift 2
  local log="$LOG_DIR/${name// /_}.log"
  echo "== $name" >&2
  local start=$SECONDS
  "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  local counts
  counts="$(counts_of "$kind" "$log")"
  if [ "$rc" -eq 0 ]; then
    summary+=("$name|passed|$counts|$((SECONDS - start))")
  else
    summary+=("$name|FAILED (exit $rc)|$counts|$((SECONDS - start))")
  fi
  return "$rc"
}

# together_start NAME KIND COMMAND...: a stage run beside others (stages that mostly wait on
# their agents' timeouts and links: two of them fill two cores); together_wait records them in
# the order started and prints their logs then.
together_names=()
together_pids=()
together_start() {
  local name="$1" kind="$2"
  shift 2
  local log="$LOG_DIR/${name// /_}.log"
  echo "== $name (beside the next stages; its log follows when all have ended)" >&2
  (
    start=$SECONDS
    "$@" >"$log" 2>&1
    echo "$? $((SECONDS - start))" >"$log.rc"
  ) &
  together_names+=("$name|$kind")
  together_pids+=($!)
}
together_wait() {
  local i name kind log rc seconds counts
  for i in "${!together_pids[@]}"; do
    wait "${together_pids[$i]}"
    IFS='|' read -r name kind <<<"${together_names[$i]}"
    log="$LOG_DIR/${name// /_}.log"
    echo "== $name" >&2
    cat "$log"
    read -r rc seconds <"$log.rc"
    counts="$(counts_of "$kind" "$log")"
    if [ "$rc" -eq 0 ]; then
      summary+=("$name|passed|$counts|$seconds")
    else
      summary+=("$name|FAILED (exit $rc)|$counts|$seconds")
    fi
  done
  together_names=()
  together_pids=()
}

# A stage that cannot run because one it needs failed.
skipped() { summary+=("$1|FAILED (not run: $2)|"); }

print_summary() {
  local failed=0 line name verdict counts seconds
  echo >&2
  echo "== summary (logs in $LOG_DIR; $((SECONDS / 60)) min in all)" >&2
  for line in "${summary[@]}"; do
    IFS='|' read -r name verdict counts seconds <<<"$line"
    printf '%-28s %-28s %6s  %s\n' "$name" "$verdict" "${seconds:+${seconds}s}" "$counts" >&2
    [ "$verdict" = passed ] || failed=1
  done
  if [ "$failed" -eq 0 ]; then
    echo "== all stages passed" >&2
  else
    echo "== some stages FAILED" >&2
  fi
  return "$failed"
}

# The bench venv (plots) is not needed here.
if ! stage "setup" none env GCAGENT_VENVS="${GCAGENT_VENVS:-dev torch tensorflow mxnet wheel}" "$REPO_DIR/scripts/setup.sh"; then
  print_summary
  exit 1
fi

release_built=0
built=()
for flavor in release asan; do
  if stage "$flavor build" none "$REPO_DIR/scripts/build.sh" "$flavor"; then
    [ "$flavor" = release ] && release_built=1
    built+=("$flavor")
    stage "$flavor ctest" ctest env "$(ucx_hooks "$flavor")" ctest --test-dir "$REPO_DIR/build/$flavor" \
      --output-on-failure -j "$jobs"
  else
    skipped "$flavor ctest" "$flavor build failed"
    skipped "$flavor integration" "$flavor build failed"
  fi
done
# Multi-process agents and trainers, on loopback and in network namespaces; the deployment
# files and the operator guide checked against each tree's gcagent. The two trees' suites run
# at once: each keeps a core busy less than half the time.
# Each suite picks its agents' ports from a range of its own (tests/integration/cluster.py).
declare -A port_range=([release]=10000-20999 [asan]=21000-32000)
for flavor in "${built[@]}"; do
  together_start "$flavor integration" pytest env "$(ucx_hooks "$flavor")" TEST_PORT_RANGE="${port_range[$flavor]}" \
    GCAGENT_BUILD_DIR="$REPO_DIR/build/$flavor" \
    "$CACHE_DIR/venv-dev/bin/python" -m pytest -q -p no:cacheprovider --durations=10 "$REPO_DIR/tests/integration" \
    "$REPO_DIR/tests/docker/test_deploy.py" "$REPO_DIR/tests/docs"
done
together_wait

# The framework shims (clients/python) against the release agents, each framework in its own
# venv (their numpy pins conflict); the package and launcher tests need only numpy and run with torch's.
shims="$REPO_DIR/tests/clients/python"
for run in "torch:test_package.py test_run.py test_run_faults.py test_dgc_defaults.py test_wheel.py test_install.py test_torch.py test_device.py test_frozen_weights.py test_torch_fsdp.py test_dtypes.py test_torch_diloco.py test_torch_overflow.py test_client_threads.py test_step_timeouts.py test_torch_backend.py test_torch_distributed_suite.py" \
           "tensorflow:test_tensorflow.py test_frozen_weights.py" "mxnet:test_mxnet.py test_frozen_weights.py test_mxnet_ported.py test_mxnet_side_by_side.py"; do
  venv="${run%%:*}"
  if [ "$release_built" -eq 0 ]; then
    skipped "$venv shims" "release build failed"
    continue
  fi
  files=()
  for f in ${run#*:}; do files+=("$shims/$f"); done
  # --durations: the slowest tests named in the log, where the time of `make test` goes.
  stage "$venv shims" pytest env "$(ucx_hooks release)" GCAGENT_BUILD_DIR="$REPO_DIR/build/release" TF_CPP_MIN_LOG_LEVEL=2 \
    "$CACHE_DIR/venv-$venv/bin/python" -m pytest -q -p no:cacheprovider --durations=15 "${files[@]}"
done

# The torch shims' trainers on the sanitizer tree's client library, AddressSanitizer's runtime
# loaded first (the trainers are Python processes): a double free or an overflow in the client
# under a real framework's threads aborts the trainer and fails the stage. The agents are the
# release tree's; leaks are not looked for (the interpreter keeps its objects at exit). The C++
# runtime is preloaded too: ASan finds the __cxa_throw it wraps only if it is there at start, and
# torch throws (and catches) C++ exceptions in FSDP's normal course.
asan_built=0
for flavor in "${built[@]}"; do [ "$flavor" = asan ] && asan_built=1; done
if [ "$release_built" -eq 1 ] && [ "$asan_built" -eq 1 ]; then
  stage "torch shims (asan client)" pytest env "$(ucx_hooks release)" GCAGENT_BUILD_DIR="$REPO_DIR/build/release" \
    TEST_CLIENT_LIB="$REPO_DIR/build/asan/clients/libgcagent_client.so.1" \
    TEST_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libstdc++.so.6)" \
    ASAN_OPTIONS=detect_leaks=0:halt_on_error=1 \
    "$CACHE_DIR/venv-torch/bin/python" -m pytest -q -p no:cacheprovider --durations=5 \
    "$shims/test_client_threads.py" "$shims/test_torch.py::test_ddp_hook_and_distributed_optimizer" \
    "$shims/test_torch_fsdp.py::test_hsdp_through_the_agent_equals_fsdp2s_own_hsdp"
else
  skipped "torch shims (asan client)" "a build failed"
fi

# The image: docker/Dockerfile built by podman from the wheel, the compose demo run; beside it
# the fuzzers (one core, no network).
if [ "$release_built" -eq 1 ]; then
  together_start "image" pytest env "$(ucx_hooks release)" GCAGENT_BUILD_DIR="$REPO_DIR/build/release" \
    "$CACHE_DIR/venv-dev/bin/python" -m pytest -q -p no:cacheprovider "$REPO_DIR/tests/docker/test_image.py"
else
  skipped "image" "release build failed"
fi
together_start "fuzz (briefly)" fuzz env FUZZ_SECONDS="${FUZZ_SECONDS:-10}" "$REPO_DIR/scripts/fuzz.sh"
together_wait

print_summary
