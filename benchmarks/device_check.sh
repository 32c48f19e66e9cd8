#!/usr/bin/env bash
# One offline check of sbjax on a lent GPU (or TPU) machine: <= 8 minutes on one H200,
# compiles included, no network; everything in ONE archive.
#
# On the lent machine (the `run` tool of the device workplace), in one call:
#   command:   bash benchmarks/device_check.sh --out "$OUT"
#   timeout_s: 540          carry: [".whl"]
# (.whl: the wheels that `import sbjax` lacks there, made here once with
#  `bash benchmarks/device_wheels.sh`; the archive comes back as $OUT/device_check_gpu.tar.gz)
#
#   bash benchmarks/device_check.sh [gpu|tpu|cpu] [--dry-run] [--out DIR]
# kind: gpu if nvidia-smi exists, else tpu if /dev/accel* or /dev/vfio exist, else cpu.
# Nothing is installed from a network. If jax does not see the accelerator, the script stops
# and says what to install; if only sbjax's own needs are missing and .whl/ holds wheels,
# they are installed into a scratch directory (pip --no-index) and put on PYTHONPATH.
# Sections (seconds on the device; each under `timeout`, exit status and time recorded;
# all of them together stop at DEADLINE_S=475):
#   tests_issue31 (40) the accelerator issue's 23 GPU failures (device_results.py's list),
#   tests_fast    (35) then the rest of the fast layer; SBJAX_TEST_PLATFORM=cuda, xdist -n 8;
#                      meanwhile the series of (c) is written to disk (untimed);
#   train        (250) sbjax vs HF GPT-NeoX eager and torch.compile, bf16 autocast, B 16 x T
#                      1024, pythia-160m and pythia-410m, each side in its own process
#                      (benchmarks/train_step_vs_hf.py --isolate; torch.compile gets up to
#                      150 s and is reported "did not finish in N s" otherwise);
#   series       (100) K=16 pythia-70m revisions, 128x256 tokens: sbjax vs the authors' way
#                      (transformers on the same GPU, numpy per revision), equal values;
#   metrics       (40) benchmarks/metrics_bench.py --quick;
#   levers        (60) only with time left: sbjax alone at pythia-160m with 64k tokens per step
#                      (B 64 x T 1024), the accelerator issue's first lever for its MFU goal.
# Results: results.json (every BENCH row, each section's status, the tests' counts and the
# issue's 23 tests one by one, the GPU goals next to the numbers as met / not met, versions),
# one CSV per section, every log: packed into OUT/device_check_KIND.tar.gz.
# --dry-run: every section at tiny sizes on the CPU (torch eager, no torch.compile), for
# tests/e2e/test_device_check.py. SECTIONS=train,metrics,... runs only those;
# PEAK_TFLOPS=<bf16 TFLOP/s> overrides the table below; PYTHON=<interpreter>.
set -euo pipefail

cd "$(dirname "$0")/.."
KIND=""
DRY=0
OUT_DIR="${OUT:-device_check}"
while [[ $# -gt 0 ]]; do
  case "$1" in
    gpu|tpu|cpu) KIND="$1" ;;
    --dry-run) DRY=1 ;;
    --out) OUT_DIR="${2:?--out needs a directory}"; shift ;;
    --out=*) OUT_DIR="${1#--out=}" ;;
    -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1' "$0"; exit 0 ;;
    *) echo "error: unknown argument '$1'; use [gpu|tpu|cpu] [--dry-run] [--out DIR]" >&2
       exit 2 ;;
  esac
  shift
done
if [[ -z "${KIND}" ]]; then
  if command -v nvidia-smi >/dev/null 2>&1; then KIND=gpu
  elif compgen -G "/dev/accel*" >/dev/null || [[ -d /dev/vfio ]]; then KIND=tpu
  else KIND=cpu; fi
