#!/usr/bin/env bash
# Runs every check that needs a GPU, on a host with one (CI has none: there these skip).
#   scripts/test_gpu.sh [BUILD_DIR] [PYTHON]
# BUILD_DIR is a tree built with CUDA (the release tree, or GCAGENT_GPU_ONLY=ON, which has no
# agent and so runs only the C++ tests). PYTHON must have PyTorch with CUDA, numpy and pytest.
# The GPU benchmarks are separate: bench/gpu_codecs and bench/gpu_path.
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$(cd "${1:-$repo/build/release}" && pwd)"
python="${2:-python3}"
failed=()

run() {
  echo "== $*"
  "$@" || failed+=("$*")
}

for test in compress/cuda/compress_gpu_test shm/cuda/shm_cuda_test clients/cuda/client_device_test \
            agent/coding/cuda/device_path_cuda_test agent/coding/cuda/cuda_coder_device_test; do
  if [ -x "$build/tests/$test" ]; then run "$build/tests/$test" --gtest_brief=1; fi
done

if [ -x "$build/agent/gcagent" ]; then
  cd "$repo/tests" || exit 1
  # Two runs: both folders hold a test_device.py.
  GCAGENT_BUILD_DIR="$build" run "$python" -m pytest -q -p no:cacheprovider -rs integration/test_device.py
  GCAGENT_BUILD_DIR="$build" run "$python" -m pytest -q -p no:cacheprovider -rs clients/python/test_device.py \
    "clients/python/test_torch.py::test_ddp_hook_with_cuda_buckets_takes_the_device_path"
fi

if [ ${#failed[@]} -gt 0 ]; then
  printf 'test_gpu: FAILED: %s\n' "${failed[@]}"
  exit 1
fi
echo "test_gpu: all passed"
