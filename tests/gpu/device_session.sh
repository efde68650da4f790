#!/usr/bin/env bash
# One lease of the GPU machine, as one command: the device check (JSON of numbers), then tests/gpu
# (test_launch_plan_on_device.py confirms issue 42's launch-plan rules: NVML's total against
# configs/gpu_profiles.yaml, PCI device order in tool processes, vLLM's KV memory against the plan's).
#   bash tests/gpu/device_session.sh [CHECK_S] [PYTEST_S]     (defaults 270 and 300 seconds)
# Carry the wheelhouse (tests/gpu/make_wheelhouse.sh --python-version X.Y, the GPU machine's python).
# What comes back under $OUT (at most 8 files): device_check.json, check.log, pytest.log, logs.tgz
# (the check's LLaMA-Factory logs, YAMLs and trainer logs), env.txt (GPU, driver, python, packages).
set -uo pipefail
cd "$(dirname "$0")/../.."
CHECK_S="${1:-270}"
PYTEST_S="${2:-300}"
OUT="${OUT:-/tmp/ftagent-device-out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -V
  python3 -m pip list 2>/dev/null | grep -i -E '^(torch|numpy|pandas|pyarrow|nvidia-ml-py|pytest|pytest-xdist) '
} >"$OUT/env.txt" 2>&1
start=$(date +%s)
timeout "$CHECK_S" bash tests/gpu/run_device_check.sh --out "$OUT/device_check.json" >"$OUT/check.log" 2>&1
check_rc=$?
echo "device session: check rc=$check_rc in $(( $(date +%s) - start ))s" | tee -a "$OUT/check.log"
tail -15 "$OUT/check.log"
WORK="${DEVICE_CHECK_WORK:-/tmp/ftagent-device-check}"
ENV_DIR="${DEVICE_CHECK_ENV:-/tmp/ftagent-device-env}"
(cd "$WORK" 2>/dev/null && find . -maxdepth 3 \( -name '*.log' -o -name '*.yaml' -o -name 'trainer_log.jsonl' \
  -o -name 'all_results.json' -o -name 'gen_*.json' \) -size -4M -print0 | tar czf "$OUT/logs.tgz" --null -T -) || true
[ -x "$ENV_DIR/bin/python" ] || { echo "device session: no check env at $ENV_DIR, tests/gpu not run"; exit "$check_rc"; }
export FT_TOOLS_ENV="$ENV_DIR" DEVICE_CHECK_ENV="$ENV_DIR" FT_SANDBOX=none FT_ALLOW_UNSANDBOXED=1 DISABLE_VERSION_CHECK=1
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 LITELLM_LOCAL_MODEL_COST_MAP=True
start=$(date +%s)
# serially: test_device_check compares NVML's peak with the allocator's, which another test's process would blur
timeout "$PYTEST_S" "$ENV_DIR/bin/python" -m pytest tests/gpu -q -rs -p no:cacheprovider --durations=15 \
  >"$OUT/pytest.log" 2>&1
pytest_rc=$?
echo "device session: pytest rc=$pytest_rc in $(( $(date +%s) - start ))s" | tee -a "$OUT/pytest.log"
tail -40 "$OUT/pytest.log"
[ "$check_rc" -eq 0 ] && exit "$pytest_rc"
exit "$check_rc"
