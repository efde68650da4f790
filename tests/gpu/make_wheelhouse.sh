#!/usr/bin/env bash
# Download the device check's wheels (tests/gpu/wheels.txt) for the GPU machine's python, no deps.
#   tests/gpu/make_wheelhouse.sh [--python-version 3.12] [--dest git_ignore_folder/gpu_wheels]
# Run it where PyPI is reachable; then carry the folder to the GPU machine (device tool: carry=[DEST]).
set -euo pipefail
cd "$(dirname "$0")/../.."
PYV=3.12
DEST=git_ignore_folder/gpu_wheels
while [ $# -gt 0 ]; do
  case "$1" in
    --python-version) PYV="$2"; shift 2 ;;
    --dest) DEST="$2"; shift 2 ;;
    *) echo "make_wheelhouse: unknown argument $1" >&2; exit 2 ;;
  esac
done
PY="${PYTHON:-python3}"
mkdir -p "$DEST"
grep -v '^\s*#' tests/gpu/wheels.txt | grep -v '^\s*$' > "$DEST/.wanted.txt"
# shellcheck disable=SC2046
"$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version "$PYV" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$DEST" -r "$DEST/.wanted.txt"
echo "$PYV" > "$DEST/.python-version"
du -sh "$DEST" | awk '{print "wheelhouse " $2 ": " $1 " (the device tool carries at most 64 MiB with the tree)"}'