fi
PY="${PYTHON:-$(command -v python3 || command -v python)}"
START=$(date +%s)
DEADLINE_S="${DEADLINE_S:-475}"
SCALE=1
if [[ "${DRY}" == 1 ]]; then SCALE=4; DEADLINE_S=$((DEADLINE_S * SCALE)); fi
WORK="$(mktemp -d "${TMPDIR:-/tmp}/sbjax_device_check.XXXXXX")"
REPORT="${WORK}/report"
mkdir -p "${REPORT}" "${OUT_DIR}"
TSV="${REPORT}/sections.tsv"
: > "${TSV}"
step() { echo "== [$(($(date +%s) - START)) s] $*"; }
# On any exit, also a failed one: whatever the report holds goes into the one archive.
pack() {
  local archive="${OUT_DIR}/device_check_${KIND}.tar.gz"
  if [[ -n "${BUILD_PID:-}" ]]; then kill "${BUILD_PID}" 2>/dev/null || true; fi
  tar -czf "${archive}" -C "${REPORT}" . && step "archive: ${archive}"
  rm -rf "${WORK}"
}
trap pack EXIT
export PYTHONPATH="${PWD}${PYTHONPATH:+:${PYTHONPATH}}" PYTHONUNBUFFERED=1
ONLY=",${SECTIONS:-},"
wanted() { [[ "${ONLY}" == ",," || "${ONLY}" == *",$1,"* ]]; }
# limit_of BUDGET: the section's seconds (x4 on a dry run), cut to what is left before DEADLINE_S
limit_of() {
  local left=$((DEADLINE_S - ($(date +%s) - START)))
  local want=$(($1 * SCALE))
  echo $((want < left ? want : left))
}
SETSID=(setsid)
if ! command -v setsid >/dev/null; then SETSID=(); fi  # then leftovers are not cleaned up
# section NAME LIMIT CMD...: OUT/NAME.log, exit status and seconds in sections.tsv. The command
# runs in its own session; at LIMIT it gets SIGINT (pytest then writes its report), 20 s later
# SIGKILL, and whatever of its process group is left is killed.
section() {
  local name="$1" limit="$2" t0 rc=0 pid
  shift 2
  if [[ "${limit}" -lt 5 ]]; then
    printf '%s\t%s\t%s\t%s\n' "${name}" "not run" 0 "${limit}" >> "${TSV}"
    step "${name}: not run, ${limit} s left"
    return 0
  fi
  step "${name} (at most ${limit} s)"
  t0=$(date +%s)
  "${SETSID[@]}" timeout --foreground -s INT -k 20 "${limit}" "$@" > "${REPORT}/${name}.log" 2>&1 &
  pid=$!
  wait "${pid}" || rc=$?
  kill -KILL -- "-${pid}" 2>/dev/null || true
  printf '%s\t%s\t%s\t%s\n' "${name}" "${rc}" "$(($(date +%s) - t0))" "${limit}" >> "${TSV}"
  grep -v '^BENCH' "${REPORT}/${name}.log" | tail -n 4 || true
}

# Dense bf16 peak TFLOP/s per chip, for MFU.
peak_for() {
  case "$1" in
    *H200*|*H100*) echo 989 ;;
    *A100*) echo 312 ;;
    *L4*) echo 121 ;;
    *v5e*|*v5litepod*|*"TPU v5 lite"*) echo 197 ;;
    *v5p*|*"TPU v5"*) echo 459 ;;
    *v4*) echo 275 ;;
    *v6e*|*"TPU v6"*) echo 918 ;;
    *) echo 0 ;;
  esac
}

# --- what is installed: nothing from a network ---------------------------------------------
if [[ "${DRY}" == 0 && "${KIND}" != cpu ]]; then
  if ! "${PY}" -c "import jax; assert jax.default_backend() in ('gpu', 'tpu')" 2>/dev/null; then
    echo "error: ${PY} has no jax that sees the ${KIND} (jax.default_backend() is not gpu/tpu)." >&2
    echo "  Install one, then run this again: with a network," >&2
    echo "  pip install -e '.[cuda12,test,hf]'" >&2
    echo "  (TPU: '.[tpu,test]'); offline, pip install --no-index the wheels of jax, jaxlib and" >&2
    echo "  jax-cuda12-plugin + jax-cuda12-pjrt (TPU: libtpu) made on a machine with a network." >&2
    exit 3
  fi
  step "jax sees the ${KIND}: no install"
