#!/usr/bin/env bash
# Run a batch of ftagent fine-tuning tasks, one tmux window each.
#
#   job/run_ft_job.sh [--dry-run] [--job-id ID] tasks.json
#
# tasks.json is validated up front (ftagent job run --dry-run: the check `ftagent job run` makes); any
# problem -> exit 2, nothing started.
# See job/README.md for the file format, environment variables and the on-disk layout.
set -euo pipefail

usage() {
  cat <<'USAGE'
usage: run_ft_job.sh [--dry-run] [--job-id ID] tasks.json

  --dry-run     validate and print the plan (window, env, command per task); start nothing
  --job-id ID   job id (default: current date and time); log/<ID>/ must not exist yet

environment:
  FTAGENT_BIN            ftagent executable (default: `ftagent` on PATH)
  FTAGENT_PYTHON         python with ftagent installed (default: the interpreter of FTAGENT_BIN, else python3)
  FT_JOB_LOG_BASE        job root directory (default: ./log)
  FT_JOB_WORKSPACE_BASE  workspace root (default: WORKSPACE_PATH from the environment or ./.env, as
                         llm_finetune uses it; else ./git_ignore_folder/workspace)
USAGE
}

die() { echo "error: $1" >&2; exit "${2:-2}"; }

DRY_RUN=0
JOB_ID=""
TASKS_FILE=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --dry-run) DRY_RUN=1; shift ;;
    --job-id) [[ $# -ge 2 ]] || die "--job-id needs a value"; JOB_ID="$2"; shift 2 ;;
    --job-id=*) JOB_ID="${1#*=}"; shift ;;
    -*) usage >&2; die "unknown option $1" ;;
    *) [[ -z "$TASKS_FILE" ]] || die "only one tasks.json may be given"; TASKS_FILE="$1"; shift ;;
  esac
done
[[ -n "$TASKS_FILE" ]] || { usage >&2; die "no tasks.json given"; }
[[ -f "$TASKS_FILE" ]] || die "$TASKS_FILE: no such file"
command -v jq >/dev/null 2>&1 || die "jq is required (apt-get install jq)" 1

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK_DIR="$(pwd)"
LOG_BASE="${FT_JOB_LOG_BASE:-./log}"

# --- the ftagent executable and a python that can import ftagent ---------------------------------
if [[ -n "${FTAGENT_BIN:-}" ]]; then
  [[ -x "$FTAGENT_BIN" ]] || FTAGENT_BIN="$(command -v "$FTAGENT_BIN" 2>/dev/null || true)"
  [[ -n "$FTAGENT_BIN" && -x "$FTAGENT_BIN" ]] || die "FTAGENT_BIN is not an executable"
else
  FTAGENT_BIN="$(command -v ftagent 2>/dev/null || true)"
  [[ -n "$FTAGENT_BIN" ]] || die "ftagent is not on PATH; activate its environment or set FTAGENT_BIN" 1
fi
FTAGENT_BIN="$(cd "$(dirname "$FTAGENT_BIN")" && pwd)/$(basename "$FTAGENT_BIN")"

find_python() {
  local candidates=()
  [[ -n "${FTAGENT_PYTHON:-}" ]] && candidates+=("$FTAGENT_PYTHON")
  local shebang
  shebang="$(head -n1 "$FTAGENT_BIN" 2>/dev/null | sed -n 's/^#!\([^ ]*python[^ ]*\).*/\1/p')"
  [[ -n "$shebang" ]] && candidates+=("$shebang")
  candidates+=(python3 python)
  local py
  for py in "${candidates[@]}"; do
    if "$py" -c 'import ftagent.jobs.tasks' >/dev/null 2>&1; then echo "$py"; return 0; fi
  done
  return 1
}
PY="$(find_python)" || die "no python that can import ftagent found; set FTAGENT_PYTHON" 1

# --- job id -------------------------------------------------------------------------------------
if [[ -n "$JOB_ID" ]]; then
  [[ "$JOB_ID" =~ ^[A-Za-z0-9][A-Za-z0-9_.-]*$ ]] || die "--job-id '$JOB_ID': use letters, digits, '_', '.', '-'"
  [[ ! -e "$LOG_BASE/$JOB_ID" ]] || die "job directory $LOG_BASE/$JOB_ID already exists; choose another --job-id"
else
  JOB_ID="$(date +%Y-%m-%d_%H-%M-%S)"
  base="$JOB_ID"; n=1
  while [[ -e "$LOG_BASE/$JOB_ID" ]]; do JOB_ID="${base}_$n"; n=$((n + 1)); done
fi

