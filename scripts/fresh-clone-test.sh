#!/usr/bin/env bash
# What CI does on a new machine, here: a clean clone of HEAD with ../shared beside it, and empty npm and loci caches
# (npm_config_cache, LOCI_CACHE in the temp dir), so that nothing left on this machine by earlier runs can make it
# pass. Cargo's registry and the rustup toolchain are kept: they live outside the project.
# Usage: scripts/fresh-clone-test.sh   (keeps the temp dir on failure, for a look)
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
d=$(mktemp -d)
git clone -q "$repo" "$d/repo"
cp -r "$repo/../shared" "$d/shared"
started=$(date +%s)
if (cd "$d/repo" && npm_config_cache="$d/npm-cache" LOCI_CACHE="$d/loci-cache" CI=true bash .ci/run); then
  echo "fresh clone: passed in $(( $(date +%s) - started )) s"
  rm -rf "$d"
else
  echo "fresh clone: FAILED after $(( $(date +%s) - started )) s (left in $d)"
  exit 1
fi