fi
if [[ "${DRY}" == 1 ]]; then  # a dry run checks the script, not speed: skip LLVM's passes
  DRY_FLAGS="$("${PY}" -c 'from tests._xla import DRY_XLA_FLAGS; print(DRY_XLA_FLAGS)')"
  export XLA_FLAGS="${XLA_FLAGS:+${XLA_FLAGS} }${DRY_FLAGS}"
  export JAX_PLATFORMS=cpu
fi
# device_env.py imports sbjax and writes env.json: where that fails and .whl/ holds wheels,
# they are installed (no index) into the work dir, put on PYTHONPATH, and it is tried again
env_ok() {
  "${PY}" benchmarks/device_env.py "${KIND}" "${DRY}" "${REPORT}/env.json" \
    > "${REPORT}/env.out" 2> "${REPORT}/env.log"
}
if ! env_ok; then
  if compgen -G ".whl/*.whl" >/dev/null; then
    step "import sbjax failed ($(tail -n 1 "${REPORT}/env.log")): installing .whl/*.whl (no index)"
    "${PY}" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
      --target "${WORK}/site" .whl/*.whl
    export PYTHONPATH="${PYTHONPATH}:${WORK}/site"
  fi
  if ! env_ok; then
    echo "error: import sbjax fails: $(tail -n 1 "${REPORT}/env.log")" >&2
    echo "  On a machine with a network run: bash benchmarks/device_wheels.sh (writes .whl/)," >&2
    echo "  and carry .whl to this machine (the run tool's carry: [\".whl\"])." >&2
    exit 3
  fi
fi
read -r NDEV DEVICE < "${REPORT}/env.out"
PEAK="${PEAK_TFLOPS:-$(peak_for "${DEVICE}")}"
if [[ "${DRY}" == 1 ]]; then PEAK=1; fi  # MFU of nothing real: skip measuring a CPU peak
step "devices: ${NDEV} x ${DEVICE}; bf16 peak ${PEAK} TFLOP/s per device; work dir ${WORK}"
TEST_PLATFORM=cuda
if [[ "${KIND}" == tpu ]]; then TEST_PLATFORM=tpu; fi

# --- sizes ---------------------------------------------------------------------------------
# the accelerator issue's 23 GPU failures, by test (device_results.py holds the list)
mapfile -t ISSUE_TESTS < <("${PY}" benchmarks/device_results.py --issue_tests)
# the issue's tests one by one over 8 workers, the rest file by file (module fixtures built once)
XDIST_ISSUE=(-n 8 --dist load)
XDIST=(-n 8 --dist loadfile)
if [[ "${KIND}" == tpu ]]; then  # one process opens a TPU
  XDIST=(-p no:xdist)
  XDIST_ISSUE=(-p no:xdist)
fi
if [[ "${DRY}" == 1 ]]; then
  TEST_PLATFORM=cpu
  ISSUE_TESTS=(tests/unit/test_hostmem.py::test_freed_step_block_is_reused_without_page_faults)
  FAST=(tests/unit/test_attention.py -k auto_choice)
  XDIST=(-p no:xdist)
  XDIST_ISSUE=(-p no:xdist)
  TRAIN=("--configs=pythia-160m" "--sides=sbjax,hf_eager" --batch=1 --seq=32 --reps=1 --warmup=0
         "--shrink=n_layers=1,vocab_size=512,d_model=64,n_heads=2")
  SERIES=(--k=2 --n=4 --t=16 --shape=tiny --chunk=4)
  METRICS=(--cases=spectra --heads=2 --spec-v=256 --spec-d=32 --reps=1 --spec-methods=auto)
  LEVERS=("--configs=pythia-160m" --sides=sbjax --batch=4 --seq=32 --reps=1 --warmup=0
          "--shrink=n_layers=1,vocab_size=512,d_model=64,n_heads=2")
else
  FAST=(tests -m "not e2e")
  for t in "${ISSUE_TESTS[@]}"; do FAST+=("--deselect=${t}"); done
  TRAIN=("--configs=pythia-160m,pythia-410m" "--sides=sbjax,hf_eager,hf_compile" --batch=16
         --seq=1024 --warmup=2 --reps=10 --side_timeout=70 --compile_timeout=150)
  SERIES=(--k=16 --n=128 --t=256 --shape=pythia-70m --chunk=32)
  METRICS=(--quick)
  LEVERS=("--configs=pythia-160m" --sides=sbjax --batch=64 --seq=1024 --warmup=2 --reps=10)
  if [[ "${KIND}" == tpu ]]; then TRAIN+=(--sides=sbjax); fi  # torch has no TPU here
fi
PYTEST=("${PY}" -m pytest -o addopts= -v -rfEs -p no:cacheprovider)

# --- (a) the tests, while the series of (c) is written (untimed) ----------------------------
BUILD_PID=""
if wanted series; then
  "${PY}" benchmarks/series_analysis.py "${SERIES[@]}" --sides= --root="${WORK}/series" \
    > "${REPORT}/series_build.log" 2>&1 &
  BUILD_PID=$!
  BUILD_T0=$(date +%s)
fi
if wanted tests_issue31; then
  SBJAX_TEST_PLATFORM="${TEST_PLATFORM}" section tests_issue31 "$(limit_of 40)" "${PYTEST[@]}" \
    "${XDIST_ISSUE[@]}" --junitxml="${REPORT}/tests_issue31.xml" "${ISSUE_TESTS[@]}"
fi
if wanted tests_fast; then
  SBJAX_TEST_PLATFORM="${TEST_PLATFORM}" section tests_fast "$(limit_of 35)" "${PYTEST[@]}" \
    "${XDIST[@]}" --junitxml="${REPORT}/tests_fast.xml" "${FAST[@]}"
fi
if [[ -n "${BUILD_PID}" ]]; then  # at most 120 s more (then the series section builds it)
  step "waiting for the series to be written"
  BUILD_LIMIT=$(limit_of 120)
  for ((i = 0; i < BUILD_LIMIT; i++)); do
    kill -0 "${BUILD_PID}" 2>/dev/null || break
    sleep 1
  done
  kill "${BUILD_PID}" 2>/dev/null || true
  BUILD_RC=0
  wait "${BUILD_PID}" || BUILD_RC=$?
  printf '%s\t%s\t%s\t%s\n' series_build "${BUILD_RC}" "$(($(date +%s) - BUILD_T0))" \
    "${BUILD_LIMIT}" >> "${TSV}"
  BUILD_PID=""
fi

# --- (b) the train step against HF, (c) the series analysis, (d) the metrics ---------------
if wanted train; then
  L=$(limit_of 250)
  section train "${L}" "${PY}" benchmarks/train_step_vs_hf.py --isolate "${TRAIN[@]}" \
    --budget_s=$((L > 11 ? L - 10 : 1)) --dtype=bfloat16 --loss_chunk=preset --remat=preset \
    --hf_device=auto --peak_tflops="${PEAK}"
fi
if wanted series; then
  section series "$(limit_of 100)" "${PY}" benchmarks/series_analysis.py "${SERIES[@]}" \
    --device=auto --root="${WORK}/series"
fi
if wanted metrics; then
  section metrics "$(limit_of 40)" "${PY}" benchmarks/metrics_bench.py "${METRICS[@]}"
fi
if wanted levers; then  # last: it only uses what the sections above left of DEADLINE_S
  L=$(limit_of 60)
  if [[ "${L}" -le 20 ]]; then L=0; fi  # too little for a compile and 12 steps: not run
  section levers "${L}" "${PY}" benchmarks/train_step_vs_hf.py --isolate "${LEVERS[@]}" \
    --budget_s=$((L > 11 ? L - 10 : 1)) --dtype=bfloat16 --loss_chunk=preset --remat=preset \
    --hf_device=auto --peak_tflops="${PEAK}"
fi
if [[ "${NDEV}" -gt 1 ]] && wanted device_equal; then
  section device_equal "$(limit_of 60)" "${PY}" benchmarks/device_equal.py --steps=3
fi

# --- results.json, CSVs, one archive (packed on any exit, see pack) ---------------------------
step "results"
"${PY}" benchmarks/device_results.py "${REPORT}" --kind="${KIND}" --dry_run="${DRY}" \
  --peak_tflops="${PEAK}" --seconds=$(($(date +%s) - START))
