#!/usr/bin/env bash
# Copies what the runtime image needs out of a build tree: gcagent, the test trainer, the
# client library, and every shared library they load that the C runtime does not provide,
# with UCX's transport modules (loaded by UCX at run time, so ldd cannot see them).
#   docker/bundle-runtime.sh BUILD_DIR DEST     -> DEST/bin, DEST/lib, DEST/lib/ucx
set -euo pipefail

build="${1:?usage: bundle-runtime.sh BUILD_DIR DEST}"
dest="${2:?usage: bundle-runtime.sh BUILD_DIR DEST}"
mkdir -p "$dest/bin" "$dest/lib" "$dest/include"

programs=("$build/agent/gcagent" "$build/clients/gcagent_test_trainer")
libraries=("$build/clients/libgcagent_client.so")
cp "${programs[@]}" "$dest/bin/"
cp -P "$build"/clients/libgcagent_client.so* "$dest/lib/"  # the soname links too
cp "$(dirname "${BASH_SOURCE[0]}")/../clients/c/gcagent_client.h" "$dest/include/"

# The C runtime comes with every base image; everything else travels.
system='^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+)\.'
copy_deps() {
  ldd "$1" | awk '/=> \//{print $3}' | while read -r lib; do
    if [[ ! "$(basename "$lib")" =~ $system ]] && [ ! -e "$dest/lib/$(basename "$lib")" ]; then
      cp -L "$lib" "$dest/lib/"
    fi
  done
}

ucs=$(ldd "$build/agent/gcagent" | awk '/libucs\.so/{print $3}')
ucx_modules="$(dirname "$ucs")/ucx"
if [ -n "$ucs" ] && [ -d "$ucx_modules" ]; then
  mkdir -p "$dest/lib/ucx"
  cp -P "$ucx_modules"/*.so* "$dest/lib/ucx/"
fi
for f in "${programs[@]}" "${libraries[@]}" "$dest"/lib/ucx/*.so*; do
  [ -e "$f" ] && copy_deps "$f"
done
echo "bundle-runtime: $(ls "$dest/lib" | wc -l) libraries in $dest/lib" >&2
