#!/usr/bin/env bash
# Makes (once) and prints the path of a minimal Debian 12 root: debootstrap's minbase variant
# plus python3 and python3-venv, nothing of gcagent's. The install test (tests/install/) trains
# in it as a machine that did not build gcagent, and the image test imports it as the
# container base (no registry is reachable here). Cached under $GCAGENT_CACHE/debian-root,
# keyed by this script's content; about 5 minutes the first time.
#   scripts/debian_root.sh            -> prints the root's path
set -euo pipefail

CACHE_DIR="${GCAGENT_CACHE:-$HOME/.cache/gcagent}"
MIRROR="${GCAGENT_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
stamp="$(sha256sum "${BASH_SOURCE[0]}" | cut -c1-12)"
root="$CACHE_DIR/debian-root/bookworm-$stamp"

if [ ! -f "$root/.complete" ]; then
  command -v debootstrap >/dev/null || { echo "debian_root.sh: debootstrap is missing (scripts/setup.sh installs it)" >&2; exit 2; }
  rm -rf "$root" "$CACHE_DIR"/debian-root/bookworm-*  # an unfinished or older root
  mkdir -p "$(dirname "$root")"
  echo "debian_root.sh: debootstrap --variant=minbase bookworm into $root (about 5 minutes)" >&2
  debootstrap --variant=minbase --include=python3,python3-venv bookworm "$root.partial" "$MIRROR" >"$root.log" 2>&1 ||
    { tail -20 "$root.log" >&2; exit 1; }
  rm -rf "$root.partial/var/cache/apt/archives"/*.deb
  touch "$root.partial/.complete"
  mv "$root.partial" "$root"
fi
echo "$root"
