#!/usr/bin/env bash
# The system packages the test suite and the demo use, installed where this machine allows it.
#
#   tmux, jq     the job runner (job/run_ft_job.sh) and its tests
#   bubblewrap   the sandbox for LLM-written code (local/conda runners)
#   chromium     the UI screenshot test
#
# As root with apt-get, a missing one is installed (one line each says so); --plan only says what would be. Otherwise each missing one
# is named with the command that installs it, and the tests that need it skip with that reason.
# Never fails: a missing package costs tests (skipped), not the run.
set -uo pipefail

pairs=("tmux:tmux:the job runner" "jq:jq:the job runner" "bwrap:bubblewrap:the sandbox for LLM-written code"
       "chromium:chromium:the UI screenshot test")
missing=()
for entry in "${pairs[@]}"; do
  IFS=: read -r cmd pkg why <<<"$entry"
  command -v "$cmd" >/dev/null 2>&1 || missing+=("$pkg:$why")
done
[ ${#missing[@]} -eq 0 ] && { echo "system packages: tmux, jq, bubblewrap, chromium present"; exit 0; }

if [ "${1:-}" = --plan ]; then  # say what a run would do, do nothing (make test prints it first)
  names=(); for entry in "${missing[@]}"; do names+=("${entry%%:*} (${entry#*:})"); done
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "system packages: will apt-get install as root: $(IFS=,; echo "${names[*]}" | sed 's/,/, /g') — SKIP_SYSTEM=1 skips"
  else
    echo "system packages: missing $(IFS=,; echo "${names[*]}" | sed 's/,/, /g') (not root: nothing is installed; their tests skip)"
  fi
  exit 0
fi

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  updated=0
  for entry in "${missing[@]}"; do
    pkg="${entry%%:*}"; why="${entry#*:}"
    if [ $updated = 0 ]; then apt-get update -qq >/dev/null 2>&1; updated=1; fi
    if DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$pkg" >/dev/null 2>&1; then
      echo "system packages: installed $pkg ($why)"
    else
      echo "system packages: could not install $pkg ($why): the tests that need it will skip"
    fi
  done
else
  for entry in "${missing[@]}"; do
    pkg="${entry%%:*}"; why="${entry#*:}"
    echo "system packages: $pkg is missing ($why): sudo apt-get install $pkg — the tests that need it will skip"
  done
fi
exit 0
