#!/usr/bin/env bash
# Runs a command as root in a throwaway copy of a root filesystem, the way a fresh machine
# would: private mount and PID namespaces, an overlay over LOWER (which stays as it was; what
# the command writes lands in STATE/upper), /proc, /dev, /sys, a /dev/shm of its own, and the given
# binds (read-only unless :rw). Everything is unmounted, and every process left is killed,
# when the command ends.
#   in_root.sh LOWER STATE [--bind SRC:DST[:rw]]... -- CMD...
set -euo pipefail

lower="$1" state="$2"
shift 2
binds=()
while [ "$1" != "--" ]; do
  [ "$1" = "--bind" ] || { echo "in_root.sh: expected --bind or --, got '$1'" >&2; exit 2; }
  binds+=("$2")
  shift 2
done
shift

mkdir -p "$state/upper" "$state/work" "$state/merged"
exec unshare --mount --pid --fork --propagation private bash -euo pipefail -c '
  lower="$1" state="$2" nbinds="$3"
  shift 3
  merged="$state/merged"
  mount -t overlay overlay -o "lowerdir=$lower,upperdir=$state/upper,workdir=$state/work" "$merged"
  mount -t proc proc "$merged/proc"
  mount --rbind /dev "$merged/dev"
  mount --rbind /sys "$merged/sys"  # UCX finds its network devices there
  mount -t tmpfs -o mode=1777 shm "$merged/dev/shm"
  for ((i = 0; i < nbinds; i++)); do
    IFS=: read -r src dst mode <<<"$1"
    shift
    mkdir -p "$merged$dst"
    mount --bind "$src" "$merged$dst"
    [ "$mode" = rw ] || mount -o remount,bind,ro "$merged$dst"
  done
  exec chroot "$merged" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/root LANG=C.UTF-8 "$@"
' in_root "$lower" "$state" "${#binds[@]}" "${binds[@]}" "$@"
