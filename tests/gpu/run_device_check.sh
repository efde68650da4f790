#!/usr/bin/env bash
# GPU device check: build builtin/qwen2-50m, train it full and LoRA with LLaMA-Factory (through ftagent
# and by hand), generate with HF and vLLM, write a JSON of measured numbers. Under 8 minutes on one GPU;
# nothing is downloaded at run time.
#
#   tests/gpu/run_device_check.sh [--dry-run] [--out FILE] [--require-vllm]
#
# What it expects to find (override with these variables):
#   DEVICE_CHECK_BASE_PYTHON  a python with CUDA torch (default: python3). Everything else comes from
#   DEVICE_CHECK_WHEELS       the wheelhouse (default: git_ignore_folder/gpu_wheels; make it with
#                             tests/gpu/make_wheelhouse.sh --python-version X.Y where PyPI is reachable,
#                             then carry that folder), installed with --no-index into
#   DEVICE_CHECK_ENV          the check venv (default: /tmp/ftagent-device-env), created over the base
#                             python when it has no bin/llamafactory-cli; an existing tool env is used as is
#   DEVICE_CHECK_DRIVER       the python that runs device_check.py (default: the check venv's)
#   VLLM_PYTHON               a python that imports vllm (else FT_VLLM_ENV, FT_FILE_PATH/envs/vllm, the
#                             check venv, python3 are tried; none -> vLLM is reported as skipped, or
#                             the check fails with --require-vllm)
#   DEVICE_CHECK_WORK         scratch folder (default: /tmp/ftagent-device-check)
# The JSON goes to --out, else $OUT/device_check.json when $OUT is set, else the work folder.
# --dry-run checks every step up to the GPU calls (any machine; no CUDA needed). --cpu-smoke runs the
# real steps on CPU with builtin/tiny-qwen2 and a few steps (tests of the script; no meaningful numbers).
# A missing prerequisite ends it with one line "device check: missing ..." and exit code 2.
set -euo pipefail
cd "$(dirname "$0")/../.."
ARGS=()
OUTFILE=""
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUTFILE="$2"; shift 2 ;;
    --dry-run|--require-vllm|--cpu-smoke) ARGS+=("$1"); shift ;;
    *) echo "run_device_check: unknown argument $1" >&2; exit 2 ;;
  esac
done
WORK="${DEVICE_CHECK_WORK:-/tmp/ftagent-device-check}"
WHEELS="${DEVICE_CHECK_WHEELS:-git_ignore_folder/gpu_wheels}"
mkdir -p "$WORK"
if [ -z "$OUTFILE" ]; then
  if [ -n "${OUT:-}" ]; then OUTFILE="$OUT/device_check.json"; else OUTFILE="$WORK/device_check.json"; fi
fi
ENV_DIR="${DEVICE_CHECK_ENV:-/tmp/ftagent-device-env}"
if [ ! -x "$ENV_DIR/bin/llamafactory-cli" ]; then
    BASE="${DEVICE_CHECK_BASE_PYTHON:-python3}"
    command -v "$BASE" >/dev/null || { echo "device check: missing a base python ($BASE)" >&2; exit 2; }
    ls "$WHEELS"/*.whl >/dev/null 2>&1 || {
      echo "device check: missing the wheelhouse $WHEELS (run tests/gpu/make_wheelhouse.sh where PyPI is reachable, carry it)" >&2
      exit 2; }
    # no pip inside the venv (ensurepip may be absent there): the base python's pip installs into it
    rm -rf "$ENV_DIR"
    "$BASE" -m venv --without-pip --system-site-packages "$ENV_DIR" \
      || { echo "device check: missing the venv module of $BASE" >&2; exit 2; }
    # the base python may itself be a venv: its site-packages (torch ...) come after the wheels
    SITE=$("$ENV_DIR/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    mkdir -p "$SITE"
    "$BASE" -c "import site; print('\n'.join(site.getsitepackages()))" > "$SITE/_device_check_base.pth"
    "$BASE" -m pip install -q --no-index --no-deps --no-compile --disable-pip-version-check --target "$SITE" \
      "$WHEELS"/*.whl >"$WORK/wheels-install.log" 2>&1 \
      || { echo "device check: missing wheels: pip could not install $WHEELS/*.whl (see $WORK/wheels-install.log)" >&2; exit 2; }
    printf '#!%s\nimport sys\nfrom llamafactory.cli import main\nsys.exit(main())\n' "$ENV_DIR/bin/python" \
      > "$ENV_DIR/bin/llamafactory-cli"
    chmod +x "$ENV_DIR/bin/llamafactory-cli"
fi
DRIVER="${DEVICE_CHECK_DRIVER:-$ENV_DIR/bin/python}"
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 LITELLM_LOCAL_MODEL_COST_MAP=True
export FT_SANDBOX=none FT_ALLOW_UNSANDBOXED=1 PYTHONUNBUFFERED=1 DISABLE_VERSION_CHECK=1
exec "$DRIVER" tests/gpu/device_check.py --env "$ENV_DIR" --work "$WORK" --out "$OUTFILE" --wheels "$WHEELS" ${ARGS[@]+"${ARGS[@]}"}