# --- validate and plan (exit 2 with one line per problem) ----------------------------------------
# The one task check of both job runners: `ftagent job run --dry-run` reads tasks.json and runs each
# task's start-up (benchmark, base model, description: ftagent.finetune.startup.resolve_tasks), so this
# script refuses exactly what `ftagent job run` refuses, before tmux starts anything (issue 34.8).
# The workspace root is ftagent's to choose (FT_JOB_WORKSPACE_BASE, else WORKSPACE_PATH, issue 32.9); its
# warnings (GPUs this machine lacks) reach the terminal on stderr.
PLAN="$(FTAGENT_BIN="$FTAGENT_BIN" "$PY" -m ftagent job run --dry-run --json "$TASKS_FILE" --job-id "$JOB_ID" \
        --log-base "$LOG_BASE")" || exit $?
SESSION="$(jq -r '.tmux_session' <<<"$PLAN")"
JOB_DIR="$(jq -r '.job_dir' <<<"$PLAN")"
N_TASKS="$(jq '.tasks | length' <<<"$PLAN")"

if [[ "$DRY_RUN" == 1 ]]; then
  echo "job:          $JOB_ID"
  echo "job dir:      $JOB_DIR"
  echo "tmux session: $SESSION"
  echo "tasks:        $N_TASKS"
  jq -r --arg s "$SESSION" '.tasks[] |
    "\n== task \(.index): \(.name) ==",
    "window:  \($s):\(.window)",
    "log:     \(.log_file)",
    "env:",
    (.env | to_entries[] | "  \(.key)=\(.value)"),
    "command: \(.command)"' <<<"$PLAN"
  exit 0
fi

command -v tmux >/dev/null 2>&1 || die "tmux is required (apt-get install tmux)" 1
if tmux has-session -t "=$SESSION" 2>/dev/null; then
  die "tmux session '$SESSION' already exists; it is left alone. Choose another --job-id"
fi

mkdir -p "$JOB_DIR/.run"
jq '.' <<<"$PLAN" >"$JOB_DIR/job.json"

# Forward the caller's ftagent-related settings (never secrets: those come from ./.env, which
# ftagent loads itself from the working directory).
forward_env() {
  local name
  while IFS= read -r name; do
    case "$name" in *KEY*|*TOKEN*|*SECRET*|*PASSWORD*) continue ;; esac
    printf 'export %s=%q\n' "$name" "${!name}"
  done < <(compgen -e | grep -E '^(FT_|HF_|TRANSFORMERS_|LITELLM_|CHAT_MODEL|OPENAI_API_BASE|OMP_NUM_THREADS)' || true)
}

write_run_script() {  # $1 = task index -> path of the script
  local i="$1" name log_file script
  name="$(jq -r ".tasks[$i].name" <<<"$PLAN")"
  log_file="$(jq -r ".tasks[$i].log_file" <<<"$PLAN")"
  script="$JOB_DIR/.run/$name.sh"
  mkdir -p "$(jq -r ".tasks[$i].log_path" <<<"$PLAN")" "$(jq -r ".tasks[$i].workspace_path" <<<"$PLAN")"
  {
    echo '#!/usr/bin/env bash'
    echo "# ftagent job $JOB_ID, task $name (generated by run_ft_job.sh)"
    printf 'cd %q\n' "$WORK_DIR"
    forward_env
    jq -r ".tasks[$i].env | to_entries[] | \"export \(.key)=\(.value | @sh)\"" <<<"$PLAN"
    printf 'log=%q\n' "$log_file"
    printf 'echo "[job %s] task %s started $(date -Is)" | tee -a "$log"\n' "$JOB_ID" "$name"
    echo "set -o pipefail"
    printf '%s 2>&1 | tee -a "$log"\n' "$(jq -r ".tasks[$i].command" <<<"$PLAN")"
    echo 'rc=$?'
    echo 'echo "[job] task finished with exit code $rc $(date -Is)" | tee -a "$log"'
    # the .exit file is the completion marker: written last, atomically, so whoever sees it sees the whole log
    printf 'echo "$rc" > %q && mv -f %q %q\n' "$JOB_DIR/.run/$name.exit.tmp" "$JOB_DIR/.run/$name.exit.tmp" \
      "$JOB_DIR/.run/$name.exit"
    echo 'exec "${SHELL:-/bin/bash}"'
  } >"$script"
  chmod 700 "$script"
  echo "$script"
}

for ((i = 0; i < N_TASKS; i++)); do
  name="$(jq -r ".tasks[$i].window" <<<"$PLAN")"
  script="$(write_run_script "$i")"
  if [[ "$i" == 0 ]]; then
    tmux new-session -d -s "$SESSION" -n "$name" -c "$WORK_DIR" "bash $(printf %q "$script")"
  else
    tmux new-window -d -t "=$SESSION:" -n "$name" -c "$WORK_DIR" "bash $(printf %q "$script")"
  fi
  echo "started task $i: $name (window $SESSION:$name)"
done

cat <<EOF_MSG

job $JOB_ID: $N_TASKS task(s) running in tmux session '$SESSION'
  attach:   tmux attach -t $SESSION
  logs:     tail -f $JOB_DIR/*.log
  status:   ftagent job status $JOB_DIR
  ui:       ftagent ui --log-dir $JOB_DIR
EOF_MSG
