#!/usr/bin/env bash
# Build a local Debian bookworm base image (Python 3.11 + venv + CA certificates) without any image
# registry: debootstrap a minimal root filesystem from a Debian mirror, then `docker import` it.
#
#   docker/base/build-base.sh [TAG] [MIRROR]
#     TAG     image tag to create              (default: ftagent-base:bookworm)
#     MIRROR  Debian mirror (or apt proxy URL)  (default: http://deb.debian.org/debian)
#
# Needs root, debootstrap (apt-get install debootstrap) and a running Docker engine. Takes about
# 1-3 minutes; the result is ~100 MB. Then: ftagent env build-images --base-image ftagent-base:bookworm
# Idempotent: does nothing when TAG already exists (set FORCE=1 to rebuild).
set -euo pipefail
tag="${1:-ftagent-base:bookworm}"
mirror="${2:-${DEBIAN_MIRROR:-http://deb.debian.org/debian}}"
suite="${SUITE:-bookworm}"

if [ "${FORCE:-0}" != 1 ] && docker image inspect "$tag" >/dev/null 2>&1; then
  echo "base image $tag exists"; exit 0
fi
command -v debootstrap >/dev/null || { echo "debootstrap is missing: apt-get install -y debootstrap" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "debootstrap needs root" >&2; exit 1; }

root="$(mktemp -d "${TMPDIR:-/tmp}/ftagent-base.XXXXXX")"
trap 'rm -rf "$root"' EXIT
start=$(date +%s)
echo "debootstrap $suite from $mirror into $root (log: $root.log)"
debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
  "$suite" "$root/rootfs" "$mirror" > "$root.log" 2>&1 \
  || { tail -20 "$root.log" >&2; echo "debootstrap failed (log: $root.log)" >&2; exit 1; }
# keep the image small: no downloaded .debs, no apt lists (the Dockerfile runs apt-get update itself)
rm -rf "$root/rootfs/var/cache/apt/archives/"*.deb "$root/rootfs/var/lib/apt/lists/"* \
  "$root/rootfs/usr/share/doc/"* "$root/rootfs/usr/share/man/"*
tar -C "$root/rootfs" -c . | docker import \
  --change 'ENV LANG=C.UTF-8 PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'CMD ["/bin/bash"]' - "$tag" >/dev/null
rm -f "$root.log"
echo "base image $tag built in $(( $(date +%s) - start ))s ($(docker image inspect -f '{{.Size}}' "$tag" | awk '{printf "%.0f MB", $1/1e6}'))"
